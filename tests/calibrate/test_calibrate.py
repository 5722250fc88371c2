"""`specgate calibrate` (harness/calibrate/): its checks before anything starts, the profile it
writes from the runs, an arm measured too rarely, and an interrupted calibration. The runs here
are stand-ins for each run's pytest (harness.sweep.point.run_point: a calibration runs its runs as
a sweep's points) that write a record as a run does; the whole path with real runs is tests/calibrate/test_calibrate_run.py (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import os
import signal
import time

from harness import cli
from harness.sweep import point
from harness.run.compose import compose
from harness.gates.profile import NoiseProfile
from harness.record.store import record_kind
from harness.run.reference import resolve_reference

SPEEDS = {"baseline": [250.0, 255.0, 245.0, 252.0], "eagle3": [310.0, 320.0, 305.0, 315.0]}


class FakeRuns:
    """Stands in for each run's pytest: writes `<record.root>/<ts>_sim_smoke/results.json` and
    `latest` as a finished run does, with the arms `measured` says; `stop_at` makes that run
    end as a Ctrl-C does."""

    def __init__(self, unmeasured: dict[int, set[str]] | None = None, stop_at: int | None = None,
                 dies: int | None = None):
        self.calls, self.unmeasured, self.stop_at, self.dies = 0, unmeasured or {}, stop_at, dies

    def __call__(self, command: list[str]) -> tuple[int, bool]:
        index, self.calls = self.calls, self.calls + 1
        if index == self.dies:
            return 1, False  # died before its record was made
        root = Path(next(re.fullmatch(r"record.root='(.*)'", a).group(1) for a in command if a.startswith("record.root=")))
        folder = root / f"20260101T00000{index}Z_sim_smoke"
        folder.mkdir(parents=True)
        arms = {arm: ({"status": "server_failed"} if arm in self.unmeasured.get(index, set()) else
                      {"status": "measured", "output_tok_s": speeds[index], "itl_ms": {"p50": 4.0}, "tpot_ms": {"p50": 4.0}})
                for arm, speeds in SPEEDS.items()}
        stopped = index == self.stop_at
        (folder / "results.json").write_text(json.dumps({"experiment": "sim_smoke", "arms": arms,
                                                         "status": "interrupted" if stopped else "finished"}))
        (root / "latest").symlink_to(folder.name)
        return (2, True) if stopped else (1 if index == 0 else 0, False)


def calibrate(tmp_path, monkeypatch, fake: FakeRuns, *extra: str) -> int:
    monkeypatch.setattr(point, "run_point", fake)
    return cli.main(["calibrate", "+exp=sim_smoke", "backend=process", "telemetry=off",
                     f"record.root={tmp_path / 'runs'}", *extra])


def calibration(tmp_path) -> Path:
    [folder] = (tmp_path / "runs").iterdir()
    return folder


def test_fewer_than_three_runs_is_one_sentence_before_anything_starts(tmp_path, monkeypatch, capsys):
    fake = FakeRuns()
    assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=2") == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "calibrate.runs must be a finite number >= 3 and <= 100 (e.g. 5), got 2" in err
    assert fake.calls == 0 and not (tmp_path / "runs").exists()


def test_a_bad_value_is_refused_before_the_first_run(tmp_path, monkeypatch, capsys):
    fake = FakeRuns()
    assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=3", "gate.baseline=/nowhere/at/all") == 4
    assert "calibration run 1: gate.baseline: /nowhere/at/all is not a run record" in capsys.readouterr().err
    assert fake.calls == 0 and not (tmp_path / "runs").exists()


def test_the_runs_become_a_noise_profile_that_gate_baseline_reads(tmp_path, monkeypatch):
    assert calibrate(tmp_path, monkeypatch, FakeRuns(), "calibrate.runs=4") == 0  # run 1's gates failed: it counts
    folder = calibration(tmp_path)
    assert folder.name.endswith("_sim_smoke_calibration") and record_kind(folder) == "calibration"
    data = json.loads((folder / "calibration.json").read_text())
    assert data["status"] == "finished" and data["exit_status"] == 0
    assert [r["exit_status"] for r in data["runs"]] == [1, 0, 0, 0]
    assert data["runs"][0]["record"] == "runs/run_1/20260101T000000Z_sim_smoke"
    profile = NoiseProfile.read(folder)
    noise = profile.arm("eagle3").metrics["output_tok_s"]
    assert noise.values == tuple(SPEEDS["eagle3"]) and profile.arm("eagle3").runs == ("run_1", "run_2", "run_3", "run_4")
    assert profile.about["host"] and profile.about["started_utc"] and profile.about["load_size"]["eagle3"]["num_prompts"] == 4
    assert profile.arm("baseline").identity["workload.name"] == "count_to_100"
    summary = (folder / "summary.md").read_text()
    assert "| eagle3 | output_tok_s | 4 | 312.5 |" in summary and "Gates failed in run_1" in summary
    experiment = compose(["+exp=sim_smoke", f"gate.baseline={folder}"])
    reference = resolve_reference(experiment)
    assert reference.kind == "calibration" and reference.runs == () and reference.notes == ()
    assert reference.profile.arms.keys() == {"baseline", "eagle3"}


def test_specgate_report_writes_the_calibration_kinds_own_page(tmp_path, monkeypatch, capsys):
    fake = FakeRuns(unmeasured={1: {"eagle3"}, 2: {"eagle3"}})  # eagle3: no profile, and why
    calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=4")
    folder = calibration(tmp_path)
    assert cli.main(["report", str(folder)]) == 0
    page = (folder / "report.html").read_text()
    assert "<h1>Calibration: sim_smoke</h1>" in page and "<td>run_3</td><td>0</td><td>finished</td>" in page
    assert "<td>baseline</td><td>output_tok_s</td><td>4</td>" in page  # the summary's own rows
    assert "eagle3</strong>: measured in 2 of 4 runs" in page


def test_an_arm_measured_in_fewer_than_three_runs_has_no_profile_and_exit_1(tmp_path, monkeypatch, capsys):
    fake = FakeRuns(unmeasured={1: {"eagle3"}, 2: {"eagle3"}})
    assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=4") == 1
    assert "arm 'eagle3' has no noise profile: measured in 2 of 4 runs; a profile needs at least 3" in capsys.readouterr().err
    folder = calibration(tmp_path)
    profile = NoiseProfile.read(folder)
    assert list(profile.arms) == ["baseline"] and "eagle3" in profile.uncovered
    assert "## No profile" in (folder / "summary.md").read_text()


def test_a_run_that_died_counts_for_no_arm_and_the_others_still_make_a_profile(tmp_path, monkeypatch):
    assert calibrate(tmp_path, monkeypatch, FakeRuns(dies=2), "calibrate.runs=4") == 0
    folder = calibration(tmp_path)
    assert [r["status"] for r in json.loads((folder / "calibration.json").read_text())["runs"]] == \
        ["finished", "finished", "no_record", "finished"]
    profile = NoiseProfile.read(folder)
    assert profile.runs == ("run_1", "run_2", "run_3", "run_4")
    assert profile.arm("eagle3").runs == ("run_1", "run_2", "run_4")
    assert profile.arm("eagle3").metrics["output_tok_s"].values == (310.0, 320.0, 315.0)


def test_a_deselected_arm_is_neither_profiled_nor_missing(tmp_path, monkeypatch, capsys):
    # `--arm baseline`: each run measures baseline only; eagle3's missing profile exited 1
    fake = FakeRuns(unmeasured={i: {"eagle3"} for i in range(3)})
    assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=3", "--arm", "baseline") == 0
    out, err = capsys.readouterr()
    assert "has no noise profile" not in err and "eagle3 deselected (--arm): not measured, not profiled" in out
    profile = NoiseProfile.read(calibration(tmp_path))
    assert list(profile.arms) == ["baseline"] and profile.uncovered == {}
    assert calibrate(tmp_path / "other", monkeypatch, FakeRuns(), "calibrate.runs=3", "--arm", "nope") == 4
    assert "--arm nope: no such arm in experiment 'sim_smoke'; arms: baseline, eagle3" in capsys.readouterr().err


class SignalsItself(FakeRuns):
    """A run during which Ctrl-C reaches the calibration (as a user's, or a script's kill -INT)."""

    def __call__(self, command: list[str]) -> tuple[int, bool]:
        if self.calls == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here, if there is one
        return super().__call__(command)


def test_a_calibration_started_with_ctrl_c_ignored_still_stops_on_it(tmp_path, monkeypatch, capsys):
    # started from a script or a shell's background job, the process inherits SIGINT ignored:
    # `specgate ab` installed its own handler and stopped, calibrate ran on through every run
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fake = SignalsItself()
        assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=3") == 2
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # put back as it was
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fake.calls == 1  # the second run was stopped as it began, the third never started
    assert "interrupted after 1 of 3 finished run(s)" in capsys.readouterr().err


def test_an_interrupted_calibration_writes_no_profile_and_says_which_runs_finished(tmp_path, monkeypatch, capsys):
    fake = FakeRuns(stop_at=1)
    assert calibrate(tmp_path, monkeypatch, fake, "calibrate.runs=3") == 2
    assert fake.calls == 2  # the third never started
    folder = calibration(tmp_path)
    data = json.loads((folder / "calibration.json").read_text())
    assert data["status"] == "interrupted" and data["runs_finished"] == ["run_1"] and data["exit_status"] == 2
    assert not (folder / "noise_profile.json").exists()
    assert "interrupted after 1 of 3 finished run(s); no noise profile written" in capsys.readouterr().err
    with pytest.raises(Exception, match="has no noise_profile.json"):
        resolve_reference(compose(["+exp=sim_smoke", f"gate.baseline={folder}"]))
