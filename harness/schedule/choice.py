"""Per concurrency, which k is fastest and how sure that is.

Every candidate is a speedup over the plain arm of its own point (plain decoding is k=0, 1.0x
by definition): dividing by the plain arm that ran beside it takes out what the machine did
between points. The point is the ratio of the two arms' per-window token rates' means, on
the basis of sweep.json's `speedup` (the steady windows where both arms had one), and its
interval the same ratio over their bootstrap resamples, drawn as the min_speedup gate draws
them (harness/gates/change.py, harness/measure/estimate.py: the same evidence, resamples and
seed): one estimator, so the point lies inside its interval. It is sweep.json's figure up to
that figure's rounding (a record without rates keeps sweep.json's, with no interval). The
fastest candidate is **decided** when, against every other candidate, the interval of the
ratio of their speedups lies above 1; else the candidates whose ratio interval reaches 1 are
**within noise** of it, and any of them is as good a choice as the data can tell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from harness.gates.change import BOOTSTRAP_RESAMPLES, CONFIDENCE, MIN_SAMPLES, evidence, resampled
from harness.measure.estimate import around
from harness.measure.registry import OUTPUT_RATE, STEADY
from harness.measure.samples import COLUMNS
from harness.measure.steady import rate_evidence as steady_rates
from harness.record.requests import read_lines
from harness.schedule.grid import Cell, Grid

PLAIN_K = 0  # plain decoding as a candidate (vLLM's schedule spells it so too)
METRIC = OUTPUT_RATE


@dataclass
class Candidate:
    k: int
    speedup: float
    point: Optional[str] = None  # None for plain decoding
    replicas: Optional[np.ndarray] = None  # bootstrap replicas of the speedup (None: too few samples)
    interval: Optional[list[float]] = None
    why: str = ""  # why there is no interval


@dataclass
class Choice:
    concurrency: int
    best: Candidate
    candidates: list[Candidate]
    status: str  # "decided" | "within_noise"
    ties: list[int] = field(default_factory=list)  # the k values within noise of the best
    against: dict[int, dict] = field(default_factory=dict)  # k -> the best's speedup over it: ratio, interval

    @property
    def plain_wins(self) -> bool:
        return self.best.k == PLAIN_K

    def words(self) -> str:
        what = "plain decoding" if self.plain_wins else f"k={self.best.k} ({self.best.speedup:.2f}x over plain)"
        if self.status == "decided":
            return f"concurrency {self.concurrency}: {what}, decided"
        ties = ", ".join("plain" if k == PLAIN_K else f"k={k}" for k in self.ties)
        return f"concurrency {self.concurrency}: {what}, within noise of {ties}"


def choose(grid: Grid, confidence: float = CONFIDENCE) -> list[Choice]:
    return [choose_at(c, grid.at(c), grid, confidence) for c in grid.concurrencies]


def choose_at(concurrency: int, cells: list[Cell], grid: Grid, confidence: float) -> Choice:
    plain = Candidate(PLAIN_K, 1.0, replicas=np.ones(BOOTSTRAP_RESAMPLES), interval=[1.0, 1.0])
    candidates = [plain] + [candidate(cell, grid, confidence, seed) for seed, cell in enumerate(cells)]
    best = max(candidates, key=lambda c: c.speedup)
    against = {other.k: compared(best, other, confidence) for other in candidates if other is not best}
    ties = [k for k, found in against.items() if not found["beaten"]]
    return Choice(concurrency, best, candidates, "within_noise" if ties else "decided", ties, against)


def candidate(cell: Cell, grid: Grid, confidence: float, seed: int) -> Candidate:
    """The cell's speedup with its interval: the gate's (seed 0) for the interval shown, and
    independent replicas (seed per cell) for comparing cells with each other."""
    found = Candidate(cell.k, cell.speedup, cell.point)
    mine, theirs = rate_samples(cell, grid)
    few = min(e.groups_count if e is not None else 0 for e in (mine, theirs))
    if few < MIN_SAMPLES:
        found.why = f"only {few} time windows of token rates in an arm, fewer than the {MIN_SAMPLES} an interval needs"
        return found
    if theirs.value():  # the point is the statistic of exactly the rates resampled
        found.speedup = mine.value() / theirs.value()
    found.interval = interval(replicas(theirs, mine, 0), found.speedup, confidence)
    found.replicas = replicas(theirs, mine, seed + 1)
    return found


def rate_samples(cell: Cell, grid: Grid):
    """Both arms' per-window token rates on the basis of the point's speedup (sweep.json's
    figure): each steady window's when the run measured the speedup on it, the whole load's
    otherwise, as the min_speedup gate draws them, so the interval is the figure's own."""
    blocks = cell.run.arms
    if (blocks.get(grid.arm) or {}).get(f"basis_vs_{grid.plain_arm}") == STEADY:
        lines = read_lines(cell.run.path.parent)
        by_arm = {arm: [line for line in lines if line.get("arm") == arm] for arm in (grid.arm, grid.plain_arm)}
        return tuple(steady_rates(by_arm[arm], (blocks.get(arm) or {}).get("steady") or {}, cell.concurrency)
                     for arm in (grid.arm, grid.plain_arm))
    return (evidence(METRIC, cell.run.request_columns(grid.arm, COLUMNS)),
            evidence(METRIC, cell.run.request_columns(grid.plain_arm, COLUMNS)))


def replicas(plain, spec, seed: int) -> np.ndarray:
    """Bootstrap replicas of spec's tok/s over plain's, drawn as judge() draws them."""
    rng = np.random.default_rng(seed)
    old, new = resampled(plain, rng, BOOTSTRAP_RESAMPLES), resampled(spec, rng, BOOTSTRAP_RESAMPLES)
    return new / old


def interval(values: np.ndarray, point: float, confidence: float) -> Optional[list[float]]:
    """The replicas' interval around `point` (estimate.around), rounded outwards to 4
    decimals so rounding never leaves the point outside it."""
    ends = around(values, point, confidence)
    if ends is None:
        return None
    return [math.floor(ends[0] * 1e4) / 1e4, math.ceil(ends[1] * 1e4) / 1e4]


def compared(best: Candidate, other: Candidate, confidence: float) -> dict:
    """The best's speedup over the other's, its interval, and whether the other is beaten
    (the interval's lower end above 1)."""
    ratio = best.speedup / other.speedup
    if best.replicas is None or other.replicas is None:
        why = best.why or other.why
        return {"ratio": round(ratio, 4), "interval": None, "beaten": False, "why": why}
    found = interval(best.replicas / other.replicas, ratio, confidence)
    beaten = found is not None and found[0] > 1.0
    return {"ratio": round(ratio, 4), "interval": found, "beaten": beaten}
