"""Reading a folder of run records as a history (harness/history/folder.py): members skipped
with a note, the folders that are no history refused in one sentence, runs ordered by time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from harness.history.folder import read_history
from harness.record.store import INTERRUPTED, RUNNING, RecordError
from tests.history.records import START, arm_block, stepped_history, write_run


def two_arms(tok_s: float = 1800.0) -> dict:
    return {"baseline": arm_block("baseline", 1000.0), "eagle3": arm_block("eagle3", tok_s)}


def test_runs_are_ordered_by_their_start_time_and_carry_what_the_gate_needs(tmp_path):
    late = write_run(tmp_path, START + timedelta(hours=2), two_arms(1700.0))
    early = write_run(tmp_path, START, two_arms(1800.0))
    nested = write_run(tmp_path / "a_calibration", START + timedelta(hours=1), two_arms(1750.0))
    history = read_history(tmp_path)
    assert [run.path for run in history.runs] == [early, nested, late]
    assert history.runs[1].label == f"a_calibration/{nested.name}"  # one level down counts, named by its path
    assert [run.started for run in history.runs] == [START + timedelta(hours=h) for h in range(3)]
    assert {run.experiment for run in history.runs} == {"sim_smoke"}
    assert history.runs[0].results["arms"]["eagle3"]["output_tok_s"] == 1800.0
    assert history.arms == ["baseline", "eagle3"]
    assert [v for _, v in history.series("eagle3", "output_tok_s")] == [1800.0, 1750.0, 1700.0]
    assert history.skipped == []


def test_the_headline_metrics_are_the_compared_ones_plus_those_asked_for(tmp_path):
    stepped_history(tmp_path, runs=3)
    history = read_history(tmp_path, metrics=["ttft_ms.p99", "output_tok_s"])
    assert history.metrics == ["output_tok_s", "itl_ms.p50", "tpot_ms.p50", "ttft_ms.p99"]
    assert history.series("eagle3", "ttft_ms.p99")[0][1] == 70.0


def test_a_torn_or_unfinished_member_is_skipped_with_a_note(tmp_path):
    stepped_history(tmp_path, runs=3)
    (tmp_path / "20261203T000000Z_sim_smoke").mkdir()  # died before results.json
    torn = write_run(tmp_path, START + timedelta(hours=10), two_arms())
    (torn / "results.json").write_text('{"experiment": "sim_smoke", "arms": {')  # cut off mid-write
    write_run(tmp_path, START + timedelta(hours=11), two_arms(), status=RUNNING)
    write_run(tmp_path, START + timedelta(hours=12), two_arms(), status=INTERRUPTED)
    (tmp_path / "latest").symlink_to(torn.name)  # a link is the same record again, not a member
    history = read_history(tmp_path)
    assert len(history.runs) == 3
    notes = "\n".join(history.skipped)
    assert len(history.skipped) == 4, notes
    assert "20261203T000000Z_sim_smoke: no results.json" in notes
    assert f"{torn.name}: " in notes and "not a readable run record" in notes
    assert "still says running" in notes and "interrupted" in notes


def test_a_sweep_record_in_the_folder_is_skipped_saying_what_to_give_instead(tmp_path):
    stepped_history(tmp_path, runs=2)
    sweep = tmp_path / "20261205T000000Z_sim_smoke_sweep"
    (sweep / "points").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"experiment": "sim_smoke", "points": []}))
    assert read_history(tmp_path).skipped == [
        f"{sweep.name}: a sweep record, not a run record (its runs differ by config; give one of its "
        "points' folders to see that point's history)"]


def test_one_usable_run_is_refused_saying_what_was_skipped(tmp_path):
    write_run(tmp_path, START, two_arms())
    write_run(tmp_path, START + timedelta(hours=1), two_arms(), status=RUNNING)
    with pytest.raises(RecordError) as refused:
        read_history(tmp_path)
    sentence = str(refused.value)
    assert "holds 1 usable run record(s) (1 skipped:" in sentence and "a history needs at least 2." in sentence
    assert "\n" not in sentence


def test_runs_of_two_experiments_are_refused_naming_them_and_how_to_pick(tmp_path):
    stepped_history(tmp_path, runs=3)
    write_run(tmp_path, START + timedelta(days=1), two_arms(), experiment="sim_lossy")
    with pytest.raises(RecordError, match=r"holds runs of 2 experiments: sim_lossy \(1 run\), sim_smoke \(3 runs\); "
                                          r"pick one with --experiment NAME\.$"):
        read_history(tmp_path)
    picked = read_history(tmp_path, experiment="sim_smoke")
    assert len(picked.runs) == 3
    assert picked.skipped == [f"left out 1 run(s) of other experiments than sim_smoke: "
                              f"{(START + timedelta(days=1)).strftime('%Y%m%dT%H%M%SZ')}_sim_lossy"]
    with pytest.raises(RecordError, match=r"holds no finished run of experiment 'nope'; it holds sim_lossy"):
        read_history(tmp_path, experiment="nope")


def test_a_path_that_is_no_folder_is_refused(tmp_path):
    with pytest.raises(RecordError, match="does not exist; give a folder of run records"):
        read_history(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordError, match="is not a folder"):
        read_history(tmp_path / "file")
    with pytest.raises(RecordError, match="holds 0 usable run record"):
        read_history(tmp_path)


def test_a_metric_no_run_has_is_refused_as_a_typo(tmp_path):
    stepped_history(tmp_path, runs=2)
    with pytest.raises(RecordError, match=r"--metric output_tok_z: no run in .* has a number at arms.<arm>.output_tok_z"):
        read_history(tmp_path, metrics=["output_tok_z"])


def test_since_last_change_is_the_newest_segment_or_every_run(tmp_path):
    paths = stepped_history(tmp_path)  # eagle3's output tok/s 8 % lower from the 7th run on
    history = read_history(tmp_path)
    [(run, point)] = history.change_points("eagle3", "output_tok_s")
    assert (run.path, point.index) == (paths[6], 6)
    assert point.relative_change == pytest.approx(-0.08, abs=0.02)
    assert [r.path for r in history.since_last_change("eagle3", "output_tok_s")] == paths[6:]
    assert history.change_points("baseline", "output_tok_s") == []
    assert [r.path for r in history.since_last_change("baseline", "output_tok_s")] == paths


def test_a_run_where_an_arm_was_not_measured_is_left_out_of_that_arms_series(tmp_path):
    write_run(tmp_path, START, two_arms(1800.0))
    write_run(tmp_path, START + timedelta(hours=1), {"baseline": arm_block("baseline", 990.0),
                                                     "eagle3": {"status": "server_failed", "error": "exited"}})
    write_run(tmp_path, START + timedelta(hours=2), two_arms(1790.0))
    history = read_history(tmp_path)
    assert [v for _, v in history.series("eagle3", "output_tok_s")] == [1800.0, 1790.0]
    assert len(history.series("baseline", "output_tok_s")) == 3


def test_a_folder_of_runs_of_different_configs_is_split_into_one_series_per_config(tmp_path, capsys):
    # a sweep's points copied into one folder: concurrency 1 and 2 were once read as one series
    from harness.cli import main

    def arms(concurrency: int, tok_s: float) -> dict:
        identity = {"server.engine": "sim", "workload.name": "count_to_100", "workload.concurrency": concurrency}
        return {arm: {**block, "identity": identity} for arm, block in two_arms(tok_s).items()}
    for i, concurrency in enumerate([1, 2, 1, 2, 1, 2]):
        # concurrency 2 is twice as fast: read as one series, every other run would look like a change
        write_run(tmp_path / "mixed", START + timedelta(hours=i), arms(concurrency, 1800.0 * concurrency))
        write_run(tmp_path / "one", START + timedelta(hours=i), arms(4, 1800.0))
    history = read_history(tmp_path / "mixed")
    assert history.arms == ["baseline", "eagle3"]
    assert history.series_names == ["baseline (workload.concurrency=1)", "baseline (workload.concurrency=2)",
                                    "eagle3 (workload.concurrency=1)", "eagle3 (workload.concurrency=2)"]
    assert [v for _, v in history.series("eagle3 (workload.concurrency=2)", "output_tok_s")] == [3600.0] * 3
    assert history.mixed_configs("eagle3 (workload.concurrency=1)") == (
        "note: these runs measured eagle3 in 2 configs (differing in workload.concurrency), so each is a series of "
        "its own, never one: eagle3 (workload.concurrency=1): 3 run(s); eagle3 (workload.concurrency=2): 3 run(s)")
    with pytest.raises(KeyError, match="measured in several configs"):
        history.series("eagle3", "output_tok_s")
    assert history.series_measuring("eagle3", {"workload.concurrency": 2, "server.engine": "sim"}) == \
        "eagle3 (workload.concurrency=2)"
    assert history.series_measuring("eagle3", {"workload.concurrency": 8}) is None
    assert main(["history", str(tmp_path / "mixed")]) == 0
    out = capsys.readouterr().out
    assert out.count("note: these runs measured") == 4 and "## eagle3 (workload.concurrency=2)" in out
    assert "[1]" not in out  # no change point: each config's series is flat
    one = read_history(tmp_path / "one")
    assert one.series_names == ["baseline", "eagle3"] and one.mixed_configs("eagle3") is None
    assert main(["history", str(tmp_path / "one")]) == 0 and "note: these runs" not in capsys.readouterr().out
