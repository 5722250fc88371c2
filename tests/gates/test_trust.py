"""A run that cannot be trusted is inconclusive, not failed (issue 21): a GPU slowed under load
makes the speed verdicts it touches inconclusive, saying so (a failure on the slowed side, a
pass beside a slowed other side); a load too short for a rate is inconclusive, saying what would
decide it; the summary says first whether the run gated anything. Gates judged on constructed
results and contexts."""

from __future__ import annotations

from types import SimpleNamespace

from omegaconf import OmegaConf

from harness.run.compose import compose
from harness.config.schema import GateConfig
from harness.gates import gpu, registry, speculative, throughput
from harness.gates.verdict import Verdict
from harness.report.summary import format_summary, gated_headline
from tests.support.arm_results import result

THROTTLED = {"gpus": {"GPU-a": {"index": 0, "throttle_fraction_under_load": {"HwSlowdown": 0.4},
                                "sm_clock_ratio_under_load": 0.97, "load": {"sm_clock_mhz": {"median": 1900.0}},
                                "sm_clock_max_mhz": 1980.0}},
             "samples": {"load": 10}}
SLOW_CLOCK = {"gpus": {"GPU-b": {"index": 1, "throttle_fraction_under_load": {},
                                 "sm_clock_ratio_under_load": 0.6, "load": {"sm_clock_mhz": {"median": 1188.0}},
                                 "sm_clock_max_mhz": 1980.0}},
              "samples": {"load": 10}}
COOL = {"gpus": {"GPU-c": {"index": 0, "throttle_fraction_under_load": {"HwSlowdown": 0.0},
                           "sm_clock_ratio_under_load": 0.99}}, "samples": {"load": 10}}
THROTTLE_WORDS = ("GPU 0 was throttled (HwSlowdown in 40% of load samples): the speed measured is the GPU's, "
                  "not the build's")


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def ctx(arm, res, cfg, gpu_block=None, results=None, arm_gpus=None, telemetry="sim"):
    return registry.GateContext(arm=arm, gate=cfg, result=res, gpu=gpu_block, plain_arm="baseline",
                                results=results or {arm: res}, reference=None, reference_label="",
                                telemetry_source=telemetry, arm_gpus=arm_gpus or {})


# --- a GPU slowed under load ----------------------------------------------------------------------


def test_a_floor_missed_on_a_throttled_gpu_is_inconclusive_and_a_pass_stands():
    cfg = gate_cfg(min_output_tok_s={"eagle3": 100.0})
    [missed] = throughput.min_output_tok_s(ctx("eagle3", result(), cfg, THROTTLED))
    assert missed.status == "inconclusive" and missed.passed is True and missed.cause == "GPU 0 throttled"
    assert missed.detail == f"inconclusive, {THROTTLE_WORDS}: eagle3: output throughput 66.00 tok/s is below the floor 100 tok/s"
    [cleared] = throughput.min_output_tok_s(ctx("eagle3", result(), gate_cfg(min_output_tok_s={"eagle3": 60.0}), THROTTLED))
    assert cleared.status == "passed" and "the build is at least this fast" in cleared.detail
    [judged] = throughput.min_output_tok_s(ctx("eagle3", result(), cfg, COOL))  # a cool GPU: judged as ever
    assert judged.status == "failed" and not judged.cause
    strict = gate_cfg(min_output_tok_s={"eagle3": 100.0}, inconclusive="fail")
    assert throughput.min_output_tok_s(ctx("eagle3", result(), strict, THROTTLED))[0].passed is False


def test_a_clock_below_the_gate_under_load_makes_a_latency_failure_inconclusive():
    cfg = gate_cfg(max_ttft_ms={"eagle3": {"p99": 60.0}}, min_clock_ratio_under_load=0.9)
    [v] = throughput.max_ttft_ms(ctx("eagle3", result(), cfg, SLOW_CLOCK))
    assert v.status == "inconclusive" and v.cause == "GPU 1 slow"
    assert v.detail.startswith("inconclusive, GPU 1 ran at 60% of its max SM clock under load: the speed measured")
    # without a clock gate the clock is not asked about: the failure stands
    [judged] = throughput.max_ttft_ms(ctx("eagle3", result(), gate_cfg(max_ttft_ms={"eagle3": {"p99": 60.0}}), SLOW_CLOCK))
    assert judged.status == "failed"


def test_the_gpu_gates_themselves_stay_as_configured():
    [v] = gpu.no_throttle_reasons_under_load(ctx("eagle3", result(), gate_cfg(), THROTTLED))
    assert v.status == "failed" and "HwSlowdown in 40% of load samples" in v.detail
    [idle] = gpu.min_gpu_util_under_load(ctx("eagle3", result(), gate_cfg(), util_at(49.0)))
    assert idle.status == "failed"  # a GPU left idle by a client that kept up: the box check fails


def util_at(pct: float) -> dict:
    return {"gpus": {"GPU-u": {"index": 0, "load": {"gpu_util_pct": {"median": pct}}}}, "samples": {"load": 10}}


def test_a_gpu_left_idle_by_a_client_that_sent_late_is_inconclusive_and_a_busy_one_passes():
    """Seen in a clean clone under load: the simulator's GPU 49 % busy against the 50 % floor
    while the client sent late; the GPU idled for want of requests, which says nothing of it."""
    lagged = bound(result(), "output_tok_s")
    [idle] = gpu.min_gpu_util_under_load(ctx("eagle3", lagged, gate_cfg(), util_at(49.0)))
    assert idle.status == "inconclusive" and idle.cause == "client-bound: event-loop lag p99 40 ms"
    assert idle.detail.startswith("inconclusive, client-bound: output tok/s is the client's lag")
    [busy] = gpu.min_gpu_util_under_load(ctx("eagle3", bound(result(), "output_tok_s"), gate_cfg(), util_at(95.0)))
    assert busy.status == "passed"  # busy even so: the GPU is at least this busy
    [latency_only] = gpu.min_gpu_util_under_load(ctx("eagle3", bound(result(), "ttft_ms.p99"), gate_cfg(), util_at(49.0)))
    assert latency_only.status == "failed"  # a late TTFT stamp leaves the load as it was asked


def speedup_ctx(ratio: float, mine=None, theirs=None):
    plain = result("baseline", output_tok_s=50.0)
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": ratio}})
    return ctx("eagle3", result(), cfg, mine, results={"eagle3": result(), "baseline": plain},
               arm_gpus={"baseline": theirs} if theirs else {})


def test_a_speedup_is_distrusted_on_the_side_a_slowed_gpu_flatters():
    # 66 / 50 = 1.32x. This arm throttled: a miss is the GPU's, a pass stands
    missed = speculative.min_speedup(speedup_ctx(1.5, mine=THROTTLED))[0]
    assert missed.status == "inconclusive" and missed.detail.startswith(f"inconclusive, {THROTTLE_WORDS}: eagle3 is faster")
    assert speculative.min_speedup(speedup_ctx(1.2, mine=THROTTLED))[0].status == "passed"
    # the plain arm throttled: its slowness raised the ratio, so a pass is not the build's; a miss stands
    flattered = speculative.min_speedup(speedup_ctx(1.2, theirs=THROTTLED))[0]
    assert flattered.status == "inconclusive" and flattered.cause == "baseline: GPU 0 throttled"
    assert "under baseline, GPU 0 was throttled" in flattered.detail
    missed_anyway = speculative.min_speedup(speedup_ctx(1.5, theirs=THROTTLED))[0]
    assert missed_anyway.status == "failed" and "only flattered this side" in missed_anyway.detail


def test_break_even_on_a_throttled_gpu_is_inconclusive_where_it_fails():
    cfg = gate_cfg(accept_length_at_least_break_even=["eagle3"])
    plain = result("baseline", decode_step_ms=12.0, accept_length=None, verify_cycle_ms=None)
    slow_cycle = result(verify_cycle_ms=30.0, accept_length=2.0)  # break-even 2.5: below
    [v] = speculative.accept_length_at_least_break_even(
        ctx("eagle3", slow_cycle, cfg, THROTTLED, results={"eagle3": slow_cycle, "baseline": plain}))
    assert v.status == "inconclusive" and "below break-even" in v.detail and THROTTLE_WORDS in v.detail


# --- a load too short -------------------------------------------------------------------------------


def test_a_rate_from_a_load_too_short_is_inconclusive_saying_what_would_decide_it():
    cfg = gate_cfg(min_output_tok_s={"eagle3": 100.0})
    [one] = throughput.min_output_tok_s(ctx("eagle3", result(requests_ok=1, duration_s=3.0), cfg))
    assert one.status == "inconclusive" and one.cause == "load too short: 1 request(s) in 3.00 s"
    assert "1 completed measured request(s) < gate.min_load_requests=2" in one.detail
    assert "a longer load (workload.num_prompts or workload.duration_s, or gate.repeats) would decide it" in one.detail
    [brief] = throughput.min_output_tok_s(ctx("eagle3", result(requests_ok=4, duration_s=0.4), cfg))
    assert brief.status == "inconclusive" and "a measured window of 0.40 s < gate.min_load_s=1" in brief.detail
    [steady] = throughput.min_output_tok_s(ctx("eagle3", result(requests_ok=4, duration_s=2.6), cfg))
    assert steady.status == "failed"  # sim_smoke's size: judged


def test_a_rate_that_was_not_measured_still_fails_however_short_the_load():
    [v] = throughput.min_output_tok_s(ctx("eagle3", result(output_tok_s=None, requests_ok=0, duration_s=0.1),
                                          gate_cfg(min_output_tok_s={"eagle3": 1.0})))
    assert v.status == "failed" and "not measured" in v.detail


def test_latency_limits_are_not_judged_by_the_loads_length():
    [v] = throughput.max_ttft_ms(ctx("eagle3", result(requests_ok=1, duration_s=0.2),
                                     gate_cfg(max_ttft_ms={"eagle3": {"p99": 60.0}})))
    assert v.status == "failed"  # a limit on what was seen: a short load does not excuse a slow request


def test_a_speedup_over_a_plain_arm_measured_too_briefly_is_inconclusive():
    plain = result("baseline", output_tok_s=50.0, requests_ok=4, duration_s=0.3)
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.5}})
    [v] = speculative.min_speedup(ctx("eagle3", result(duration_s=3.0), cfg,
                                      results={"eagle3": result(duration_s=3.0), "baseline": plain}))
    assert v.status == "inconclusive" and "baseline: a measured window of 0.30 s" in v.detail
    assert v.cause == "load too short: baseline 4 request(s) in 0.30 s"


def test_the_projects_own_experiments_measure_loads_long_enough_to_gate():
    """sim_smoke (4 requests at concurrency 1, ~2.6-3.2 s per arm on the simulator) and
    eagle_k2_sim (4 s of closed loop) still gate their rates under the defaults."""
    gate = compose(["+exp=sim_smoke"]).base.gate
    assert (gate.min_load_requests, gate.min_load_s) == (2, 1.0)
    assert compose(["+exp=sim_smoke"]).base.workload.num_prompts >= gate.min_load_requests
    assert compose(["+exp=eagle_k2_sim"]).base.workload.duration_s >= gate.min_load_s


# --- the summary says first whether the run gated anything -------------------------------------------


def verdict(name, status, cause="", arm="eagle3"):
    passed = {"passed": True, "failed": False, "inconclusive": True, "skipped": None}[status]
    return Verdict(name, arm, passed, 1.0, 1.0, "x", inconclusive=status == "inconclusive", cause=cause)


def test_the_headline_counts_what_was_decided():
    assert gated_headline([verdict("max_failed_requests", "passed"), verdict("min_output_tok_s", "failed"),
                           verdict("min_speedup", "passed")]) == "Gated: 2 verdict(s) passed, 1 failed."
    assert gated_headline([]) == "Gated nothing: no gate was evaluated."


def test_the_headline_says_when_nothing_was_gated_and_why():
    lagged = "client-bound: event-loop lag p99 140 ms"
    verdicts = [verdict("client_bound", "inconclusive", lagged), verdict("min_output_tok_s", "inconclusive", lagged),
                verdict("baseline.itl_ms.p50", "inconclusive", "GPU 0 throttled"), verdict("lossless", "skipped")]
    assert gated_headline(verdicts) == (
        "This run gated nothing it measured: 3 verdict(s) inconclusive (eagle3: client-bound: event-loop lag p99 "
        "140 ms (2); eagle3: GPU 0 throttled (1)).")


def test_the_headline_says_when_no_speed_verdict_was_decided():
    verdicts = [verdict("max_failed_requests", "passed"), verdict("min_accept_length", "passed"),
                verdict("min_output_tok_s", "inconclusive", "GPU 0 throttled"),
                verdict("baseline.output_tok_s", "inconclusive", "GPU 0 throttled")]
    assert gated_headline(verdicts) == ("Gated: 2 verdict(s) passed, 0 failed, but no speed verdict decided: "
                                        "2 verdict(s) inconclusive (eagle3: GPU 0 throttled).")


def test_summary_md_opens_with_the_headline():
    experiment = SimpleNamespace(name="sim_smoke", description="d", arm_names=["eagle3"])
    text = format_summary(experiment, {"eagle3": result()}, {}, [verdict("min_output_tok_s", "passed")], {})
    assert text.splitlines()[:3] == ["# specgate: sim_smoke", "", "**Gated: 1 verdict(s) passed, 0 failed.**"]


# --- the client's lag on either side of a ratio -------------------------------------------------------


def bound(res, *paths):
    res.client = {"client_bound": True, "client_bound_figures": list(paths), "loop_lag_ms": {"p99": 40.0}}
    return res


def test_a_speedup_is_distrusted_on_the_side_the_clients_lag_flatters():
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.2}})
    lagged_plain = bound(result("baseline", output_tok_s=50.0), "output_tok_s")
    [flattered] = speculative.min_speedup(ctx("eagle3", result(), cfg, results={"eagle3": result(),
                                                                                   "baseline": lagged_plain}))
    assert flattered.status == "inconclusive" and flattered.cause == "client-bound: event-loop lag p99 40 ms"
    lagged_mine = bound(result(), "output_tok_s")
    [stands] = speculative.min_speedup(ctx("eagle3", lagged_mine, cfg, results={
        "eagle3": lagged_mine, "baseline": result("baseline", output_tok_s=50.0)}))
    assert stands.status == "passed" and "at least this good" in stands.detail


def test_break_even_on_a_client_bound_decode_span_decides_nothing():
    cfg = gate_cfg(accept_length_at_least_break_even=["eagle3"])
    plain = bound(result("baseline", decode_step_ms=12.0, accept_length=None, verify_cycle_ms=None), "decode_step_ms")
    fine = result(verify_cycle_ms=20.0, accept_length=2.0)  # break-even 1.67: passes, on a plain step that was the client's
    [v] = speculative.accept_length_at_least_break_even(ctx("eagle3", fine, cfg, results={"eagle3": fine, "baseline": plain}))
    assert v.status == "inconclusive" and "decode step ms is the client's lag" in v.detail


# --- against a reference run (reference.with_gpu_state) ------------------------------------------------


def test_a_pass_against_a_reference_run_whose_gpu_was_throttled_is_inconclusive():
    from harness.gates import reference
    from harness.gates.change import evidence
    from tests.gates.test_change import ctx as reference_ctx, lines

    old_lines, same_lines = lines(64, 1, concurrency=8), lines(64, 3, concurrency=8)
    c = reference_ctx(same_lines, old_lines, {"compare": {"output_tok_s": "5%"}}, gpu=COOL,
                      output_tok_s=evidence("output_tok_s", old_lines).value())
    assert reference.no_regression_against_reference(c)[0].status == "passed"
    c.reference["gpu"] = THROTTLED  # the reference run's arm was measured on a throttled GPU
    [v] = reference.no_regression_against_reference(c)
    assert v.status == "inconclusive" and v.cause == "the reference run: GPU 0 throttled", v.detail
    assert "under the reference run, GPU 0 was throttled" in v.detail


def test_a_rate_against_a_reference_run_measured_too_briefly_is_inconclusive():
    from harness.gates import reference
    from harness.gates.change import evidence
    from tests.gates.test_change import ctx as reference_ctx, lines

    old_lines, slow_lines = lines(64, 1, concurrency=8), lines(64, 2, step_ms=6.0, concurrency=8)
    c = reference_ctx(slow_lines, old_lines, {"compare": {"output_tok_s": "5%", "tpot_ms.p50": "5%"}},
                      output_tok_s=evidence("output_tok_s", old_lines).value(), duration_s=0.5, tpot_ms={"p50": 4.0})
    verdicts = {v.name: v for v in reference.no_regression_against_reference(c)}
    tok = verdicts["baseline.output_tok_s"]
    assert tok.status == "inconclusive" and tok.cause == "load too short: the reference run 64 request(s) in 0.50 s"
    assert verdicts["baseline.tpot_ms.p50"].status == "failed"  # a per-request figure: not the window's


# --- the registry applies the guards, in one order; speed comes from the metric ---------------------


def throwaway_gate(name: str, path: str):
    """An arm gate on a registry metric that only computes its verdict and declares its figure."""
    from harness.gates.trust import Trust, one
    from harness.gates.verdict import at_least
    from harness.measure.registry import metric_value

    def check(c):
        return [at_least(name, c.arm, metric_value(c.result, path), 1.0, path)]
    return registry.register(name, "throughput", ("min_output_tok_s",), trust=Trust(one(path)))(check)


def test_a_new_gate_on_a_registry_speed_metric_is_guarded_with_no_list_to_edit():
    from harness.gates.trust import speed_verdict
    from harness.measure.registry import Metric, registered

    # a metric of its own, a latency-kind figure (the client stamps it): a speed figure by its registry entry
    with registered(Metric("probe_ms", "probe ms", "ms", "{:.1f}", "lower", client="latency")):
        try:
            check = throwaway_gate("min_probe", "request_per_s")
            [missed] = check(ctx("eagle3", result(request_per_s=0.2), gate_cfg(), THROTTLED))  # 0.2 < 1.0
            assert missed.status == "inconclusive" and missed.cause == "GPU 0 throttled" and speed_verdict(missed)
            [short] = check(ctx("eagle3", result(requests_ok=1, duration_s=3.0), gate_cfg()))
            assert short.status == "inconclusive" and short.cause.startswith("load too short")
            assert registry.GATES["min_probe"].check is check  # what the suites run is the guarded check
            probe = throwaway_gate("min_probe_ms", "probe_ms")
            [v] = probe(ctx("eagle3", result(), gate_cfg(), THROTTLED))  # not measured: nothing to distrust
            assert v.status == "failed" and not v.cause and speed_verdict(v)
        finally:
            registry.GATES.pop("min_probe", None)
            registry.GATES.pop("min_probe_ms", None)


def test_a_gate_on_a_figure_no_slowdown_moves_is_not_a_speed_verdict_and_a_throttled_failure_stands():
    from harness.gates.trust import speed_verdict

    cfg = gate_cfg(min_accept_length={"eagle3": 3.0})
    [v] = speculative.min_accept_length(ctx("eagle3", result(accept_length=2.0), cfg, THROTTLED))
    assert v.status == "failed" and not speed_verdict(v)
    assert speed_verdict(Verdict("accept_length_at_least_break_even", "eagle3", True, 2.0, 1.5, ""))  # its cycle and step
    assert speed_verdict(Verdict("baseline.tpot_ms.p50", "eagle3", True, 4.0, 0.05, ""))
    assert not speed_verdict(Verdict("baseline.accept_length", "eagle3", True, 2.0, 0.05, ""))


def test_the_guards_run_in_one_order_client_lag_noise_short_load_gpu():
    cfg = gate_cfg(min_output_tok_s={"eagle3": 100.0})
    # 1 before 2: a noisy figure that was the client's is unreliable, and says it was the client's too
    lagged = bound(result(repeats=3, noise={"output_tok_s": {"median": 66.0, "mad": 5.0, "cv": 0.2}}), "output_tok_s")
    [v] = throughput.min_output_tok_s(ctx("eagle3", lagged, cfg, THROTTLED))
    assert v.status == "unreliable" and v.cause.startswith("client-bound")
    assert v.detail.startswith("unreliable (output_tok_s CV 20.0% over 3 repeats") and "inconclusive, client-bound" in v.detail
    assert "GPU" not in v.detail  # decided already: 4 leaves it
    # 3 before 4: a miss from a short load on a throttled GPU is the short load's
    [short] = throughput.min_output_tok_s(ctx("eagle3", result(requests_ok=1, duration_s=3.0), cfg, THROTTLED))
    assert short.cause.startswith("load too short") and "GPU" not in short.detail
    # the same order on a ratio: the plain arm's lag (1) before its noise (2) and its GPU (4)
    plain = bound(result("baseline", output_tok_s=50.0, repeats=3,
                         noise={"output_tok_s": {"median": 50.0, "mad": 5.0, "cv": 0.2}}), "output_tok_s")
    speedup_cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.2}})
    [ratio] = speculative.min_speedup(ctx("eagle3", result(), speedup_cfg, results={"eagle3": result(), "baseline": plain},
                                          arm_gpus={"baseline": THROTTLED}))
    assert ratio.status == "unreliable" and ratio.cause.startswith("client-bound") and "GPU" not in ratio.detail
