"""Exit statuses: README's table lists exactly the ones the code uses, and a usage mistake
on the `specgate` command line is one sentence with status 4, never argparse's 2 (which
README keeps for an interrupted run)."""

import re
from pathlib import Path

import pytest

from harness import cli
from harness.exit_status import INTERRUPTED, MISTAKE, STATUSES

ROOT = Path(__file__).resolve().parents[1]


def table_statuses(text: str, header: str) -> set[int]:
    """The statuses of the table under a `| <header> | means |` line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    found = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        found.add(int(line.split("|")[1]))
    return found


def test_readme_lists_the_exit_statuses_the_code_uses():
    assert table_statuses((ROOT / "README.md").read_text(), "exit status") == set(STATUSES)
    header = next(line for line in (ROOT / "docs/configuration.md").read_text().splitlines()
                  if line.startswith("| command |"))
    assert {int(n) for n in re.findall(r"\| (\d) ", header + " ")} == set(STATUSES)


@pytest.mark.parametrize("argv, fragment", [
    ([], "the following arguments are required: command"),
    (["nope"], "invalid choice: 'nope'"),
    (["compare"], "the following arguments are required: runs"),
    (["capacity", "+exp=sim_capacity", "-v"], "unrecognized arguments: -v"),
    (["history"], "the following arguments are required: folder"),
])
def test_a_usage_mistake_is_one_sentence_and_exit_4(capsys, argv, fragment):
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == MISTAKE != INTERRUPTED
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "--help" in err, err
