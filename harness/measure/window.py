"""Where a figure is measured: a window of one arm's request lines, on the lines' own time
axis (ms from each repeat's run start), and how the tokens, decode gaps and values of one
request are counted inside it.

Every registry metric (harness/measure/registry.py) computes over a window of the same
lines: the whole load (:data:`WHOLE`), the steady window (harness/measure/steady.py chooses
its stretches), a timeslice (harness/measure/timeslices.py chooses its edges). Those modules
only choose windows; the registry's samples (harness/measure/samples.py) read a request
through this module, so a figure over a slice and the same figure over the whole load are
one definition, and a figure and its interval one estimator (harness/measure/estimate.py).

A window is, per repeat, a few stretches [start, end) of that repeat's time axis. Tokens are
counted at their chunks' arrival by default; the steady window shares a chunk's tokens
across an edge instead (``shared_edges``), because its stretches open and close mid-decode
(where the running batch fills or empties), so an edge between two chunks is the rule there,
not the exception.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np

Span = tuple[float, float]


@dataclass(frozen=True)
class Window:
    """A named window: per repeat (its index in the lines' ``repeat``), its stretches in ms.
    No stretches: the whole load (each repeat's completed requests, first send to last end)."""

    name: str
    spans: Optional[dict[int, tuple[Span, ...]]] = None
    shared_edges: bool = False  # a chunk's tokens shared across an edge (the steady window's rule)

    @classmethod
    def over(cls, name: str, spans: Iterable[Span], repeat: int = 0, shared_edges: bool = False) -> "Window":
        """One repeat's window of the given stretches."""
        return cls(name, {int(repeat): tuple((float(a), float(b)) for a, b in spans)}, shared_edges)

    @property
    def whole(self) -> bool:
        return self.spans is None

    def lines(self, lines: Iterable[Any]) -> dict[int, list[Any]]:
        """The lines of each of the window's repeats, in the window's order of repeats."""
        by_repeat: dict[int, list[Any]] = {k: [] for k in self.spans or {}}
        for line in lines:
            mine = by_repeat.get(repeat_of(line))
            if mine is not None:
                mine.append(line)
        return by_repeat

    def extent(self, repeat: int) -> Optional[Span]:
        """A repeat's first stretch's start to its last one's end (None: the repeat is not in it).
        A request's own values (a TTFT, a gap, an E2E) belong to the window where they were seen
        inside it: the stretches say where a rate or a decode step is measured (the steady
        window's every-slot-decoding stretches end at a last chunk, before its request ends),
        not which requests count."""
        spans = () if self.spans is None else self.spans.get(repeat, ())
        return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None

    def holds(self, repeat: int, t: Optional[float]) -> bool:
        """Whether a request's value seen at instant ``t`` of a repeat lies in the window (half-open)."""
        if self.spans is None or t is None:
            return t is not None
        extent = self.extent(repeat)
        return extent is not None and extent[0] <= t < extent[1]

    def mask(self, repeat: int, times: np.ndarray) -> np.ndarray:
        """:meth:`holds` for many instants at once (a request's chunks)."""
        if self.spans is None:
            return np.ones(times.shape, dtype=bool)
        extent = self.extent(repeat)
        if extent is None:
            return np.zeros(times.shape, dtype=bool)
        return (times >= extent[0]) & (times < extent[1])

    def spans_of(self, line: Any) -> tuple[Span, ...]:
        """The stretches of the line's repeat (none where the window leaves that repeat out)."""
        return () if self.spans is None else self.spans.get(repeat_of(line), ())

    def tokens(self, line: Any, spans: Optional[Iterable[Span]] = None) -> float:
        """A request's output tokens inside the stretches (its repeat's, unless given), by the window's rule."""
        spans = self.spans_of(line) if spans is None else tuple(spans)
        if self.shared_edges:
            return tokens_over(line, spans)
        return sum(tokens_arrived(line, a, b) for a, b in spans)


WHOLE = Window("whole")


def repeat_of(line: Any) -> int:
    return int(line.get("repeat") or 0)


def tokens_arrived(line: Any, start_ms: float, end_ms: float) -> float:
    """A request's output tokens whose chunks arrived in [start, end): each chunk's tokens
    scaled so the chunks add up to the usage count; without chunk times, its count
    pro-rated by how much of its life lies in the window (nothing says when they came)."""
    if chunked(line):
        times, counts = line["chunk_ms"], line["chunk_tokens"]
        total = line.get("completion_tokens") or 0
        return total / sum(counts) * sum(n for t, n in zip(times, counts) if start_ms <= t < end_ms)
    return tokens_in_life(line, start_ms, end_ms)


def chunked(line: Any) -> bool:
    """The request's chunks say when its tokens came: arrival times, each with its tokens."""
    times, counts = line.get("chunk_ms") or [], line.get("chunk_tokens") or []
    return bool(times) and len(counts) == len(times) and sum(counts) > 0


def tokens_in_life(line: Any, start_ms: float, end_ms: float) -> float:
    """A request's count pro-rated by its life's overlap with [start, end)."""
    total = line.get("completion_tokens") or 0
    begin, finish = line.get("send_ms"), line.get("end_ms")
    if begin is None or finish is None or finish <= begin:
        return float(total) if begin is not None and start_ms <= begin < end_ms else 0.0
    overlap = max(0.0, min(finish, end_ms) - max(begin, start_ms))
    return total * overlap / (finish - begin)


def tokens_over(line: Any, spans: Iterable[Span]) -> float:
    """A request's output tokens made inside the spans: its token count grows linearly between
    consecutive chunks (scaled to its usage count), so a span's edge falling between two
    chunks takes its share of the tokens between them, not all or none."""
    spans = list(spans)
    times, counts = line.get("chunk_ms") or [], line.get("chunk_tokens") or []
    total = line.get("completion_tokens") or 0
    if len(times) < 2 or len(counts) != len(times) or sum(counts) <= 0:
        return sum(tokens_arrived(line, a, b) for a, b in spans)
    made = np.cumsum(np.asarray(counts, dtype=float)) * total / sum(counts)
    edges = np.asarray(spans, dtype=float)
    at = np.interp(edges, np.asarray(times, dtype=float), made, left=0.0)
    return float((at[:, 1] - at[:, 0]).sum()) if edges.size else 0.0


def decode_in(line: Any, spans: tuple[Span, ...]) -> tuple[float, float, float]:
    """(ms, tokens, verify cycles) of a request's decoding inside the spans: the gaps between
    consecutive chunks that both arrived in one span, the later chunk's tokens, and its share
    of the request's verify cycles (cycles per decoded token, as the whole-load figures count them)."""
    times, counts = line.get("chunk_ms") or [], line.get("chunk_tokens") or []
    total, verify = line.get("completion_tokens") or 0, line.get("spec_verify_ct") or 0
    if len(times) < 2 or len(counts) != len(times) or total < 2:
        return 0.0, 0.0, 0.0
    scale = (total - 1) / max(1, sum(counts[1:]))  # decoded tokens: all but the prefill's first
    starts = [a for a, _ in spans]
    ms = tokens = 0.0
    for before, now, n in zip(times, times[1:], counts[1:]):
        k = bisect.bisect_right(starts, before) - 1
        if k >= 0 and now <= spans[k][1]:
            ms, tokens = ms + now - before, tokens + n * scale
    return ms, tokens, tokens * verify / (total - 1)


def pieces(spans: Iterable[Span], count: int) -> list[list[Span]]:
    """The spans cut into `count` pieces of equal total length, each piece its own spans."""
    spans = list(spans)
    width = sum(b - a for a, b in spans) / count
    out: list[list[Span]] = [[] for _ in range(count)]
    done = 0.0  # measured time before the current span
    for a, b in spans:
        for k in range(int(done // width), count):
            lo, hi = max(a, a + k * width - done), min(b, a + (k + 1) * width - done)
            if hi > lo:
                out[k].append((lo, hi))
            if a + (k + 1) * width - done >= b:
                break
        done += b - a
    return out
