"""Gates: thresholds turned into verdicts that are data, in one registry.

Every gate is a function ``check(ctx: GateContext) -> list[Verdict]`` registered with
:func:`register`: its name (the suite's test is ``test_<name>``), the suite it belongs to,
the ``gate.*`` config keys it reads and the arm names its config refers to. Config
validation and the suites are generated from :data:`GATES`, so a new gate is one
registered function here plus its field in ``harness.config.schema.GateConfig``.

A gate with no threshold for the arm is a *skipped* verdict with that reason, never a
silent pass; a threshold on something that was not measured is a failure.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal

from harness.gates.change import evidence, judge
from harness.gates.client_bound import guard_client_bound
from harness.gates.lossless import compare as compare_outputs, summary as describe_outputs
from harness.measure.registry import METRICS, break_even_accept_length, compared_by_default, metric, metric_value, speedup
from harness.measure.metrics import ArmResult, spread

STATS = ("mean", "p50", "p90", "p99")  # the statistics a latency limit (PercentileLimits) may set


@dataclass
class Verdict:
    name: str  # the gate, e.g. "min_output_tok_s" or "max_ttft_ms.p99"
    arm: str
    passed: bool | None  # None: skipped (see detail)
    value: float | None
    threshold: float | None
    detail: str  # the verdict in words
    baseline: float | None = None  # the reference run's value (gate.baseline); the key records keep
    unreliable: bool = False  # too noisy over the repeats to decide (then passed is None)
    inconclusive: bool = False  # the data cannot tell (passed follows gate.inconclusive: fail, warn, pass)
    interval: list[float] | None = None  # the relative change's interval, where one was computed

    @property
    def status(self) -> str:
        if self.unreliable:
            return "unreliable"
        if self.inconclusive:
            return "inconclusive"
        return {True: "passed", False: "failed", None: "skipped"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


def skipped(name: str, arm: str, why: str) -> Verdict:
    return Verdict(name, arm, None, None, None, why)


def not_configured(name: str, arm: str) -> Verdict:
    return skipped(name, arm, f"no threshold configured for arm '{arm}' (gate.{name.split('.')[0]})")


def fmt(value: float | None, unit: str = "") -> str:
    return "not measured" if value is None else f"{value:.2f}{unit}"


def at_least(name: str, arm: str, value: float | None, floor: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, floor, f"{arm}: {what} was not measured (threshold ≥ {floor:g}{unit})")
    passed = value >= floor
    relation = "meets" if passed else "is below"
    return Verdict(name, arm, passed, value, floor, f"{arm}: {what} {value:.2f}{unit} {relation} the floor {floor:g}{unit}")


def at_most(name: str, arm: str, value: float | None, ceiling: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, ceiling, f"{arm}: {what} was not measured (threshold ≤ {ceiling:g}{unit})")
    passed = value <= ceiling
    relation = "is within" if passed else "exceeds"
    return Verdict(name, arm, passed, value, ceiling, f"{arm}: {what} {value:.2f}{unit} {relation} the limit {ceiling:g}{unit}")


def guard_noise(verdicts: list[Verdict], result: ArmResult, paths: list[str], gate) -> list[Verdict]:
    """A decision on a metric whose coefficient of variation over the repeats exceeds
    gate.max_cv is noise: the verdict says so instead of passing or failing."""
    noisy = [(p, result.noise[p]["cv"]) for p in paths
             if (result.noise.get(p) or {}).get("cv") is not None and result.noise[p]["cv"] > gate.max_cv]
    if not noisy:
        return verdicts
    why = ", ".join(f"{p} CV {cv:.1%}" for p, cv in noisy)
    for verdict in verdicts:
        if verdict.passed is not None:
            verdict.passed, verdict.unreliable = None, True
            verdict.detail = f"unreliable ({why} over {result.repeats} repeats > max_cv {gate.max_cv:.1%}): {verdict.detail}"
    return verdicts


# --- the registry ---------------------------------------------------------------------------

Suite = Literal["throughput", "speculative", "gpu", "baseline"]  # suites/test_<suite>.py; "baseline" gates vs a reference run


@dataclass
class GateContext:
    """What a gate may look at for one arm of this run."""

    arm: str
    gate: Any  # the arm's cfg.gate (a GateConfig DictConfig)
    result: ArmResult | None  # the arm's measured result; None when it was not measured
    gpu: dict | None  # the arm's telemetry block (harness/telemetry/summary.py); None when none was recorded
    plain_arm: str | None  # the experiment's plain-decoding arm
    results: dict[str, ArmResult]  # every arm measured so far in this run
    reference: dict | None  # this arm's block in the reference run (gate.baseline), if any
    reference_label: str  # how verdicts name the reference run
    telemetry_source: str  # the arm's telemetry.source: "off" means no GPU gate can decide
    requests: list = field(default_factory=list)  # this arm's request lines in memory (the samples behind verdicts)
    reference_requests: Any = field(default_factory=list)  # the same arm's requests in the reference run (RequestColumns)
    history: list = field(default_factory=list)  # the arm's blocks in a history of past runs (gate.baseline folder)
    arm_requests: dict = field(default_factory=dict)  # every measured arm's request lines in this run (speedup intervals)
    server_windows: list = field(default_factory=list)  # the server's /metrics differenced, one per repeat


@dataclass(frozen=True)
class Gate:
    name: str  # the suite's test is test_<name>
    suite: Suite
    check: Callable[[GateContext], list[Verdict]]
    keys: tuple[str, ...]  # the gate.* config keys it reads
    arms: Callable[[Any], list[str]]  # the arm names its config (cfg.gate) refers to
    needs_plain_arm: bool = False  # configured for any arm, the experiment must name its plain arm

    @property
    def key_names(self) -> str:
        return ", ".join(f"gate.{k}" for k in self.keys)


GATES: dict[str, Gate] = {}


def no_arms(gate: Any) -> list[str]:
    return []


def register(name: str, suite: Suite, keys: tuple[str, ...], arms: Callable[[Any], list[str]] = no_arms,
             needs_plain_arm: bool = False) -> Callable:
    """Add a gate to the registry (a decorator); names are unique."""
    def add(check: Callable[[GateContext], list[Verdict]]) -> Callable[[GateContext], list[Verdict]]:
        if name in GATES:
            raise ValueError(f"gate '{name}' is registered twice")
        GATES[name] = Gate(name, suite, check, keys, arms, needs_plain_arm)
        return check
    return add


def gates_of(suite: Suite) -> list[Gate]:
    return [g for g in GATES.values() if g.suite == suite]


def is_configured(registered: Gate, gate: Any, arm: str) -> bool:
    """Whether an arm's config asks for this gate: a per-arm gate names the arm; any other
    has its first key set (a threshold, a reference run, a list of reasons)."""
    value = gate[registered.keys[0]]
    if registered.arms is not no_arms:  # {arm: threshold} or [arm, ...]; not `over` arms
        return arm in [str(a) for a in value]
    return value is not None and value is not False and not (hasattr(value, "__len__") and len(value) == 0)


def configured_gates(arms: list[tuple[str, Any]]) -> list[tuple[Gate, str]]:
    """(gate, arm) for every registered gate the config asks of each (name, cfg.gate) arm."""
    return [(g, name) for name, gate in arms for g in GATES.values() if is_configured(g, gate, name)]


def keyed_arms(key: str) -> Callable[[Any], list[str]]:
    """The arms of a per-arm gate key (`gate.<key>: {arm: ...}` or `[arm, ...]`)."""
    return lambda gate: [str(a) for a in gate[key]]


def unmeasured(name: str, ctx: GateContext) -> list[Verdict] | None:
    """A gate on the arm's numbers cannot decide for an arm without any."""
    if ctx.result is not None:
        return None
    return [Verdict(name, ctx.arm, False, None, None, f"{ctx.arm}: the arm was not measured")]


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
        label = metric.removesuffix("_ms").upper()
        return [guard_noise(guard_client_bound([at_most(f"{name}.{s}", arm, getattr(distribution, s), limits[s],
                                                         f"{label} {s}", " ms")],
                                                ctx.result, [f"{metric}.{s}"], inconclusive_passes(gate)),
                            ctx.result, [f"{metric}.{s}"], gate)[0] for s in stats]

    check.__doc__ = f"Each configured statistic of {metric.removesuffix('_ms').upper()} within gate.{name}[arm] (ms)."
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


# --- speculative decoding -----------------------------------------------------------------------


@register("min_accept_length", "speculative", ("min_accept_length",), keyed_arms("min_accept_length"))
def min_accept_length(ctx: GateContext) -> list[Verdict]:
    """Accept length (run-scoped, token-weighted) at least gate.min_accept_length[arm]."""
    name, arm, gate = "min_accept_length", ctx.arm, ctx.gate
    if arm not in gate.min_accept_length:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    floors = per_category_floors(gate.min_accept_length[arm])
    verdicts = []
    for category, floor in floors.items():
        if category == ALL:
            verdict = at_least(name, arm, ctx.result.accept_length, floor, "accept length")
            if ctx.result.accept_length_source == "server_cumulative":
                verdict.detail += " (server-cumulative fallback: includes warm-up and other traffic)"
            verdicts += guard_noise([verdict], ctx.result, ["accept_length"], gate)
        else:  # a category nobody sent has no accept length: a failed threshold, not a pass
            value = (ctx.result.categories.get(category) or {}).get("accept_length")
            verdicts.append(at_least(f"{name}.{category}", arm, value, floor, f"accept length on '{category}' prompts"))
    return verdicts


ALL = "all"  # in a per-category threshold: the arm over every request


def per_category_floors(threshold: Any) -> dict[str, float]:
    """`2.0` -> {all: 2.0}; `{all: 2.0, code: 2.5}` as it is (validated with the config)."""
    if isinstance(threshold, (int, float)):
        return {ALL: float(threshold)}
    return {str(k): float(v) for k, v in dict(threshold).items()}


@register("max_accept_length", "speculative", ("max_accept_length",), keyed_arms("max_accept_length"))
def max_accept_length(ctx: GateContext) -> list[Verdict]:
    """Accept length at most gate.max_accept_length[arm] (a draft that must not be accepted)."""
    name, arm, gate = "max_accept_length", ctx.arm, ctx.gate
    if arm not in gate.max_accept_length:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    verdict = at_most(name, arm, ctx.result.accept_length, gate.max_accept_length[arm], "accept length")
    return guard_noise([verdict], ctx.result, ["accept_length"], gate)


def speedup_arms(gate: Any) -> list[str]:
    return [str(a) for a in gate.min_speedup] + [str(g.over) for g in gate.min_speedup.values()]


@register("min_speedup", "speculative", ("min_speedup",), speedup_arms)
def min_speedup(ctx: GateContext) -> list[Verdict]:
    """Output tok/s at least gate.min_speedup[arm].ratio times the `over` arm's, in this run."""
    name, arm, gate = "min_speedup", ctx.arm, ctx.gate
    spec = gate.min_speedup.get(arm)
    if spec is None:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    result, plain = ctx.result, ctx.results.get(spec.over)
    if plain is None:
        return [skipped(name, arm, f"arm '{spec.over}' was not measured in this run, so there is nothing to compare with")]
    ratio = speedup(result, plain)
    if ratio is None:
        return [Verdict(name, arm, False, None, spec.ratio, f"{arm}: speedup over {spec.over} not measurable (output tok/s {fmt(result.output_tok_s)} vs {fmt(plain.output_tok_s)})")]
    words = "faster than" if ratio > 1 else "slower than" if ratio < 1 else "as fast as"
    detail = (
        f"{arm} is {words} {spec.over}: {result.output_tok_s:.1f} tok/s is {ratio:.2f}x of "
        f"{spec.over}'s {plain.output_tok_s:.1f} tok/s (gate: ≥ {spec.ratio:.2f}x)"
    )
    verdict = Verdict(name, arm, ratio >= spec.ratio, ratio, spec.ratio, detail)
    speed_interval(verdict, ctx, spec.over, spec.ratio)
    verdicts = guard_noise([verdict], result, ["output_tok_s"], gate)
    return [with_gpu_state(v, ctx) for v in guard_noise(verdicts, plain, ["output_tok_s"], gate)]


def speed_interval(verdict: Verdict, ctx: GateContext, over: str, floor: float) -> None:
    """The speedup's interval from both arms' per-window token rates: failed only when
    even its upper end is below the floor, passed when its lower end clears it."""
    mine, theirs = evidence("output_tok_s", ctx.requests), evidence("output_tok_s", ctx.arm_requests.get(over, []))
    if mine is None or theirs is None or not mine.groups or not theirs.groups:
        return  # no request lines (e.g. a test's bare result): the point ratio decides
    # judge() measures how much worse `mine` is than `theirs`; the floor is 1 - ratio worse
    change = judge("output_tok_s", theirs, mine, 1.0 - floor, lower_is_better=False, confidence=ctx.gate.confidence)
    if change.low is None:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(ctx.gate)
        verdict.detail += f"; inconclusive: {change.why} (gate.inconclusive={ctx.gate.inconclusive})"
        return
    low, high = 1.0 - change.high, 1.0 - change.low  # the ratio's interval
    verdict.interval = [round(low, 4), round(high, 4)]
    verdict.detail += f"; {ctx.gate.confidence:.0%} interval {low:.2f}x to {high:.2f}x"
    if change.outcome == "inconclusive":
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(ctx.gate)
        needed = f"; {change.needed} would decide it" if change.needed else ""
        verdict.detail += f": inconclusive{needed} (gate.inconclusive={ctx.gate.inconclusive})"
    else:
        verdict.passed = change.outcome == "passed"


@register("accept_length_at_least_break_even", "speculative", ("accept_length_at_least_break_even",),
          keyed_arms("accept_length_at_least_break_even"), needs_plain_arm=True)
def accept_length_at_least_break_even(ctx: GateContext) -> list[Verdict]:
    """Accept length at least break-even: this arm's verify cycle ÷ the plain arm's decode step."""
    name, arm, gate, plain_arm = "accept_length_at_least_break_even", ctx.arm, ctx.gate, ctx.plain_arm
    if arm not in gate.accept_length_at_least_break_even:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    result = ctx.result
    plain = ctx.results.get(plain_arm) if plain_arm else None
    if plain is None:
        return [skipped(name, arm, f"plain arm '{plain_arm}' was not measured in this run, so break-even is unknown")]
    if result.verify_cycle_ms is None or plain.decode_step_ms is None or result.accept_length is None:
        return [Verdict(name, arm, False, result.accept_length, None,
                        f"{arm}: break-even not measurable (verify cycle {fmt(result.verify_cycle_ms, ' ms')}, "
                        f"plain step {fmt(plain.decode_step_ms, ' ms')}, accept length {fmt(result.accept_length)})")]
    even = break_even_accept_length(result.verify_cycle_ms, plain.decode_step_ms)
    passed = result.accept_length >= even
    why = (f"verify cycle {result.verify_cycle_ms:.1f} ms ÷ {plain_arm}'s decode step {plain.decode_step_ms:.1f} ms")
    if passed:
        detail = f"{arm}: accept length {result.accept_length:.2f} is at or above break-even {even:.2f} ({why})"
    else:
        detail = (f"{arm}: accept length {result.accept_length:.2f} is below break-even {even:.2f} ({why}): "
                  f"speculation costs more per cycle than it gains")
    verdicts = [Verdict(name, arm, passed, result.accept_length, even, detail)]
    verdicts = guard_noise(verdicts, result, ["accept_length", "verify_cycle_ms"], gate)
    return guard_noise(verdicts, plain, ["decode_step_ms"], gate)


def lossless_arms(gate: Any) -> list[str]:
    return [str(a) for a in gate.lossless] + [str(g.against) for g in gate.lossless.values()]


@register("lossless", "speculative", ("lossless",), lossless_arms)
def lossless(ctx: GateContext) -> list[Verdict]:
    """Under greedy decoding each request generates exactly what it did in the `against`
    arm, for at least gate.lossless[arm].min_exact_match of the requests both completed."""
    name, arm, gate = "lossless", ctx.arm, ctx.gate
    spec = gate.lossless.get(arm)
    if spec is None:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    if spec.against not in ctx.results:
        return [skipped(name, arm, f"arm '{spec.against}' was not measured in this run, so there is nothing to compare with")]
    found = compare_outputs(spec.against, ctx.arm_requests.get(spec.against, []), arm, ctx.requests)
    rate, floor = found.exact_match, spec.min_exact_match
    detail = describe_outputs(found, arm, spec.against, floor)
    return [Verdict(name, arm, rate is not None and rate >= floor, rate, floor, detail)]


PER_REQUEST_DEFINITION = ("the requests' own counts: Σ completion tokens ÷ Σ spec_verify_ct over the measured "
                          "requests (each request's first, prefill-produced token included)")


def per_request_accept_length(lines: list[dict]) -> float | None:
    """Σ completion tokens ÷ Σ verify cycles over one repeat's successful measured requests
    that carry verify counts, as harness.measure.metrics.summarize computes the arm's figure."""
    spec = [r for r in lines if r.get("ok") and r.get("completion_tokens") is not None and r.get("spec_verify_ct")]
    verify = sum(r["spec_verify_ct"] for r in spec)
    return sum(r["completion_tokens"] for r in spec) / verify if verify else None


def measured_lines_by_repeat(lines: list[dict]) -> dict[int, list[dict]]:
    by_repeat: dict[int, list[dict]] = {}
    for line in lines:
        if not line.get("warmup"):
            by_repeat.setdefault(int(line.get("repeat") or 0), []).append(line)
    return by_repeat


@register("accept_length_sources_agree", "speculative", ("max_accept_length_source_gap",))
def accept_length_sources_agree(ctx: GateContext) -> list[Verdict]:
    """Where the accept length has two sources over one window (the requests' own verify
    counts and the server's /metrics counters), they differ by at most
    gate.max_accept_length_source_gap of the larger."""
    name, arm, gap = "accept_length_sources_agree", ctx.arm, ctx.gate.max_accept_length_source_gap
    if gap is None:
        return [skipped(name, arm, "gate.max_accept_length_source_gap is null: the two sources are not compared")]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    by_repeat = measured_lines_by_repeat(ctx.requests)
    repeats = max(len(ctx.server_windows), len(by_repeat), 1)
    return [source_verdict(ctx, repeat, by_repeat.get(repeat, []), window, gap, repeats)
            for repeat, window in enumerate(ctx.server_windows or [{}])]


def source_verdict(ctx: GateContext, repeat: int, lines: list[dict], window: dict, gap: float,
                   repeats: int) -> Verdict:
    """One repeat's two accept lengths side by side, or why they cannot be compared."""
    name, arm = "accept_length_sources_agree", ctx.arm
    where = f" (repeat {repeat + 1})" if repeats > 1 else ""
    mine, theirs = per_request_accept_length(lines), (window or {}).get("accept_length")
    if mine is None and theirs is None:
        return skipped(name, arm, f"{arm}{where}: no accept length from either source (no speculation measured)")
    if mine is None:
        return skipped(name, arm, f"{arm}{where}: one source only, {window.get('accept_length_definition')} "
                                  f"= {theirs:.4f}; the requests carry no verify counts to compare it with")
    if theirs is None:
        return skipped(name, arm, f"{arm}{where}: one source only, {PER_REQUEST_DEFINITION} = {mine:.4f}; the "
                                  f"server's /metrics gave no generation-token and verify-call counters over the window")
    both = (f"{PER_REQUEST_DEFINITION} = {mine:.4f}; {window.get('accept_length_definition')} = {theirs:.4f}")
    failed = [r for r in lines if not r.get("ok")]
    if failed:  # the server counted what it finished of them, the client none of them
        return skipped(name, arm, f"{arm}{where}: not like for like: {len(failed)} measured request(s) failed, "
                                  f"which only the server's counters may hold ({both})")
    difference = abs(mine - theirs) / max(mine, theirs)
    if difference <= gap:
        return Verdict(name, arm, True, round(difference, 6), gap,
                       f"{arm}{where}: the two accept lengths agree within {difference:.2%} (≤ {gap:.0%}): {both}")
    return Verdict(name, arm, False, round(difference, 6), gap,
                   f"{arm}{where}: the two accept lengths disagree by {difference:.2%} of the larger (> {gap:.0%}): "
                   f"{both}. Over the same requests they count the same tokens and cycles, so one of them is not "
                   f"measuring what it claims")


# --- comparison with a reference run (gate.baseline) -------------------------------------------

CHANGE = re.compile(r"^\s*[+-]?\s*(\d+(?:\.\d+)?)\s*%\s*$")
NOISE_SIGMAS = 3.0  # the noise band is this many robust standard deviations (1.4826 x MAD)
INCONCLUSIVE = ("fail", "warn", "pass")


@dataclass(frozen=True)
class Comparison:
    """A typed reference-run gate parsed from config: `output_tok_s: "3%"` may get 3 % worse.
    Which way is worse comes from the metric registry (tok/s down, latencies up), never from
    a sign: "-3%" and "+3%" allow the same 3 % regression."""

    metric: str
    allowed: float  # fraction
    higher_is_better: bool

    @classmethod
    def parse(cls, metric: str, text: str) -> "Comparison":
        match = CHANGE.match(str(text))
        if not match:
            raise ValueError(f"gate.compare.{metric}: '{text}' is not an allowed change like \"3%\" "
                             f"(how much worse the metric may get)")
        return cls(metric, float(match.group(1)) / 100.0, better_of(metric) == "higher")

    def __str__(self) -> str:
        return f"{self.metric}: {self.allowed:.1%} worse at most"


def better_of(path: str) -> str:
    """The registry's better direction of `path`; a statistic the registry does not list
    (ttft_ms.p90) takes its distribution's (ttft_ms.*). Unknown metrics are a ValueError."""
    try:
        return metric(path).better
    except KeyError:
        family = [m for m in METRICS if "." in path and m.path.split(".")[0] == path.split(".")[0]]
        if family and path.split(".")[1] in STATS:
            return family[0].better
        valid = ", ".join(m.path for m in METRICS if not m.between_arms and not m.count)
        raise ValueError(f"gate.compare.{path}: no such metric; valid: {valid} "
                         f"(and mean/p90 of the latency distributions)") from None


def comparisons(gate) -> list[Comparison]:
    """The configured comparisons; with a reference run and none listed, the registry's
    default-compared metrics at gate.tolerance, so pointing at a reference run is enough
    to gate a merge."""
    if gate.compare:
        return [Comparison.parse(metric, text) for metric, text in gate.compare.items()]
    return [Comparison(m.path, gate.tolerance, m.better == "higher") for m in compared_by_default()]


def noise_band(*spreads: dict | None) -> float:
    """Relative noise of the difference of two measurements, from each one's MAD."""
    parts = [NOISE_SIGMAS * 1.4826 * s["mad"] / s["median"] for s in spreads
             if s and s.get("mad") is not None and s.get("median")]
    return math.sqrt(sum(p * p for p in parts))


def history_band(metric: str, history: list[dict]) -> float | None:
    """The lookback band: how far the metric moved between past runs (NOISE_SIGMAS robust
    standard deviations relative to its median); None without at least 3 past runs."""
    values = [v for v in (metric_value(block, metric) for block in history) if isinstance(v, (int, float))]
    return noise_band(spread(values)) if len(values) >= 3 else None


def allowed_change(metric: str, old: float, allowed: float, band: float, gate) -> float:
    """The larger of the allowed change and the noise band over repeats; for latencies
    also the scheduling-jitter floor (a 0.4 ms move of a 4 ms TTFT is 10 % and still noise)."""
    floor = gate.latency_noise_floor_ms / abs(old) if metric.split(".")[0].endswith("_ms") and old else 0.0
    return max(allowed, band, floor)


@register("no_regression_against_baseline", "baseline",
          ("baseline", "compare", "tolerance", "latency_noise_floor_ms", "confidence", "inconclusive",
           "baseline_mismatch"))
def no_regression_against_reference(ctx: GateContext) -> list[Verdict]:
    """Each compared metric no worse than its allowed change vs the reference run
    (gate.baseline), judged from the samples of both runs: passed, failed or inconclusive."""
    arm, gate, label = ctx.arm, ctx.gate, ctx.reference_label
    if not gate.baseline:
        return [skipped("baseline", arm, "no reference run configured (gate.baseline=<run dir | results.json>)")]
    if ctx.reference is None or not ctx.reference.get("requests"):
        return [skipped("baseline", arm, f"the reference run {label} has no measured arm '{arm}'")]
    if (missing := unmeasured("baseline", ctx)) is not None:
        return missing
    verdicts = [compare_metric(ctx, c) for c in comparisons(gate)]
    return [with_gpu_state(v, ctx) for v in verdicts]


def compare_metric(ctx: GateContext, c: Comparison) -> Verdict:
    arm, gate, label, result, reference = ctx.arm, ctx.gate, ctx.reference_label, ctx.result, ctx.reference
    name = f"baseline.{c.metric}"
    new, old = metric_value(result, c.metric), metric_value(reference, c.metric)
    if old is None or not old:
        return skipped(name, arm, f"the reference run {label} has no {c.metric} for arm '{arm}'")
    if new is None:
        return Verdict(name, arm, False, None, None, f"{arm}: {c.metric} was not measured (reference run {old:.2f})", old)
    band = noise_band(result.noise.get(c.metric), (reference.get("noise") or {}).get(c.metric))
    lookback = history_band(c.metric, ctx.history)
    bands = (f"tolerance {c.allowed:.1%}, noise band {band:.1%}"
             + (f", history band {lookback:.1%} over {len(ctx.history)} runs" if lookback is not None else ""))
    old_ev, new_ev = evidence(c.metric, ctx.reference_requests), evidence(c.metric, ctx.requests)
    if old_ev is None or new_ev is None or not old_ev.groups or not new_ev.groups:
        # one value against one value: a small latency move is scheduling jitter (the floor)
        limit = allowed_change(c.metric, old, c.allowed, max(band, lookback or 0.0), gate)
        floor = f", {gate.latency_noise_floor_ms:g} ms floor" if c.metric.split(".")[0].endswith("_ms") else ""
        return point_verdict(arm, c, old, new, limit, f"allowed {limit:.1%} = max({bands}{floor})", label)
    # with samples, jitter is inside the interval: no floor
    limit = max(c.allowed, band, lookback or 0.0)
    why_limit = f"allowed {limit:.1%} = max({bands})"
    change = judge(c.metric, old_ev, new_ev, limit, not c.higher_is_better, gate.confidence)
    return interval_verdict(arm, c, change, old, new, why_limit, label, gate)


def point_verdict(arm: str, c: Comparison, old: float, new: float, limit: float, why_limit: str, label: str) -> Verdict:
    """Without per-request data in both runs (an older record, record.keep_requests=false):
    one value against one value, as the verdict says."""
    name = f"baseline.{c.metric}"
    change = (new - old) / old
    worse = -change if c.higher_is_better else change  # > 0: a regression
    passed = worse <= limit
    words = f"regressed by {worse:.1%}" if worse > 0 else f"improved by {-worse:.1%}"
    detail = (f"{arm}: {c.metric} {words} vs the reference run {label} ({old:.2f} -> {new:.2f}); {why_limit}; "
              f"judged on the two values only (no per-request data to draw an interval from)")
    return Verdict(name, arm, passed, new, limit, detail, baseline=old)


def interval_verdict(arm: str, c: Comparison, change, old: float, new: float, why_limit: str, label: str,
                     gate) -> Verdict:
    name = f"baseline.{c.metric}"
    verdict = Verdict(name, arm, None, new, change.allowed, "", baseline=old)
    if change.worse is None:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        verdict.detail = f"{arm}: {c.metric} inconclusive vs the reference run {label}: {change.why}"
        return verdict
    words = f"{change.worse:+.1%} worse" if change.worse > 0 else f"{-change.worse:.1%} better"
    interval = "" if change.low is None else f", {gate.confidence:.0%} interval {change.low:+.1%} to {change.high:+.1%} worse"
    if change.low is not None:
        verdict.interval = [round(change.low, 5), round(change.high, 5)]
    facts = f"{c.metric} {old:.2f} -> {new:.2f} ({words}{interval}) vs the reference run {label}; {why_limit}"
    if change.outcome == "failed":
        verdict.passed = False
        verdict.detail = f"{arm}: {c.metric} regressed: {facts}"
    elif change.outcome == "passed":
        verdict.passed = True
        verdict.detail = f"{arm}: {facts}"
    else:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        needed = f"; {change.needed} would decide it" if change.needed else ""
        verdict.detail = (f"{arm}: {c.metric} inconclusive ({change.why}{needed}; gate.inconclusive={gate.inconclusive}): "
                          f"{facts}")
    return verdict


def inconclusive_passes(gate) -> bool | None:
    """gate.inconclusive: fail -> a failed test; warn -> a passing test with a warning; pass -> passing."""
    return {"fail": False, "warn": True, "pass": True}[gate.inconclusive]


def with_gpu_state(verdict: Verdict, ctx: GateContext) -> Verdict:
    """A failed or inconclusive speed verdict says in the same sentence when the arm's GPUs
    were throttled or below the clock gate under load: a hot GPU, not a code regression."""
    if verdict.status not in ("failed", "inconclusive") or not ctx.gpu:
        return verdict
    state = gpu_trouble(ctx.gpu, ctx.gate)
    if state:
        verdict.detail += f", while {state}"
    return verdict


def gpu_trouble(gpu: dict, gate) -> str:
    """The GPUs' trouble under load in words ("" when none was seen)."""
    troubles = []
    for uuid, block in (gpu.get("gpus") or {}).items():
        index = block.get("index", uuid)
        reasons = {r: share for r, share in (block.get("throttle_fraction_under_load") or {}).items()
                   if share and r in set(gate.fail_on_throttle_reasons)}
        if reasons:
            named = ", ".join(f"{r} in {share:.0%} of load samples" for r, share in sorted(reasons.items()))
            troubles.append(f"GPU {index} was throttled ({named})")
            continue
        ratio = block.get("sm_clock_ratio_under_load")
        if gate.min_clock_ratio_under_load is not None and ratio is not None and ratio < gate.min_clock_ratio_under_load:
            troubles.append(f"GPU {index} ran at {ratio:.0%} of its max SM clock under load")
    return "; ".join(troubles)


# --- GPU telemetry (the `gpu` block of an arm, see harness/telemetry/summary.py) ----------------


def telemetry_missing(name: str, ctx: GateContext, threshold: Any) -> list[Verdict] | None:
    """Telemetry off or unavailable here (no NVIDIA driver) decides nothing: skipped. Telemetry
    that was configured but recorded nothing is a failed measurement."""
    source = ctx.telemetry_source
    if source == "off":
        return [skipped(name, ctx.arm, "telemetry is off for this arm (telemetry=nvml, smi or sim samples the GPUs)")]
    if ctx.gpu is None:
        return [Verdict(name, ctx.arm, False, None, threshold,
                        f"telemetry={source} was configured but recorded nothing for arm '{ctx.arm}'")]
    if ctx.gpu.get("unavailable"):
        return [skipped(name, ctx.arm, str(ctx.gpu["unavailable"]))]
    return None


def no_load_samples(name: str, arm: str, gpu: dict, threshold: float | None, gate: Any) -> list[Verdict] | None:
    """No sample under load. A load that never reached the GPU is a failed measurement; a
    load that streamed, but only within the ramp-in left out while clocks boost, is too
    short to judge: inconclusive (gate.inconclusive decides), said in those words."""
    if gpu["samples"].get("load", 0) > 0:
        return None
    ramp_in, longest = gpu.get("ramp_in_s", 0) or 0, gpu.get("longest_load_window_s")
    if longest is not None and longest < ramp_in + 2 * (gpu.get("interval_s") or 0):
        return [Verdict(name, arm, inconclusive_passes(gate), None, threshold,
                        f"{arm}: the load was too short to sample the GPUs under load: tokens streamed for "
                        f"{longest:.2f} s (the longest of {gpu.get('load_windows', 1)} load window(s)), all within "
                        f"the first {ramp_in:g} s that telemetry.ramp_in_s leaves out while clocks boost; a longer "
                        f"load (workload.num_prompts, max_tokens or duration_s) can be judged", inconclusive=True)]
    if not gpu.get("load_windows"):
        return [Verdict(name, arm, False, None, threshold,
                        f"{arm}: no GPU samples under load: no token of a measured request streamed, so the "
                        f"load window never opened (did the requests fail?)")]
    return [Verdict(name, arm, False, None, threshold,
                    f"{arm}: no GPU samples under load: tokens streamed for {longest or 0:.2f} s past the "
                    f"{ramp_in:g} s ramp-in but no sample was read then (telemetry.interval_s "
                    f"{gpu.get('interval_s')} s; was the sampler starved?)")]


def per_gpu(name: str, ctx: GateContext, threshold: Any, judge) -> list[Verdict]:
    """The shared frame of the GPU gates: skipped without telemetry or a threshold, failed
    without load samples, otherwise `judge(label, gpu_block)` for every sampled GPU."""
    number = threshold if isinstance(threshold, float) else None
    if (missing := telemetry_missing(name, ctx, number)) is not None:
        return missing
    if threshold is None or threshold == []:
        return [not_configured(name, ctx.arm)]
    gpu = ctx.gpu
    return no_load_samples(name, ctx.arm, gpu, number if number is not None else 0.0, ctx.gate) or [
        judge(f"GPU {g.get('index')} ({uuid})", g) for uuid, g in gpu["gpus"].items()]


@register("sm_clock_under_load", "gpu", ("min_clock_ratio_under_load",))
def min_clock_ratio_under_load(ctx: GateContext) -> list[Verdict]:
    """Every GPU's SM clock under load at least gate.min_clock_ratio_under_load of its maximum."""
    name, arm, floor = "min_clock_ratio_under_load", ctx.arm, ctx.gate.min_clock_ratio_under_load

    def judge(label: str, g: dict) -> Verdict:
        ratio = g.get("sm_clock_ratio_under_load")
        if ratio is None:
            return Verdict(name, arm, False, None, floor, f"{arm}: {label}: SM clock or its maximum was not measured")
        median = g["load"]["sm_clock_mhz"]["median"]
        return Verdict(name, arm, ratio >= floor, ratio, floor,
                       f"{arm}: {label}: SM clock under load {median:.0f} MHz is {ratio:.2f} of its max "
                       f"{g.get('sm_clock_max_mhz'):.0f} MHz ({'meets' if ratio >= floor else 'is below'} {floor:.2f})")

    return per_gpu(name, ctx, floor, judge)


@register("no_slowdown_reasons_under_load", "gpu", ("fail_on_throttle_reasons",))
def no_throttle_reasons_under_load(ctx: GateContext) -> list[Verdict]:
    """No GPU reports any of gate.fail_on_throttle_reasons while under load."""
    name, arm, reasons = "throttle_reasons_under_load", ctx.arm, list(ctx.gate.fail_on_throttle_reasons)

    def judge(label: str, g: dict) -> Verdict:
        seen = {r: f for r, f in g.get("throttle_fraction_under_load", {}).items() if r in reasons and f > 0}
        detail = (f"{arm}: {label}: " + ", ".join(f"{r} in {f:.0%} of load samples" for r, f in sorted(seen.items()))
                  if seen else f"{arm}: {label}: none of {', '.join(reasons)} under load")
        return Verdict(name, arm, not seen, max(seen.values(), default=0.0), 0.0, detail)

    return per_gpu(name, ctx, reasons, judge)


@register("gpu_utilization_under_load", "gpu", ("min_gpu_util_under_load_pct",))
def min_gpu_util_under_load(ctx: GateContext) -> list[Verdict]:
    """Every GPU's median utilization under load at least gate.min_gpu_util_under_load_pct."""
    name, arm, floor = "min_gpu_util_under_load_pct", ctx.arm, ctx.gate.min_gpu_util_under_load_pct

    def judge(label: str, g: dict) -> Verdict:
        util = (g["load"].get("gpu_util_pct") or {}).get("median")
        return at_least(name, arm, util, floor, f"{label} utilization under load (median)", " %")

    return per_gpu(name, ctx, floor, judge)


@register("joules_per_token", "gpu", ("max_joules_per_token",), keyed_arms("max_joules_per_token"))
def max_joules_per_token(ctx: GateContext) -> list[Verdict]:
    """GPU energy per output token over the load window at most gate.max_joules_per_token[arm]
    (all the arm's GPUs together; harness/telemetry/energy.py says how it is measured)."""
    name, arm, gate = "max_joules_per_token", ctx.arm, ctx.gate
    if arm not in gate.max_joules_per_token:
        return [not_configured(name, arm)]
    ceiling = float(gate.max_joules_per_token[arm])
    if (missing := telemetry_missing(name, ctx, ceiling)) is not None:
        return missing
    if (short := no_load_samples(name, arm, ctx.gpu, ceiling, gate)) is not None:
        return short
    energy = ctx.gpu.get("energy") or {}
    value = energy.get("joules_per_token")
    if value is None:
        return [energy_unmeasured(name, arm, energy, ceiling, gate)]
    return [Verdict(name, arm, value <= ceiling, value, ceiling,
                    f"{arm}: {value:.3f} J per output token ({energy['joules']:.1f} J over {energy['seconds']:.2f} s "
                    f"of load, {energy['output_tokens']} tokens, {energy_method_words(energy['method'])}) "
                    f"{'is within' if value <= ceiling else 'exceeds'} the limit {ceiling:g} J/token")]


def energy_method_words(method: str | None) -> str:
    return {"energy_counter": "from the GPUs' energy counters",
            "power_integration": "from power samples integrated over time (no energy counter)",
            "mixed": "from energy counters and, where they were missing, integrated power"}.get(str(method), str(method))


def energy_unmeasured(name: str, arm: str, energy: dict, ceiling: float, gate: Any) -> Verdict:
    """No joules per token: a load too short to difference two samples is inconclusive;
    anything else (nothing read, no energy block, no token in the window) failed to measure."""
    why = energy.get("why") or "the gpu block has no energy figures"
    if energy.get("why_kind") == "too_short":
        return Verdict(name, arm, inconclusive_passes(gate), None, ceiling,
                       f"{arm}: energy per token cannot be judged: {why}; a longer load can be judged "
                       f"(gate.inconclusive={gate.inconclusive})", inconclusive=True)
    return Verdict(name, arm, False, None, ceiling, f"{arm}: energy per token was not measured: {why}")
