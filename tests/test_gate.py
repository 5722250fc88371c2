"""Gates turn numbers into verdicts: pass, fail (with the reason in words) or skip (no
threshold, never a silent pass). A threshold on something not measured is a failure."""

from omegaconf import OmegaConf

from harness import gate
from harness.metrics import ArmResult, Stat
from harness.schema import GateConfig


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def result(arm="eagle3", **values) -> ArmResult:
    base = dict(arm=arm, output_tok_s=66.0, request_per_s=0.2, ttft_ms=Stat(mean=50, p50=50, p90=60, p99=70),
                itl_ms=Stat(mean=30, p50=30, p90=31, p99=33), decode_step_ms=15.0, accept_length=2.0,
                accept_length_source="run", verify_cycle_ms=30.0, requests_ok=5, requests_failed=0)
    base.update(values)
    return ArmResult(**base)


PLAIN = result("baseline", output_tok_s=82.0, decode_step_ms=12.2, accept_length=None, verify_cycle_ms=None,
               accept_length_source=None)


def test_floor_passes_fails_and_skips():
    cfg = gate_cfg(min_output_tok_s={"eagle3": 60.0})
    [ok] = gate.min_output_tok_s("eagle3", result(), cfg)
    assert ok.passed is True and ok.value == 66.0 and ok.threshold == 60.0
    [low] = gate.min_output_tok_s("eagle3", result(output_tok_s=50.0), cfg)
    assert low.passed is False and "50.00 tok/s is below the floor 60 tok/s" in low.detail
    [none] = gate.min_output_tok_s("baseline", PLAIN, cfg)
    assert none.passed is None and "no threshold configured" in none.detail


def test_a_threshold_on_an_unmeasured_value_fails():
    [v] = gate.min_output_tok_s("eagle3", result(output_tok_s=None), gate_cfg(min_output_tok_s={"eagle3": 1.0}))
    assert v.passed is False and "not measured" in v.detail


def test_latency_limits_one_verdict_per_statistic():
    cfg = gate_cfg(max_ttft_ms={"eagle3": {"p50": 55.0, "p99": 60.0}})
    verdicts = gate.max_latency("ttft_ms", "eagle3", result(), cfg)
    assert [(v.name, v.passed) for v in verdicts] == [("max_ttft_ms.p50", True), ("max_ttft_ms.p99", False)]
    assert "TTFT p99 70.00 ms exceeds the limit 60 ms" in verdicts[1].detail


def test_speedup_says_slower_in_words():
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.0}})
    [v] = gate.min_speedup("eagle3", result(), cfg, {"baseline": PLAIN})
    assert v.passed is False and abs(v.value - 66 / 82) < 1e-9
    assert "eagle3 is slower than baseline" in v.detail and "0.80x" in v.detail


def test_speedup_without_the_plain_arm_is_skipped_not_passed():
    cfg = gate_cfg(min_speedup={"eagle3": {"over": "baseline", "ratio": 1.0}})
    [v] = gate.min_speedup("eagle3", result(), cfg, {})
    assert v.passed is None and "was not measured" in v.detail


def test_break_even_is_cycle_over_plain_step():
    cfg = gate_cfg(accept_length_at_least_break_even=["eagle3"])
    [v] = gate.accept_length_at_least_break_even("eagle3", result(), cfg, "baseline", {"baseline": PLAIN})
    assert v.passed is False
    assert abs(v.threshold - 30.0 / 12.2) < 1e-9
    assert "accept length 2.00 is below break-even 2.46" in v.detail
    [good] = gate.accept_length_at_least_break_even("eagle3", result(accept_length=2.6), cfg, "baseline", {"baseline": PLAIN})
    assert good.passed is True


def test_failed_requests_show_the_servers_message():
    cfg = gate_cfg()
    bad = result(requests_ok=3, requests_failed=2, errors={"HTTP 400: Only 'application/json' is allowed": 2})
    [v] = gate.max_failed_requests("eagle3", bad, cfg)
    assert v.passed is False and "application/json" in v.detail and "2 of 5" in v.detail
    [empty] = gate.max_failed_requests("eagle3", result(requests_ok=0, requests_failed=0), cfg)
    assert empty.passed is False and "nothing was measured" in empty.detail


def test_server_cumulative_accept_length_is_labelled():
    cfg = gate_cfg(min_accept_length={"eagle3": 1.5})
    [v] = gate.min_accept_length("eagle3", result(accept_length_source="server_cumulative"), cfg)
    assert v.passed is True and "server-cumulative" in v.detail
