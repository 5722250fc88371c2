"""A reference run must have measured the same engine, model and workload (gate.baseline)."""

import json
from pathlib import Path

import pytest
import yaml

from harness.gates.baseline_match import check_baseline, differences, model_name
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.record.store import read_run


def record(folder: Path, arm_cfgs: dict[str, dict]) -> Path:
    """A minimal record: results.json with measured arms, and each arm's config.yaml."""
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"arms": {a: {"status": "measured"} for a in arm_cfgs}}))
    for arm, cfg in arm_cfgs.items():
        (folder / "arms" / arm).mkdir(parents=True)
        (folder / "arms" / arm / "config.yaml").write_text(yaml.safe_dump(cfg))
    return folder


def cfg(**workload) -> dict:
    return {"server": {"engine": "sim", "model_path": "sim/model"},
            "workload": {"api": "chat", "max_tokens": 64, "num_prompts": 10, **workload}}


def test_only_what_shapes_a_request_counts():
    assert differences(cfg(num_prompts=3, timeout_s=9, warmup_requests=0), cfg()) == []
    assert differences(cfg(max_tokens=8), cfg()) == ["workload.max_tokens: 64 there, 8 here"]
    assert differences(cfg(max_tokens=8), cfg(max_tokens="***")) == []  # redacted: cannot tell
    assert differences(cfg(new_key=1), cfg()) == []  # an older record without the key
    other_engine = {**cfg(), "server": {"engine": "vllm", "model_path": "sim/model"}}
    assert differences(cfg(), other_engine) == ["server.engine: 'vllm' there, 'sim' here"]


def test_secrets_in_an_identity_compare_by_fingerprint():
    """A prompt or model path holding a secret (a URL's token) is a fingerprint in both
    configs: equal values compare equal, different ones differ, none is skipped."""
    from harness.secrets import fingerprint
    mine, same, other = (cfg(prompt=f"http://{fingerprint(v)}@host/p") for v in ("tok1", "tok1", "tok2"))
    assert differences(mine, same) == []
    assert len(differences(mine, other)) == 1


def test_a_local_model_matches_by_its_folder_name():
    assert model_name("/a/checkout/.cache/tiny-models/qwen") == model_name("/b/.cache/tiny-models/qwen") == "qwen"
    assert model_name("Qwen/Qwen2-0.5B") == "Qwen/Qwen2-0.5B"


@pytest.fixture
def experiment():
    return compose(["+exp=sim_smoke", "workload.max_tokens=64"])


def arm_cfg(experiment, arm, **workload):
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(experiment.arm(arm).cfg, resolve=True)
    data["workload"].update(workload)
    return data


def test_a_history_leaves_out_the_runs_that_measured_something_else(experiment, tmp_path):
    arms = experiment.arm_names
    same = read_run(record(tmp_path / "1_same", {a: arm_cfg(experiment, a) for a in arms}))
    other = read_run(record(tmp_path / "2_other", {a: arm_cfg(experiment, a, api="completions") for a in arms}))
    kept, notes = check_baseline(experiment, [same, other])
    assert kept == [same]
    assert notes == [f"gate.baseline: left out of the history, as the reference run 2_other measured arm "
                     f"'{arms[0]}' differently (and 1 other arm(s)): workload.api: 'completions' there, 'chat' here"]
    with pytest.raises(ConfigError, match="gate.baseline: the reference run 2_other measured arm"):
        check_baseline(experiment, [other])


def test_a_record_without_arm_configs_is_compared_as_before(experiment, tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"arms": {"baseline": {"status": "measured"}}}))
    assert check_baseline(experiment, [read_run(folder)])[1] == []


def test_an_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="gate.baseline_mismatch 'maybe' is unknown; valid: fail, warn"):
        compose(["+exp=sim_smoke", "gate.baseline_mismatch=maybe"])


def lone_results(folder: Path, identities: dict[str, dict]) -> Path:
    """A results.json alone (copied out of its record, as a CI artifact): the identity it carries is all there is."""
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"arms": {a: {"status": "measured", "identity": i}
                                                              for a, i in identities.items()}}))
    return folder / "results.json"


def test_a_lone_results_json_carries_what_identifies_its_measurement(experiment, tmp_path):
    # at another concurrency: refused as for its record folder, with no config.yaml beside it
    from harness.gates.baseline_match import arm_identity
    other = {a: {**arm_identity(experiment.arm(a)), "workload.concurrency": 64} for a in experiment.arm_names}
    with pytest.raises(ConfigError, match=r"workload.concurrency: 64 there, \d+ here"):
        check_baseline(experiment, [read_run(lone_results(tmp_path / "x", other))])
    same = {a: arm_identity(experiment.arm(a)) for a in experiment.arm_names}
    assert check_baseline(experiment, [read_run(lone_results(tmp_path / "y", same))])[1] == []


def test_an_edited_dataset_at_the_same_path_is_another_workload(tmp_path):
    from harness.gates.baseline_match import arm_identity
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "count to ten"}\n')
    experiment = compose(["+exp=sim_smoke", f"workload.dataset={data}"])
    recorded = {a: arm_identity(experiment.arm(a)) for a in experiment.arm_names}
    reference = read_run(lone_results(tmp_path / "ref", recorded))
    assert check_baseline(experiment, [reference])[1] == []
    data.write_text('{"prompt": "write a long story"}\n')  # same path, other prompts
    with pytest.raises(ConfigError, match="workload.dataset_sha256: '[0-9a-f]{64}' there, '[0-9a-f]{64}' here"):
        check_baseline(experiment, [reference])


@pytest.mark.parametrize("arms, theirs", [({}, "no arm at all"),
                                          ({"baseline": {"status": "server_failed"}}, "baseline (server_failed)"),
                                          ({"other": {"status": "measured", "requests": {"ok": 4}}}, "other (measured)")])
def test_a_reference_with_no_arm_to_compare_with_is_a_mistake(experiment, tmp_path, arms, theirs):
    """`{"arms": {}}` used to skip every baseline gate and exit 0: a merge gated on nothing."""
    (tmp_path / "results.json").write_text(json.dumps({"arms": arms}))
    with pytest.raises(ConfigError) as refused:
        check_baseline(experiment, [read_run(tmp_path / "results.json")])
    assert str(refused.value) == (
        f"gate.baseline: the reference run {tmp_path.name} measured none of this run's arms (baseline, eagle3; it has "
        f"{theirs}), so no gate can compare with it: point gate.baseline at a finished run of this experiment, "
        f"or leave it unset")


def test_a_reference_with_no_comparable_arm_stops_the_run_with_exit_status_4(tmp_path):
    from tests.support.runs import run_suites

    (tmp_path / "results.json").write_text(json.dumps({"arms": {}}))
    done = run_suites("+exp=sim_smoke", f"gate.baseline={tmp_path / 'results.json'}", f"record.root={tmp_path}",
                      refused=True, timeout=120)
    assert "measured none of this run's arms" in done.stderr + done.stdout
    assert not (tmp_path / "latest").exists()
