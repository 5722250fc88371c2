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

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.measure.registry import resolve
from harness.measure.samples import PERCENTILES, Evidence, measured
from harness.record.requests import RequestColumns

BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95  # one-sided, at each end of the interval
MIN_SAMPLES = 5  # fewer in either run: inconclusive
MIN_BEYOND_TAIL = 5  # a percentile p is judged only with n * (1 - p) samples at least this many
DIRECT_LIMIT = 20_000  # up to this many values a percentile's resample gathers them all, else
# the values within this many standard deviations of a resample's rank (at least
# MIN_HALF_WINDOW values) either side of the pooled percentile are weighed
WINDOW_SIGMAS, MIN_HALF_WINDOW = 10.0, 2_000


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

def resampled(ev: Evidence, rng: np.random.Generator, times: int) -> np.ndarray:
    """The statistic over `times` resamples of the groups, with replacement (NaN where a
    resample gives none). Each resample draws its groups with one `rng.integers(0, n, n)`
    and computes the statistic without laying 100,000 small arrays end to end: a mean or a
    ratio from per-group sums, a percentile by gathering the drawn rows, or, over many
    values, from the values near the pooled percentile weighed by how often their group
    was drawn (WeightedPercentile: the same number to the last bit)."""
    n, values = ev.groups_count, np.empty(times)
    if ev.stat in PERCENTILES and not ev.single and ev.count > DIRECT_LIMIT:
        return WeightedPercentile(ev).resampled(rng, times)
    lengths = np.diff(ev.offsets)
    sums = np.add.reduceat(ev.rows, ev.offsets[:-1], axis=0) if n and ev.stat in ("mean", "ratio") else None
    for i in range(times):
        picks = rng.integers(0, n, size=n)
        if sums is not None:
            values[i] = summed(sums[picks].sum(axis=0), int(lengths[picks].sum()), ev.stat)
        else:
            value = ev.statistic(ev.rows[picks] if ev.single else ev.rows[gathered(ev.offsets, picks)])
            values[i] = math.nan if value is None else value
    return values


def summed(sums: np.ndarray, count: int, stat: str) -> float:
    """A mean (sum ÷ count) or a ratio of sums, from the drawn groups' sums."""
    if stat == "ratio":
        return float(sums[0] / sums[1]) if sums[1] else math.nan
    return float(sums / count) if count else math.nan


def gathered(offsets: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """The row indices of groups `picks`, end to end."""
    picked = np.diff(offsets)[picks]
    ends = np.cumsum(picked)
    return np.repeat(offsets[:-1][picks] - (ends - picked), picked) + np.arange(ends[-1] if ends.size else 0)


class WeightedPercentile:
    """A percentile's resamples over many values. A resample's sorted values are the pooled
    ones, each as often as its group was drawn, so its percentile is found among the pooled
    values by ranks weighted with the draw counts; only the values near the pooled
    percentile are kept sorted. A resample whose percentile falls outside them is gathered
    whole (exact either way)."""

    def __init__(self, ev: Evidence):
        self.ev, self.q = ev, PERCENTILES[ev.stat]
        ids = np.repeat(np.arange(ev.groups_count, dtype=np.int32), np.diff(ev.offsets))
        total = ev.count
        self.lengths = np.diff(ev.offsets)
        center = int(self.q / 100.0 * (total - 1))
        # partitions, not a sort: only the window's values need their order (equal values
        # give the same percentile in any order)
        order = np.argpartition(ev.rows, center)
        half = self.half_window(np.bincount(ids[order[:center]], minlength=ev.groups_count))
        self.low, high = max(0, center - half), min(total, center + half + 2)
        del order  # one partition of millions of indices at a time
        order = np.argpartition(ev.rows, [self.low, high - 1])
        self.below = np.bincount(ids[order[:self.low]], minlength=ev.groups_count)  # per group, under the window
        window = order[self.low:high]
        window = window[np.argsort(ev.rows[window])]
        self.values, self.ids = ev.rows[window], ids[window]

    def half_window(self, under_center: np.ndarray) -> int:
        """How far a resample's percentile rank strays from the pooled one: each group adds
        its values under the pooled percentile less its share q of its values; a resample
        sums n draws of that, so its spread is sqrt(n) times theirs."""
        stray = under_center - self.q / 100.0 * self.lengths
        return max(MIN_HALF_WINDOW, int(WINDOW_SIGMAS * math.sqrt(self.ev.groups_count * float(stray.var()))))

    def resampled(self, rng: np.random.Generator, times: int) -> np.ndarray:
        n, out = self.ev.groups_count, np.empty(times)
        for i in range(times):
            picks = rng.integers(0, n, size=n)
            found = self.one(np.bincount(picks, minlength=n))
            if found is None:
                found = self.ev.statistic(self.ev.rows[gathered(self.ev.offsets, picks)])
            out[i] = math.nan if found is None else found
        return out

    def one(self, drawn: np.ndarray) -> Optional[float]:
        """The percentile of one resample (its groups drawn `drawn` times each), or None
        when it lies outside the kept values."""
        total, below = int(self.lengths @ drawn), int(self.below @ drawn)
        if total == 0:
            return math.nan
        index = (total - 1) * (self.q / 100.0)  # numpy's linear method
        first = math.floor(index)
        ranks = np.cumsum(drawn[self.ids])
        wanted = np.asarray([first, min(first + 1, total - 1)]) - below
        if wanted[0] < 0 or wanted[1] >= (ranks[-1] if ranks.size else 0):
            return None
        a, b = self.values[np.searchsorted(ranks, wanted, side="right")]
        return lerp(float(a), float(b), index - first)


def lerp(a: float, b: float, t: float) -> float:
    """numpy.percentile's interpolation, to the last bit."""
    return float(b - (b - a) * (1 - t)) if t >= 0.5 else float(a + (b - a) * t)


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
    worse_b = sign * (new_b / old_b - 1.0)
    worse_b = worse_b[np.isfinite(worse_b)]
    if worse_b.size < BOOTSTRAP_RESAMPLES // 2:
        change.why = "the metric could not be recomputed from most resamples"
        return change
    tail = (1.0 - confidence) * 100.0
    change.low, change.high = (float(x) for x in np.percentile(worse_b, [tail, 100.0 - tail]))
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


@dataclass
class PairedChange(Change):
    """A Change of B against A measured in rounds: each round's own change, and how many counted."""

    rounds: list[Optional[float]] = None  # per round: B's relative regression against A (None: not measured)


def judge_paired(metric: str, rounds: list[tuple[Optional[Evidence], Optional[Evidence]]], allowed: float,
                 lower_is_better: bool, confidence: float = CONFIDENCE) -> PairedChange:
    """B against A over rounds measured in alternation on one machine (harness/ab/). Each
    round gives one paired change, log(B / A) of the metric in that round, so what the machine
    did between rounds (its temperature, other jobs) cancels; the change is their mean (a
    geometric mean of the ratios). The rounds are the unit of resampling: each round's change
    already carries that round's sampling noise and its servers' luck, so the spread between
    rounds is the whole noise. With few rounds a bootstrap over them is too narrow (3 rounds
    have 10 distinct resamples), so the interval is Student's t over the rounds' changes,
    which such a bootstrap approaches as rounds grow, and is exact for normal changes."""
    sign = 1.0 if lower_is_better else -1.0
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
    change.worse = sign * math.expm1(float(logs.mean()))
    few = min(min(a.groups_count, b.groups_count) for a, b in counted)
    if few < MIN_SAMPLES:
        change.why = f"only {few} {counted[0][0].unit} in a round, fewer than the {MIN_SAMPLES} needed"
        change.needed = f"at least {MIN_SAMPLES} {counted[0][0].unit} per round"
        return change
    if (short := tail_shortfall(metric, *(ev for pair in counted for ev in pair))) is not None:
        change.why, change.needed = short.replace("in each run", "in each round"), short.rsplit("; ", 1)[1]
        return change
    half = t_quantile(len(logs) - 1, confidence) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    ends = sorted(sign * math.expm1(float(logs.mean()) + d) for d in (-half, half))
    change.low, change.high = ends
    return decide(change, "the interval straddles the allowed change", lambda: "more rounds (ab.rounds)")


# --- Student's t, without scipy ---------------------------------------------------------------

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
