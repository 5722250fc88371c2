"""The break-even accept length measured on the engine: per concurrency, the accept length at
which speculation's speedup over plain decoding crosses 1, read off arms that differ only in
how much they accept (forced acceptance, `drafter.forced_accept_length`, or drafters of graded
quality), beside the registry's formula (verify cycle ÷ plain decode step).

**Observations.** Each speculative arm of a finished point with a measured speedup and accept
length is one observation: (its measured accept length, its speedup, the speedup's bootstrap
replicas). The x-coordinate is the accept length the arm *measured*, never the one it was
forced to: a forced length is a mean the engine aims at, and on vLLM's CPU build the lengths
come from drafters, with nothing set. Observations are grouped by (concurrency, the drafter's
k = num_steps, the other swept keys but the concurrency and the acceptance keys), so arms of
one point and points that differ only by a swept acceptance key make one curve.

**The speedup** is `specgate schedule`'s estimator (harness/gates/arm_speedup.py): the ratio of
the two arms' window rates on sweep.json's basis, its replicas the same ratio over bootstrap
resamples. The plain arm's resamples are shared by every arm of its point (seeded by the point)
and each arm's own are independent (seeded by point and arm): the plain arm's noise moves the
whole curve of a point at once, as it does in the measurement.

**The crossing.** Sorted by accept length, the measured break-even is where the speedups first
rise through 1, linear between the two observations around it (the simulator's speedup is
proportional to the accept length, so linear is close to exact). Its interval: the same crossing
of each replica curve (accept lengths held at their measured values), the percentiles of those
crossings around the point (harness/measure/estimate.py `around`'s convention). A replica curve
that pays at every swept length crosses below the range, one that pays at none above it; when
more of them than an interval's tail fall off one end, that end is open (null: "beyond the swept
accept lengths").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from harness.gates.arm_speedup import estimate_speedup
from harness.gates.change import BOOTSTRAP_RESAMPLES, CONFIDENCE
from harness.measure.registry import metric, number, read
from harness.record.store import RecordError, RunData, read_run

CONCURRENCY_KEY = "workload.concurrency"
# swept keys that vary only the acceptance: their points are one curve, each an observation
ACCEPTANCE_KEYS = ("drafter.forced_accept_length", "drafter.forced_accept_rates", "drafter")
MEASURED = "measured"
BELOW, ABOVE = -math.inf, math.inf  # a curve that pays at every swept length / at none


Key = tuple[int, Optional[int], tuple[str, ...]]  # (concurrency, k, the other swept keys)


@dataclass
class Observation:
    arm: str  # the arm, with its point's swept acceptance keys when there are any
    accept_length: float  # measured
    speedup: float  # sweep.json's figure until estimated, then the estimator's point
    formula: Optional[float] = None  # the registry's break-even at this point: verify cycle ÷ plain step
    forced: Optional[str] = None  # what forced its acceptance (results.json's benchmark_only); None: its drafter's own
    replicas: Optional[np.ndarray] = None  # None: not estimated, or too few window rates for an interval
    interval: Optional[list[float]] = None
    why: str = ""  # why its speedup has no replicas
    source: Optional[tuple[RunData, str, int, tuple[list[int], list[int]]]] = None  # run, arm, concurrency, seeds
    name: str = ""  # the arm's own name (arm without the swept keys)


# --- the observations, from the points' records -----------------------------------------------

def measured_break_even(sweep: Path, points: list[dict[str, Any]], plain_arm: Optional[str],
                        curve_arms: list[str] | tuple[str, ...] = (),
                        confidence: float = CONFIDENCE) -> list[dict[str, Any]]:
    """sweep.json's `break_even_accept_length`: one entry per group of two or more observations
    of the curve's arms (only those are estimated: a sweep with one per curve costs nothing here).
    The curve's arms are `curve_arms` (the experiment's break_even_arms), else the forced ones:
    arms of different drafters cost differently per cycle, so they are never one curve unasked;
    every other speculative arm at the group's concurrency is listed beside it (`real`)."""
    if not plain_arm:
        return []
    groups = observations(Path(sweep), points, plain_arm)
    on_curve = (lambda o: (o.name or o.arm) in curve_arms) if curve_arms else (lambda o: o.forced is not None)
    entries = []
    for key, found in sorted(groups.items(), key=lambda g: (g[0][2], g[0][1] or 0, g[0][0])):
        curve = [o for o in found if on_curve(o)]
        if len(curve) < 2:
            continue  # one accept length: no curve to cross
        real = [o for (c, _, w), there in groups.items() if (c, w) == (key[0], key[2]) for o in there if not on_curve(o)]
        entries.append(analysed(key, [estimated(o, plain_arm, confidence) for o in curve], real, confidence))
    return entries


def observations(sweep: Path, points: list[dict[str, Any]], plain_arm: str) -> dict[Key, list[Observation]]:
    """Every speculative arm of every finished point, by its group, not yet estimated."""
    groups: dict[Key, list[Observation]] = {}
    for index, point in enumerate(points):
        run = point_run(sweep, point)
        if run is None:
            continue
        others, acceptance = split_swept(point)
        for order, (arm, figures) in enumerate((point.get("arms") or {}).items()):
            found = observation(arm, figures, plain_arm, acceptance)
            if found is not None:
                concurrency = int(figures["concurrency"])
                # the plain arm's resamples seeded by the point (shared by its arms), each arm's by point and arm
                found.source = (run, arm, concurrency, ([index], [index, order + 1]))
                groups.setdefault((concurrency, steps_of(run, arm), others), []).append(found)
    return groups


def point_run(sweep: Path, point: dict[str, Any]) -> Optional[RunData]:
    """The point's run record, when it ran to the end and can be read."""
    if point.get("status") != "finished" or not point.get("record"):
        return None
    try:
        return read_run(sweep / point["record"])
    except RecordError:
        return None


def split_swept(point: dict[str, Any]) -> tuple[tuple[str, ...], list[str]]:
    """The point's swept `key=value`s: those that place it on another curve (the concurrency and
    the acceptance keys aside), and the acceptance keys'."""
    others, acceptance = [], []
    for override in point.get("swept") or []:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == CONCURRENCY_KEY:
            continue
        (acceptance if key in ACCEPTANCE_KEYS else others).append(override)
    return tuple(others), acceptance


def observation(arm: str, figures: Any, plain_arm: str, acceptance: list[str]) -> Optional[Observation]:
    """One speculative arm of a point as sweep.json has it; None for the plain arm and an arm
    without a measured speedup, accept length or concurrency."""
    if arm == plain_arm or not isinstance(figures, dict) or figures.get("status") != MEASURED:
        return None
    length, speedup = number(read(figures, metric("accept_length"))), number(figures.get("speedup"))
    if length is None or speedup is None or not figures.get("concurrency"):
        return None
    label = f"{arm} ({', '.join(acceptance)})" if acceptance else arm
    return Observation(label, length, speedup, number(read(figures, metric("break_even_accept_length"))),
                       figures.get("benchmark_only"), name=arm)


def estimated(found: Observation, plain_arm: str, confidence: float) -> Observation:
    """A copy of the observation with the estimator's speedup, replicas and interval (its
    record's rates); a record whose requests cannot be read keeps sweep.json's figure, with no
    interval. (A copy: the real drafters' arms listed beside every group keep sweep.json's.)"""
    run, arm, concurrency, (seed, arm_seed) = found.source
    try:
        got = estimate_speedup(run, arm, plain_arm, seed, found.speedup, concurrency, confidence, arm_seed=arm_seed)
    except (OSError, ValueError) as exc:  # a torn Parquet file (pyarrow's errors are these)
        return replace(found, why=f"its requests could not be read ({exc})")
    return replace(found, speedup=got.speedup, replicas=got.replicas, interval=got.interval, why=got.why)


def steps_of(run: RunData, arm: str) -> Optional[int]:
    """The arm's drafter.num_steps (k) as its record's config says (None when it cannot tell)."""
    try:
        steps = ((run.arm_config(arm) or {}).get("drafter") or {}).get("num_steps")
        return None if steps is None else int(steps)
    except (ValueError, TypeError, AttributeError):
        return None


# --- one group: the crossing, its interval, the words -----------------------------------------

def analysed(key: Key, found: list[Observation], real: list[Observation], confidence: float) -> dict[str, Any]:
    """One group's entry: the measured break-even, its interval, the formula's, the curve, the
    real drafters' arms at its concurrency, and the answer in words."""
    concurrency, k, others = key
    found = sorted(found, key=lambda o: o.accept_length)
    lengths = [o.accept_length for o in found]
    falling = falls_beyond_noise(found)
    point = None if falling else crossing(lengths, [o.speedup for o in found])
    measured = point if point is not None and math.isfinite(point) else None
    ends, why = crossing_interval(found, measured, confidence) if measured is not None else (None, "")
    formulas = [o.formula for o in found if o.formula is not None]
    entry = {"concurrency": concurrency, "k": k, "arms": [o.arm for o in found], "with": list(others),
             "measured": rounded(measured), "interval": ends,
             "formula": rounded(statistics.median(formulas)) if formulas else None,
             "points": [[rounded(o.accept_length), rounded(o.speedup), o.interval] for o in found],
             "real": [{"arm": o.arm, "accept_length": rounded(o.accept_length), "speedup": rounded(o.speedup)}
                      for o in real]}
    entry["extrapolated"] = rounded(extrapolated(found)) if point in (BELOW, ABOVE) else None
    entry["words"] = (falling_words(falling, entry["formula"]) if falling else
                      words(found, point, ends, why, entry["formula"]) + beyond_words(entry["extrapolated"], k))
    return entry


def falls_beyond_noise(found: list[Observation]) -> Optional[tuple[Observation, Observation]]:
    """Two observations (by accept length) whose speedup falls as the accept length grows, by
    more than both intervals allow: arms that share a cycle's cost cannot do that, so their speeds
    were not measured alike (a machine busy for some arms, not others) and no crossing read off
    them is the engine's. None when the curve is consistent (or without intervals to tell)."""
    for i, lower in enumerate(found):
        for higher in found[i + 1:]:
            if lower.interval and higher.interval and higher.interval[1] < lower.interval[0]:
                return lower, higher
    return None


def falling_words(pair: tuple[Observation, Observation], formula: Optional[float]) -> str:
    lower, higher = pair
    beside = f"; formula {formula:.2f}" if formula is not None else ""
    return (f"no break-even: the speedup falls from {lower.speedup:.2f}x at {lower.accept_length:.2f} to "
            f"{higher.speedup:.2f}x at {higher.accept_length:.2f}, beyond both intervals, so the arms' speeds were "
            f"not measured alike (a busy machine?); re-run where the arms get the same machine{beside}")


def extrapolated(found: list[Observation]) -> Optional[float]:
    """Where the line through the origin that the speedups follow (throughput is accept length ÷
    a cycle that costs the same whatever is accepted) reaches 1.0x: least squares, so an answer
    for a curve that never crosses inside the swept lengths. Extrapolated, never measured."""
    lengths, speedups = np.array([o.accept_length for o in found]), np.array([o.speedup for o in found])
    slope = float(np.dot(lengths, speedups) / np.dot(lengths, lengths))
    return 1.0 / slope if slope > 0 else None


def beyond_words(guess: Optional[float], k: Optional[int]) -> str:
    if guess is None:
        return ""
    reach = "" if k is None or guess <= k + 1 else (
        f", past {k + 1}, the most a cycle of k={k} yields: no acceptance pays at this drafter's cost")
    return f"; about {guess:.2f} on the line through the origin its speedups follow (extrapolated, not measured){reach}"


def crossing(lengths: list[float], speedups: list[float]) -> Optional[float]:
    """Where the speedups (sorted by accept length) first rise through 1, linear between the two
    observations around it; BELOW when every one pays, ABOVE when none does, None when they
    cross 1 only on the way down (more acceptance, less speed: no break-even to read) or a
    speedup is not a number."""
    if any(not math.isfinite(s) for s in speedups):
        return None
    if all(s >= 1.0 for s in speedups):
        return BELOW
    if all(s < 1.0 for s in speedups):
        return ABOVE
    i = first_rise(speedups)
    if i is None:
        return None
    (l0, l1), (s0, s1) = lengths[i:i + 2], speedups[i:i + 2]
    return l0 + (1.0 - s0) * (l1 - l0) / (s1 - s0)


def first_rise(speedups: list[float]) -> Optional[int]:
    """The first i with speedups[i] < 1 <= speedups[i + 1]: where the curve rises through 1."""
    return next((i for i in range(len(speedups) - 1) if speedups[i] < 1.0 <= speedups[i + 1]), None)


def replica_crossings(found: list[Observation]) -> Optional[np.ndarray]:
    """The crossing of each replica curve s_j(L_i), the accept lengths held at their measured
    values (their own noise is not resampled); None when an observation has no replicas."""
    if any(o.replicas is None for o in found):
        return None
    lengths = [o.accept_length for o in found]
    curves = np.column_stack([o.replicas for o in found])
    return np.array([math.nan if (x := crossing(lengths, list(curve))) is None else x for curve in curves])


def crossing_interval(found: list[Observation], point: float,
                      confidence: float) -> tuple[Optional[list[Optional[float]]], str]:
    """The replica crossings' interval around `point` ([low, high], an end None when open), or
    (None, why)."""
    crossings = replica_crossings(found)
    if crossings is None:
        missing = next(o for o in found if o.replicas is None)
        return None, f"{missing.arm}'s speedup has no interval ({missing.why})"
    valid = crossings[~np.isnan(crossings)]
    if valid.size < BOOTSTRAP_RESAMPLES // 2:  # as estimate.around: half the replicas or no interval
        return None, f"only {valid.size} of {crossings.size} replica curves cross 1 on the way up"
    tail = 1.0 - confidence
    lowest, highest = found[0].accept_length, found[-1].accept_length
    # an off-range crossing is at most the lowest (at least the highest) length swept: clamped
    # there, the percentiles stay right wherever fewer than a tail's share lie off that end
    clamped = np.clip(valid, lowest, highest)
    low, high = (float(x) for x in np.percentile(clamped, [tail * 100.0, 100.0 - tail * 100.0]))
    low_open, high_open = np.mean(valid == BELOW) > tail, np.mean(valid == ABOVE) > tail
    return [None if low_open else math.floor(min(low, point) * 1e4) / 1e4,
            None if high_open else math.ceil(max(high, point) * 1e4) / 1e4], ""


def rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 4)


def words(found: list[Observation], point: Optional[float], ends: Optional[list[Optional[float]]], why: str,
          formula: Optional[float]) -> str:
    """The group's answer in one line."""
    first, last = found[0], found[-1]
    beside = f"; formula {formula:.2f}" if formula is not None else ""
    if point == BELOW:
        return f"pays at every accept length swept, down to {first.accept_length:.2f} ({first.speedup:.2f}x){beside}"
    if point == ABOVE:
        return (f"does not pay at any accept length swept, up to {last.accept_length:.2f} ({last.speedup:.2f}x): "
                f"break-even above it{beside}")
    if point is None:
        curve = ", ".join(f"{o.speedup:.2f}x at {o.accept_length:.2f}" for o in found)
        return f"no break-even: the speedup does not rise through 1.0x as the accept length grows ({curve}){beside}"
    i = first_rise([o.speedup for o in found])
    below, above = found[i], found[i + 1]
    return (f"break-even accept length {point:.2f} ({interval_words(ends, why, first, last)}{beside}), between "
            f"{below.accept_length:.2f} ({below.speedup:.2f}x) and {above.accept_length:.2f} ({above.speedup:.2f}x)")


def interval_words(ends: Optional[list[Optional[float]]], why: str, first: Observation, last: Observation) -> str:
    if ends is None:
        return f"no interval: {why}"
    low = f"{ends[0]:.2f}" if ends[0] is not None else f"beyond the swept accept lengths (below {first.accept_length:.2f})"
    high = f"{ends[1]:.2f}" if ends[1] is not None else f"beyond the swept accept lengths (above {last.accept_length:.2f})"
    return f"interval {low} to {high}"
