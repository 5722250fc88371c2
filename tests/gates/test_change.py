"""Reference-run verdicts from distributions: passed, failed or inconclusive, with an
interval; tails with too few samples are inconclusive; which way is worse comes from the
metric registry, not from a sign."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.gates import reference
from harness.gates import registry
from harness.gates import speculative
from harness.gates.change import evidence, judge
from harness.measure.metrics import ArmResult, Stat
from harness.config.schema import GateConfig


def lines(n: int, seed: int, step_ms: float = 4.0, tokens: int = 64, ttft_ms: float = 20.0, concurrency: int = 1,
          repeat: int = 0) -> list[dict]:
    """requests.jsonl lines of a closed loop: jittered TTFT and decode steps, back to back."""
    rng = np.random.default_rng(seed)
    out, clock = [], [0.0] * concurrency
    for i in range(n):
        slot = i % concurrency
        send = clock[slot]
        ttft = ttft_ms * rng.lognormal(0, 0.15)
        gaps = step_ms * rng.lognormal(0, 0.10, size=tokens - 1)
        chunks = list(send + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        end = chunks[-1] + 0.2
        clock[slot] = end
        out.append({"index": i, "warmup": False, "ok": True, "repeat": repeat, "send_ms": send, "end_ms": end,
                    "ttft_ms": ttft, "e2e_ms": end - send, "decode_ms": chunks[-1] - chunks[0],
                    "completion_tokens": tokens, "chunk_ms": chunks, "chunk_tokens": [1] * tokens,
                    "spec_verify_ct": None})
    return out


@pytest.mark.parametrize("metric", ["output_tok_s", "tpot_ms.p50", "itl_ms.p50", "ttft_ms.p50", "e2e_ms.p50"])
def test_identical_runs_pass_and_a_ten_percent_slowdown_fails(metric):
    lower_is_better = metric != "output_tok_s"
    old, same = evidence(metric, lines(64, 1, concurrency=8)), evidence(metric, lines(64, 2, concurrency=8))
    change = judge(metric, old, same, 0.05, lower_is_better)
    assert change.outcome in ("passed", "inconclusive") and change.low < 0.05
    if metric != "ttft_ms.p50":  # TTFT does not move with the decode step
        slow = evidence(metric, lines(64, 3, step_ms=4.4, concurrency=8))
        change = judge(metric, old, slow, 0.03, lower_is_better)
        assert change.outcome == "failed", change
        assert 0.03 < change.low < change.worse < change.high
        assert 0.06 < change.worse < 0.14


def test_a_tail_of_too_few_samples_is_inconclusive_not_failed():
    old, new = evidence("ttft_ms.p99", lines(40, 1)), evidence("ttft_ms.p99", lines(40, 2, ttft_ms=30.0))
    change = judge("ttft_ms.p99", old, new, 0.05, True)
    assert change.outcome == "inconclusive"
    assert "p99 of 40 samples rests on 0.4 beyond it" in change.why and "at least 500" in change.needed
    assert change.worse > 0.2  # the point change is large, and still not a verdict


def test_an_undecided_change_says_how_much_data_would_decide():
    old, new = evidence("tpot_ms.p50", lines(8, 1)), evidence("tpot_ms.p50", lines(8, 2, step_ms=4.2))
    change = judge("tpot_ms.p50", old, new, 0.05, True)
    assert change.outcome == "inconclusive" and change.low < 0.05 < change.high
    assert change.needed.startswith(("about", "more than")) and "requests per run" in change.needed


def test_accept_length_is_a_ratio_of_sums_over_requests():
    spec = [{**line, "spec_verify_ct": 32} for line in lines(20, 1)]
    worse = [{**line, "spec_verify_ct": 40} for line in lines(20, 2)]
    old, new = evidence("accept_length", spec), evidence("accept_length", worse)
    assert old.value() == pytest.approx(2.0)
    change = judge("accept_length", old, new, 0.05, False)
    assert change.outcome == "failed" and change.worse == pytest.approx(0.2)


def result(tok_s: float, tpot: float) -> ArmResult:
    return ArmResult.of("eagle3", output_tok_s=tok_s, tpot_ms=Stat(p50=tpot), requests_ok=64)


def ctx(new_lines, old_lines, gate_overrides=None, gpu=None, **reference):
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"baseline": "runs/old", **(gate_overrides or {})})
    old = {"requests": {"ok": 64, "failed": 0}, **reference}
    new_tpot = float(np.median(evidence("tpot_ms.p50", new_lines).groups))
    return registry.GateContext(arm="eagle3", gate=cfg, result=result(evidence("output_tok_s", new_lines).value(), new_tpot),
                            gpu=gpu, plain_arm=None, results={}, reference=old, reference_label="runs/old",
                            telemetry_source="off", requests=new_lines, reference_requests=old_lines)


def test_the_sign_does_not_decide_which_way_is_worse():
    old_lines, slow_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=8.0, concurrency=8)
    old_tok_s = evidence("output_tok_s", old_lines).value()
    for allowed in ("+5%", "-5%", "5%"):
        c = ctx(slow_lines, old_lines, {"compare": {"output_tok_s": allowed}}, output_tok_s=old_tok_s)
        [v] = reference.no_regression_against_reference(c)
        assert v.status == "failed", v.detail
        assert "output_tok_s regressed" in v.detail and "interval" in v.detail and v.interval[0] > 0.05


def test_inconclusive_follows_the_configured_policy():
    old_lines, new_lines = lines(40, 1), lines(40, 2)
    old_tok_s = evidence("output_tok_s", old_lines).value()
    for policy, passed in (("warn", True), ("pass", True), ("fail", False)):
        c = ctx(new_lines, old_lines, {"compare": {"ttft_ms.p99": "5%"}, "inconclusive": policy},
                output_tok_s=old_tok_s, ttft_ms={"p99": 25.0})
        c.result.set("ttft_ms", Stat(p99=26.0))
        [v] = reference.no_regression_against_reference(c)
        assert v.status == "inconclusive" and v.passed is passed and f"gate.inconclusive={policy}" in v.detail


def test_a_regression_measured_on_a_throttled_gpu_is_inconclusive_naming_it():
    old_lines, slow_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=6.0, concurrency=8)
    gpu = {"gpus": {"GPU-a": {"index": 3, "throttle_fraction_under_load": {"HwThermalSlowdown": 0.4},
                              "sm_clock_ratio_under_load": 0.7}}}
    c = ctx(slow_lines, old_lines, {"compare": {"output_tok_s": "5%"}}, gpu=gpu,
            output_tok_s=evidence("output_tok_s", old_lines).value())
    [v] = reference.no_regression_against_reference(c)
    assert v.status == "inconclusive" and v.passed is True and v.cause == "GPU 3 throttled", v.detail
    assert v.detail.startswith("inconclusive, GPU 3 was throttled (HwThermalSlowdown in 40% of load samples): "
                               "the speed measured is the GPU's, not the build's: ")
    assert "output_tok_s regressed" in v.detail  # what was measured is still said
    c.gate.fail_on_throttle_reasons = []  # the same run, the GPU gate not asking about throttling: judged as ever
    assert reference.no_regression_against_reference(c)[0].status == "failed"


def test_without_requests_in_the_reference_the_verdict_says_it_compared_two_values():
    new_lines = lines(64, 2, concurrency=8)
    c = ctx(new_lines, [], {"compare": {"output_tok_s": "5%"}}, output_tok_s=5000.0)
    [v] = reference.no_regression_against_reference(c)
    assert v.status == "failed" and "judged on the two values only" in v.detail


def test_an_unknown_compared_metric_is_a_config_error():
    with pytest.raises(ValueError, match="gate.compare.foo_ms: no such metric"):
        reference.Comparison.parse("foo_ms", "+5%")
    assert reference.Comparison.parse("ttft_ms.p90", "10%").higher_is_better is False


def test_a_history_of_past_runs_widens_the_allowed_change_by_its_spread():
    # 20 % slower: beyond the run-to-run floor, so it fails alone
    old_lines, slow_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=4.8, concurrency=8)
    old_tok_s = evidence("output_tok_s", old_lines).value()
    c = ctx(slow_lines, old_lines, {"compare": {"output_tok_s": "5%"}}, output_tok_s=old_tok_s)
    [alone] = reference.no_regression_against_reference(c)
    assert alone.status == "failed"
    c.history = [{"output_tok_s": old_tok_s * f} for f in (1.0, 1.15, 0.9, 1.1, 0.85)]  # a noisy machine
    [v] = reference.no_regression_against_reference(c)
    assert v.status != "failed" and "history band 44.5% over 5 runs" in v.detail


def speedup_ctx(floor: float, spec_step_ms: float):
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"min_speedup": {"eagle3": {"over": "baseline", "ratio": floor}}})
    plain_lines, spec_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=spec_step_ms, concurrency=8)
    plain = ArmResult.of("baseline", output_tok_s=evidence("output_tok_s", plain_lines).value(), requests_ok=64)
    spec = ArmResult.of("eagle3", output_tok_s=evidence("output_tok_s", spec_lines).value(), requests_ok=64)
    return registry.GateContext(arm="eagle3", gate=cfg, result=spec, gpu=None, plain_arm="baseline",
                            results={"baseline": plain, "eagle3": spec}, reference=None, reference_label="",
                            telemetry_source="off", requests=spec_lines,
                            arm_requests={"baseline": plain_lines, "eagle3": spec_lines})


@pytest.mark.parametrize("floor, spec_step_ms, status", [
    (1.0, 3.2, "passed"),   # ~1.23x, clearly above 1.0
    (1.5, 3.2, "failed"),   # clearly below 1.5
    (1.0, 4.0, "inconclusive"),  # as fast as plain: the interval straddles 1.0
])
def test_speedup_is_judged_with_its_interval(floor, spec_step_ms, status):
    [v] = speculative.min_speedup(speedup_ctx(floor, spec_step_ms))
    assert v.status == status, v.detail
    assert "95% interval" in v.detail and v.interval[0] <= v.value <= v.interval[1]


def test_a_figure_that_was_the_clients_lag_decides_nothing_against_the_reference():
    old_lines, slow_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=8.0, concurrency=8)
    old_tok_s = evidence("output_tok_s", old_lines).value()
    lagged = {"client_bound": True, "client_bound_figures": ["tpot_ms.p50"], "verdict": "client-bound: ..."}
    # this run's TPOT was the client's lag: its failure is inconclusive, its throughput still judged
    c = ctx(slow_lines, old_lines, {"compare": {"tpot_ms.p50": "5%", "output_tok_s": "5%"}}, output_tok_s=old_tok_s,
            tpot_ms={"p50": 4.0})
    c.result.client = lagged
    verdicts = {v.name: v for v in reference.no_regression_against_reference(c)}
    tpot, tok = verdicts["baseline.tpot_ms.p50"], verdicts["baseline.output_tok_s"]
    assert tpot.status == "inconclusive" and "client-bound: TPOT p50 is the client's lag" in tpot.detail, tpot.detail
    assert tok.status == "failed", tok.detail
    # the reference run's TPOT was the client's: a pass does not stand either
    same = ctx(lines(64, 3, concurrency=8), old_lines, {"compare": {"tpot_ms.p50": "5%"}}, output_tok_s=old_tok_s,
               tpot_ms={"p50": 4.0}, client=lagged)
    [v] = reference.no_regression_against_reference(same)
    assert v.status == "inconclusive" and "client-bound in the reference run: its TPOT p50" in v.detail, v.detail


def test_the_speedup_over_the_steady_windows_is_judged_with_their_interval():
    """EAGLE-3 ~1.23x while every slot is busy, then one slot runs on alone for 6 more
    requests: over the whole load that tail drags it below 1.0x; over each arm's steady
    window (harness/measure/steady.py) it is the 1.23x the gate is about, and its interval is
    drawn from the steady windows' time slices."""
    from harness.measure.steady import steady_figures

    plain_lines, spec_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=3.2, concurrency=8)
    clock = max(line["end_ms"] for line in spec_lines)
    for k, extra in enumerate(lines(6, 3, step_ms=3.2)):  # the tail: one slot alone, back to back, after the rest
        extra.update(index=64 + k, send_ms=extra["send_ms"] + clock, end_ms=extra["end_ms"] + clock,
                     chunk_ms=[t + clock for t in extra["chunk_ms"]])
        spec_lines.append(extra)
    ok = {"baseline": plain_lines, "eagle3": spec_lines}
    results = {arm: ArmResult.of(arm, output_tok_s=evidence("output_tok_s", arm_lines).value(), requests_ok=len(arm_lines),
                              steady=steady_figures(arm_lines, 8, None, 0.25)) for arm, arm_lines in ok.items()}
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"min_speedup": {"eagle3": {"over": "baseline", "ratio": 1.0}}})
    c = registry.GateContext(arm="eagle3", gate=cfg, result=results["eagle3"], gpu=None, plain_arm="baseline",
                             results=results, reference=None, reference_label="", telemetry_source="off",
                             requests=spec_lines, arm_requests=ok)
    whole = results["eagle3"].value("output_tok_s") / results["baseline"].value("output_tok_s")
    [v] = speculative.min_speedup(c)
    assert whole < 1.0 < v.value == pytest.approx(1.23, abs=0.05), (whole, v.value)
    assert v.status == "passed" and "over each arm's steady window" in v.detail, v.detail
    assert v.interval[0] <= v.value <= v.interval[1] and v.interval[0] > 1.0, v.detail
