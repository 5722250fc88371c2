"""How a metric is resampled for an interval: the samples behind it in a run's request
lines, grouped so that a bootstrap resamples what belongs together, and the statistic that
turns a resample back into the metric's value.

A request line is one line of requests.jsonl (a dict: ``ttft_ms``, ``e2e_ms``,
``decode_ms``, ``completion_tokens``, ``spec_verify_ct``, ``chunk_ms``, ``chunk_tokens``,
``send_ms``, ``end_ms``, ``repeat``); every function here takes the measured, successful
lines of one arm and reads them field by field, so a columnar reader can hand it rows too.

Three kinds, one per way a metric is defined (harness/measure/metrics.py):

* :class:`PerRequest`: one or more values per request (a TTFT, each inter-token gap),
  resampled request by request, summarized by a percentile or the mean;
* :class:`RatioOfSums`: a (numerator, denominator) row per request, the metric being
  Σ numerators ÷ Σ denominators (accept length, verify cycle, decode step);
* :class:`WindowRate`: a rate cut into equal time windows of each repeat's measured span
  (tokens or completions per second), the windows resampled.

A metric entry (harness/measure/registry.py) names its kind; change.py's bootstrap and
the registry's own computation of a new metric both read it, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

WINDOWS_PER_REPEAT = 10  # time windows a repeat's measured span is cut into for rates
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}

Line = dict[str, Any]
# the per-request columns samples read: what a reference run's record is asked for
COLUMNS = ("warmup", "ok", "repeat", "send_ms", "end_ms", "ttft_ms", "e2e_ms", "tpot_ms", "decode_ms",
           "completion_tokens", "prompt_tokens", "spec_verify_ct", "chunk_ms", "chunk_tokens")


@dataclass
class Evidence:
    """One run's samples for one metric: `groups` are resampled together (a request, or a
    time window); `statistic` turns the rows of a resample into the metric's value."""

    groups: list[np.ndarray]  # each an array of rows (values, or (numerator, denominator) pairs)
    statistic: Callable[[np.ndarray], Optional[float]]
    unit: str  # what one group is, in words: "requests", "windows"
    samples: int  # the values the statistic rests on (gaps for ITL; for tails, what counts)
    percentile: Optional[float] = None  # the percentile the statistic is (its tail needs samples beyond it)

    @property
    def count(self) -> int:
        """How many rows (values, or pairs) the groups hold."""
        return sum(len(group) for group in self.groups)

    def value(self) -> Optional[float]:
        return self.statistic(np.concatenate(self.groups)) if self.groups else None


def percentile_of(q: float) -> Callable[[np.ndarray], Optional[float]]:
    return lambda values: float(np.percentile(values, q)) if values.size else None


def mean_of(values: np.ndarray) -> Optional[float]:
    return float(values.mean()) if values.size else None


def ratio_of_sums(rows: np.ndarray) -> Optional[float]:
    total = rows[:, 1].sum() if rows.size else 0.0
    return float(rows[:, 0].sum() / total) if total else None


def statistic_named(stat: str) -> tuple[Callable[[np.ndarray], Optional[float]], Optional[float]]:
    """("mean" | "p50" | "p90" | "p99") -> (the statistic, its percentile or None)."""
    if stat == "mean":
        return mean_of, None
    if stat in PERCENTILES:
        return percentile_of(PERCENTILES[stat]), PERCENTILES[stat]
    raise KeyError(f"'{stat}' is not a statistic; valid: mean, {', '.join(PERCENTILES)}")


# --- what one request line gives ------------------------------------------------------------

def field_value(name: str) -> Callable[[Line], list[float]]:
    """A request's one value of a field (its TTFT, its E2E), none when missing."""
    def values(line: Line) -> list[float]:
        value = line.get(name)
        return [] if value is None else [float(value)]
    return values


def itl_values(line: Line) -> list[float]:
    """Every gap between a request's token chunks."""
    chunks = line.get("chunk_ms") or []
    return list(np.diff(np.asarray(chunks, dtype=float))) if len(chunks) > 1 else []


def tpot_values(line: Line) -> list[float]:
    """Decode time over the tokens after the first (none for a one-token request)."""
    tokens, decode = line.get("completion_tokens"), line.get("decode_ms")
    return [decode / (tokens - 1)] if tokens and tokens > 1 and decode is not None else []


# --- the three kinds --------------------------------------------------------------------------

@dataclass(frozen=True)
class PerRequest:
    """Values per request (`values_of(line)`), summarized by `stat` (mean, p50, p90, p99)."""

    values_of: Callable[[Line], list[float]]
    stat: str = "p50"
    kind: str = "per-request values"

    def at(self, stat: str) -> "PerRequest":
        """The same samples summarized by another statistic (ttft_ms.p90 from ttft_ms.p50's)."""
        statistic_named(stat)  # a KeyError for an unknown one
        return PerRequest(self.values_of, stat)

    def evidence(self, lines: list[Line]) -> Evidence:
        groups = [np.asarray(v, dtype=float) for v in (self.values_of(line) for line in lines) if len(v)]
        statistic, q = statistic_named(self.stat)
        return Evidence(groups, statistic, "requests", sum(g.size for g in groups), q)


@dataclass(frozen=True)
class RatioOfSums:
    """(numerator, denominator) per request (`row_of(line)`, None to leave it out)."""

    row_of: Callable[[Line], Optional[tuple[float, float]]]
    kind: str = "ratio of sums over requests"

    def evidence(self, lines: list[Line]) -> Evidence:
        rows = [np.asarray([row], dtype=float) for row in (self.row_of(line) for line in lines) if row is not None]
        return Evidence(rows, ratio_of_sums, "requests", len(rows))


@dataclass(frozen=True)
class WindowRate:
    """Tokens ("tokens") or completed requests ("requests") per second, in equal windows."""

    what: str
    kind: str = "rate in time windows"

    def evidence(self, lines: list[Line]) -> Evidence:
        groups = window_rates(lines, self.what) if lines else []
        return Evidence(groups, mean_of, "windows", len(groups))


def window_rates(lines: list[Line], what: str) -> list[np.ndarray]:
    """Tokens (or completed requests) per second in equal windows of each repeat's span."""
    by_repeat: dict[Any, list[Line]] = {}
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


def accept_length_row(line: Line) -> Optional[tuple[float, float]]:
    """Σ completion tokens ÷ Σ verify cycles over the requests that carry verify counts."""
    verify = line.get("spec_verify_ct")
    return (line.get("completion_tokens") or 0, verify) if verify else None


def verify_cycle_row(line: Line) -> Optional[tuple[float, float]]:
    """Σ decode time ÷ Σ verify cycles: a request without a decode span (one chunk) adds its cycles."""
    verify = line.get("spec_verify_ct")
    return (line.get("decode_ms") or 0.0, verify) if verify else None


def decode_step_row(line: Line) -> Optional[tuple[float, float]]:
    tokens, decode = line.get("completion_tokens"), line.get("decode_ms")
    return (decode, tokens - 1) if tokens and tokens > 1 and decode is not None else None


class RecordLine:
    """A request record (harness/load/records.py) read as its request line, unrounded: what
    an arm's result is computed from while the run goes, through the same functions that
    read requests.jsonl afterwards."""

    __slots__ = ("record",)

    def __init__(self, record: Any):
        self.record = record

    def get(self, key: str, default: Any = None) -> Any:
        r = self.record
        if key == "chunk_ms":
            return [t * 1000.0 for t in r.chunk_times]
        if key in ("ttft_ms", "e2e_ms", "decode_ms"):
            seconds = getattr(r, key.removesuffix("_ms") + "_s")
            return default if seconds is None else seconds * 1000.0
        value = getattr(r, key, default)
        return default if value is None else value


def measured(lines: list[Line]) -> list[Line]:
    """The lines a metric is computed from: measured (not warm-up) and successful."""
    return [line for line in lines if not line.get("warmup") and line.get("ok")]
