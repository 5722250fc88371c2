"""`specgate compare`: two hand-written records side by side, relative changes, bad paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.compare import CompareError, compare_data, compare_runs
from harness.record.store import RecordError


def arm(tok_s, ttft_p99, ok=8, failed=0, accept=None, **extra):
    return {"status": "measured", "output_tok_s": tok_s, "request_per_s": tok_s / 100,
            "ttft_ms": {"mean": 10.0, "p50": 9.0, "p90": 12.0, "p99": ttft_p99},
            "itl_ms": {"p50": 4.0, "p99": 9.0}, "tpot_ms": {"p50": 4.1}, "e2e_ms": {"p50": 800.0},
            "accept_length": accept, "verify_cycle_ms": 7.5 if accept else None,
            "requests": {"ok": ok, "failed": failed}, "some_future_key": {"x": 1}, **extra}


def write_record(root: Path, name: str, arms: dict, gates: list | None = None) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({
        "experiment": "sim_smoke", "started_utc": "2026-12-02T15:00:00+00:00", "interrupted": False,
        "arms": arms, "gates": gates or []}))
    return path


@pytest.fixture
def two_runs(tmp_path):
    first = write_record(tmp_path, "20261202T150000Z_sim_smoke",
                         {"baseline": arm(200.0, 10.0), "eagle3": arm(250.0, 8.0, accept=2.0)},
                         gates=[{"name": "min_speedup", "arm": "eagle3", "passed": True},
                                {"name": "min_speedup", "arm": "baseline", "passed": None}])
    second = write_record(tmp_path, "20261202T160000Z_sim_smoke",
                          {"baseline": arm(220.0, 9.0, ok=7, failed=1),
                           "eagle3": {"status": "server_failed", "error": "server exited with code 1"},
                           "eagle5": arm(300.0, 7.0, accept=2.5,
                                         noise={"output_tok_s": {"median": 300.0, "cv": 0.021}})},
                          gates=[{"name": "min_speedup", "arm": "eagle3", "passed": False}])
    return first, second


def row(table: str, arm: str, metric: str) -> list[str]:
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == [arm, metric]:
            return cells[2:]
    raise AssertionError(f"no row {arm} / {metric} in\n{table}")


def test_table_has_a_column_per_run_and_relative_changes(two_runs):
    first, second = two_runs
    table = compare_runs([first, second])
    header = next(line for line in table.splitlines() if line.startswith("| arm"))
    assert first.name in header and second.name in header and f"Δ {second.name}" in header
    assert row(table, "baseline", "output tok/s") == ["200.0", "220.0", "+10.0%"]
    assert row(table, "baseline", "TTFT p99 ms") == ["10.0", "9.0", "-10.0%"]
    assert row(table, "baseline", "requests failed") == ["0", "1", "+1"]  # counts: the difference
    assert row(table, "baseline", "requests ok") == ["8", "7", "-1"]


def test_arms_missing_from_a_run_and_failed_arms_show_a_dash(two_runs):
    table = compare_runs(list(two_runs))
    assert row(table, "eagle3", "output tok/s") == ["250.0", "-", "-"]  # server_failed: no metrics
    assert row(table, "eagle3", "accept length") == ["2.00", "-", "-"]
    assert row(table, "eagle5", "output tok/s") == ["-", "300.0 ±2.1%", "-"]  # only in the second run
    assert row(table, "baseline", "accept length") == ["-", "-", "-"]
    assert "eagle3: server_failed" in table
    assert "1 passed, 0 failed, 1 skipped" in table and "0 passed, 1 failed, 0 skipped" in table


def test_compare_data_for_machines(two_runs):
    data = compare_data(list(two_runs))
    assert [r["label"] for r in data["runs"]] == [p.name for p in two_runs]
    tok = next(r for r in data["rows"] if r["arm"] == "baseline" and r["metric"] == "output_tok_s")
    assert tok["values"] == [200.0, 220.0]
    assert tok["changes"] == [pytest.approx(0.10)]
    assert tok["change_kind"] == "relative"
    json.dumps(data)  # plain data


def test_one_run_latest_link_and_results_json_path(two_runs, tmp_path):
    first, second = two_runs
    (tmp_path / "latest").symlink_to(second.name)
    data = compare_data([first / "results.json", tmp_path / "latest"])
    assert [r["label"] for r in data["runs"]] == [first.name, second.name]  # the link resolves to its folder
    single = compare_runs([first])
    assert "Δ" not in single and row(single, "eagle3", "output tok/s") == ["250.0"]


def test_the_same_record_twice_keeps_two_columns(two_runs):
    data = compare_data([two_runs[0], two_runs[0]])
    assert data["runs"][0]["label"] != data["runs"][1]["label"]


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "nope",                                        # does not exist
    lambda tmp: tmp,                                                 # a folder without results.json
    lambda tmp: (tmp / "x.json").write_text("{not json") and tmp / "x.json",  # not JSON
    lambda tmp: (tmp / "y.json").write_text("[1, 2]") and tmp / "y.json",     # JSON, not a record
])
def test_a_path_that_is_not_a_record_is_one_sentence(tmp_path, make):
    with pytest.raises(RecordError) as info:
        compare_runs([make(tmp_path)])
    message = str(info.value)
    assert "\n" not in message and str(tmp_path) in message and "not" in message


def test_no_path_at_all():
    with pytest.raises(CompareError, match="at least one"):
        compare_runs([])


def test_a_folder_of_runs_is_a_history(tmp_path):
    from harness.report.compare import compare_data
    from harness.record.store import is_history, read_runs

    history = tmp_path / "main"
    for i, tok_s in enumerate((100.0, 104.0, 98.0)):
        run = history / f"20261201T00000{i}Z_sim_smoke"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps({"arms": {"baseline": {"output_tok_s": tok_s}}}))
    (history / "latest").symlink_to(f"20261201T000002Z_sim_smoke")
    assert is_history(history) and not is_history(history / "20261201T000000Z_sim_smoke")
    assert [r.label for r in read_runs(history)] == [f"20261201T00000{i}Z_sim_smoke" for i in range(3)]
    data = compare_data([history])
    row = next(r for r in data["rows"] if r["arm"] == "baseline" and r["metric"] == "output_tok_s")
    assert row["values"] == [100.0, 104.0, 98.0]


def test_a_run_that_died_or_was_stopped_is_shown_as_such(tmp_path):
    dead = write_record(tmp_path, "20261202T170000Z_sim_smoke", {"baseline": arm(200.0, 10.0)})
    data = json.loads((dead / "results.json").read_text())
    (dead / "results.json").write_text(json.dumps({**data, "status": "running"}))
    stopped = write_record(tmp_path, "20261202T180000Z_sim_smoke", {"baseline": {"status": "interrupted"}})
    data = json.loads((stopped / "results.json").read_text())
    (stopped / "results.json").write_text(json.dumps({**data, "status": "interrupted", "interrupted": True}))
    old = write_record(tmp_path, "20261202T190000Z_sim_smoke", {"baseline": arm(210.0, 10.0)})  # no status key
    table = compare_runs([dead, stopped, old])
    runs = {cells[0].strip(): cells[1].strip() for cells in (line.strip("| ").split(" | ") for line in table.splitlines()
                                                             if line.startswith("| 2026"))}
    assert runs == {dead.name: "**INCOMPLETE**", stopped.name: "**INTERRUPTED**", old.name: "finished"}
    assert f"{dead.name} is incomplete: it still says running, so the run died before it finished" in table
    assert f"{stopped.name} is interrupted: the run was stopped" in table
    assert f"{old.name} is" not in table
    assert [r["status"] for r in compare_data([dead, stopped, old])["runs"]] == ["running", "interrupted", "finished"]
