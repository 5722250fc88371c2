"""Per concurrency, which k is fastest and how sure that is.

Every candidate is a speedup over the plain arm of its own point (plain decoding is k=0, 1.0x
by definition): dividing by the plain arm that ran beside it takes out what the machine did
between points. The point is the ratio of the two arms' per-window token rates' means, on
the basis of sweep.json's `speedup` (the steady windows where both arms had one), and its
interval the same ratio over their bootstrap resamples, drawn as the min_speedup gate draws
them (harness/gates/arm_speedup.py, over harness/gates/change.py and harness/measure/estimate.py:
the same evidence, resamples and seed): one estimator, so the point lies inside its interval.
It is sweep.json's figure up to that figure's rounding (a record without rates keeps
sweep.json's, with no interval). The fastest candidate is **decided** when, against every
other candidate, the interval of the ratio of their speedups lies above 1; else the
candidates whose ratio interval reaches 1 are **within noise** of it, and any of them is as
good a choice as the data can tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from harness.gates.arm_speedup import estimate_speedup, interval
from harness.gates.change import BOOTSTRAP_RESAMPLES, CONFIDENCE
from harness.schedule.grid import Cell, Grid

PLAIN_K = 0  # plain decoding as a candidate (vLLM's schedule spells it so too)


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
    independent replicas (seed per cell) for comparing cells with each other
    (harness/gates/arm_speedup.py, the estimator the sweep's break-even shares)."""
    found = estimate_speedup(cell.run, grid.arm, grid.plain_arm, seed + 1, cell.speedup, cell.concurrency, confidence)
    return Candidate(cell.k, found.speedup, cell.point, found.replicas, found.interval, found.why)


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
