"""`specgate history DIR` as a user runs it, on a folder of twelve records the test writes
(tests/history/records.py): the change point found at the right run, in the table and on the
page, exit 0; a folder that is no history refused in one sentence, exit 4."""

from __future__ import annotations

import re
from datetime import timedelta

from harness.cli import main
from tests.history.records import START, arm_block, stepped_history, write_run
from tests.support.runs import REFUSED, specgate


def table_row(text: str, arm: str, run: str) -> str:
    section = text.split(f"## {arm}\n", 1)[1].split("\n## ", 1)[0]
    return next(line for line in section.splitlines() if f"| {run} " in line)


def test_history_finds_the_step_at_the_run_it_starts_and_draws_it(tmp_path):
    paths = stepped_history(tmp_path)  # eagle3's output tok/s 8 % lower from the 7th run (paths[6]) on
    (tmp_path / "20261204T000000Z_sim_smoke").mkdir()  # a run that died before its results.json
    done = specgate("history", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    step = paths[6].name
    assert re.search(rf"\| {step} \| \d+\.\d \[1\] +\|", table_row(out, "eagle3", step))
    assert "[1]" not in "".join(table_row(out, "eagle3", p.name) for p in paths if p != paths[6])
    assert re.search(rf"\[1\] output tok/s: from {step} on, mean 1[78]\d\d\.\d -> 16\d\d\.\d \(-[789]\.\d %\), "
                     rf"p = 0\.0\d+\n", out)
    assert "[1]" not in out.split("## baseline", 1)[1].split("## eagle3", 1)[0]  # no step there
    assert "## skipped (1)" in out and "20261204T000000Z_sim_smoke: no results.json" in out
    page = tmp_path / "history.html"
    assert out.rstrip().endswith(f"history: {page}")
    html = page.read_text()
    assert html.count('src="data:image/png;base64,') == 6  # 2 arms x 3 headline metrics
    assert f"output tok/s: from {step} on" in html and "http://" not in html and "https://" not in html
    assert "20261204T000000Z_sim_smoke: no results.json" in html


def test_history_writes_the_page_where_asked_with_the_metrics_asked_for(tmp_path, capsys):
    stepped_history(tmp_path / "runs", runs=4)
    out = tmp_path / "pages" / "h.html"
    assert main(["history", str(tmp_path / "runs"), "--metric", "ttft_ms.p99", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "TTFT p99 ms" in printed.splitlines()[6]  # the baseline table's header
    assert out.is_file() and not (tmp_path / "runs" / "history.html").exists()
    assert out.read_text().count('src="data:image/png;base64,') == 8


def test_a_folder_that_is_no_history_is_one_sentence_and_exit_4(tmp_path, capsys):
    write_run(tmp_path, START, {"eagle3": arm_block("eagle3", 1800.0)})
    assert main(["history", str(tmp_path)]) == REFUSED
    err = capsys.readouterr().err
    assert err.startswith("specgate: ") and "a history needs at least 2." in err and err.count("\n") == 1
    write_run(tmp_path, START + timedelta(hours=1), {"eagle3": arm_block("eagle3", 1800.0)}, experiment="sim_lossy")
    assert main(["history", str(tmp_path)]) == REFUSED
    assert "pick one with --experiment NAME." in capsys.readouterr().err
    assert main(["history", str(tmp_path / "nowhere")]) == REFUSED
    assert not list(tmp_path.glob("*.html"))  # nothing written for a refused folder
