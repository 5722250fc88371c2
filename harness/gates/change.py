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
from harness.measure.samples import Evidence, measured
from harness.record.requests import RequestColumns

BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95  # one-sided, at each end of the interval
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
    lines = requests.rows() if isinstance(requests, RequestColumns) else requests
    return entry.samples.evidence(measured(lines))


# --- the bootstrap and the decision ------------------------------------------------------------

def resampled(ev: Evidence, rng: np.random.Generator, times: int) -> np.ndarray:
    """The statistic over `times` resamples of the groups, with replacement. The groups are
    laid end to end once and each resample is one gather of rows (not a concatenation of
    100,000 small arrays): the same rows, in the same order, as drawing group by group."""
    n = len(ev.groups)
    rows = np.concatenate(ev.groups) if n else np.empty(0)
    lengths = np.fromiter((len(g) for g in ev.groups), dtype=np.int64, count=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    single = bool(n) and bool((lengths == 1).all())
    values = np.empty(times)
    for i in range(times):
        picks = rng.integers(0, n, size=n)
        value = ev.statistic(rows[picks] if single else rows[gathered(offsets, lengths, picks)])
        values[i] = np.nan if value is None else value
    return values


def gathered(offsets: np.ndarray, lengths: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """The row indices of groups `picks`, end to end."""
    picked = lengths[picks]
    ends = np.cumsum(picked)
    return np.repeat(offsets[:-1][picks] - (ends - picked), picked) + np.arange(ends[-1] if ends.size else 0)


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
    few = min(len(old.groups), len(new.groups))
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
    if change.low > allowed:
        change.outcome = "failed"
    elif change.high <= allowed:
        change.outcome = "passed"
    else:
        change.why = "the interval straddles the allowed change"
        change.needed = more_data(change, few, old.unit)
    return change


def more_data(change: Change, n: int, unit: str) -> str:
    """The interval narrows as 1/sqrt(n): how many samples would put it on one side."""
    half = (change.high - change.low) / 2.0
    distance = abs(change.worse - change.allowed)
    if distance < half / 10.0:
        return f"more than {100 * n} {unit} per run (the change sits on the allowed limit)"
    return f"about {math.ceil(n * (half / distance) ** 2)} {unit} per run"
