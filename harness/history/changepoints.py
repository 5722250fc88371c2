"""Change points in a series of run figures: E-divisive means with a permutation test.

The method of Matteson & James (2014, "A Nonparametric Approach for Multiple Change Point
Analysis of Multivariate Data", JASA 109:505), as MongoDB's performance CI runs it
(the `signal-processing-algorithms` package, `e_divisive`) and Apache Otava (formerly
Hunter) builds on:

1. For every split τ of a window into X = values[a:τ] and Y = values[τ:b], the energy
   statistic with exponent 1, Q(τ) = n·m/(n+m) · (2·mean|x−y| − mean|x−x'| − mean|y−y'|)
   (the within-segment means over all n² and m² pairs, as MongoDB computes them). It is 0
   for two segments with the same values and grows with any difference between their
   distributions: a shift of the mean most of all.
2. The split with the largest Q over every window between the change points found so far
   is the candidate.
3. Its significance by permutation: shuffle the values within each window (the ordering,
   not the values, is what a change point claims), take the largest Q over all windows,
   and count how often it reaches the candidate's. p = (count + 1) / (permutations + 1).
4. A candidate with p ≤ alpha is a change point, and the search goes on in the windows it
   makes; the first candidate that is not significant ends it.

One difference from MongoDB's package: its p-value is count / (permutations + 1), which is 0
when no shuffle reached the candidate; here the observed order counts as one of the
permutations (the usual, never-zero permutation p-value, as R's ecp computes it), so a
decision at the same alpha is never more eager than MongoDB's. The permutations come from a
seeded numpy Generator: the same values and seed give the same change points.

Only numpy: the MongoDB package installs here but drags gevent, structlog and an older numpy
with it, and apache-otava pins numpy, scipy, BigQuery and Slack clients. tests/history/ checks
this module's statistics and answers against MongoDB's, stored as a fixture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

# A change point's p-value must be at most this. 0.05 is MongoDB's published default: on a
# flat series (no change at all) at most about 1 in 20 shows a spurious change point. The histories
# this reads are short (10-30 runs): at 0.05 a clean step after 12 runs shows from its 2nd
# run on, at 0.01 only from about its 4th (tests/history/test_changepoints.py checks both
# the false-alarm rate and the 2nd run). A single last run is never one: a shuffle puts any
# value last as easily, so one run cannot be told from an outlier.
DEFAULT_ALPHA = 0.05
# Shuffles per test. 199 makes the smallest p-value 0.005 and puts alpha=0.05 at 10 of 200
# orders, fine enough for the decision; MongoDB's default is 100.
DEFAULT_PERMUTATIONS = 199
# A shuffle that puts the values in an order as separated as the observed one reaches its
# statistic, though the sums add up in another order: equal within this relative rounding.
TIE = 1e-9


@dataclass(frozen=True)
class ChangePoint:
    """Where a new segment starts and how it differs from the one before it."""

    index: int  # the first value of the new segment
    p_value: float  # the permutation test's, when this change point was accepted
    mean_before: float  # the mean of the segment that ends at `index`
    mean_after: float  # the mean of the segment that starts at `index`

    @property
    def relative_change(self) -> Optional[float]:
        """(after − before) / |before|: +0.05 is 5 % higher; None when before is 0."""
        return None if self.mean_before == 0 else (self.mean_after - self.mean_before) / abs(self.mean_before)


def change_points(values: Sequence[float], *, alpha: float = DEFAULT_ALPHA,
                  permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0) -> list[ChangePoint]:
    """The change points of `values` (in the order given: oldest first), sorted by index.
    A ValueError for a value that is not a finite number or a parameter out of range."""
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1 or not np.all(np.isfinite(series)):
        raise ValueError("change points need a flat sequence of finite numbers")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha is a significance level between 0 and 1, not {alpha}")
    if permutations < 1:
        raise ValueError(f"permutations must be at least 1, not {permutations}")
    if len(series) < 2:
        return []
    found = significant_splits(series, alpha, permutations, np.random.default_rng(seed))
    return describe(series, found)


def significant_splits(series: np.ndarray, alpha: float, permutations: int,
                       rng: np.random.Generator) -> dict[int, float]:
    """E-divisive: split after split while the best one is significant; index -> p-value."""
    distances = np.abs(series[:, None] - series[None, :])
    found: dict[int, float] = {}
    while True:
        windows = bounds(len(series), found)
        index, statistic = best_split(distances, windows)
        if index is None:
            return found
        p = permutation_p_value(distances, windows, statistic, permutations, rng)
        if p > alpha:
            return found
        found[index] = p


def bounds(length: int, found: dict[int, float]) -> list[tuple[int, int]]:
    """The windows [a, b) between the change points found so far."""
    edges = [0, *sorted(found), length]
    return list(zip(edges[:-1], edges[1:]))


def best_split(distances: np.ndarray, windows: list[tuple[int, int]]) -> tuple[Optional[int], float]:
    """The split with the largest statistic over every window (the first of equals), and that
    statistic; (None, 0) when no window has a split that separates anything."""
    best_index, best = None, 0.0
    for a, b in windows:
        q = split_statistics(distances[a:b, a:b])
        tau = int(np.argmax(q))
        if q[tau] > best:
            best_index, best = a + tau, float(q[tau])
    return best_index, best


def split_statistics(distances: np.ndarray) -> np.ndarray:
    """Q(τ) for τ = 0 .. w−1 of one window's w×w distance matrix (Q(0) = 0: no split), from a
    2-D prefix sum, so one window costs O(w²) however many splits it has."""
    w = len(distances)
    prefix = np.zeros((w + 1, w + 1))
    prefix[1:, 1:] = distances.cumsum(0).cumsum(1)
    tau = np.arange(w)
    n, m = tau.astype(np.float64), (w - tau).astype(np.float64)
    within_x = prefix[tau, tau]  # Σ|xi − xj| over X×X (both orders)
    cross = prefix[tau, w] - within_x  # Σ|xi − yj| over X×Y
    within_y = prefix[w, w] - within_x - 2 * cross  # Σ|yi − yj| over Y×Y
    with np.errstate(divide="ignore", invalid="ignore"):
        energy = 2 * cross / (n * m) - within_x / n**2 - within_y / m**2
        q = n * m / (n + m) * energy
    q[0] = 0.0
    return q


def permutation_p_value(distances: np.ndarray, windows: list[tuple[int, int]], observed: float,
                        permutations: int, rng: np.random.Generator) -> float:
    """How often a shuffle within each window reaches `observed`, the observed order counted once."""
    reached = 0
    for _ in range(permutations):
        best = 0.0
        for a, b in windows:
            order = a + rng.permutation(b - a)
            best = max(best, float(split_statistics(distances[np.ix_(order, order)]).max()))
        reached += best >= observed * (1 - TIE)
    return (reached + 1) / (permutations + 1)


def describe(series: np.ndarray, found: dict[int, float]) -> list[ChangePoint]:
    """Each change point with the means of the segments either side of it."""
    edges = [0, *sorted(found), len(series)]
    return [ChangePoint(index=edges[i], p_value=found[edges[i]],
                        mean_before=float(series[edges[i - 1]:edges[i]].mean()),
                        mean_after=float(series[edges[i]:edges[i + 1]].mean()))
            for i in range(1, len(edges) - 1)]
