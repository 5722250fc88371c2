"""Speculative-decoding gates (suites/test_speculative.py): accept length floors and ceilings, speedup over the plain arm, accept length against break-even, the lossless comparison, the two accept-length sources."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.gates.change import Change, evidence, judge
from harness.gates.lossless import compare as compare_outputs, summary as describe_outputs
from harness.measure.metrics import acceptance_per_position
from harness.measure.steady import rate_evidence as steady_rates
from harness.measure.server_metrics import missing_note
from harness.measure.registry import OUTPUT_RATE, STEADY, break_even_accept_length, cycle_and_step, speedup, speedup_missing, throughputs
from harness.gates.verdict import inconclusive_passes, Verdict, skipped, not_configured, fmt, at_least, at_most, outward
from harness.gates.trust import Figures, Side, Trust, one
from harness.gates.registry import GateConfigError, GateContext, register, keyed_arms, own_acceptance, unmeasured
from harness.measure.samples import ACCEPTED_DEFINITION, TOKENS_DEFINITION, accept_definition, accept_tokens
from harness.measure.stream_steps import EVERY_STEP as STREAM_EVERY_STEP, StreamSteps, stream_steps


# --- speculative decoding -----------------------------------------------------------------------


def overall_accept_length(name: str) -> Figures:
    """`min_accept_length` judges the arm's accept length; `min_accept_length.<category>` a
    category's, which has no spread over repeats."""
    return Figures(("accept_length",)) if name == "min_accept_length" else Figures()


@register("min_accept_length", "speculative", ("min_accept_length",), keyed_arms("min_accept_length"),
          trust=Trust(overall_accept_length), quality=own_acceptance("min_accept_length"))
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
            verdict = at_least(name, arm, ctx.result.value("accept_length"), floor, "accept length")
            if ctx.result.accept_length_source == "server_cumulative":
                verdict.detail += " (server-cumulative fallback: includes warm-up and other traffic)"
            verdicts.append(verdict)
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


@register("max_accept_length", "speculative", ("max_accept_length",), keyed_arms("max_accept_length"),
          trust=Trust(one("accept_length")), quality=own_acceptance("max_accept_length"))
def max_accept_length(ctx: GateContext) -> list[Verdict]:
    """Accept length at most gate.max_accept_length[arm] (a draft that must not be accepted)."""
    name, arm, gate = "max_accept_length", ctx.arm, ctx.gate
    if arm not in gate.max_accept_length:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    verdict = at_most(name, arm, ctx.result.value("accept_length"), gate.max_accept_length[arm], "accept length")
    return [verdict]


def shares_in_unit_range(gate: Any, arms: list[str], plain_arm: str | None) -> None:
    for arm, floors in (gate.min_acceptance_per_position or {}).items():
        where = f"gate.min_acceptance_per_position.{arm}"
        if not floors or any(not 0.0 <= float(f) <= 1.0 for f in floors):
            raise GateConfigError(f"{where} is a list of shares of drafts, one per draft position, each between 0 "
                                  f"and 1 (e.g. [0.5, 0.3]), got {list(floors)}")


@register("min_acceptance_per_position", "speculative", ("min_acceptance_per_position",),
          keyed_arms("min_acceptance_per_position"), validate=shares_in_unit_range,
          quality=own_acceptance("min_acceptance_per_position"))
def min_acceptance_per_position(ctx: GateContext) -> list[Verdict]:
    """The share of drafts whose position i was accepted at least
    gate.min_acceptance_per_position[arm][i-1], one verdict per position given: from the
    server's counters where it keeps them (vLLM), else the requests' per-cycle histograms."""
    name, arm, gate = "min_acceptance_per_position", ctx.arm, ctx.gate
    floors = gate.min_acceptance_per_position.get(arm)
    if floors is None:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    shares, source = acceptance_by_position(ctx)
    verdicts = []
    for position, floor in enumerate(floors, start=1):
        value = shares[position - 1] if shares and position <= len(shares) else None
        what = f"acceptance at draft position {position} ({source})" if source else f"acceptance at draft position {position}"
        verdicts.append(at_least(f"{name}.{position}", arm, value, float(floor), what))
    return verdicts


def acceptance_by_position(ctx: GateContext) -> tuple[list[float] | None, str | None]:
    """Per draft position, the share of drafts accepted there, and where it came from:
    the /metrics windows pooled by their drafts, else the requests' histograms."""
    windows = [w for w in ctx.server_windows or [] if w and w.get("acceptance_per_position") and w.get("spec_drafts")]
    if windows:
        drafts = sum(w["spec_drafts"] for w in windows)
        depth = min(len(w["acceptance_per_position"]) for w in windows)
        return [sum(w["acceptance_per_position"][i] * w["spec_drafts"] for w in windows) / drafts
                for i in range(depth)], "the server's counters"
    if ctx.result.correct_drafts_histogram:
        return acceptance_per_position(ctx.result.correct_drafts_histogram), "the requests' histograms"
    return None, None


def speedup_arms(gate: Any) -> list[str]:
    return [str(a) for a in gate.min_speedup] + [str(g.over) for g in gate.min_speedup.values()]


def arm_side(name: str | None, ctx: GateContext) -> Side | None:
    """Another arm of this run as the side a verdict compares this arm with."""
    return None if name is None else Side(name, ctx.results.get(name), ctx.arm_gpus.get(name))


def speedup_over(ctx: GateContext) -> Side | None:
    """A speedup's divisor: the `over` arm's output rate (its slowness flatters this arm)."""
    spec = ctx.gate.min_speedup.get(ctx.arm)
    return arm_side(None if spec is None else str(spec.over), ctx)


@register("min_speedup", "speculative", ("min_speedup",), speedup_arms,
          trust=Trust(lambda name: Figures((OUTPUT_RATE,), (OUTPUT_RATE,)), against=speedup_over))
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
        return [Verdict(name, arm, False, None, spec.ratio, f"{arm}: speedup over {spec.over} not measurable "
                                                            f"({speedup_missing(arm, result, spec.over, plain)})")]
    mine, theirs, on = throughputs(result, plain)
    change = speed_change(ctx, spec.over, spec.ratio, on)
    if change is not None and change.low is not None:
        # one estimator: the rates and the ratio shown are the samples' own, which the interval is
        # drawn around (results.json's rate of several repeats is their median, the samples' pooled)
        mine, theirs, ratio = change.new, change.old, 1.0 - change.worse
    words = "faster than" if ratio > 1 else "slower than" if ratio < 1 else "as fast as"
    where = "each arm's steady window" if on == STEADY else "each arm's whole load"
    detail = (
        f"{arm} is {words} {spec.over}: {mine:.1f} tok/s is {ratio:.2f}x of "
        f"{spec.over}'s {theirs:.1f} tok/s over {where} (gate: ≥ {spec.ratio:.2f}x)"
    )
    verdict = Verdict(name, arm, ratio >= spec.ratio, ratio, spec.ratio, detail)
    if change is not None:
        decided_by_interval(verdict, change, ctx.gate)
    return [verdict]


def speed_change(ctx: GateContext, over: str, floor: float, on: str) -> Change | None:
    """How much slower this arm is than the `over` arm, with its interval, from both arms'
    per-window token rates (windows of each steady window on the steady basis); None without
    request lines (e.g. a test's bare result): the point ratio decides."""
    if on == STEADY:
        mine = steady_rates(ctx.requests, ctx.result.steady)
        theirs = steady_rates(ctx.arm_requests.get(over, []), ctx.results[over].steady)
    else:
        mine, theirs = evidence(OUTPUT_RATE, ctx.requests), evidence(OUTPUT_RATE, ctx.arm_requests.get(over, []))
    if mine is None or theirs is None or not mine.groups_count or not theirs.groups_count:
        return None
    # judge() measures how much worse `mine` is than `theirs`; the floor is 1 - ratio worse
    return judge(OUTPUT_RATE, theirs, mine, 1.0 - floor, lower_is_better=False, confidence=ctx.gate.confidence)


def decided_by_interval(verdict: Verdict, change: Change, gate: Any) -> None:
    """The speedup's verdict from its interval: failed only when even its upper end is below
    the floor, passed when its lower end clears it."""
    if change.low is None:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        verdict.detail += f"; inconclusive: {change.why} (gate.inconclusive={gate.inconclusive})"
        return
    low, high = 1.0 - change.high, 1.0 - change.low  # the ratio's interval, around 1 - change.worse
    verdict.interval = outward(low, high, 4)
    verdict.detail += f"; {gate.confidence:.0%} interval {low:.2f}x to {high:.2f}x"
    if change.outcome == "inconclusive":
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        needed = f"; {change.needed} would decide it" if change.needed else ""
        verdict.detail += f": inconclusive{needed} (gate.inconclusive={gate.inconclusive})"
    else:
        verdict.passed = change.outcome == "passed"


# break-even is this arm's verify cycle over the plain arm's decode step: a slower cycle raises it,
# a slower plain step lowers it (flattering this arm)
@register("accept_length_at_least_break_even", "speculative", ("accept_length_at_least_break_even",),
          keyed_arms("accept_length_at_least_break_even"), needs_plain_arm=True,
          trust=Trust(lambda name: Figures(("accept_length", "verify_cycle_ms"), ("decode_step_ms",)),
                      against=lambda ctx: arm_side(ctx.plain_arm, ctx)))
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
    cycle, step = cycle_and_step(result, plain)  # over the steady windows where both arms have one
    accept = result.value("accept_length")
    if cycle is None or step is None or accept is None:
        return [Verdict(name, arm, False, accept, None,
                        f"{arm}: break-even not measurable (verify cycle {fmt(cycle, ' ms')}, "
                        f"plain step {fmt(step, ' ms')}, accept length {fmt(accept)})")]
    even = break_even_accept_length(cycle, step)
    passed = accept >= even
    why = f"verify cycle {cycle:.1f} ms ÷ {plain_arm}'s decode step {step:.1f} ms"
    if passed:
        detail = f"{arm}: accept length {accept:.2f} is at or above break-even {even:.2f} ({why})"
    else:
        detail = (f"{arm}: accept length {accept:.2f} is below break-even {even:.2f} ({why}): "
                  f"speculation costs more per cycle than it gains")
    return [Verdict(name, arm, passed, accept, even, detail)]


def lossless_arms(gate: Any) -> list[str]:
    return [str(a) for a in gate.lossless] + [str(g.against) for g in gate.lossless.values()]


def lossless_compared(ctx: GateContext) -> list[str]:
    """The arm the lossless gate is configured for, and the arm it compares outputs with."""
    spec = ctx.gate.lossless.get(ctx.arm)
    return [] if spec is None else [ctx.arm, str(spec.against)]


@register("lossless", "speculative", ("lossless",), lossless_arms, quality=lossless_compared)
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


PER_REQUEST_DEFINITION = TOKENS_DEFINITION  # SGLang's and the simulator's; vLLM's per-request stats: ACCEPTED_DEFINITION


def per_request_accept_length(lines: list[dict]) -> float | None:
    """Σ credited tokens ÷ Σ verify cycles over one repeat's successful measured requests
    that carry verify counts, as harness.measure.metrics.summarize computes the arm's figure:
    by the engine's own definition as the lines count it (harness.measure.samples.accept_tokens:
    Σ completion tokens ÷ Σ cycles, or 1 + Σ accepted drafts ÷ Σ cycles)."""
    spec = [r for r in lines if r.get("ok") and r.get("completion_tokens") is not None and r.get("spec_verify_ct")]
    verify = sum(r["spec_verify_ct"] for r in spec)
    credited = sum(accept_tokens(r["completion_tokens"], r["spec_verify_ct"], r.get("spec_accepted_drafts")) for r in spec)
    return credited / verify if verify else None


def measured_lines_by_repeat(lines: list[dict]) -> dict[int, list[dict]]:
    by_repeat: dict[int, list[dict]] = {}
    for line in lines:
        if not line.get("warmup"):
            by_repeat.setdefault(int(line.get("repeat") or 0), []).append(line)
    return by_repeat


@register("accept_length_sources_agree", "speculative", ("max_accept_length_source_gap",))
def accept_length_sources_agree(ctx: GateContext) -> list[Verdict]:
    """Where the accept length has more than one source over one window (the requests' own
    counts, the server's /metrics counters, the stream's tokens per decode step), they
    differ by at most gate.max_accept_length_source_gap of the largest."""
    name, arm, gap = "accept_length_sources_agree", ctx.arm, ctx.gate.max_accept_length_source_gap
    if gap is None:
        return [skipped(name, arm, "gate.max_accept_length_source_gap is null: the sources are not compared")]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    by_repeat = measured_lines_by_repeat(ctx.requests)
    repeats = max(len(ctx.server_windows), len(by_repeat), 1)
    return [source_verdict(ctx, repeat, by_repeat.get(repeat, []), window, gap, repeats)
            for repeat, window in enumerate(ctx.server_windows or [{}])]


REQUESTS, SERVER, STREAM = "requests", "server", "stream"  # the sources, as a verdict names them


@dataclass(frozen=True)
class Source:
    """One source's accept length over the window: a point, or (the stream's) bounds."""

    definition: str
    low: float
    high: float

    def said(self, name: str) -> str:
        if self.low == self.high:
            return f"{name}: {self.definition} = {self.low:.4f}"
        return f"{name}: {self.definition} = {self.low:.4f} to {self.high:.4f}"

    def apart(self, other: "Source") -> float:
        """How far apart two sources are: 0 where their bounds meet."""
        return max(self.low - other.high, other.low - self.high, 0.0)


def accept_length_sources(lines: list[dict], window: dict, gap: float) -> tuple[dict[str, Source], str | None]:
    """One repeat's accept lengths by source, and why the stream's is left out, if it is. The
    requests' own counts where the engine returns them; the server's /metrics window; the
    stream's tokens per decode step where no prefill token is counted on the other side:
    beside the server's counters alone (vLLM without per-request stats) or the engine's
    1 + accepted ÷ cycles (vLLM's), never beside Σ completion tokens ÷ Σ cycles (SGLang's,
    which counts the prefill's token), and only where its decode chunks are the server's
    draft steps (:func:`steps_unlike_drafts`). The stream counts every step the server
    counts, as bounds: a request's last step may have been cut short (stream_steps.py)."""
    found: dict[str, Source] = {}
    mine = per_request_accept_length(lines)
    if mine is not None:
        found[REQUESTS] = Source(accept_definition(lines), mine, mine)
    if window.get("accept_length") is not None:
        value = float(window["accept_length"])
        found[SERVER] = Source(str(window.get("accept_length_definition")), value, value)
    no_prefill = (mine is None and SERVER in found) or (mine is not None and found[REQUESTS].definition == ACCEPTED_DEFINITION)
    steps = stream_steps(lines) if no_prefill else None
    if steps is None:
        return found, None
    verify = sum(r.get("spec_verify_ct") or 0 for r in lines if r.get("ok"))
    unlike = steps_unlike_drafts(steps, window.get("spec_drafts") or verify or None, gap)
    if unlike is not None:
        return found, unlike
    most = whole_step_tokens(lines, window, steps)
    low, high = steps.every_step(most)
    found[STREAM] = Source(STREAM_EVERY_STEP.format(most=most), low, high)
    return found, None


def whole_step_tokens(lines: list[dict], window: dict, steps: StreamSteps) -> int:
    """The most tokens one step can stream, 1 + k: k from the server's drafted tokens per
    draft, or the requests' per-step histograms (k + 1 bins), never below the longest chunk
    seen (a per-batch-size k varies, and a mean would understate the largest)."""
    most = steps.longest_chunk
    if window.get("spec_drafts") and window.get("spec_draft_tokens"):
        most = max(most, 1 + math.ceil(window["spec_draft_tokens"] / window["spec_drafts"] - 1e-9))
    for line in lines:
        if line.get("ok") and line.get("spec_correct_drafts_histogram"):
            most = max(most, len(line["spec_correct_drafts_histogram"]))
    return most


def source_verdict(ctx: GateContext, repeat: int, lines: list[dict], window: dict, gap: float,
                   repeats: int) -> Verdict:
    """One repeat's accept lengths side by side (up to three sources, see
    :func:`accept_length_sources`), or why they cannot be compared."""
    name, arm = "accept_length_sources_agree", ctx.arm
    where = f" (repeat {repeat + 1})" if repeats > 1 else ""
    window = window or {}
    found, unlike = accept_length_sources(lines, window, gap)
    said = "; ".join(source.said(key) for key, source in found.items())
    if not found:
        return skipped(name, arm, f"{arm}{where}: no accept length from any source (no speculation measured)")
    if len(found) == 1:
        [source] = found
        if source == SERVER and unlike:
            return skipped(name, arm, f"{arm}{where}: not like for like: {unlike} ({said})")
        if source == SERVER:
            return skipped(name, arm, f"{arm}{where}: one source only, {said}; the requests carry no verify counts "
                                      f"and no decode chunks to compare it with")
        why = missing_note(window) or ("the server's /metrics gave no generation-token and verify-call counters "
                                       "over the window")
        return skipped(name, arm, f"{arm}{where}: one source only, {said}; {why}")
    failed = [r for r in lines if not r.get("ok")]
    if failed and SERVER in found:  # the server counted what it finished of them, the client none of them
        cut = sum(1 for r in failed if r.get("cancelled"))
        what = f"failed or were cancelled ({cut} cancelled)" if cut else "failed"
        return skipped(name, arm, f"{arm}{where}: not like for like: {len(failed)} measured request(s) {what}, "
                                  f"which only the server's counters may hold ({said})")
    sources = list(found.values())
    largest = max(source.low for source in sources)
    difference = max(a.apart(b) for a in sources for b in sources) / largest
    compared = f"{len(found)} sources ({', '.join(found)})"
    left_out = f"; the stream's left out: {unlike}" if unlike else ""
    if difference <= gap:
        return Verdict(name, arm, True, round(difference, 6), gap,
                       f"{arm}{where}: {compared} agree within {difference:.2%} (≤ {gap:.0%}): {said}{left_out}")
    return Verdict(name, arm, False, round(difference, 6), gap,
                   f"{arm}{where}: {compared} disagree by {difference:.2%} of the "
                   f"{'larger' if len(found) == 2 else 'largest'} (> {gap:.0%}): "
                   f"{said}{left_out}. Over the same requests they count the same tokens and cycles, so one of "
                   f"them is not measuring what it claims")


def steps_unlike_drafts(steps: StreamSteps, drafts: float | None, gap: float) -> str | None:
    """Why the stream's decode chunks are not the server's draft steps, if they are not: the
    drafter skipped steps (an n-gram without a match) or the server merged steps into a chunk."""
    if not drafts:
        return "the server's counters give no number of drafts to match the stream's decode chunks with"
    chunks = steps.decode_chunks
    if abs(chunks - drafts) <= gap * max(chunks, drafts):
        return None
    if chunks > drafts:
        return (f"{chunks} decode chunks but {drafts:.0f} drafts: the drafter proposed nothing in some steps "
                "(each such step streams one token the server counts no draft for)")
    return (f"{chunks} decode chunks for {drafts:.0f} drafts: the server merged steps into chunks "
            "(the client read late), so chunks no longer count steps")
