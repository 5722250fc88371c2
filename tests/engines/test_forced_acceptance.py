"""Forced acceptance (benchmark only): `drafter.forced_accept_length` / `forced_accept_rates`
reach each engine through its own mechanism, are refused in one sentence where the engine or
its build has none (before any server starts), and mark the arm benchmark-only, also when
the engine's own knob is set by hand; a quality gate asked of such an arm cannot pass."""

from __future__ import annotations

import json

import pytest

from harness.config.compose import ConfigError
from harness.engines import engine_of
from harness.engines.vllm import speculative_config
from harness.gates.baseline_match import arm_identity
from harness.gates.registry import GATES, GateContext
from harness.measure.metrics import ArmResult
from harness.run.compose import compose


def arm(exp: str, name: str, *overrides: str):
    return compose([f"+exp={exp}", *overrides]).arm(name)


def launched(found) -> tuple[list[str], dict[str, str]]:
    cfg = found.typed
    engine = engine_of(cfg)
    return engine.launch(cfg, 1234, "127.0.0.1", False).argv, engine.environment(cfg)


# --- each engine's own mechanism ------------------------------------------------------------

def test_a_forced_length_is_sglangs_simulate_env_on_the_simulator():
    eagle3 = arm("sim_smoke", "eagle3", "drafter.forced_accept_length=2.5")
    argv, env = launched(eagle3)
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "2.5" and env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert eagle3.benchmark_only == "drafter.forced_accept_length=2.5"
    plain = arm("sim_smoke", "baseline", "drafter.forced_accept_length=2.5")  # the command line reaches every arm
    assert plain.benchmark_only is None and "SGLANG_SIMULATE_ACC_LEN" not in launched(plain)[1]


def test_a_method_the_user_set_is_kept():
    eagle3 = arm("sim_smoke", "eagle3", "drafter.forced_accept_length=2.5",
                 "++server.env.SGLANG_SIMULATE_ACC_METHOD=multinomial")
    assert launched(eagle3)[1]["SGLANG_SIMULATE_ACC_METHOD"] == "multinomial"


def test_forced_rates_are_the_simulators_own_flag():
    eagle3 = arm("sim_smoke", "eagle3", "drafter.forced_accept_rates=[0.9,0.5]")
    argv, env = launched(eagle3)
    assert argv[argv.index("--sim-forced-accept-rates") + 1] == "0.9,0.5"
    assert "SGLANG_SIMULATE_ACC_LEN" not in env
    assert eagle3.benchmark_only == "drafter.forced_accept_rates=[0.9, 0.5]"


def test_sglang_takes_a_length_and_refuses_rates():
    eagle3 = arm("eagle_k2", "eagle3", "drafter.forced_accept_length=2")
    assert launched(eagle3)[1]["SGLANG_SIMULATE_ACC_LEN"] == "2"
    with pytest.raises(ConfigError, match=r"forces acceptance by a mean length only .*use drafter.forced_accept_length"):
        arm("eagle_k2", "eagle3", "drafter.forced_accept_rates=[0.9,0.5]")


def test_vllm_gpu_builds_take_synthetic_rejection_sampling():
    drafter = arm("vllm_cpu_eagle3", "ngram").typed.drafter
    drafter.forced_accept_length = 2.5
    config = speculative_config(drafter)
    assert (config["rejection_sample_method"], config["synthetic_acceptance_length"]) == ("synthetic", 2.5)
    drafter.forced_accept_length, drafter.forced_accept_rates = None, [0.9, 0.8, 0.1]
    assert speculative_config(drafter)["synthetic_acceptance_rates"] == [0.9, 0.8, 0.1]
    found = arm("vllm_cpu_eagle3", "ngram", "build=vllm_release", "drafter.forced_accept_length=2.5")
    argv, _ = launched(found)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["rejection_sample_method"] == "synthetic" and config["synthetic_acceptance_length"] == 2.5
    assert found.benchmark_only == "drafter.forced_accept_length=2.5"


# --- refused in one sentence, before any server starts --------------------------------------

@pytest.mark.parametrize("overrides", [
    ["drafter.forced_accept_length=2.5"],
    ["++drafter.vllm_speculative_config.rejection_sample_method=synthetic",
     "++drafter.vllm_speculative_config.synthetic_acceptance_length=2.5"],
], ids=["specgates-key", "vllms-own-knob-by-hand"])
def test_vllms_cpu_build_refuses_forced_acceptance(overrides):
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=vllm_cpu_eagle3", *overrides])
    said = str(caught.value)
    assert "vLLM's CPU build has no synthetic (forced) acceptance" in said and "\n" not in said


@pytest.mark.parametrize("overrides, said", [
    (["drafter.forced_accept_length=3.5"], r"forced_accept_length=3.5 is outside \[1, 3\]"),
    (["drafter.forced_accept_length=2", "drafter.forced_accept_rates=[0.5,0.5]"], "set one"),
    (["drafter.forced_accept_rates=[0.9]"], "has 1 rate"),
    (["drafter.forced_accept_rates=[0.5,0.9]"], "increases"),
    (["drafter.forced_accept_rates=[1.5,0.5]"], "forced_accept_rates"),
    (["drafter.forced_accept_length=0.5"], "forced_accept_length"),
])
def test_impossible_forcing_is_one_sentence(overrides, said):
    with pytest.raises(ConfigError, match=said) as caught:
        compose(["+exp=sim_smoke", *overrides])
    assert "\n" not in str(caught.value)


# --- the engines' own knobs, set by hand, are found too ---------------------------------------

def test_sglangs_env_set_by_hand_marks_the_arm():
    eagle3 = arm("sim_smoke", "eagle3", "++server.env.SGLANG_SIMULATE_ACC_LEN=3")
    assert eagle3.benchmark_only == "server.env.SGLANG_SIMULATE_ACC_LEN=3"
    assert arm("sim_smoke", "eagle3", "++server.env.SGLANG_SIMULATE_ACC_LEN=-1").benchmark_only is None  # SGLang's "off"
    assert arm("sim_smoke", "baseline", "++server.env.SGLANG_SIMULATE_ACC_LEN=3").benchmark_only is None  # drafts nothing


def test_sglangs_env_inherited_by_a_process_server_marks_the_arm(monkeypatch):
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_LEN", "2")
    inherited = arm("sim_smoke", "eagle3", "backend=process").benchmark_only
    assert inherited == "specgate's environment (backend=process passes it on): SGLANG_SIMULATE_ACC_LEN=2"
    assert arm("sim_smoke", "eagle3").benchmark_only is None  # a container does not inherit it


def test_a_forced_arm_is_another_identity_than_a_real_one():
    real, forced = arm("sim_smoke", "eagle3"), arm("sim_smoke", "eagle3", "drafter.forced_accept_length=2.5")
    assert arm_identity(real)["acceptance"] == "the drafter's own"
    assert arm_identity(forced)["acceptance"] == "forced: drafter.forced_accept_length=2.5"


# --- quality gates cannot pass a benchmark-only arm -------------------------------------------

def context(name: str, **kwargs) -> GateContext:
    experiment = compose(["+exp=sim_smoke", "drafter.forced_accept_length=2.5"])
    result = ArmResult.of("eagle3", accept_length=2.5)
    forced = {a.name: a.benchmark_only for a in experiment.arms if a.benchmark_only}
    return GateContext(arm=name, gate=experiment.arm(name).cfg.gate, result=result, gpu=None, plain_arm="baseline",
                       results={"eagle3": result, "baseline": ArmResult.of("baseline")}, reference=None,
                       reference_label="", telemetry_source="sim", benchmark_only=forced, **kwargs)


@pytest.mark.parametrize("gate", ["min_accept_length", "lossless"])
def test_a_quality_gate_asked_of_a_forced_arm_fails_saying_why(gate):
    (verdict,) = GATES[gate].check(context("eagle3"))
    assert verdict.passed is False
    assert "arm 'eagle3' forces its acceptance (drafter.forced_accept_length=2.5)" in verdict.detail
    assert "benchmark-only" in verdict.detail


def test_speed_gates_still_judge_a_forced_arm():
    verdicts = GATES["accept_length_at_least_break_even"].check(context("eagle3"))
    assert all("benchmark-only" not in v.detail for v in verdicts)


def test_a_quality_gate_not_asked_of_the_arm_is_skipped_as_before():
    (verdict,) = GATES["min_accept_length"].check(context("baseline"))
    assert verdict.passed is None and "no threshold configured" in verdict.detail
