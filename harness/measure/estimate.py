"""A figure and its interval from one estimator: the statistic of a metric's samples
(harness/measure/samples.py Evidence) is the point, and the percentiles of the same
statistic over bootstrap resamples of the same groups are its interval.

Why one module: a figure computed one way and an interval drawn around another (a rate
over a run's span beside window rates that did not add up to it; a steady figure over the
window's decoding stretches beside rates over the whole window) put a speedup of 1.5879
outside its own interval [1.536, 1.5863] (issue 32). Here the point is always
``Evidence.value()`` of exactly the rows resampled, and :func:`around` widens a percentile
interval to reach its point in the rare case it does not (a skewed statistic over a few
groups: the bootstrap's percentiles can sit a hair to one side of the point), so a point
lies inside its interval by construction; widening only ever makes a verdict more careful.

Who reads it: change verdicts and the reference-run gate (harness/gates/change.py), the
schedule's choice of k (harness/schedule/choice.py), and the registry's figures' own
intervals (harness/measure/registry.py Metric.estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.measure.samples import PERCENTILES, Evidence

BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95  # one-sided, at each end of the interval
DIRECT_LIMIT = 20_000  # up to this many values a percentile's resample gathers them all, else
# the values within this many standard deviations of a resample's rank (at least
# MIN_HALF_WINDOW values) either side of the pooled percentile are weighed
WINDOW_SIGMAS, MIN_HALF_WINDOW = 10.0, 2_000


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


# --- a figure with its interval ---------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """A metric's value from its samples and the interval around it (None: too few groups,
    or the statistic could not be recomputed from most resamples)."""

    point: Optional[float]
    low: Optional[float] = None
    high: Optional[float] = None
    groups: int = 0  # the n of the bootstrap (requests, windows)

    @property
    def interval(self) -> Optional[list[float]]:
        return None if self.low is None else [self.low, self.high]


MIN_GROUPS = 5  # fewer groups than this: a bootstrap over them says little, so no interval


def estimate(ev: Optional[Evidence], confidence: float = CONFIDENCE, seed: int = 0) -> Estimate:
    """The point (the statistic of the evidence's rows) and its bootstrap interval."""
    if ev is None or not ev.groups_count:
        return Estimate(None)
    point = ev.value()
    if point is None or ev.groups_count < MIN_GROUPS:
        return Estimate(point, groups=ev.groups_count)
    ends = around(resampled(ev, np.random.default_rng(seed), BOOTSTRAP_RESAMPLES), point, confidence)
    return Estimate(point, *(ends or (None, None)), groups=ev.groups_count)


def around(replicas: np.ndarray, point: float, confidence: float) -> Optional[tuple[float, float]]:
    """The percentile interval of bootstrap replicas (CONFIDENCE one-sided at each end),
    stretched to reach `point` where it falls outside (see the module's docstring); None
    when fewer than half the replicas are finite."""
    replicas = replicas[np.isfinite(replicas)]
    if replicas.size < BOOTSTRAP_RESAMPLES // 2:
        return None
    tail = (1.0 - confidence) * 100.0
    low, high = (float(x) for x in np.percentile(replicas, [tail, 100.0 - tail]))
    return min(low, point), max(high, point)
