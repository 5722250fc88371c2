"""Throughput and latency gates (suites/test_throughput.py): requests succeed, output tok/s floors, latency limits, and whether the client kept up."""

from __future__ import annotations

from typing import Callable

from harness.gates.client_bound import guard_client_bound
from harness.measure.registry import resolve
from harness.gates.verdict import inconclusive_passes, Verdict, skipped, not_configured, at_least, at_most, guard_noise
from harness.gates.registry import GateContext, register, keyed_arms, unmeasured

STATS = ("mean", "p50", "p90", "p99")  # the statistics a latency limit (PercentileLimits) may set


# --- throughput and latency ------------------------------------------------------------------


@register("requests_succeed", "throughput", ("max_failed_requests",))
def requests_succeed(ctx: GateContext) -> list[Verdict]:
    """At most gate.max_failed_requests measured requests failed, and some were measured."""
    name, arm, result = "max_failed_requests", ctx.arm, ctx.result
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    allowed = ctx.gate.max_failed_requests
    failed = result.requests_failed
    if result.requests_ok + failed == 0:
        return [Verdict(name, arm, False, 0, allowed, f"{arm}: no measured request completed or failed: nothing was measured")]
    if failed <= allowed:
        return [Verdict(name, arm, True, failed, allowed, f"{arm}: {failed} of {result.requests_ok + failed} requests failed (allowed {allowed})")]
    worst = max(result.errors.items(), key=lambda kv: kv[1], default=("unknown error", failed))
    return [
        Verdict(
            name, arm, False, failed, allowed,
            f"{arm}: {failed} of {result.requests_ok + failed} requests failed (allowed {allowed}); most common error ({worst[1]}x): {worst[0]}",
        )
    ]


@register("min_output_tok_s", "throughput", ("min_output_tok_s",), keyed_arms("min_output_tok_s"))
def min_output_tok_s(ctx: GateContext) -> list[Verdict]:
    """Output tokens per second at least gate.min_output_tok_s[arm]."""
    name, arm, gate = "min_output_tok_s", ctx.arm, ctx.gate
    if arm not in gate.min_output_tok_s:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    verdicts = [at_least(name, arm, ctx.result.output_tok_s, gate.min_output_tok_s[arm], "output throughput", " tok/s")]
    verdicts = guard_client_bound(verdicts, ctx.result, ["output_tok_s"], inconclusive_passes(gate))
    return guard_noise(verdicts, ctx.result, ["output_tok_s"], gate)


def max_latency(metric: str) -> Callable[[GateContext], list[Verdict]]:
    """`metric` is "ttft_ms" or "itl_ms"; one verdict per statistic gate.max_<metric>[arm] sets."""
    name = f"max_{metric}"

    def check(ctx: GateContext) -> list[Verdict]:
        arm, gate = ctx.arm, ctx.gate
        limits = gate[name].get(arm)
        stats = [s for s in STATS if limits is not None and limits[s] is not None]
        if not stats:
            return [not_configured(name, arm)]
        if (missing := unmeasured(name, ctx)) is not None:
            return missing
        distribution = getattr(ctx.result, metric)
        entry = resolve(f"{metric}.p50")  # the distribution's name and unit are its registry entry's
        label = entry.label.split(" ")[0]
        return [guard_noise(guard_client_bound([at_most(f"{name}.{s}", arm, getattr(distribution, s), limits[s],
                                                         f"{label} {s}", f" {entry.unit}")],
                                                ctx.result, [f"{metric}.{s}"], inconclusive_passes(gate)),
                            ctx.result, [f"{metric}.{s}"], gate)[0] for s in stats]

    entry = resolve(f"{metric}.p50")
    check.__doc__ = f"Each configured statistic of {entry.label.split(' ')[0]} within gate.{name}[arm] ({entry.unit})."
    return check


max_ttft_ms = register("max_ttft_ms", "throughput", ("max_ttft_ms",), keyed_arms("max_ttft_ms"))(max_latency("ttft_ms"))
max_itl_ms = register("max_itl_ms", "throughput", ("max_itl_ms",), keyed_arms("max_itl_ms"))(max_latency("itl_ms"))


@register("client_kept_up", "throughput", ("client_bound", "allow_client_bound"))
def client_kept_up(ctx: GateContext) -> list[Verdict]:
    """No figure of the arm is the client's own lag (gate.client_bound, harness/gates/client_bound.py);
    gate.allow_client_bound=true makes a client-bound arm a warning instead of a failure."""
    name, arm, gate = "client_bound", ctx.arm, ctx.gate
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    client = ctx.result.client or {}
    if "client_bound" not in client:
        return [skipped(name, arm, f"{arm}: the client's health was not measured for this result")]
    lag_p99, limit = (client.get("loop_lag_ms") or {}).get("p99"), gate.client_bound.loop_lag_ms_p99
    if not client["client_bound"]:
        return [Verdict(name, arm, True, lag_p99, limit, f"{arm}: {client['verdict']}")]
    if gate.allow_client_bound:
        return [Verdict(name, arm, True, lag_p99, limit,
                        f"{arm}: WARNING, {client['verdict']}; allowed by gate.allow_client_bound=true")]
    return [Verdict(name, arm, False, lag_p99, limit,
                    f"{arm}: {client['verdict']}. A benchmark must not judge a server by its client's lag: give "
                    f"the client a less busy machine or fewer requests in flight, or set "
                    f"gate.allow_client_bound=true to record it as a warning")]
