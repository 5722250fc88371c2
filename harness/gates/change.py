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

Samples per metric:

- ``ttft_ms``, ``e2e_ms``, ``tpot_ms``: one value per measured request;
- ``itl_ms``: every gap between a request's chunks, resampled request by request;
- ``output_tok_s``, ``request_per_s``: rates in equal time windows of each repeat's
  measured span (tokens or completions per window), so one run gives many samples;
- ``accept_length``, ``verify_cycle_ms``, ``decode_step_ms``: ratios of sums over the
  resampled requests, as the metrics themselves are defined (harness/measure/metrics.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95  # one-sided, at each end of the interval
WINDOWS_PER_REPEAT = 10  # time windows a repeat's measured span is cut into for rates
MIN_SAMPLES = 5  # fewer in either run: inconclusive
MIN_BEYOND_TAIL = 5  # a percentile p is judged only with n * (1 - p) samples at least this many
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


@dataclass
class Evidence:
    """One run's samples for one metric: `groups` are resampled together (a request, or a
    time window); `statistic` turns the rows of a resample into the metric's value."""

    groups: list[np.ndarray]  # each an array of rows (values, or (numerator, denominator) pairs)
    statistic: Callable[[np.ndarray], Optional[float]]
    unit: str  # what one group is, in words: "requests", "windows"
    samples: int  # the values the statistic rests on (gaps for ITL; for tails, what counts)

    def value(self) -> Optional[float]:
        return self.statistic(np.concatenate(self.groups)) if self.groups else None


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


# --- samples from request lines (requests.jsonl) ---------------------------------------------

def measured(lines: list[dict]) -> list[dict]:
    return [line for line in lines if not line.get("warmup") and line.get("ok")]


def request_values(lines: list[dict], base: str) -> list[np.ndarray]:
    """Per-request values of a latency distribution, grouped by request."""
    groups = []
    for line in lines:
        if base == "itl_ms":
            chunks = line.get("chunk_ms") or []
            values = np.diff(np.asarray(chunks, dtype=float)) if len(chunks) > 1 else np.empty(0)
        elif base == "tpot_ms":
            tokens, decode = line.get("completion_tokens"), line.get("decode_ms")
            values = np.asarray([decode / (tokens - 1)]) if tokens and tokens > 1 and decode is not None else np.empty(0)
        else:
            value = line.get(base)
            values = np.asarray([value], dtype=float) if value is not None else np.empty(0)
        if values.size:
            groups.append(values)
    return groups


def window_rates(lines: list[dict], what: str) -> list[np.ndarray]:
    """Tokens (or completed requests) per second in equal windows of each repeat's span."""
    by_repeat: dict[Any, list[dict]] = {}
    for line in lines:
        by_repeat.setdefault(line.get("repeat", 0), []).append(line)
    rates = []
    for repeat_lines in by_repeat.values():
        start = min(line["send_ms"] for line in repeat_lines)
        end = max(line["end_ms"] for line in repeat_lines)
        if end <= start:
            continue
        edges = np.linspace(start, end, WINDOWS_PER_REPEAT + 1)
        if what == "tokens":
            times = np.concatenate([np.asarray(line.get("chunk_ms") or [], dtype=float) for line in repeat_lines])
            weights = np.concatenate([np.asarray(line.get("chunk_tokens") or [], dtype=float) for line in repeat_lines])
        else:
            times = np.asarray([line["end_ms"] for line in repeat_lines], dtype=float)
            weights = np.ones(times.size)
        counts, _ = np.histogram(times, bins=edges, weights=weights)
        rates += [np.asarray([c * 1000.0 / (edges[1] - edges[0])]) for c in counts]
    return rates


def ratio_rows(lines: list[dict], metric: str) -> list[np.ndarray]:
    """(numerator, denominator) per request for ratio-of-sums metrics."""
    rows = []
    for line in lines:
        tokens, verify, decode = line.get("completion_tokens"), line.get("spec_verify_ct"), line.get("decode_ms")
        if metric == "accept_length" and tokens and verify:
            rows.append(np.asarray([[tokens, verify]], dtype=float))
        elif metric == "verify_cycle_ms" and verify and decode is not None:
            rows.append(np.asarray([[decode, verify]], dtype=float))
        elif metric == "decode_step_ms" and tokens and tokens > 1 and decode is not None:
            rows.append(np.asarray([[decode, tokens - 1]], dtype=float))
    return rows


def percentile_of(q: float) -> Callable[[np.ndarray], Optional[float]]:
    return lambda values: float(np.percentile(values, q)) if values.size else None


def mean_of(values: np.ndarray) -> Optional[float]:
    return float(values.mean()) if values.size else None


def ratio_of_sums(rows: np.ndarray) -> Optional[float]:
    total = rows[:, 1].sum() if rows.size else 0.0
    return float(rows[:, 0].sum() / total) if total else None


def evidence(metric: str, lines: list[dict]) -> Optional[Evidence]:
    """The samples behind `metric` in one run's request lines; None for a metric that has
    no samples here (it is then judged on its point values)."""
    ok = measured(lines)
    base, _, stat = metric.partition(".")
    if base in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        groups = request_values(ok, base)
        if stat == "mean":
            statistic = mean_of
        elif stat in PERCENTILES:
            statistic = percentile_of(PERCENTILES[stat])
        else:
            return None
        return Evidence(groups, statistic, "requests", sum(g.size for g in groups))
    if metric in ("output_tok_s", "request_per_s"):
        groups = window_rates(ok, "tokens" if metric == "output_tok_s" else "requests") if ok else []
        return Evidence(groups, mean_of, "windows", len(groups))
    if metric in ("accept_length", "verify_cycle_ms", "decode_step_ms"):
        groups = ratio_rows(ok, metric)
        return Evidence(groups, ratio_of_sums, "requests", len(groups))
    return None


# --- the bootstrap and the decision ------------------------------------------------------------

def resampled(ev: Evidence, rng: np.random.Generator, times: int) -> np.ndarray:
    """The statistic over `times` resamples of the groups, with replacement."""
    n = len(ev.groups)
    values = np.empty(times)
    for i in range(times):
        picks = rng.integers(0, n, size=n)
        value = ev.statistic(np.concatenate([ev.groups[j] for j in picks]))
        values[i] = np.nan if value is None else value
    return values


def tail_shortfall(metric: str, *runs: Evidence) -> Optional[str]:
    """Why a tail percentile cannot be judged from this many samples, or None."""
    stat = metric.partition(".")[2]
    if stat not in PERCENTILES or PERCENTILES[stat] <= 50:
        return None
    beyond = 1.0 - PERCENTILES[stat] / 100.0
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
