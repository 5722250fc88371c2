"""Throughput and latency gates (suites/test_throughput.py): requests succeed, output tok/s floors, latency limits, and whether the client kept up.

A speed verdict of a run that cannot be trusted for it is inconclusive (harness/gates/trust.py,
client_bound.py): a figure that is the client's lag, a GPU slowed under load, a load too short.
The gates here only compute their verdicts and declare the figure each judges (`trust=`); the
registry applies the guards."""

from __future__ import annotations

from typing import Callable

from harness.gates.client_bound import cause
from harness.gates.trust import Figures, Trust, one
from harness.measure import output_length, prompt_length
from harness.measure.registry import OUTPUT_RATE, metric_value, resolve
from harness.gates.verdict import inconclusive_passes, Verdict, skipped, not_configured, at_least, at_most, untrusted
from harness.gates.registry import GateConfigError, GateContext, register, keyed_arms, unmeasured

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


@register("serves_after_cancel", "throughput", ("check_serving_after_cancel",))
def serves_after_cancel(ctx: GateContext) -> list[Verdict]:
    """With workload.cancel, the server kept serving after the client cancelled requests:
    some request sent after the first cancellation completed, and none sent after a
    cancellation failed. An engine whose abort path leaks the slot, stalls the batch or
    breaks its scheduler fails here, whatever its figures say."""
    name, arm = "serves_after_cancel", ctx.arm
    if not ctx.gate.check_serving_after_cancel:
        return [skipped(name, arm, f"{arm}: turned off (gate.check_serving_after_cancel=false)")]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    after = after_cancels([line for line in ctx.requests if not line.get("warmup")])
    if after is None:
        return [skipped(name, arm, f"{arm}: no request was cancelled (workload.cancel)")]
    served, failed = after
    if failed:
        listed = "; ".join(failed[:LISTED_FAILURES]) + ("; ..." if len(failed) > LISTED_FAILURES else "")
        return [Verdict(name, arm, False, len(failed), 0, f"{arm}: the server did not keep serving after cancelled "
                                                          f"requests: {len(failed)} request(s) sent after a cancellation "
                                                          f"failed ({listed})")]
    if not served:
        return [skipped(name, arm, f"{arm}: no request was sent after the first cancellation (every later one "
                                   f"was cancelled too, or none followed), so whether the server kept serving is unknown")]
    return [Verdict(name, arm, True, 0, 0, f"{arm}: the server kept serving after cancelled requests: {served} "
                                           f"request(s) sent after a cancellation completed, none failed")]


LISTED_FAILURES = 3  # failures after a cancellation named in the verdict


def after_cancels(lines: list[dict]) -> tuple[int, list[str]] | None:
    """Per repeat (each its own clock), the measured requests sent after its first
    cancellation ended: how many completed, and each one that failed with the cancellation
    before it and its error. None when nothing was cancelled."""
    by_repeat: dict[int, list[dict]] = {}
    for line in lines:
        by_repeat.setdefault(int(line.get("repeat") or 0), []).append(line)
    served, failed, any_cancel = 0, [], False
    for repeat_lines in by_repeat.values():
        cancels = sorted((line for line in repeat_lines if line.get("cancelled") and line.get("end_ms") is not None),
                         key=lambda line: line["end_ms"])
        if not cancels:
            continue
        any_cancel = True
        for line in repeat_lines:
            before = [c for c in cancels if c["end_ms"] <= (line.get("send_ms") or 0.0)]
            if not before or line.get("cancelled"):
                continue
            if line.get("ok"):
                served += 1
            else:
                last = before[-1]
                failed.append(f"request {line['index']}, sent {line['send_ms'] - last['end_ms']:.0f} ms after request "
                              f"{last['index']} was cancelled: {line.get('error') or 'did not complete'}")
    return (served, failed) if any_cancel else None


@register("workload_as_configured", "throughput", ("check_workload",))
def workload_as_configured(ctx: GateContext) -> list[Verdict]:
    """The arm measured the workload it was configured with: output lengths within each
    request's max_tokens (exactly it under ignore_eos), and prompts sized by a tokenizer of
    the length meant. A server that ignores max_tokens makes every other figure a
    measurement of another workload, so this fails whatever the other gates say."""
    name, arm = "workload_as_configured", ctx.arm
    if not ctx.gate.check_workload:
        return [skipped(name, arm, f"{arm}: turned off (gate.check_workload=false)")]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    outputs, prompts = ctx.result.output_length, ctx.result.prompt_length
    problems = [output_length.problem(arm, outputs)]
    if prompts and prompts.get("sized_by") and prompts.get("mismatched"):  # words-only sizing is approximate by design
        problems.append(prompt_length.sentence(arm, prompts))
    problems = [p for p in problems if p]
    if problems:
        return [Verdict(name, arm, False, len(problems), 0,
                        "this run measured another workload than configured: " + "; ".join(problems))]
    if not outputs:
        return [skipped(name, arm, f"{arm}: no answered request to check against its max_tokens")]
    exactly = " (exactly, as ignore_eos asks)" if any(line.get("ignore_eos") for line in ctx.requests) else ""
    return [Verdict(name, arm, True, 0, 0, f"{arm}: all {outputs['checked']} requests generated at most their "
                                           f"max_tokens{exactly}")]


@register("min_output_tok_s", "throughput", ("min_output_tok_s",), keyed_arms("min_output_tok_s"), trust=Trust(one(OUTPUT_RATE)))
def min_output_tok_s(ctx: GateContext) -> list[Verdict]:
    """Output tokens per second at least gate.min_output_tok_s[arm]."""
    name, arm, gate = "min_output_tok_s", ctx.arm, ctx.gate
    if arm not in gate.min_output_tok_s:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    rate = metric_value(ctx.result, OUTPUT_RATE)  # the gate's name is its config key; the metric is the registry's
    return [at_least(name, arm, rate, gate.min_output_tok_s[arm], "output throughput", " tok/s")]


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
        distribution = ctx.result.stat(metric)
        entry = resolve(f"{metric}.p50")  # the distribution's name and unit are its registry entry's
        label = entry.label.split(" ")[0]
        return [at_most(f"{name}.{s}", arm, getattr(distribution, s), limits[s], f"{label} {s}", f" {entry.unit}")
                for s in stats]

    entry = resolve(f"{metric}.p50")
    check.__doc__ = f"Each configured statistic of {entry.label.split(' ')[0]} within gate.{name}[arm] ({entry.unit})."
    return check


def statistic_of(metric: str):
    """`max_ttft_ms.p99` judges ttft_ms.p99."""
    return lambda name: Figures((f"{metric}.{name.partition('.')[2]}",))


max_ttft_ms = register("max_ttft_ms", "throughput", ("max_ttft_ms",), keyed_arms("max_ttft_ms"),
                       trust=Trust(statistic_of("ttft_ms")))(max_latency("ttft_ms"))
max_itl_ms = register("max_itl_ms", "throughput", ("max_itl_ms",), keyed_arms("max_itl_ms"),
                      trust=Trust(statistic_of("itl_ms")))(max_latency("itl_ms"))


@register("client_kept_up", "throughput", ("client_bound", "allow_client_bound", "fail_client_bound"),
          validate=lambda gate, arms, plain: one_client_bound_switch(gate))
def client_kept_up(ctx: GateContext) -> list[Verdict]:
    """No figure of the arm is the client's own lag (gate.client_bound, harness/gates/client_bound.py).
    A client-bound arm is a run that cannot be trusted, not a regression: inconclusive
    (gate.inconclusive decides); gate.fail_client_bound=true fails it, gate.allow_client_bound=true
    passes it with a warning."""
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
    fixes = ("give the client a less busy machine or fewer requests in flight (workload.client_processes "
             "splits the load)")
    if gate.fail_client_bound:
        return [Verdict(name, arm, False, lag_p99, limit,
                        f"{arm}: {client['verdict']}. A benchmark must not judge a server by its client's lag, and "
                        f"gate.fail_client_bound=true makes a client that could not keep up fail the run: {fixes}")]
    verdict = Verdict(name, arm, True, lag_p99, limit,
                      f"{arm}: {client['verdict']}. Its figures are not the server's, so this run cannot be trusted "
                      f"for them (gate.inconclusive={gate.inconclusive}; gate.fail_client_bound=true makes this a "
                      f"failure): {fixes}")
    return [untrusted(verdict, cause(ctx.result), "the client could not keep up", inconclusive_passes(gate))]


def one_client_bound_switch(gate) -> None:
    """gate.allow_client_bound and gate.fail_client_bound ask opposite things of one verdict."""
    if gate.allow_client_bound and gate.fail_client_bound:
        raise GateConfigError("gate.allow_client_bound=true and gate.fail_client_bound=true contradict each other: "
                              "a client-bound arm is either a passing warning or a failure; set one")
