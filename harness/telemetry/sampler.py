"""Sample an opened source from a background thread, and tag each sample with its phase.

The load runner calls ``mark_load_start`` when the client has *seen tokens stream*
(not when it sent a request: a request that failed with a 400 never loaded the GPU) and
``mark_load_end`` when the load is over.  Each start/end pair is one **load window**: a
workload repeated N times on one server gives N windows, and what happens between them
(the next repeat's warm-up, the wait for its first token) is not load.  Phases are decided
from each sample's own read time against the marks, once, in ``stop()``:

    idle     read before anything was sent (the idle snapshot)
    warmup   after the idle snapshot but outside every load window (warm-up requests,
             the wait for the first token, the gap between two repeats)
    ramp_in  within ``ramp_in_s`` after a window's start: clocks and power still ramping
    load     after the ramp-in, before the window's end
    after    read after the last end mark

so a sample read just before a mark is never counted on the wrong side of it, however
late the thread gets to it.  If ``mark_load_start`` is never called there are no load
samples at all, and the summary says so.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from harness.telemetry.base import GpuInfo, GpuSample, Source, now

# idle: before anything was sent; warmup: warm-up requests and the wait for the first
# measured token (neither idle nor the load); ramp_in: the first ramp_in_s of the load.
PHASES = ("idle", "warmup", "ramp_in", "load", "after")


@dataclass
class Telemetry:
    source: str
    gpus: list[GpuInfo]
    samples: list[GpuSample]
    interval_s: float
    ramp_in_s: float
    load_start: float | None  # the first window's start
    load_end: float | None  # the last end mark: later samples are "after"
    notes: list[str] = field(default_factory=list)
    disabled_fields: list[str] = field(default_factory=list)
    sampler_cpu_s: float = 0.0  # CPU time of the sampler thread (time.thread_time), for the overhead report
    wall_s: float = 0.0  # how long the sampler ran
    windows: list[tuple[float, float | None]] = field(default_factory=list)  # (start, end) per load


def window_of(t: float, windows: list[tuple[float, float | None]]) -> int | None:
    """The index of the load window holding ``t`` (None: outside every window)."""
    for i, (start, end) in enumerate(windows):
        if start <= t and (end is None or t < end):
            return i
    return None


def phase_of(t: float, windows: list[tuple[float, float | None]], load_end: float | None, ramp_in_s: float,
             idle_end: float | None = None) -> str:
    if load_end is not None and t >= load_end:
        return "after"
    i = window_of(t, windows)
    if i is not None:
        return "ramp_in" if t < windows[i][0] + ramp_in_s else "load"
    if idle_end is not None and t >= idle_end or windows and t >= windows[0][0]:
        return "warmup"
    return "idle"


class Sampler:
    """``start()`` -> marks -> ``stop()`` -> Telemetry.  The source is opened (and later
    closed) by the caller; the sampler only reads it."""

    def __init__(self, source: Source, interval_s: float = 0.1, ramp_in_s: float = 2.0):
        if interval_s <= 0:
            raise ValueError("telemetry interval_s must be > 0")
        self.source = source
        self.interval_s = float(interval_s)
        self.ramp_in_s = float(ramp_in_s)
        self.idle_end: float | None = None
        self.windows: list[tuple[float, float | None]] = []
        self.load_end: float | None = None
        self._samples: list[GpuSample] = []
        self._notes: list[str] = []
        self._errors: dict[str, int] = {}
        self._late = 0
        self._reads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0
        self._t_start = 0.0
        self._t_stop = 0.0

    # ------------------------------------------------------------------ marks
    def mark_idle_end(self, t: float | None = None) -> None:
        """Requests are about to be sent: later samples are no longer the idle snapshot."""
        if self.idle_end is None:
            self.idle_end = now() if t is None else t

    @property
    def load_start(self) -> float | None:
        return self.windows[0][0] if self.windows else None

    def window_open(self) -> bool:
        return bool(self.windows) and self.windows[-1][1] is None

    def mark_load_start(self, t: float | None = None) -> None:
        """The client has seen tokens stream (time.perf_counter(); default now): a load
        window opens, unless one is open already (the first call wins)."""
        if not self.window_open():
            self.windows.append((now() if t is None else t, None))

    def mark_load_end(self, t: float | None = None) -> None:
        """This load is over: its window closes. Samples after the last end mark are "after"."""
        t = now() if t is None else t
        if self.window_open():
            self.windows[-1] = (self.windows[-1][0], t)
        self.load_end = t

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("Sampler.start() called twice")
        self._t_start = now()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cpu0 = time.thread_time()
        next_t = now()
        try:
            while True:
                try:
                    got = self.source.read()
                except Exception as exc:  # a source must not raise; if one does, keep sampling
                    key = f"{type(exc).__name__}: {exc}"
                    self._errors[key] = self._errors.get(key, 0) + 1
                    got = []
                self._samples.extend(got)
                self._reads += 1
                next_t += self.interval_s
                delay = next_t - now()
                if delay < 0:
                    # Fell behind (a slow read): count it and start a fresh schedule
                    # rather than firing a burst of catch-up reads.
                    self._late += 1
                    next_t = now()
                    delay = 0.0
                if self._stop.wait(delay):
                    break
        finally:
            self._cpu_s = time.thread_time() - cpu0

    def stop(self) -> Telemetry:
        """Stop the thread (after its current read) and tag every sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._t_stop = now()
        samples = sorted(self._samples, key=lambda s: s.t)
        for s in samples:
            s.phase = phase_of(s.t, self.windows, self.load_end, self.ramp_in_s, self.idle_end)
        notes = list(self.source.repeated_notes())
        for err, n in self._errors.items():
            notes.append(f"source read raised {err}" + (f" (x{n})" if n > 1 else ""))
        if self._late:
            notes.append(
                f"{self._late} of {self._reads} reads took longer than the {self.interval_s:g} s interval"
            )
        lengths = [end - start for start, end in self.windows if end is not None]
        if not self.windows:
            notes.append("no load samples: the load never started (no tokens were seen streaming)")
        elif lengths and len(lengths) == len(self.windows) and max(lengths) <= self.ramp_in_s:
            notes.append(
                f"no load samples: the load lasted {max(lengths):.2f} s, "
                f"not longer than the {self.ramp_in_s:g} s ramp-in"
            )
        return Telemetry(
            source=self.source.name,
            gpus=list(self.source.opened),
            samples=samples,
            interval_s=self.interval_s,
            ramp_in_s=self.ramp_in_s,
            load_start=self.load_start,
            load_end=self.load_end,
            notes=notes,
            disabled_fields=list(self.source.disabled_fields),
            sampler_cpu_s=self._cpu_s,
            wall_s=self._t_stop - self._t_start,
            windows=list(self.windows),
        )
