"""`gate.baseline=<history folder>`: the reference distribution is the runs since the last
change point (harness/run/reference.py history_profile over harness/history/), so a level
main moved to is the reference, not the average of before and after it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from harness.config.compose import ConfigError

from harness.run.compose import compose
from harness.gates import registry
from harness.gates.reference import no_regression_against_reference
from harness.run.reference import resolve_reference
from tests.history.records import stepped_history, write_run, START, arm_block
from tests.support.arm_results import result


def judge(profile, tok_s: float, arm: str = "eagle3"):
    cfg = compose(["+exp=sim_smoke", "+gate.compare.output_tok_s=2%", f"gate.baseline={profile.about['history']}"]).arm(arm).cfg.gate
    ctx = registry.GateContext(arm=arm, gate=cfg, result=result(arm=arm, output_tok_s=tok_s), gpu=None,
                               plain_arm="baseline", results={}, reference=None, reference_label=profile.label,
                               telemetry_source="off", profile=profile)
    (verdict,) = no_regression_against_reference(ctx)
    return verdict


def test_the_runs_since_the_last_change_point_are_the_reference(tmp_path):
    paths = stepped_history(tmp_path / "main", runs=12, step_at=6)  # eagle3 8 % lower from the 7th run on
    experiment = compose(["+exp=sim_smoke", f"gate.baseline={tmp_path / 'main'}"])
    reference = resolve_reference(experiment)
    profile = reference.profile
    eagle = profile.arm("eagle3").metrics["output_tok_s"]
    assert eagle.n == 6 and 1600 < eagle.median < 1700  # the six runs at the new level, not all twelve
    assert profile.arm("baseline").metrics["output_tok_s"].n == 12  # no change there: every run
    assert profile.label == f"{tmp_path / 'main'} (a history: each arm's runs since its last change point)"
    assert reference.kind == "history" and reference.runs == () and reference.notes == ()  # judged against the profile, not the newest run
    at_new_level = judge(profile, 1660.0)
    assert at_new_level.status != "failed", at_new_level.detail
    assert "noise profile of 6 runs" in at_new_level.detail, at_new_level.detail
    lower_still = judge(profile, 1660.0 * 0.85)
    assert lower_still.status == "failed", lower_still.detail
    assert profile.arm("eagle3").runs[0] == paths[6].name  # the segment starts at the change point


def test_a_history_too_short_since_its_change_is_judged_against_its_newest_run(tmp_path):
    for i, tok_s in enumerate([1800.0, 1805.0]):
        write_run(tmp_path / "main", START.replace(hour=i), {"eagle3": arm_block("eagle3", tok_s),
                                                             "baseline": arm_block("baseline", 1000.0)})
    experiment = compose(["+exp=sim_smoke", f"gate.baseline={tmp_path / 'main'}"])
    reference = resolve_reference(experiment)
    assert reference.kind == "history" and reference.profile is None  # two runs give no spread worth a profile
    assert len(reference.runs) == 2  # the old way: the newest run is the reference


def test_a_run_is_judged_against_its_own_configs_runs_in_a_mixed_history(tmp_path):
    """A sweep's points copied into one history: concurrency 8 runs twice as fast as 4. Read as
    one series, the reference would be their mix; judged, a run is held to its own config's."""
    from harness.gates.baseline_match import arm_identity

    def experiment(concurrency: int):
        return compose(["+exp=sim_smoke", f"workload.concurrency={concurrency}", f"gate.baseline={tmp_path / 'main'}"])
    for i in range(8):
        concurrency = (4, 8)[i % 2]
        arms = {name: {**arm_block(name, 900.0 * concurrency / 4 * (1 + 0.005 * (i % 3))),
                       "identity": arm_identity(experiment(concurrency).arm(name))} for name in ("baseline", "eagle3")}
        write_run(tmp_path / "main", START + timedelta(hours=i), arms)
    for concurrency, level in ((4, 900.0), (8, 1800.0)):
        profile = resolve_reference(experiment(concurrency)).profile
        eagle = profile.arm("eagle3").metrics["output_tok_s"]
        assert eagle.n == 4 and level <= eagle.median <= level * 1.01, (concurrency, eagle)
    with pytest.raises(ConfigError, match="workload.concurrency: 4 there, 16 here"):  # no run of this config
        resolve_reference(experiment(16))
