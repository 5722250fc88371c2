"""One arm's speedup over the plain arm of the same run record, with its bootstrap replicas and
interval: the estimator `specgate schedule` (harness/schedule/choice.py) and a sweep's measured
break-even accept length (harness/sweep/break_even.py) share.

The point is the ratio of the two arms' per-window token rates' means, on the basis of
sweep.json's `speedup` (the steady windows where the run measured it on them, else the whole
loads), and its interval the same ratio over their bootstrap resamples, drawn as the
min_speedup gate draws them (harness/gates/change.py, harness/measure/estimate.py): one
estimator, so the point lies inside its interval. A record without enough window rates keeps
the figure it is given (sweep.json's), with no interval and the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from harness.gates.change import BOOTSTRAP_RESAMPLES, CONFIDENCE, MIN_SAMPLES, evidence, resampled
from harness.measure.estimate import around
from harness.measure.registry import OUTPUT_RATE, STEADY
from harness.measure.samples import COLUMNS
from harness.measure.steady import rate_evidence as steady_rates
from harness.record.requests import read_lines
from harness.record.store import RunData

METRIC = OUTPUT_RATE


@dataclass
class SpeedupEstimate:
    speedup: float  # the rates' own ratio, or the figure given when there are too few rates
    replicas: Optional[np.ndarray] = None  # bootstrap replicas drawn with the caller's seed (None: too few samples)
    interval: Optional[list[float]] = None  # the gate's interval (seed 0), around `speedup`
    why: str = ""  # why there is no interval


def estimate_speedup(run: RunData, arm: str, plain_arm: str, seed: int | Sequence[int], figure: float,
                     concurrency: Optional[int], confidence: float = CONFIDENCE,
                     arm_seed: int | Sequence[int] | None = None) -> SpeedupEstimate:
    """`arm`'s speedup over `plain_arm` in `run`. The interval is the min_speedup gate's (seed
    0, the interval shown); `replicas` are drawn with `seed` (the plain arm's resamples) and
    `arm_seed` (the arm's; None: the same generator, after the plain arm's), so a caller can
    keep them independent between candidates, or share one plain arm's resamples between
    arms measured beside it."""
    mine, theirs = rate_samples(run, arm, plain_arm, concurrency)
    few = min(e.groups_count if e is not None else 0 for e in (mine, theirs))
    if few < MIN_SAMPLES:
        return SpeedupEstimate(figure, why=f"only {few} time windows of token rates in an arm, fewer than the "
                                           f"{MIN_SAMPLES} an interval needs")
    point = mine.value() / theirs.value() if theirs.value() else figure  # the statistic of exactly the rates resampled
    return SpeedupEstimate(point, replicas(theirs, mine, seed, arm_seed),
                           interval(replicas(theirs, mine, 0), point, confidence))


def rate_samples(run: RunData, arm: str, plain_arm: str, concurrency: Optional[int]):
    """Both arms' per-window token rates on the basis of the point's speedup (sweep.json's
    figure): each steady window's when the run measured the speedup on it, the whole load's
    otherwise, as the min_speedup gate draws them, so the interval is the figure's own."""
    blocks = run.arms
    if (blocks.get(arm) or {}).get(f"basis_vs_{plain_arm}") == STEADY:
        lines = read_lines(run.path.parent)
        by_arm = {name: [line for line in lines if line.get("arm") == name] for name in (arm, plain_arm)}
        return tuple(steady_rates(by_arm[name], (blocks.get(name) or {}).get("steady") or {}, concurrency)
                     for name in (arm, plain_arm))
    return (evidence(METRIC, run.request_columns(arm, COLUMNS)),
            evidence(METRIC, run.request_columns(plain_arm, COLUMNS)))


def replicas(plain, spec, seed: int | Sequence[int], spec_seed: int | Sequence[int] | None = None) -> np.ndarray:
    """Bootstrap replicas of spec's tok/s over plain's, drawn as judge() draws them (the plain
    arm's first, then the arm's from the same generator, or from `spec_seed`'s)."""
    rng = np.random.default_rng(seed)
    old = resampled(plain, rng, BOOTSTRAP_RESAMPLES)
    new = resampled(spec, rng if spec_seed is None else np.random.default_rng(spec_seed), BOOTSTRAP_RESAMPLES)
    return new / old


def interval(values: np.ndarray, point: float, confidence: float) -> Optional[list[float]]:
    """The replicas' interval around `point` (estimate.around), rounded outwards to 4
    decimals so rounding never leaves the point outside it."""
    ends = around(values, point, confidence)
    if ends is None:
        return None
    return [math.floor(ends[0] * 1e4) / 1e4, math.ceil(ends[1] * 1e4) / 1e4]
