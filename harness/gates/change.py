"""How much a metric changed between two runs, with an interval, from the samples behind it.

A reference-run gate that compares one number with one number cries wolf: p99s of a few
dozen requests move by tens of percent between identical runs. Here each compared metric
is rebuilt from its samples (the lines of requests.jsonl) and the relative change is
bootstrapped: both runs are resampled by request (a request's inter-token gaps stay
together), the metric is recomputed, and the 5th-95th percentiles of the change are its
interval. Judged against the allowed change (a regression in the metric's worse
direction, from the metric registry):

- **failed**: the regression exceeds the allowed change with 95 % confidence (the
  interval's better end is still beyond it);
- **passed**: the interval's worse end is within it;
- **inconclusive**: the interval straddles it, too few samples, or a tail percentile with
  too few samples beyond it; `needed` says roughly how much data would decide.

What a metric's samples are (per-request values, a ratio of sums over requests, rates in
time windows) is its registry entry's (harness/measure/registry.py, harness/measure/samples.py):
a newly registered metric gets its interval here without a line of this module changing.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

# the bootstrap lives with the figures it draws intervals for; re-exported for its readers here
from harness.measure.estimate import (BOOTSTRAP_RESAMPLES, CONFIDENCE, WeightedPercentile, around,  # noqa: F401
                                      gathered, resampled)
from harness.measure.registry import resolve
from harness.measure.samples import Evidence, measured
from harness.record.requests import RequestColumns

MIN_SAMPLES = 5  # fewer in either run: inconclusive
MIN_BEYOND_TAIL = 5  # a percentile p is judged only with n * (1 - p) samples at least this many


@dataclass
class Change:
    """The change of one metric between a reference run and this one."""

    metric: str
    old: Optional[float]
    new: Optional[float]
    worse: Optional[float]  # the relative regression (> 0 worse, < 0 better); None when not computable
    low: Optional[float]  # the interval of `worse` (CONFIDENCE one-sided at each end)
    high: Optional[float]
    allowed: float
    outcome: str  # "passed" | "failed" | "inconclusive"
    why: str = ""  # for inconclusive: what is missing, in words
    needed: Optional[str] = None  # roughly what would decide it, in words


# --- samples from a run's requests (lines in memory, or a record's columns) --------------------

def evidence(metric: str, requests: RequestColumns | list[dict]) -> Optional[Evidence]:
    """The samples behind `metric` in one run's requests (this run's lines in memory, or a
    reference record's columns: harness/record/requests.py), resampled as its registry
    entry says; None for a metric the registry gives no samples (it is then judged on its
    point values, and the verdict says so)."""
    try:
        entry = resolve(metric)
    except KeyError:
        return None
    if entry.samples is None:
        return None
    if isinstance(requests, RequestColumns):
        return entry.samples.evidence(requests.measured())
    return entry.samples.evidence(measured(requests))


# --- the bootstrap and the decision ------------------------------------------------------------

def tail_shortfall(metric: str, *runs: Evidence) -> Optional[str]:
    """Why a tail percentile cannot be judged from this many samples, or None."""
    q = runs[0].percentile
    if q is None or q <= 50:
        return None
    stat = f"p{q:g}"
    beyond = 1.0 - q / 100.0
    fewest = min(ev.samples for ev in runs)
    if fewest * beyond >= MIN_BEYOND_TAIL:
        return None
    need = math.ceil(MIN_BEYOND_TAIL / beyond)
    return (f"{stat} of {fewest} samples rests on {fewest * beyond:.1f} beyond it; "
            f"judging it needs at least {need} in each run")


def judge(metric: str, old: Evidence, new: Evidence, allowed: float, lower_is_better: bool,
          confidence: float = CONFIDENCE, seed: int = 0) -> Change:
    """The relative change of `metric` from `old` to `new`, its interval and the outcome."""
    old_value, new_value = old.value(), new.value()
    change = Change(metric, old_value, new_value, None, None, None, allowed, "inconclusive")
    if old_value is None or new_value is None or old_value == 0:
        change.why = "not measured in both runs"
        return change
    sign = 1.0 if lower_is_better else -1.0
    change.worse = sign * (new_value / old_value - 1.0)
    few = min(old.groups_count, new.groups_count)
    if few < MIN_SAMPLES:
        change.why = f"only {few} {old.unit} in a run, fewer than the {MIN_SAMPLES} needed"
        change.needed = f"at least {MIN_SAMPLES} {old.unit} per run"
        return change
    if (short := tail_shortfall(metric, old, new)) is not None:
        change.why = short
        change.needed = short.rsplit("; ", 1)[1]
        return change
    rng = np.random.default_rng(seed)
    old_b, new_b = resampled(old, rng, BOOTSTRAP_RESAMPLES), resampled(new, rng, BOOTSTRAP_RESAMPLES)
    # the change's point is the two evidences' own statistics, its interval their resamples',
    # stretched to reach the point (harness/measure/estimate.py): never a change outside its interval
    ends = around(sign * (new_b / old_b - 1.0), change.worse, confidence)
    if ends is None:
        change.why = "the metric could not be recomputed from most resamples"
        return change
    change.low, change.high = ends
    return decide(change, "the interval straddles the allowed change", lambda: more_data(change, few, old.unit))


def decide(change: Change, straddles: str, needed) -> Change:
    """The outcome from the interval: failed when even its better end is beyond the allowed
    change, passed when its worse end is within it, else inconclusive (`needed()` says what
    would decide it)."""
    if change.low > change.allowed:
        change.outcome = "failed"
    elif change.high <= change.allowed:
        change.outcome = "passed"
    else:
        change.why, change.needed = straddles, needed()
    return change


def more_data(change: Change, n: int, unit: str) -> str:
    """The interval narrows as 1/sqrt(n): how many samples would put it on one side."""
    half = (change.high - change.low) / 2.0
    distance = abs(change.worse - change.allowed)
    if distance < half / 10.0:
        return f"more than {100 * n} {unit} per run (the change sits on the allowed limit)"
    return f"about {math.ceil(n * (half / distance) ** 2)} {unit} per run"


# --- two builds measured in alternating rounds (specgate ab) -----------------------------------

MIN_ROUNDS = 2  # fewer rounds that counted: a paired change has no spread to judge it by
# a sequential A/B's first look: at 2 rounds a paired interval has one degree of freedom, and
# its quantile at a sequential confidence (t(1) at 99.9 % is 318) could never decide anything
FIRST_LOOK = 3


@dataclass(frozen=True)
class Sequential:
    """`ab.rounds=auto`: the A/B judges after every round from the FIRST_LOOK-th to
    `max_rounds` and stops once every verdict is decided. Stopping when the data look decided
    is optional stopping, which inflates a fixed test's error, and many verdicts at once
    multiply it: so the error (1 - gate.confidence) is split evenly over every look and every
    verdict judged together (Bonferroni), and each look is Student's t at its share. Whatever
    rule stops the A/B, the chance that any verdict ever fails on a B that is within its
    allowed change (or passes one that is not) is at most the error: the union over all
    planned looks and verdicts bounds every path through them. A group-sequential t test of
    this kind decides a 5 % slowdown (allowed 2 %, 1.3 % round-to-round noise) in ~6 rounds,
    and identical builds as the same within the allowed change in ~8 (docs/ab.md)."""

    max_rounds: int
    verdicts: int  # the verdicts judged together: arms x compared metrics

    @property
    def looks(self) -> int:
        return max(self.max_rounds - FIRST_LOOK + 1, 1)

    def confidence(self, overall: float) -> float:
        """Each look's confidence, so that all of them together hold at `overall`."""
        return 1.0 - (1.0 - overall) / (self.looks * max(self.verdicts, 1))

    def describe(self, overall: float) -> str:
        return (f"sequential: {1 - overall:.0%} error split over {self.looks} looks (rounds {FIRST_LOOK}-"
                f"{self.max_rounds}) and {self.verdicts} verdicts, each look at {self.confidence(overall):.2%}")


@dataclass
class PairedChange(Change):
    """A Change of B against A measured in rounds: each round's own change, and how many counted."""

    rounds: list[Optional[float]] = None  # per round: B's relative regression against A (None: not measured)


def judge_paired(metric: str, rounds: list[tuple[Optional[Evidence], Optional[Evidence]]], allowed: float,
                 lower_is_better: bool, confidence: float = CONFIDENCE,
                 sequential: Optional[Sequential] = None) -> PairedChange:
    """B against A over rounds measured in alternation on one machine (harness/ab/). Each
    round gives one paired change, log(B / A) of the metric in that round, so what the machine
    did between rounds (its temperature, other jobs) cancels; the change is their mean (a
    geometric mean of the ratios). The rounds are the unit of resampling: each round's change
    already carries that round's sampling noise and its servers' luck, so the spread between
    rounds is the whole noise. With few rounds a bootstrap over them is too narrow (3 rounds
    have 10 distinct resamples), so the interval is Student's t over the rounds' changes,
    which such a bootstrap approaches as rounds grow, and is exact for normal changes. With
    `sequential` (ab.rounds=auto) the interval is at one look's share of the error."""
    sign = 1.0 if lower_is_better else -1.0
    more = "more rounds (ab.max_rounds)" if sequential else "more rounds (ab.rounds)"
    values = [(a.value() if a else None, b.value() if b else None) for a, b in rounds]
    per_round = [sign * (vb / va - 1.0) if va and vb else None for va, vb in values]
    counted = [pair for pair, change in zip(rounds, per_round) if change is not None]
    old = float(np.exp(np.mean([math.log(a.value()) for a, _ in counted]))) if counted else None
    new = float(np.exp(np.mean([math.log(b.value()) for _, b in counted]))) if counted else None
    change = PairedChange(metric, old, new, None, None, None, allowed, "inconclusive", rounds=per_round)
    if len(counted) < MIN_ROUNDS:
        change.why = f"{len(counted)} round(s) measured it in both A and B, fewer than the {MIN_ROUNDS} a paired change needs"
        change.needed = f"at least {MIN_ROUNDS} rounds"
        return change
    logs = np.array([math.log(b.value() / a.value()) for a, b in counted])
    # the change shown is B's geometric mean over A's (the verdict's value over its baseline):
    # the mean log's, to rounding; the interval is stretched to hold it (never outside its interval)
    change.worse = sign * (new / old - 1.0)
    few = min(min(a.groups_count, b.groups_count) for a, b in counted)
    if few < MIN_SAMPLES:
        change.why = f"only {few} {counted[0][0].unit} in a round, fewer than the {MIN_SAMPLES} needed"
        change.needed = f"at least {MIN_SAMPLES} {counted[0][0].unit} per round"
        return change
    if (short := tail_shortfall(metric, *(ev for pair in counted for ev in pair))) is not None:
        change.why, change.needed = short.replace("in each run", "in each round"), short.rsplit("; ", 1)[1]
        return change
    if sequential is not None and len(counted) < FIRST_LOOK:
        change.why = f"a sequential A/B's first look is at round {FIRST_LOOK}; {len(counted)} counted"
        change.needed = more
        return change
    level = sequential.confidence(confidence) if sequential is not None else confidence
    half = t_quantile(len(logs) - 1, level) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    ends = sorted(sign * math.expm1(float(logs.mean()) + d) for d in (-half, half))
    change.low, change.high = min(ends[0], change.worse), max(ends[1], change.worse)
    return decide(change, "the interval straddles the allowed change", lambda: more)


# --- Student's t, without scipy ---------------------------------------------------------------

@functools.lru_cache(maxsize=1024)  # a sequential A/B asks the same few (df, confidence) at every look
def t_quantile(df: int, confidence: float) -> float:
    """The one-sided Student t quantile: P(T <= q) = confidence for `df` degrees of freedom
    (bisection on the CDF, to 1e-6)."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"a one-sided confidence is in [0.5, 1), not {confidence}")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < confidence:
        high *= 2.0
    while high - low > 1e-6:
        mid = (low + high) / 2.0
        low, high = (mid, high) if t_cdf(mid, df) < confidence else (low, mid)
    return (low + high) / 2.0


def t_cdf(x: float, df: int) -> float:
    """Student's t CDF at x >= 0: 1/2 plus the density integrated from 0 by Simpson's rule
    (the density is smooth, so 2,000 panels are exact to far below the bisection's 1e-6)."""
    grid = np.linspace(0.0, x, 2001)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid * grid / df))
    step = grid[1] - grid[0] if x > 0 else 0.0
    simpson = step / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())
    return 0.5 + float(simpson)
