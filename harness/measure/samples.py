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

from harness.measure.window import WHOLE, Window, chunked, decode_in, pieces, repeat_of, tokens_in_life

WINDOWS_PER_REPEAT = 10  # time windows a repeat's measured span is cut into for rates
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}

Line = dict[str, Any]
# the per-request columns samples read: what a reference run's record is asked for
COLUMNS = ("warmup", "ok", "repeat", "send_ms", "end_ms", "ttft_ms", "e2e_ms", "tpot_ms", "decode_ms",
           "completion_tokens", "prompt_tokens", "spec_verify_ct", "spec_accepted_drafts", "chunk_ms", "chunk_tokens")


@dataclass
class Evidence:
    """One run's samples for one metric: rows (values, or (numerator, denominator) pairs)
    cut into groups that a bootstrap resamples together (a request's values, a time
    window's rate), group i at ``rows[offsets[i]:offsets[i+1]]``, and the statistic
    (``stat``: mean, ratio, p50, p90, p99) that turns rows back into the metric's value.
    Rows end to end, not a list of arrays: 100,000 requests are a few numpy arrays."""

    rows: np.ndarray
    offsets: np.ndarray
    stat: str  # "mean" | "ratio" | a percentile's name ("p50")
    unit: str  # what one group is, in words: "requests", "windows"
    samples: int  # the values the statistic rests on (gaps for ITL; for tails, what counts)

    @classmethod
    def singles(cls, rows: np.ndarray, stat: str, unit: str) -> "Evidence":
        """Every row its own group."""
        return cls(rows, np.arange(rows.shape[0] + 1, dtype=np.int64), stat, unit, rows.shape[0])

    @property
    def groups_count(self) -> int:
        """How many groups (the n of a bootstrap)."""
        return self.offsets.size - 1

    @property
    def groups(self) -> list[np.ndarray]:
        return np.split(self.rows, self.offsets[1:-1]) if self.groups_count else []

    @property
    def count(self) -> int:
        """How many rows (values, or pairs) the groups hold."""
        return int(self.rows.shape[0])

    @property
    def single(self) -> bool:
        """Every group is one row (a resample is a gather of rows)."""
        return self.count == self.groups_count

    @property
    def percentile(self) -> Optional[float]:
        """The percentile the statistic is (its tail needs samples beyond it), else None."""
        return PERCENTILES.get(self.stat)

    def statistic(self, rows: np.ndarray) -> Optional[float]:
        return statistic_of(self.stat, rows)

    def value(self) -> Optional[float]:
        return statistic_of(self.stat, self.rows) if self.groups_count else None


def statistic_of(stat: str, rows: np.ndarray) -> Optional[float]:
    """A statistic of rows: the mean, a ratio of the columns' sums, or a percentile."""
    if not rows.size:
        return None
    if stat == "mean":
        return float(rows.mean())
    if stat == "ratio":
        return ratio_of_sums(rows)
    return float(np.percentile(rows, PERCENTILES[stat]))


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


# --- what one request gives: read from a line, or from a whole record's columns at once ------
#
# A metric's samples are defined on one request line (``values_of(line)``, ``row_of(line)``),
# which is all a newly registered metric has to write. The built-in ones also read a
# record's columns in one pass (``from_columns``): a columnar record (harness/record/
# requests.py: ``get(name)`` a float column with NaN for missing, ``ragged(name)`` a list
# column as values and offsets) of 100,000 requests is then not walked row by row. Both
# readings give the same rows (tests/measure/test_samples.py).

@dataclass(frozen=True)
class FieldValue:
    """A request's one value of a field (its TTFT, its E2E), none when missing. A window holds
    it when it was seen: at the first chunk (``at="first_chunk"``: a TTFT) or at the request's end."""

    name: str
    at: str = "end"

    def __call__(self, line: Line) -> list[float]:
        value = line.get(self.name)
        return [] if value is None else [float(value)]

    def within(self, line: Line, window: Window) -> list[float]:
        if self.at == "first_chunk":
            chunks = line.get("chunk_ms")
            seen = chunks[0] if chunks else None
        else:
            seen = line.get("end_ms")
        return self(line) if window.holds(repeat_of(line), seen) else []

    def from_columns(self, columns: Any) -> tuple[np.ndarray, np.ndarray]:
        values = columns.get(self.name)
        values = values[np.isfinite(values)]
        return values, np.arange(values.size + 1, dtype=np.int64)


def field_value(name: str, at: str = "end") -> FieldValue:
    return FieldValue(name, at)


class ItlValues:
    """Every gap between a request's token chunks."""

    def __call__(self, line: Line) -> list[float]:
        chunks = line.get("chunk_ms") or []
        return list(np.diff(np.asarray(chunks, dtype=float))) if len(chunks) > 1 else []

    def within(self, line: Line, window: Window) -> list[float]:
        """The gaps whose later chunk arrived in the window."""
        chunks = np.asarray(line.get("chunk_ms") or [], dtype=float)
        if chunks.size < 2:
            return []
        return list(np.diff(chunks)[window.mask(repeat_of(line), chunks[1:])])

    def from_columns(self, columns: Any) -> tuple[np.ndarray, np.ndarray]:
        chunks = columns.ragged("chunk_ms")
        lengths = np.diff(chunks.offsets)
        gaps = np.maximum(lengths - 1, 0)
        keep = np.ones(chunks.values.size, dtype=bool)
        keep[chunks.offsets[:-1][lengths > 0]] = False  # a row's first chunk has no gap before it
        offsets = np.concatenate([[0], np.cumsum(gaps[gaps > 0])]).astype(np.int64)
        return np.diff(chunks.values)[keep[1:]], offsets


class TpotValues:
    """Decode time over the tokens after the first (none for a one-token request)."""

    def __call__(self, line: Line) -> list[float]:
        tokens, decode = line.get("completion_tokens"), line.get("decode_ms")
        return [decode / (tokens - 1)] if tokens and tokens > 1 and decode is not None else []

    def within(self, line: Line, window: Window) -> list[float]:
        """A request's TPOT, seen at its end."""
        return self(line) if window.holds(repeat_of(line), line.get("end_ms")) else []

    def from_columns(self, columns: Any) -> tuple[np.ndarray, np.ndarray]:
        tokens, decode = columns.get("completion_tokens"), columns.get("decode_ms")
        keep = (tokens > 1) & np.isfinite(decode)
        values = decode[keep] / (tokens[keep] - 1)
        return values, np.arange(values.size + 1, dtype=np.int64)


itl_values, tpot_values = ItlValues(), TpotValues()


def given(x: np.ndarray) -> np.ndarray:
    """A count the line carries, and not 0 (a line's `if verify:`)."""
    return np.isfinite(x) & (x != 0)


ACCEPTED_DEFINITION = ("the requests' own counts: 1 + Σ accepted drafts ÷ Σ spec_verify_ct over the measured "
                       "requests (the engine's per-request stats; no prefill token)")
TOKENS_DEFINITION = ("the requests' own counts: Σ completion tokens ÷ Σ spec_verify_ct over the measured "
                     "requests (each request's first, prefill-produced token included)")


def accept_tokens(completion_tokens: Any, verify: Any, accepted: Any) -> float:
    """The tokens a request's verify cycles are credited with, by its engine's own definition
    as the line carries it: where the engine counts the drafts it accepted (vLLM's
    per-request stats, ``spec_accepted_drafts``), one per cycle plus those, so Σ ÷ Σ cycles
    is 1 + accepted ÷ cycles (no prefill token, the count of its /metrics counters); else
    its completion tokens (SGLang's ``spec_verify_ct``: tokens ÷ cycles, the prefill's
    token included). The accept length's one numerator: the registry, the per-request
    distribution, categories, buckets and the sources gate all read it."""
    if accepted is not None:
        return float((verify or 0) + accepted)
    return float(completion_tokens or 0)


def accept_definition(lines: Any) -> str:
    """The per-request accept length's definition in words, as these lines count it."""
    return ACCEPTED_DEFINITION if any(line.get("spec_accepted_drafts") is not None for line in lines) else TOKENS_DEFINITION


class AcceptLengthRow:
    """Σ credited tokens (:func:`accept_tokens`) ÷ Σ verify cycles over the requests that
    carry verify counts: Σ completion tokens ÷ Σ cycles, or 1 + Σ accepted ÷ Σ cycles where
    the engine counts accepted drafts per request."""

    def __call__(self, line: Line) -> Optional[tuple[float, float]]:
        verify = line.get("spec_verify_ct")
        if not verify:
            return None
        return accept_tokens(line.get("completion_tokens"), verify, line.get("spec_accepted_drafts")), verify

    def within(self, line: Line, window: Window) -> Optional[tuple[float, float]]:
        """Its tokens in the window, and its cycles (and credited tokens) pro-rated by them."""
        total, verify = line.get("completion_tokens") or 0, line.get("spec_verify_ct") or 0
        if not (total and verify):
            return None
        tokens = window.tokens(line)
        accepted = line.get("spec_accepted_drafts")
        credited = tokens if accepted is None else tokens * accept_tokens(total, verify, accepted) / total
        return credited, tokens * verify / total

    def from_columns(self, columns: Any) -> np.ndarray:
        tokens, verify = columns.get("completion_tokens"), columns.get("spec_verify_ct")
        accepted = columns.get("spec_accepted_drafts")
        keep = given(verify)
        credited = np.where(np.isfinite(accepted), verify + accepted, np.nan_to_num(tokens, nan=0.0))
        return pairs(credited[keep], verify[keep])


class VerifyCycleRow:
    """Σ decode time ÷ Σ verify cycles: a request without a decode span (one chunk) adds its cycles."""

    def __call__(self, line: Line) -> Optional[tuple[float, float]]:
        verify = line.get("spec_verify_ct")
        return (line.get("decode_ms") or 0.0, verify) if verify else None

    def within(self, line: Line, window: Window) -> Optional[tuple[float, float]]:
        """The gaps between its chunks inside one of the window's stretches, and its cycles there."""
        if not line.get("spec_verify_ct"):
            return None
        ms, _, cycles = decode_in(line, window.spans_of(line))
        return ms, cycles

    def from_columns(self, columns: Any) -> np.ndarray:
        decode, verify = columns.get("decode_ms"), columns.get("spec_verify_ct")
        keep = given(verify)
        return pairs(np.nan_to_num(decode[keep], nan=0.0), verify[keep])


class DecodeStepRow:
    """Σ decode time ÷ Σ tokens after the first."""

    def __call__(self, line: Line) -> Optional[tuple[float, float]]:
        tokens, decode = line.get("completion_tokens"), line.get("decode_ms")
        return (decode, tokens - 1) if tokens and tokens > 1 and decode is not None else None

    def within(self, line: Line, window: Window) -> Optional[tuple[float, float]]:
        """The gaps between its chunks inside one of the window's stretches, and the tokens they made."""
        if len(line.get("chunk_ms") or []) < 2 or (line.get("completion_tokens") or 0) < 2:
            return None
        ms, tokens, _ = decode_in(line, window.spans_of(line))
        return ms, tokens

    def from_columns(self, columns: Any) -> np.ndarray:
        tokens, decode = columns.get("completion_tokens"), columns.get("decode_ms")
        keep = (tokens > 1) & np.isfinite(decode)
        return pairs(decode[keep], tokens[keep] - 1)


accept_length_row, verify_cycle_row, decode_step_row = AcceptLengthRow(), VerifyCycleRow(), DecodeStepRow()


def pairs(numerators: np.ndarray, denominators: np.ndarray) -> np.ndarray:
    return np.stack([numerators, denominators], axis=1).astype(float) if numerators.size else np.empty((0, 2))


def columnar(requests: Any, reader: Any) -> bool:
    """Read `requests` as columns: they are a record's columns and the reader has a columnar form."""
    return hasattr(requests, "ragged") and hasattr(reader, "from_columns")


def lines_of(requests: Any) -> list:
    """Request lines: the lines themselves, or a columnar record's rows read one by one."""
    return requests.rows() if hasattr(requests, "rows") else requests


def in_window(requests: Any, window: Window) -> list:
    """The request lines of the window's repeats."""
    return [line for lines in window.lines(lines_of(requests)).values() for line in lines]


# --- the three kinds --------------------------------------------------------------------------
#
# Each takes one arm's measured, successful requests: request lines (dicts, RecordLine
# views), or a columnar record's requests (already measured: RequestColumns.measured()).

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

    def evidence(self, requests: Any, window: Window = WHOLE) -> Evidence:
        if window.whole and columnar(requests, self.values_of):
            values, offsets = self.values_of.from_columns(requests)
        else:
            per_line = ([self.values_of(line) for line in lines_of(requests)] if window.whole else
                        [self.values_of.within(line, window) for line in in_window(requests, window)])
            lengths = np.fromiter((len(v) for v in per_line), dtype=np.int64, count=len(per_line))
            values = np.asarray([x for v in per_line for x in v], dtype=float)
            offsets = np.concatenate([[0], np.cumsum(lengths[lengths > 0])]).astype(np.int64)
        return Evidence(values, offsets, self.stat, "requests", values.size)


@dataclass(frozen=True)
class RatioOfSums:
    """(numerator, denominator) per request (`row_of(line)`, None to leave it out)."""

    row_of: Callable[[Line], Optional[tuple[float, float]]]
    kind: str = "ratio of sums over requests"

    def evidence(self, requests: Any, window: Window = WHOLE) -> Evidence:
        if window.whole and columnar(requests, self.row_of):
            rows = self.row_of.from_columns(requests)
        else:
            read = ((self.row_of(line) for line in lines_of(requests)) if window.whole else
                    (self.row_of.within(line, window) for line in in_window(requests, window)))
            found = [row for row in read if row is not None]
            rows = np.asarray(found, dtype=float).reshape(-1, 2)
        return Evidence.singles(rows, "ratio", "requests")


@dataclass(frozen=True)
class WindowRate:
    """Tokens ("tokens") or completed requests ("requests") per second, in equal windows."""

    what: str
    kind: str = "rate in time windows"

    def evidence(self, requests: Any, window: Window = WHOLE) -> Evidence:
        if not window.whole:
            by_repeat = window.lines(lines_of(requests))
            rates = [rate for repeat, lines in by_repeat.items()
                     for rate in span_rates(lines, window.spans[repeat], window, self.what)]
            return Evidence.singles(np.asarray(rates, dtype=float), "mean", "windows")
        if hasattr(requests, "ragged"):
            rates = column_window_rates(requests, self.what) if len(requests) else np.empty(0)
        else:
            lines = lines_of(requests)
            rates = window_rates(lines, self.what) if lines else np.empty(0)
        return Evidence.singles(rates, "mean", "windows")


def window_rates(lines: list[Line], what: str) -> np.ndarray:
    """Tokens (or completed requests) per second in equal windows of each repeat's span
    (its first send to its last end), repeats in the order they first appear. The windows'
    mean is then Σ tokens ÷ span: the arm's output tok/s itself (harness/measure/metrics.py
    takes it from here), so the figure is the statistic its interval resamples."""
    by_repeat: dict[Any, list[Line]] = {}
    for line in lines:
        by_repeat.setdefault(line.get("repeat", 0), []).append(line)
    rates = []
    for repeat_lines in by_repeat.values():
        start = min(line["send_ms"] for line in repeat_lines)
        end = max(line["end_ms"] for line in repeat_lines)
        if what == "tokens":
            arrivals = [token_arrivals(line) for line in repeat_lines]
            times = np.concatenate([a for a, _ in arrivals] or [np.empty(0)])
            weights = np.concatenate([w for _, w in arrivals] or [np.empty(0)])
        else:
            times = np.asarray([line["end_ms"] for line in repeat_lines], dtype=float)
            weights = np.ones(times.size)
        rates += windowed(start, end, times, weights)
    return np.asarray(rates, dtype=float)


def token_arrivals(line: Line) -> tuple[np.ndarray, np.ndarray]:
    """(times, tokens) of a request's output: its chunks' arrivals, their tokens scaled so they
    add up to its usage count (a server's usage can count a token no chunk carried), or,
    without chunk times, its whole count at its end. Σ tokens is then its completion_tokens,
    what output tok/s counts."""
    times = np.asarray(line.get("chunk_ms") or [], dtype=float)
    counts = np.asarray(line.get("chunk_tokens") or [], dtype=float)
    total = line.get("completion_tokens")
    if times.size and counts.size == times.size and counts.sum() > 0:
        return times, counts * (total / counts.sum() if total is not None else 1.0)
    end = line.get("end_ms")
    if not total or end is None:
        return np.empty(0), np.empty(0)
    return np.asarray([end], dtype=float), np.asarray([float(total)])


def column_window_rates(columns: Any, what: str) -> np.ndarray:
    """window_rates over a columnar record: the same windows, the same order."""
    repeat = np.nan_to_num(columns.get("repeat"), nan=0.0)
    kinds, first = np.unique(repeat, return_index=True)
    send, end = columns.get("send_ms"), columns.get("end_ms")
    if what == "tokens":
        chunks, tokens = columns.ragged("chunk_ms"), columns.ragged("chunk_tokens")
        if not np.array_equal(chunks.offsets, tokens.offsets) or not scalable(columns, tokens):
            return window_rates(columns.rows(), what)  # a line with a hole in a list, or no chunk tokens: as lines
        chunk_repeat = np.repeat(repeat, np.diff(chunks.offsets))
        scaled = tokens.values * np.repeat(usage_scale(columns, tokens), np.diff(tokens.offsets))
    rates: list[float] = []
    for value in kinds[np.argsort(first)]:
        mine = repeat == value
        if what == "tokens":
            in_repeat = chunk_repeat == value
            times, weights = chunks.values[in_repeat], scaled[in_repeat]
        else:
            times = end[mine]
            weights = np.ones(times.size)
        rates += windowed(float(np.min(send[mine])), float(np.max(end[mine])), times, weights)
    return np.asarray(rates, dtype=float)


def scalable(columns: Any, tokens: Any) -> bool:
    """Every row carries chunk tokens that add up to more than 0 (else token_arrivals' other
    branch, read line by line)."""
    lengths = np.diff(tokens.offsets)
    if not len(columns) or not (lengths > 0).all():  # reduceat needs every row non-empty
        return False
    return bool((np.add.reduceat(tokens.values, tokens.offsets[:-1]) > 0).all())


def usage_scale(columns: Any, tokens: Any) -> np.ndarray:
    """Per row: its usage count over its chunks' tokens (1 without a usage count), as token_arrivals."""
    sums = np.add.reduceat(tokens.values, tokens.offsets[:-1]).astype(float)
    usage = columns.get("completion_tokens")
    return np.where(np.isfinite(usage), usage / sums, 1.0)


def span_rates(lines: list[Line], spans: tuple, window: Window, what: str) -> list[float]:
    """Tokens (or completed requests) per second in WINDOWS_PER_REPEAT pieces of equal time
    laid over one repeat's stretches of a window: the pieces' mean is Σ over the stretches ÷
    their length, the figure over the window, so it is the point of the interval they give."""
    total = sum(b - a for a, b in spans)
    if total <= 0:
        return []  # no time to divide by; a stretch with no request in it is a rate of 0
    width = total / WINDOWS_PER_REPEAT
    return [count * 1000.0 / width for count in piece_counts(lines, spans, window, what)]


def piece_counts(lines: list[Line], spans: tuple, window: Window, what: str) -> list[float]:
    """How much of `what` each of the pieces of the stretches holds: completed requests by
    their end; tokens by the window's rule. Arrivals are binned once for all pieces (a load of
    many slices asks for every slice's pieces)."""
    if what == "tokens" and window.shared_edges:
        return [sum(window.tokens(line, piece) for line in lines) for piece in pieces(spans, WINDOWS_PER_REPEAT)]
    if what == "requests":
        times, weights, rest = np.asarray([line["end_ms"] for line in lines], dtype=float), None, []
    else:
        streamed = [token_arrivals(line) for line in lines if chunked(line)]
        rest = [line for line in lines if not chunked(line)]  # nothing says when their tokens came: pro-rated
        times = np.concatenate([t for t, _ in streamed] or [np.empty(0)])
        weights = np.concatenate([w for _, w in streamed] or [np.empty(0)])
    if len(spans) == 1 and not rest:  # one stretch (a slice): its pieces are bins, counted in one pass
        edges = spans[0][0] + (spans[0][1] - spans[0][0]) * np.arange(WINDOWS_PER_REPEAT + 1) / WINDOWS_PER_REPEAT
        bins = np.searchsorted(edges, times, side="right") - 1
        keep = (bins >= 0) & (bins < WINDOWS_PER_REPEAT) & (times < spans[0][1])
        return list(np.bincount(bins[keep], weights=None if weights is None else weights[keep],
                                minlength=WINDOWS_PER_REPEAT).astype(float))
    counts = []
    for piece in pieces(spans, WINDOWS_PER_REPEAT):
        inside = np.zeros(times.shape, dtype=bool)
        for a, b in piece:
            inside |= (times >= a) & (times < b)
        counts.append(float(inside.sum() if weights is None else weights[inside].sum())
                      + sum(tokens_in_life(line, a, b) for line in rest for a, b in piece))
    return counts


def windowed(start: float, end: float, times: np.ndarray, weights: np.ndarray) -> list[float]:
    """Weights per second in WINDOWS_PER_REPEAT equal windows of [start, end] (none for an empty span)."""
    if not end > start:
        return []
    edges = np.linspace(start, end, WINDOWS_PER_REPEAT + 1)
    counts, _ = np.histogram(times, bins=edges, weights=weights)
    return list(counts * 1000.0 / (edges[1] - edges[0]))


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
