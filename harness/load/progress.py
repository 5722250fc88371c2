"""Counting a load as it runs, and the live progress line made from those counts."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from harness.load.records import RequestRecord


@dataclass
class ProgressSnapshot:
    done: int  # measured requests finished
    total: int | None  # num_prompts, or None in duration mode
    in_flight: int
    errors: int
    tokens: int  # completion tokens received so far (measured requests)
    elapsed_s: float  # since the first measured send
    warmup: bool = False  # still in the warm-up phase
    final: bool = False
    duration_s: float | None = None  # duration mode: planned seconds

    @property
    def tok_s(self) -> float:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


class LoadCounter:
    """Requests in flight and finished, errors and tokens, as the load goes."""

    def __init__(self, total: int | None, duration_s: float | None):
        self.total = total
        self.duration_s = duration_s
        self.in_flight: list[RequestRecord] = []
        self.done = 0
        self.errors = 0
        self.tokens_done = 0
        self.measure_start: float | None = None  # when the first measured request was sent
        self.in_warmup = True

    def sent(self, rec: RequestRecord) -> None:
        self.in_flight.append(rec)
        if not rec.warmup and self.measure_start is None:
            self.measure_start = time.perf_counter()

    def left(self, rec: RequestRecord) -> None:
        """``rec`` is no longer in flight (ended, or cancelled)."""
        self.in_flight.remove(rec)

    def finished(self, rec: RequestRecord) -> None:
        """``rec`` ended (ok or not); warm-ups are not counted."""
        if rec.warmup:
            return
        self.done += 1
        if rec.ok:
            self.tokens_done += rec.completion_tokens or 0
        elif rec.failed:  # a request the client cancelled is no error
            self.errors += 1

    def snapshot(self, final: bool = False) -> ProgressSnapshot:
        live = sum(sum(r.chunk_tokens) for r in self.in_flight if not r.warmup)
        return ProgressSnapshot(
            done=self.done,
            total=self.total,
            in_flight=len(self.in_flight),
            errors=self.errors,
            tokens=self.tokens_done + live,
            elapsed_s=0.0 if self.measure_start is None else time.perf_counter() - self.measure_start,
            warmup=self.in_warmup,
            final=final,
            duration_s=self.duration_s,
        )


_last_print = [0.0]


def print_progress(snap: ProgressSnapshot, stream: Any = None, min_interval_s: float = 0.25, label: str = "") -> None:
    """One live line on stderr (``\\r``-rewritten), at most ~4 times a second; the final
    snapshot ends the line."""
    now = time.monotonic()
    out = stream if stream is not None else sys.stderr
    interactive = getattr(out, "isatty", lambda: False)()
    if not interactive:  # a log file or CI: a plain line every 10 s, not a stream of \r
        min_interval_s = max(min_interval_s, 10.0)
    if not snap.final and now - _last_print[0] < min_interval_s:
        return
    _last_print[0] = now
    if snap.warmup:
        line = f"warm-up ... {snap.done} done"
    else:
        total = f"/{snap.total}" if snap.total is not None else f" ({snap.elapsed_s:.0f}/{snap.duration_s:g}s)"
        line = (
            f"{snap.done}{total} done  {snap.in_flight} in flight  {snap.tok_s:8.1f} tok/s  "
            f"{snap.errors} errors  {snap.elapsed_s:6.1f}s"
        )
    if interactive:
        out.write("\r" + label + line + "   " + ("\n" if snap.final else ""))
    else:
        out.write(label + line + "\n")
    out.flush()
