"""Comparison with a reference run (gate.baseline; suites/test_baseline.py): every compared metric's change with an interval from its samples (harness/gates/change.py), the noise band of a run history, a noise profile's predictive interval (harness/gates/profile.py), the run-to-run floor when no between-run noise is known, and the GPU state behind a verdict."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.gates.change import evidence, judge
from harness.gates.reproduce import disagreement
from harness.gates.trust import Figures, Side, Trust
from harness.measure.registry import Metric, all_metrics, compared_by_default, metric_value, resolve
from harness.measure.metrics import spread
from harness.gates.verdict import inconclusive_passes, outward, Verdict, skipped
from harness.gates.registry import GateContext, register, unmeasured


# --- comparison with a reference run (gate.baseline) -------------------------------------------

CHANGE = re.compile(r"^\s*[+-]?\s*(\d+(?:\.\d+)?)\s*%\s*$")
NOISE_SIGMAS = 3.0  # the noise band is this many robust standard deviations (1.4826 x MAD)
INCONCLUSIVE = ("fail", "warn", "pass")
UNDECIDED = ("exit", "warn", "fail")  # gate.undecided: exit status 6, a passing warning, a failure


@dataclass(frozen=True)
class Comparison:
    """A typed reference-run gate parsed from config: `<metric path>: "3%"` may get 3 % worse.
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
    """The registry's better direction of `path` (another statistic of a registered
    distribution, ttft_ms.p90, takes its distribution's). Unknown metrics are a ValueError."""
    return entry_of(path).better


def entry_of(path: str) -> Metric:
    """The registry entry a compared metric is judged by: its unit, direction and samples."""
    try:
        return resolve(path)
    except KeyError:
        valid = ", ".join(m.path for m in all_metrics() if not m.between_arms and not m.count)
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
    floor = gate.latency_noise_floor_ms / abs(old) if entry_of(metric).unit == "ms" and old else 0.0
    return max(allowed, band, floor)


def compared_figure(name: str) -> Figures:
    """`baseline.<metric>` judges the metric in this run and in the reference run."""
    metric = name.partition(".")[2]
    return Figures((metric,), (metric,)) if metric else Figures()


def reference_side(ctx: GateContext) -> Side | None:
    """The reference run's arm (its figure, its client block, its GPUs); a noise profile has
    none of these to distrust."""
    if ctx.profile is not None:
        return None
    return Side("the reference run", ctx.reference, (ctx.reference or {}).get("gpu"), reference=True)


# The trust guards (harness/gates/trust.py) judge each compared figure on both sides: the
# client's lag, a load too short for a rate, a GPU slowed under load. Not the repeats' noise:
# the noise band is in the allowed change already.
@register("no_regression_against_baseline", "baseline",
          ("baseline", "compare", "tolerance", "latency_noise_floor_ms", "confidence", "inconclusive",
           "baseline_mismatch", "run_to_run_floor", "undecided", "undecided_above"),
          trust=Trust(compared_figure, against=reference_side, noise=False, verdicts="baseline", this="this run"))
def no_regression_against_reference(ctx: GateContext) -> list[Verdict]:
    """Each compared metric no worse than its allowed change vs the reference run
    (gate.baseline), judged from the samples of both runs: passed, failed or inconclusive."""
    arm, gate, label = ctx.arm, ctx.gate, ctx.reference_label
    if not gate.baseline:
        return [skipped("baseline", arm, "no reference run configured (gate.baseline=<run dir | results.json>)")]
    if ctx.profile is not None:
        return profile_verdicts(ctx)
    if ctx.reference is None or not ctx.reference.get("requests"):
        return [skipped("baseline", arm, f"the reference run {label} has no measured arm '{arm}'")]
    if (missing := unmeasured("baseline", ctx)) is not None:
        return missing
    return [compare_metric(ctx, c) for c in comparisons(gate)]


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
    if (without := why_no_interval(c.metric, old_ev, new_ev, ctx)) is not None:
        # one value against one value: a small latency move is scheduling jitter (the floor)
        limit = allowed_change(c.metric, old, c.allowed, max(band, lookback or 0.0), gate)
        floor = f", {gate.latency_noise_floor_ms:g} ms floor" if entry_of(c.metric).unit == "ms" else ""
        verdict = point_verdict(arm, c, old, new, limit, f"allowed {limit:.1%} = max({bands}{floor})", label, without)
        return verdict if lookback is not None else point_within_floor(verdict, c, old, new, gate)
    if (doctored := disagreement(c.metric, reference, ctx.reference_requests)) is not None:
        return not_reproduced(arm, c, old, new, doctored, label, gate)
    # with samples, jitter is inside the interval: no floor
    limit = max(c.allowed, band, lookback or 0.0)
    why_limit = f"allowed {limit:.1%} = max({bands})"
    change = judge(c.metric, old_ev, new_ev, limit, not c.higher_is_better, gate.confidence)
    if lookback is None:  # no between-run noise known: the run-to-run floor stands in for it
        change = within_floor(change, gate)
    return interval_verdict(arm, c, change, old, new, why_limit, label, gate)


# --- one run against one run: the run-to-run floor (gate.run_to_run_floor) --------------------

DECIDERS = "a noise profile (specgate calibrate), a history folder, or an A/B run (specgate ab)"


def floor_words(gate) -> str:
    return f"within the {gate.run_to_run_floor:.0%} two runs on one machine can differ by (gate.run_to_run_floor)"


def within_floor(change, gate):
    """One run against one reference run, with no between-run noise known (no profile, no
    history band): a regression whose interval's better end is within the run-to-run floor
    may be what the machine did between the runs, which no interval over one run's requests
    can see, so it is inconclusive, not failed, and says what would decide it."""
    if change.outcome != "failed" or change.low > gate.run_to_run_floor:
        return change
    change.outcome, change.needed = "inconclusive", DECIDERS
    change.why = f"worse than the allowed {change.allowed:.1%} but {floor_words(gate)}"
    return change


def point_within_floor(verdict: Verdict, c: Comparison, old: float, new: float, gate) -> Verdict:
    """within_floor for a verdict on two values alone."""
    worse = (old - new) / old if c.higher_is_better else (new - old) / old
    if verdict.passed is not False or worse > gate.run_to_run_floor:
        return verdict
    verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
    verdict.detail = (f"{verdict.arm}: {c.metric} inconclusive ({floor_words(gate)}; {DECIDERS} would decide it; "
                      f"gate.inconclusive={gate.inconclusive}): {verdict.detail.split(': ', 1)[1]}")
    return verdict


# --- against a noise profile (gate.baseline=<calibration folder>) ------------------------------

def profile_verdicts(ctx: GateContext) -> list[Verdict]:
    """Each compared metric of this run against the noise profile's median, with its
    predictive interval from the between-run spread (harness/gates/profile.py)."""
    arm, gate, profile = ctx.arm, ctx.gate, ctx.profile
    if profile.arm(arm) is None:
        why = profile.uncovered.get(arm, "the calibrated experiment has no such arm")
        return [skipped("baseline", arm, f"the noise profile {profile.label} has no arm '{arm}' ({why})")]
    if (missing := unmeasured("baseline", ctx)) is not None:
        return missing
    return [profile_metric(ctx, c) for c in comparisons(gate)]


def profile_metric(ctx: GateContext, c: Comparison) -> Verdict:
    """One compared metric against the profile. The allowed change is the tolerance (or the
    one gate.compare lists): the machine's noise is already in the interval."""
    arm, gate, profile = ctx.arm, ctx.gate, ctx.profile
    name = f"baseline.{c.metric}"
    if c.metric not in profile.arms[arm].metrics:
        return skipped(name, arm, f"the noise profile {profile.label} has no {c.metric} for arm '{arm}' "
                                  f"(calibrate with it in gate.compare)")
    new = metric_value(ctx.result, c.metric)
    old = profile.arms[arm].metrics[c.metric].median
    if new is None:
        return Verdict(name, arm, False, None, None, f"{arm}: {c.metric} was not measured (noise profile median "
                                                      f"{old:.2f})", old)
    together = judged_together(gate, profile)
    confidence = 1.0 - (1.0 - gate.confidence) / together
    change = profile.judge(arm, c.metric, new, c.allowed, c.higher_is_better, confidence)
    against = profile.describe(arm, c.metric)
    shared = (f"; {1 - gate.confidence:.0%} error shared by the {together} verdicts judged together, each at "
              f"{confidence:.2%}" if together > 1 else "")
    return interval_verdict(arm, c, change, old, new, f"allowed {c.allowed:.1%} (tolerance){shared}", "", gate,
                            against=against, kind="predictive interval",
                            confidence=confidence if together > 1 else None)


def judged_together(gate, profile) -> int:
    """How many verdicts a run judges against one profile at once: each compared metric of
    each profiled arm. At 95 % each, one of them falls outside its predictive interval far
    more often than 5 % of identical runs (the verdicts benchmark: 2 of 40 with three metrics),
    so the error is shared among them (Bonferroni), as an A/B shares it among its verdicts."""
    return max(len(comparisons(gate)) * max(len(profile.arms), 1), 1)


def why_no_interval(path: str, old_ev, new_ev, ctx: GateContext) -> str | None:
    """Why a compared metric is judged on its two values alone, in words (None: it has an
    interval): the registry gives it no per-request samples, the reference's per-request file
    cannot be read (torn), a run kept no request lines (an older record,
    record.keep_requests=false), or a run's lines hold none of its samples."""
    if entry_of(path).samples is None:
        return f"{path} has no per-request samples to draw an interval from"
    if unreadable := getattr(ctx.reference_requests, "unreadable", None):  # not a record that kept none: say so
        return f"the reference run's per-request data could not be read, so no interval: {unreadable}"
    if not ctx.reference_requests or not ctx.requests:
        return "no per-request data to draw an interval from"
    empty = [run for run, ev in (("the reference run", old_ev), ("this run", new_ev)) if ev is None or not ev.groups_count]
    return f"no request of {' or '.join(empty)} carries {path}'s samples" if empty else None


def not_reproduced(arm: str, c: Comparison, old: float, new: float, why: str, label: str, gate) -> Verdict:
    """A reference whose rows do not reproduce its figure (harness/gates/reproduce.py): its
    figure and its samples are two different measurements, and a change judged from one and
    shown beside the other contradicts itself, so neither is judged: inconclusive, saying why
    and what would decide it (gate.inconclusive still decides whether the run goes on)."""
    verdict = Verdict(f"baseline.{c.metric}", arm, inconclusive_passes(gate), new, c.allowed, "", baseline=old)
    verdict.inconclusive = True
    verdict.detail = (f"{arm}: {c.metric} inconclusive vs the reference run {label} ({why}; a reference record "
                      f"whose rows are the run's own would decide it; gate.inconclusive={gate.inconclusive}): "
                      f"{c.metric} {old:.2f} (reference results.json) -> {new:.2f}")
    return verdict


def point_verdict(arm: str, c: Comparison, old: float, new: float, limit: float, why_limit: str, label: str,
                  without: str = "no per-request data to draw an interval from") -> Verdict:
    """Without an interval (why_no_interval): one value against one value, as the verdict says."""
    name = f"baseline.{c.metric}"
    change = (new - old) / old
    worse = -change if c.higher_is_better else change  # > 0: a regression
    passed = worse <= limit
    words = f"regressed by {worse:.1%}" if worse > 0 else f"improved by {-worse:.1%}"
    detail = (f"{arm}: {c.metric} {words} vs the reference run {label} ({old:.2f} -> {new:.2f}); {why_limit}; "
              f"judged on the two values only ({without})")
    return Verdict(name, arm, passed, new, limit, detail, baseline=old)


def interval_verdict(arm: str, c: Comparison, change, old: float, new: float, why_limit: str, label: str,
                     gate, against: str | None = None, kind: str = "interval", confidence: float | None = None) -> Verdict:
    """`against`: what the verdict names ("the reference run <label>" unless given)."""
    name = f"baseline.{c.metric}"
    against = against or f"the reference run {label}"
    if change.old is not None and change.new is not None:
        # one estimator: the figures shown are the ones the change and its interval are drawn from
        # (the samples' statistics; results.json's figure of several repeats is their median)
        old, new = change.old, change.new
    verdict = Verdict(name, arm, None, new, change.allowed, "", baseline=old)
    if change.worse is None:
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        verdict.detail = f"{arm}: {c.metric} inconclusive vs {against}: {change.why}"
        return verdict
    words = f"{change.worse:+.1%} worse" if change.worse > 0 else f"{-change.worse:.1%} better"
    level = f"{gate.confidence:.0%}" if confidence is None else f"{confidence:.2%}"
    interval = "" if change.low is None else f", {level} {kind} {change.low:+.1%} to {change.high:+.1%} worse"
    if change.low is not None:
        verdict.interval = outward(change.low, change.high)
    facts = f"{c.metric} {old:.2f} -> {new:.2f} ({words}{interval}) vs {against}; {why_limit}"
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
