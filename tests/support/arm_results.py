"""A hand-made arm result with plausible figures (an EAGLE-3 arm at 66 tok/s), any of them
overridden by keyword: what the gate tests judge. Shared by the gate and accept-length tests."""

from __future__ import annotations

from harness.measure.metrics import ArmResult, Stat


def result(arm="eagle3", **values) -> ArmResult:
    base = dict(arm=arm, output_tok_s=66.0, request_per_s=0.2, ttft_ms=Stat(mean=50, p50=50, p90=60, p99=70),
                itl_ms=Stat(mean=30, p50=30, p90=31, p99=33), decode_step_ms=15.0, accept_length=2.0,
                accept_length_source="run", verify_cycle_ms=30.0, requests_ok=5, requests_failed=0)
    base.update(values)
    return ArmResult.of(**base)
