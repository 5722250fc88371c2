"""One record writer with kinds run | sweep | capacity | ab | calibration (harness/record/recorder.py, kinds.py): each
kind's folder name, JSON and summary, through the one redaction policy; the reader tells a
folder's kind; and `specgate report` still renders sweep and capacity records written before
verdicts had one shape."""

from __future__ import annotations

import json

import pytest

from harness import cli
from harness.capacity.record import summary as capacity_summary
from harness.run.compose import compose
from harness.record.kinds import AB, BISECT, CALIBRATION, CAPACITY, KINDS, RUN, SWEEP
from harness.record.recorder import Recorder
from harness.record.store import RunRecord, record_kind
from harness.sweep.record import crossovers, summary as sweep_summary

SECRET = "hf_planted_secret_123456"


@pytest.mark.parametrize("kind, suffix, data_file", [(RUN, "", "results.json"), (SWEEP, "_sweep", "sweep.json"),
                                                     (CAPACITY, "_capacity", "capacity.json"), (AB, "_ab", "ab.json"),
                                                     (CALIBRATION, "_calibration", "calibration.json"),
                                                     (BISECT, "_bisect", "bisect.json")])
def test_each_kind_names_its_folder_and_its_json_as_today(tmp_path, kind, suffix, data_file):
    record = RunRecord(tmp_path, "sim_smoke", kind=kind)
    assert record.path.name.endswith(f"_sim_smoke{suffix}") and record.path.name[:8].isdigit()
    assert record_kind(record.path) is None  # no JSON yet: not a record to read
    record.write_data({"status": "running"})
    assert json.loads((record.path / data_file).read_text()) == {"status": "running"}
    assert record_kind(record.path) == kind.name
    assert set(KINDS) == {"run", "sweep", "capacity", "ab", "calibration", "bisect"}


@pytest.mark.parametrize("kind, configs, step_summary", [("run", True, True), ("sweep", False, False),
                                                         ("capacity", True, False), ("ab", True, True),
                                                         ("calibration", True, False), ("bisect", False, True)])
def test_every_driver_writes_through_one_recorder_redacted(tmp_path, monkeypatch, kind, configs, step_summary):
    step = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    experiment = compose(["+exp=sim_smoke", f"record.root={tmp_path / 'runs'}", f"+server.env.HF_TOKEN={SECRET}"])
    writer = Recorder(experiment, kind=kind)
    writer.learn_secrets([f"server.env.OTHER_TOKEN={SECRET}-too"])  # learned before the folder exists
    writer.write_data({"status": "finished", "command": [f"server.env.OTHER_TOKEN={SECRET}-too"]})
    writer.write_summary(f"# summary\nthe token was {SECRET}-too\n")
    folder = writer.path
    assert folder.parent == tmp_path / "runs" and folder.name.endswith("sim_smoke" + KINDS[kind].suffix)
    assert record_kind(folder) == kind
    assert (folder / "config.yaml").is_file() == configs and (folder / "arms" / "eagle3" / "config.yaml").is_file() == configs
    assert step.is_file() == step_summary
    for file in [p for p in folder.rglob("*") if p.is_file()] + ([step] if step_summary else []):
        assert SECRET not in file.read_text(), file


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_says_its_status_the_same_way(tmp_path, kind):
    writer = Recorder(compose(["+exp=sim_smoke", f"record.root={tmp_path}"]), kind=kind)
    running = writer.status_fields("running")
    assert running == {"record_kind": kind, "status": "running", "started_utc": writer.started_utc, "finished_utc": None}
    for status in ("finished", "interrupted"):
        ended = writer.status_fields(status)
        assert ended["status"] == status and ended["started_utc"] == writer.started_utc
        assert ended["finished_utc"] >= ended["started_utc"]
    with pytest.raises(ValueError, match="a record's status is one of running, finished, interrupted"):
        writer.status_fields("done")
    assert not writer.started  # asking what to write makes no folder


def old_sweep_record(folder):
    """A sweep.json as specgate wrote it before verdicts had one shape: dicts with a status only."""
    points = [{"label": f"{n}_concurrency-{c}", "swept": [f"workload.concurrency={c}"], "exit_status": 0,
               "overrides": [f"workload.concurrency={c}"], "record": None, "status": "finished",
               "arms": {"baseline": {"status": "measured", "concurrency": c, "speedup": None, "output_tok_s": 100.0},
                        "eagle3": {"status": "measured", "concurrency": c, "speedup": s, "output_tok_s": 100.0 * s,
                                   "accept_length": 2.4, "break_even": 2.0}}}
              for n, (c, s) in enumerate([(1, 1.3), (4, 1.2), (16, 0.9)])]
    data = {"experiment": "sim_crossover", "status": "finished", "command": ["specgate", "sweep"],
            "pytest_options": [], "started_utc": "2026-12-01T00:00:00+00:00",
            "finished_utc": "2026-12-01T00:10:00+00:00", "exit_status": 1, "points": points,
            "crossovers": crossovers(points),
            "sweep_gates": [{"name": "crossover_at_least", "arm": "eagle3", "with": [], "status": "failed",
                             "value": 10.1, "threshold": 16, "detail": "eagle3 pays up to concurrency ~10.1: "
                                                                       "crossover below 16"},
                            {"name": "min_speedup_through", "arm": "eagle3", "with": [], "status": "not_evaluable",
                             "value": None, "threshold": 1.1, "detail": "eagle3: no swept point has concurrency <= 0"}]}
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(data))
    return data


def test_an_older_sweep_record_still_renders_and_summarizes(tmp_path):
    folder = tmp_path / "20261201T000000Z_sim_crossover_sweep"
    data = old_sweep_record(folder)
    assert record_kind(folder) == "sweep"
    assert cli.main(["report", str(folder)]) == 0
    page = (folder / "report.html").read_text()
    assert "FAILED: 1 sweep gate(s) failed" in page and "crossover below 16" in page
    text = sweep_summary(data)
    assert "- FAILED crossover_at_least eagle3: eagle3 pays up to concurrency ~10.1: crossover below 16" in text
    assert "- NOT EVALUABLE min_speedup_through eagle3: eagle3: no swept point" in text


def test_an_older_capacity_record_still_renders_and_summarizes(tmp_path):
    folder = tmp_path / "20261201T000000Z_sim_capacity_capacity"
    folder.mkdir()
    probe = {"probe": 0, "load": 8, "met": True, "misses": [], "failed_requests": 0, "goodput_rps": 3.0,
             "output_tok_s": 300.0, "request_per_s": 3.0, "ttft_ms": {"p50": 20.0, "p99": 40.0},
             "tpot_ms": {"p50": 5.0, "p99": 9.0}, "itl_ms": {"p99": 9.5}, "e2e_ms": {"p99": 400.0}}
    arm = {"status": "finished", "capacity": 8, "first_miss": 16, "reached_max": False, "goodput_rps": 3.0,
           "at_capacity": probe, "error": None, "server": {}, "probes": [probe]}
    verdict = {"name": "min_capacity", "arm": "eagle3", "passed": False, "value": 8, "threshold": 12.0,
               "detail": "eagle3: capacity 8 concurrent requests is below the floor 12", "baseline": None,
               "unreliable": False, "inconclusive": False, "interval": None, "status": "failed"}  # no scope, no `with`
    data = {"experiment": "sim_capacity", "description": "", "command": ["specgate", "capacity"],
            "status": "finished", "started_utc": "2026-12-01T00:00:00+00:00", "finished_utc": "2026-12-01T00:10:00+00:00",
            "exit_status": 1, "dimension": "concurrency",
            "slos": [{"metric": "tpot_ms", "statistic": "p99", "limit_ms": 10.0}],
            "search": {"start": 1, "max": 64, "growth": 2.0, "tolerance": None, "rounds": 2, "probe_s": None},
            "plain_arm": "baseline", "arms": {"eagle3": arm}, "gates": [verdict]}
    (folder / "capacity.json").write_text(json.dumps(data))
    assert record_kind(folder) == "capacity"
    assert cli.main(["report", str(folder)]) == 0
    assert "is below the floor 12" in (folder / "report.html").read_text()
    assert "- FAILED min_capacity eagle3: eagle3: capacity 8 concurrent requests is below the floor 12" in \
        capacity_summary(data)


def test_a_write_that_fails_mid_run_is_one_sentence_and_the_next_write_holds_everything(tmp_path, capsys, monkeypatch):
    # a full disk mid-run: it used to be a traceback, 45 s of measurements lost and exit 1
    writer = Recorder(compose(["+exp=sim_smoke", f"record.root={tmp_path}"]))
    writer.write_data({"arms": {}, "n": 0})  # the record exists
    real = RunRecord.write_data

    def full(self, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(RunRecord, "write_data", full)
    writer.write_data({"arms": {}, "n": 1})
    writer.write_data({"arms": {}, "n": 2})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the record's results.json in" in err and "No space left" in err
    monkeypatch.setattr(RunRecord, "write_data", real)
    writer.write_data({"arms": {}, "n": 3})  # the disk has room again: the whole data is written
    assert json.loads((writer.path / "results.json").read_text())["n"] == 3
