"""Gates turn numbers into verdicts: pass, fail (with the reason in words) or skip (no
threshold, never a silent pass). A threshold on something not measured is a failure.
Every gate is registered with one signature; config validation and the suites come from
the registry."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.gates import gpu
from harness.gates import reference
from harness.gates import registry
from harness.gates import speculative
from harness.gates import throughput
from harness.gates import verdict
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.config.schema import GateConfig, SweepGateConfig
from tests.support.arm_results import result

ROOT = Path(__file__).resolve().parents[2]
EXP_CAPACITY = "+exp=sim_capacity"  # configures gate.min_capacity


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def ctx(arm, result, cfg, results=None, plain_arm="baseline", gpu=None, telemetry="off", reference=None):
    return registry.GateContext(arm=arm, gate=cfg, result=result, gpu=gpu, plain_arm=plain_arm,
                            results=results or {}, reference=reference, reference_label="runs/old",
                            telemetry_source=telemetry)


PLAIN = result("baseline", output_tok_s=82.0, decode_step_ms=12.2, accept_length=None, verify_cycle_ms=None,
               accept_length_source=None)


def test_floor_passes_fails_and_skips():
    cfg = gate_cfg(min_output_tok_s={"eagle3": 60.0})
    [ok] = throughput.min_output_tok_s(ctx("eagle3", result(), cfg))
    assert ok.passed is True and ok.value == 66.0 and ok.threshold == 60.0
    [low] = throughput.min_output_tok_s(ctx("eagle3", result(output_tok_s=50.0), cfg))
    assert low.passed is False and "50.00 tok/s is below the floor 60 tok/s" in low.detail
    [none] = throughput.min_output_tok_s(ctx("baseline", PLAIN, cfg))
    assert none.passed is None and "no threshold configured" in none.detail


def test_a_threshold_on_an_unmeasured_value_fails():
    [v] = throughput.min_output_tok_s(ctx("eagle3", result(output_tok_s=None), gate_cfg(min_output_tok_s={"eagle3": 1.0})))
    assert v.passed is False and "not measured" in v.detail


def test_latency_limits_one_verdict_per_statistic():
    cfg = gate_cfg(max_ttft_ms={"eagle3": {"p50": 55.0, "p99": 60.0}})
    verdicts = throughput.max_ttft_ms(ctx("eagle3", result(), cfg))
    assert [(v.name, v.passed) for v in verdicts] == [("max_ttft_ms.p50", True), ("max_ttft_ms.p99", False)]
    assert "TTFT p99 70.00 ms exceeds the limit 60 ms" in verdicts[1].detail


def test_speedup_says_slower_in_words():
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.0}})
    [v] = speculative.min_speedup(ctx("eagle3", result(), cfg, {"baseline": PLAIN}))
    assert v.passed is False and abs(v.value - 66 / 82) < 1e-9
    assert "eagle3 is slower than baseline" in v.detail and "0.80x" in v.detail


def test_speedup_without_the_plain_arm_is_skipped_not_passed():
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.0}})
    [v] = speculative.min_speedup(ctx("eagle3", result(), cfg, {}))
    assert v.passed is None and "was not measured" in v.detail


def test_break_even_is_cycle_over_plain_step():
    cfg = gate_cfg(accept_length_at_least_break_even=["eagle3"])
    [v] = speculative.accept_length_at_least_break_even(ctx("eagle3", result(), cfg, {"baseline": PLAIN}))
    assert v.passed is False
    assert abs(v.threshold - 30.0 / 12.2) < 1e-9
    assert "accept length 2.00 is below break-even 2.46" in v.detail
    [good] = speculative.accept_length_at_least_break_even(ctx("eagle3", result(accept_length=2.6), cfg, {"baseline": PLAIN}))
    assert good.passed is True


def test_failed_requests_show_the_servers_message():
    cfg = gate_cfg()
    bad = result(requests_ok=3, requests_failed=2, errors={"HTTP 400: Only 'application/json' is allowed": 2})
    [v] = throughput.requests_succeed(ctx("eagle3", bad, cfg))
    assert v.passed is False and "application/json" in v.detail and "2 of 5" in v.detail
    [empty] = throughput.requests_succeed(ctx("eagle3", result(requests_ok=0, requests_failed=0), cfg))
    assert empty.passed is False and "nothing was measured" in empty.detail


def test_server_cumulative_accept_length_is_labelled():
    cfg = gate_cfg(min_accept_length={"eagle3": 1.5})
    [v] = speculative.min_accept_length(ctx("eagle3", result(accept_length_source="server_cumulative"), cfg))
    assert v.passed is True and "server-cumulative" in v.detail


def test_unreliable_verdicts_say_so_in_their_record():
    noisy = result(repeats=3, noise={"output_tok_s": {"median": 66.0, "mad": 5.0, "cv": 0.2}})
    [v] = throughput.min_output_tok_s(ctx("eagle3", noisy, gate_cfg(min_output_tok_s={"eagle3": 60.0})))
    assert v.passed is None and v.unreliable and v.to_json()["status"] == "unreliable"
    assert v.to_json()["unreliable"] is True and "CV 20.0%" in v.detail


def test_every_gate_has_one_signature_a_suite_and_known_config_keys():
    fields = {f.name for f in dataclasses.fields(GateConfig)}
    # read by the runner and the noise guard of every gate; the load-size guard of every rate (gates/trust.py)
    general = {"repeats", "max_cv", "min_load_requests", "min_load_s"}
    read = set()
    for registered in registry.gates_in("arm"):
        assert registered.suite in ("throughput", "speculative", "gpu", "baseline", "fleet")
        assert registered.section == "gate" and set(registered.keys) <= fields, registered.name
        read |= set(registered.keys)
        verdicts = registered.check(ctx("eagle3", result(), gate_cfg()))
        assert verdicts and all(isinstance(v, verdict.Verdict) and v.scope == "arm" for v in verdicts)
    for registered in registry.gates_in("capacity"):  # judged by `specgate capacity`, not a suite
        assert registered.suite is None and registered.section == "gate" and set(registered.keys) <= fields
        read |= set(registered.keys)
    assert fields - general == read, "a GateConfig field that no registered gate reads"


def test_sweep_and_capacity_gates_are_registered_with_their_scope_and_keys():
    sweep_fields = {f.name for f in dataclasses.fields(SweepGateConfig)}
    sweep_gates = registry.gates_in("sweep")
    assert {g.name for g in sweep_gates} == {"min_speedup_through", "crossover_at_least"}
    assert {k for g in sweep_gates for k in g.keys} == sweep_fields
    assert all(g.suite is None and g.section == "sweep_gate" for g in sweep_gates)
    assert [g.name for g in registry.gates_in("capacity")] == ["min_capacity"]
    assert set(registry.GATES) == {g.name for scope in verdict.SCOPES for g in registry.gates_in(scope)}
    # an unconfigured sweep or capacity gate judges nothing (an arm gate says it was skipped)
    assert registry.judge("sweep", registry.SweepContext(OmegaConf.structured(SweepGateConfig), [], [], "baseline")) == []
    assert registry.judge("capacity", registry.CapacityContext(gate_cfg(), {}, "req/s", 1.0)) == []
    with pytest.raises(ValueError):
        registry.judge("arm", registry.SweepContext({}, [], []))
    with pytest.raises(ValueError, match="an arm gate names its suite, a sweep gate none"):
        registry.register("suited_sweep_gate", "throughput", ("crossover_at_least",), scope="sweep")
    with pytest.raises(ValueError, match="an arm gate names its suite"):
        registry.register("suiteless_arm_gate", None, ("max_cv",))


def test_a_gate_outside_a_suite_is_not_a_suite_test_nor_listed_as_not_evaluated():
    not_run = {g.name for g, _ in registry.configured_gates([("eagle3", compose([EXP_CAPACITY]).base.gate)])}
    assert "min_capacity" not in not_run and not_run <= {g.name for g in registry.gates_in("arm")}


@pytest.mark.parametrize("passed, flags, status, word", [
    (True, {}, "passed", "PASSED"), (False, {}, "failed", "FAILED"), (None, {}, "skipped", "SKIPPED"),
    (None, {"unreliable": True}, "unreliable", "UNRELIABLE"), (True, {"inconclusive": True}, "inconclusive", "INCONCLUSIVE"),
    (None, {"not_evaluable": True, "scope": "sweep", "others": ["drafter.num_steps=2"]}, "not_evaluable", "NOT EVALUABLE"),
])
def test_one_verdict_type_is_written_read_back_and_printed_the_same_way_in_every_scope(passed, flags, status, word):
    v = verdict.Verdict("crossover_at_least", "eagle3", passed, 5.5, 4.0, "eagle3 pays up to ~5.5", **flags)
    data = v.to_json()
    assert data["status"] == status and data["with"] == v.others and data["scope"] == v.scope
    assert verdict.Verdict.from_json(data) == v
    others = " (with drafter.num_steps=2)" if v.others else ""
    assert v.line() == f"{word} crossover_at_least eagle3{others}: eagle3 pays up to ~5.5"


@pytest.mark.parametrize("status, passed", [("passed", True), ("failed", False), ("not_evaluable", None)])
def test_a_sweep_verdict_as_older_records_kept_it_reads_back(status, passed):
    old = {"name": "min_speedup_through", "arm": "eagle3", "with": ["drafter.num_steps=4"], "status": status,
           "value": 1.2, "threshold": 1.1, "detail": "eagle3: ..."}  # sweep.json before one Verdict type
    v = verdict.Verdict.from_json(old, "sweep")
    assert (v.passed, v.status, v.scope, v.others) == (passed, status, "sweep", ["drafter.num_steps=4"])
    assert {k: v.to_json()[k] for k in old} == old


def suite_tests(suite: str) -> set[str]:
    path = ROOT / "suites" / f"test_{'baseline' if suite == 'baseline' else suite}.py"
    spec = importlib.util.spec_from_file_location(f"suite_{suite}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name for name, obj in vars(module).items() if name.startswith("test_") and callable(obj)}


@pytest.mark.parametrize("suite", ["throughput", "speculative", "gpu", "baseline"])
def test_the_suites_are_generated_from_the_registry(suite, monkeypatch):
    expected = {f"test_{g.name}" for g in registry.gates_of(suite)}
    assert suite_tests(suite) == expected
    monkeypatch.setitem(registry.GATES, "a_new_gate", registry.Gate("a_new_gate", suite, lambda c: [], (), registry.no_arms))
    assert suite_tests(suite) == expected | {"test_a_new_gate"}


def test_today_s_test_names_stay():
    names = {f"test_{n}" for n in registry.GATES}
    assert {"test_requests_succeed", "test_max_ttft_ms", "test_min_speedup", "test_sm_clock_under_load",
            "test_no_slowdown_reasons_under_load", "test_gpu_utilization_under_load",
            "test_no_regression_against_baseline", "test_accept_length_at_least_break_even"} <= names


@pytest.mark.parametrize("override, key", [
    ("+gate.min_output_tok_s.nope=1", "gate.min_output_tok_s"),
    ("+gate.min_accept_length.nope=1.5", "gate.min_accept_length"),
    ("gate.min_speedup.eagle3.over=nope", "gate.min_speedup"),
    ("gate.accept_length_at_least_break_even=[nope]", "gate.accept_length_at_least_break_even"),
])
def test_config_validation_of_arm_names_comes_from_the_registry(override, key):
    with pytest.raises(ConfigError) as info:
        compose(["+exp=sim_smoke", override])
    assert f"{key} names arm 'nope', which is not an arm" in str(info.value)


def test_a_registered_gate_s_arms_are_validated(monkeypatch):
    monkeypatch.setitem(registry.GATES, "picky", registry.Gate("picky", "throughput", lambda c: [], ("repeats",),
                                                       lambda g: ["ghost"]))
    with pytest.raises(ConfigError, match="gate.repeats names arm 'ghost'"):
        compose(["+exp=sim_smoke"])


def gpu_block(**g):
    return {"source": "sim", "samples": {"idle": 5, "load": 10}, "ramp_in_s": 1.0,
            "gpus": {"GPU-0": {"index": 0, "load": {"sm_clock_mhz": {"median": 2500.0}, "gpu_util_pct": {"median": 90}},
                               "sm_clock_max_mhz": 2600.0, "sm_clock_ratio_under_load": 0.96, **g}}}


def test_gpu_gates_decide_when_telemetry_cannot():
    cfg = gate_cfg(min_clock_ratio_under_load=0.9)
    [off] = gpu.min_clock_ratio_under_load(ctx("eagle3", result(), cfg, telemetry="off"))
    assert off.passed is None and "telemetry is off" in off.detail
    [nothing] = gpu.min_clock_ratio_under_load(ctx("eagle3", result(), cfg, telemetry="nvml"))
    assert nothing.passed is False and "recorded nothing" in nothing.detail
    unavailable = {"source": "nvml", "unavailable": "no NVIDIA driver (libnvidia-ml.so.1 not found)"}
    [skip] = gpu.min_clock_ratio_under_load(ctx("eagle3", result(), cfg, telemetry="nvml", gpu=unavailable))
    assert skip.passed is None and "no NVIDIA driver" in skip.detail
    [ok] = gpu.min_clock_ratio_under_load(ctx("eagle3", result(), cfg, telemetry="sim", gpu=gpu_block()))
    assert ok.passed is True and "2500 MHz is 0.96 of its max 2600 MHz" in ok.detail
    idle = {**gpu_block(), "samples": {"idle": 5, "load": 0}}
    [no_load] = gpu.min_gpu_util_under_load(ctx("eagle3", result(), cfg, telemetry="sim", gpu=idle))
    assert no_load.passed is False and "no GPU samples under load" in no_load.detail
    assert "the load window never opened (did the requests fail?)" in no_load.detail


def test_a_load_shorter_than_the_ramp_in_is_too_short_to_judge_not_a_failure():
    short = {**gpu_block(), "samples": {"idle": 5, "ramp_in": 6, "load": 0}, "interval_s": 0.1,
             "load_windows": 1, "longest_load_window_s": 0.62}
    [v] = gpu.min_gpu_util_under_load(ctx("eagle3", result(), gate_cfg(), telemetry="sim", gpu=short))
    assert v.status == "inconclusive" and v.passed is True  # gate.inconclusive=warn (the default)
    assert v.detail == ("eagle3: the load was too short to sample the GPUs under load: tokens streamed for 0.62 s "
                        "(the longest of 1 load window(s)), all within the first 1 s that telemetry.ramp_in_s leaves "
                        "out while clocks boost; a longer load (workload.num_prompts, max_tokens or duration_s) can be judged")
    [strict] = gpu.min_gpu_util_under_load(ctx("eagle3", result(), gate_cfg(inconclusive="fail"), telemetry="sim", gpu=short))
    assert strict.passed is False and strict.inconclusive
    starved = {**short, "longest_load_window_s": 3.0}
    [v] = gpu.min_gpu_util_under_load(ctx("eagle3", result(), gate_cfg(), telemetry="sim", gpu=starved))
    assert v.passed is False and "tokens streamed for 3.00 s past the 1 s ramp-in but no sample was read" in v.detail


def test_reference_run_gate_names_the_regression():
    cfg = gate_cfg(baseline="runs/old", compare={"output_tok_s": "-3%"})
    old = {"requests": {"ok": 5, "failed": 0}, "output_tok_s": 80.0}
    [v] = reference.no_regression_against_reference(ctx("eagle3", result(), cfg, reference=old))
    assert v.passed is False and v.name == "baseline.output_tok_s" and v.baseline == 80.0
    assert "eagle3: output_tok_s regressed by 17.5% vs the reference run runs/old" in v.detail
    [none] = reference.no_regression_against_reference(ctx("eagle3", result(), gate_cfg()))
    assert none.passed is None and "no reference run configured" in none.detail
    defaults = [c.metric for c in reference.comparisons(gate_cfg())]
    assert defaults == ["output_tok_s", "itl_ms.p50", "tpot_ms.p50"]


def test_min_accept_length_per_category():
    cats = {"code": {"accept_length": 2.7}, "prose": {"accept_length": 1.6}}
    cfg = gate_cfg(min_accept_length={"eagle3": {"all": 2.0, "code": 2.5, "prose": 1.8, "math": 1.5}})
    verdicts = {v.name: v for v in speculative.min_accept_length(ctx("eagle3", result(categories=cats), cfg))}
    assert verdicts["min_accept_length"].passed is True  # "all": the arm over every request (2.0)
    assert verdicts["min_accept_length.code"].passed is True
    prose = verdicts["min_accept_length.prose"]
    assert prose.passed is False and prose.detail == "eagle3: accept length on 'prose' prompts 1.60 is below the floor 1.8"
    math = verdicts["min_accept_length.math"]  # no such prompt was sent: a threshold on nothing fails
    assert math.passed is False and "accept length on 'math' prompts was not measured" in math.detail
    [plain] = speculative.min_accept_length(ctx("eagle3", result(), gate_cfg(min_accept_length={"eagle3": 2.5})))
    assert plain.name == "min_accept_length" and plain.passed is False  # a number is the arm as a whole
