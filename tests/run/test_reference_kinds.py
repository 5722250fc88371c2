"""gate.baseline resolves once, by the kind of record it names, to its Reference
(harness/run/reference.py): unset, one run, a calibration (or its noise_profile.json) or a
history folder; one it cannot read is one sentence and `specgate show`'s exit status 4."""

from __future__ import annotations

import json

import pytest

from harness import cli
from harness.config.compose import ConfigError
from harness.exit_status import MISTAKE
from harness.gates.profile import NoiseProfile
from harness.run.compose import compose
from harness.run.preflight import check_experiment
from harness.run.reference import (CalibrationReference, HistoryReference, NoReference, RunReference,
                                   resolve_reference)
from tests.history.records import START, arm_block, stepped_history, write_run

ARMS = {"baseline": 1000.0, "eagle3": 1800.0}


def resolved(baseline) -> object:
    return resolve_reference(compose(["+exp=sim_smoke", f"gate.baseline={baseline}"]))


def one_run(root, hour: int = 0):
    return write_run(root, START.replace(hour=hour), {arm: arm_block(arm, tok_s) for arm, tok_s in ARMS.items()})


def calibration(folder):
    """A calibration's folder as `specgate calibrate` leaves it: calibration.json and noise_profile.json."""
    folder.mkdir(parents=True)
    results = [{"experiment": "sim_smoke", "arms": {arm: arm_block(arm, tok_s * (1 + i / 100)) for arm, tok_s in ARMS.items()}}
               for i in range(3)]
    (folder / "calibration.json").write_text(json.dumps({"record_kind": "calibration", "status": "finished"}))
    (folder / "noise_profile.json").write_text(json.dumps(NoiseProfile.from_results(results, str(folder)).to_json()))
    return folder


def test_no_baseline_is_no_reference():
    reference = resolve_reference(compose(["+exp=sim_smoke"]))
    assert type(reference) is NoReference and reference.kind == "none"
    assert reference.run is None and reference.profile is None and reference.arm("eagle3") is None
    assert reference.requests("eagle3") == [] and reference.history_arms("eagle3") == []


def test_one_run_is_a_run_reference(tmp_path):
    path = one_run(tmp_path / "runs")
    reference = resolved(path)
    assert type(reference) is RunReference and reference.kind == "run" and reference.label == str(path)
    assert reference.run.label == path.name and reference.history == () and reference.profile is None
    assert reference.arm("eagle3")["output_tok_s"] == 1800.0 and reference.history_arms("eagle3") == []
    assert type(resolved(path / "results.json")) is RunReference  # the file names the same run


def test_a_calibration_folder_or_its_profile_file_is_a_calibration_reference(tmp_path):
    folder = calibration(tmp_path / "20260101T000000Z_sim_smoke_calibration")
    for baseline in (folder, folder / "noise_profile.json"):
        reference = resolved(baseline)
        assert type(reference) is CalibrationReference and reference.kind == "calibration"
        assert reference.runs == () and reference.run is None and reference.arm("eagle3") is None
        assert reference.profile.arms.keys() == {"baseline", "eagle3"}


def test_a_history_folder_is_a_history_reference_with_a_profile_or_its_newest_run(tmp_path):
    stepped_history(tmp_path / "main", runs=8, step_at=8)
    reference = resolved(tmp_path / "main")
    assert type(reference) is HistoryReference and reference.kind == "history"
    assert reference.profile is not None and reference.runs == ()  # judged against the runs since the change
    one_run(tmp_path / "short", 0), one_run(tmp_path / "short", 1)
    short = resolved(tmp_path / "short")
    assert type(short) is HistoryReference and short.profile is None  # too few for a spread
    assert len(short.runs) == 2 and short.run.label == sorted(p.name for p in (tmp_path / "short").iterdir())[-1]
    assert len(short.history_arms("eagle3")) == 2  # the newest run and its history band


def test_the_reference_check_experiment_gives_is_the_resolved_one(tmp_path):
    path = one_run(tmp_path / "runs")
    assert check_experiment(compose(["+exp=sim_smoke", f"gate.baseline={path}"]), here=False) == resolved(path)


@pytest.mark.parametrize("what", ["nowhere", "sweep", "torn"])
def test_an_unreadable_or_unknown_baseline_is_one_sentence_and_exit_4(what, tmp_path, capsys):
    path = tmp_path / what
    if what == "sweep":  # another kind of record: no run, calibration or history
        path.mkdir()
        (path / "sweep.json").write_text(json.dumps({"record_kind": "sweep", "status": "finished"}))
    elif what == "torn":
        path.mkdir()
        (path / "results.json").write_text('{"arms": {"eagle3": ')
    with pytest.raises(ConfigError, match=r"^gate\.baseline: .*not a (readable )?run record") as raised:
        resolved(path)
    assert "\n" not in str(raised.value)
    assert cli.main(["show", "+exp=sim_smoke", f"gate.baseline={path}"]) == MISTAKE
    said = [line for line in capsys.readouterr().err.splitlines() if "specgate: " in line]
    assert len(said) == 1 and "gate.baseline: " in said[0], said
