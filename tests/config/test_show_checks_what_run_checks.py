"""`specgate show`, the "check my config" command, makes every check `specgate run` makes before a
server starts (harness/run/preflight.py check_experiment): for each mistake below both refuse,
with the same sentence and the exit status of a mistake (4, docs/configuration.md), and nothing starts."""

from __future__ import annotations

import pytest

from harness import cli
from harness.exit_status import MISTAKE
from tests.history.records import START, arm_block, write_run
from tests.support.runs import specgate


def reference(tmp_path) -> str:
    """A finished run of sim_smoke to compare with (gate.baseline)."""
    return str(write_run(tmp_path / "reference", START, {"baseline": arm_block("baseline", 1000.0),
                                                         "eagle3": arm_block("eagle3", 1800.0)}))


MISTAKES = {
    # run refused it (reading the reference, it parses the comparisons), show printed the config: exit 0
    "a comparison of nan% against a reference": lambda tmp: [f"gate.baseline={reference(tmp)}",
                                                            "+gate.compare.output_tok_s=nan%"],
    "a comparison that is no percentage": lambda tmp: ["+gate.compare.output_tok_s=3"],
    "a reference run that is not there": lambda tmp: [f"gate.baseline={tmp / 'nowhere'}"],
    "an interpreter that is not there": lambda tmp: ["backend=process", f"build.python={tmp / 'nope' / 'python'}"],
    "a negative latency ceiling": lambda tmp: ["+gate.max_ttft_ms.baseline.p99=-5"],
}


def sentence(stderr: str) -> str:
    """The one sentence after `specgate: ` (pytest prefixes `ERROR: `)."""
    lines = [line for line in stderr.splitlines() if "specgate: " in line]
    assert len(lines) == 1, stderr[-2000:]
    return lines[0].split("specgate: ", 1)[1]


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_show_refuses_what_run_refuses_in_the_same_sentence(mistake, tmp_path, capsys):
    overrides = ["+exp=sim_smoke", f"record.root={tmp_path / 'runs'}", *MISTAKES[mistake](tmp_path)]
    assert cli.main(["show", *overrides]) == MISTAKE
    shown = capsys.readouterr()
    assert "# ---- arm" not in shown.out  # no config printed for a config run refuses
    ran = specgate("run", *overrides, refused=True)  # exit 4, checked there
    assert sentence(shown.err) == sentence(ran.stderr), (shown.err, ran.stderr)
    assert not (tmp_path / "runs").exists()
