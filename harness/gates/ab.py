"""The A/B gate (scope "ab"; `specgate ab`, harness/ab/): each compared metric of each arm,
B against A, judged on the paired change over the rounds that measured both sides, with an
interval over the rounds (harness/gates/change.py `judge_paired`: the round is the unit). The metrics and the allowed
change are the reference-run gate's (gate.compare, else the registry's default-compared
metrics at gate.tolerance); an A/B needs no noise band or floor: what the machine did
between rounds cancels in the pairs, and what it did within them is in the interval."""

from __future__ import annotations

from harness.gates.change import PairedChange, evidence, judge_paired
from harness.gates.client_bound import bound_figures, cause, one_sided
from harness.gates.reference import Comparison, comparisons
from harness.gates.trust import gpu_trouble, speed_figure
from harness.gates.registry import ABContext, register
from harness.gates.verdict import Verdict, inconclusive_passes, outward


@register("no_regression_between_sides", None, ("tolerance", "compare", "confidence", "inconclusive", "undecided",
                                                "undecided_above"), scope="ab")
def no_regression_between_sides(ctx: ABContext) -> list[Verdict]:
    """Per arm and compared metric: passed, failed or inconclusive, B against A."""
    return [side_verdict(arm, c, rounds, ctx) for arm, rounds in ctx.rounds.items() for c in comparisons(ctx.gate)]


def still_open(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts more rounds could still decide (ab.rounds=auto goes on while there are
    any): inconclusive ones, except those inconclusive for a reason more rounds cannot mend
    (a round whose client or GPU was in trouble stays in the pairs, and says so)."""
    return [v for v in verdicts if v.status == "inconclusive" and not v.cause]


def side_verdict(arm: str, c: Comparison, rounds: list, ctx: ABContext) -> Verdict:
    pairs = [(side_evidence(c.metric, r.lines.get("A")), side_evidence(c.metric, r.lines.get("B"))) for r in rounds]
    change = judge_paired(c.metric, pairs, c.allowed, not c.higher_is_better, ctx.gate.confidence, ctx.sequential)
    return untrusted_rounds(paired_verdict(arm, c, change, len(rounds), ctx), c.metric, rounds, ctx.gate)


def untrusted_rounds(verdict: Verdict, metric: str, rounds: list, gate) -> Verdict:
    """A paired change is only the build's when both sides measured the server: where, in a
    round that counted, either side's figure was the client's own lag or either side's GPU
    was slowed under load (a slow A flatters B, a slow B blames it), the verdict is
    inconclusive, pass or fail, naming the round and side. Except where the trouble can only
    have made its side look worse and the verdict stands anyway: a failure with trouble on A
    alone (B is worse than an A measured worse than it is), a pass with trouble on B alone. A
    slowed GPU only ever slows its side; client lag only worsens a one-sided figure
    (throughput, TTFT, E2E), not an ITL, which a stalled loop reads in bursts."""
    troubles: list[tuple[str, str, bool]] = []  # (side, what, can only have made that side look worse)
    lag_only_worsens = metric.split(".")[0] in one_sided()
    for pair in rounds:
        if not all(side in pair.lines for side in ("A", "B")):
            continue  # the round did not count
        for side in ("A", "B"):
            result = pair.results.get(side)
            if result is not None and metric in bound_figures(result):
                troubles.append((side, f"round {pair.round} side {side}: {cause(result)}", lag_only_worsens))
            slowed = gpu_trouble(pair.gpus.get(side) or {}, gate) if speed_figure(metric) else ""
            if slowed:
                troubles.append((side, f"round {pair.round} side {side}: {slowed}", True))
    if not troubles or verdict.status not in ("passed", "failed"):
        return verdict
    said = "; ".join(what for _, what, _ in troubles)
    harmless_side = "A" if verdict.status == "failed" else "B"
    if all(side == harmless_side and worsens for side, _, worsens in troubles):
        verdict.detail += (f" (stands despite {said}: that can only have made side {harmless_side} look worse, "
                           f"{'so B is worse still' if harmless_side == 'A' else 'and B passed anyway'})")
        return verdict
    verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
    verdict.cause = troubles[0][1]
    verdict.detail = f"inconclusive, not the build's alone ({said}): {verdict.detail}"
    return verdict


def side_evidence(metric: str, lines: list | None):
    """A side's samples of `metric` in one round; None when that side was not measured in it."""
    if not lines:
        return None
    found = evidence(metric, lines)
    return found if found is not None and found.groups_count else None


def paired_verdict(arm: str, c: Comparison, change: PairedChange, rounds: int, ctx: ABContext) -> Verdict:
    name, gate = f"ab.{c.metric}", ctx.gate
    verdict = Verdict(name, arm, None, change.new, change.allowed, "", baseline=change.old, scope="ab")
    counted = sum(r is not None for r in change.rounds)
    per_round = ", ".join("–" if r is None else f"{r:+.1%}" for r in change.rounds)
    over = f"over {counted} of {rounds} rounds (per round: {per_round} worse)"
    if change.worse is None:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        verdict.detail = f"{arm}: {c.metric} B against A inconclusive: {change.why}"
        return verdict
    words = f"{change.worse:+.1%} worse" if change.worse > 0 else f"{-change.worse:.1%} better"
    interval = ""
    if change.low is not None:
        verdict.interval = outward(change.low, change.high)
        level = f"{gate.confidence:.0%}" if ctx.sequential is None else f"{ctx.sequential.confidence(gate.confidence):.2%}"
        interval = f", {level} interval {change.low:+.1%} to {change.high:+.1%} worse"
    sequential = f"; {ctx.sequential.describe(gate.confidence)}" if ctx.sequential is not None else ""
    facts = (f"{c.metric} A {change.old:.2f} -> B {change.new:.2f} ({words}{interval}) {over}; "
             f"allowed {change.allowed:.1%}{sequential}")
    if change.outcome == "failed":
        verdict.passed, verdict.detail = False, f"{arm}: B regressed: {facts}"
    elif change.outcome == "passed":
        verdict.passed, verdict.detail = True, f"{arm}: {facts}"
    else:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        needed = f"; {change.needed} would decide it" if change.needed else ""
        verdict.detail = f"{arm}: {c.metric} inconclusive ({change.why}{needed}; gate.inconclusive={gate.inconclusive}): {facts}"
    return verdict
