"""An arm's figures over time: one load cut into slices of ``record.timeslice_s`` seconds, each
with the registry's figures over it (the metrics whose entry names the timeslice window:
output tok/s, TTFT and ITL percentiles, accept length) and, from the telemetry samples on the
same time axis, GPU clock and power. One number per arm hides warm-up, throttling or a server
that slows down mid-run; the slices show them (results.json ``timeslices``, the report's
timeline, harness/report/timeline.py).

This module only chooses the windows (the slices' edges); what a slice holds is the
registry's business, counted as harness/measure/window.py says: the tokens whose chunks
arrived in it, the TTFT of requests whose first token arrived in it, the gaps between chunks
that ended in it. Request lines give times in ms from the load's run start (requests.jsonl's
shape); a GPU sample is placed on that axis by the load's run start (both are
``time.perf_counter`` readings) and a slice holds the samples read in it.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Optional

import numpy as np

from harness.limits import MAX_TIMESLICES
from harness.measure.registry import TIMESLICE, figures_over
from harness.measure.window import Window, chunked, repeat_of


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    return None if x is None else round(float(x), nd)


def span_ms(lines: list[dict]) -> tuple[float, float]:
    """(first measured send, last end) of the lines, in ms."""
    start = min(line["send_ms"] for line in lines)
    return start, max(line["end_ms"] if line.get("end_ms") is not None else line["send_ms"] for line in lines)


def slice_width(lines: list[dict], slice_s: float) -> float:
    """slice_s, or wider where the load is so long that slice_s would cut it into more than
    MAX_TIMESLICES slices (a load's length is known only once it ran)."""
    start, end = span_ms(lines)
    return max(slice_s, (end - start) / 1000.0 / MAX_TIMESLICES)


def slice_edges(lines: list[dict], slice_s: float) -> list[float]:
    """Edges (ms) from the first measured send to the last end, slice_s apart (the last slice
    may be short), at most MAX_TIMESLICES slices."""
    start, end = span_ms(lines)
    width = slice_width(lines, slice_s) * 1000.0
    count = max(1, int(np.ceil((end - start) / width - 1e-9)))
    # the last edge a hair past the last end, so that the last chunk (at the end) lies inside a slice
    return [start + k * width for k in range(count)] + [(end if end > start else start + width) + 1e-6]


def gpu_in(samples: Iterable[tuple[float, Any]], start: float, end: float) -> dict[str, Optional[float]]:
    """Mean SM clock over the GPUs' samples in [start, end) and their power summed (each GPU's mean)."""
    inside = [s for t, s in samples if start <= t < end]
    clocks = [s.sm_clock_mhz for s in inside if s.sm_clock_mhz is not None]
    power_by_gpu: dict[str, list[float]] = {}
    for s in inside:
        if s.power_w is not None:
            power_by_gpu.setdefault(s.uuid, []).append(s.power_w)
    return {"sm_clock_mhz": _r(np.mean(clocks), 1) if clocks else None,
            "power_w": _r(sum(np.mean(v) for v in power_by_gpu.values()), 1) if power_by_gpu else None,
            "gpu_samples": len(inside)}


def one_slice(lines: list[dict], ok: list[dict], start: float, end: float, gpu: list[tuple[float, Any]],
              quiet: "Quiet") -> dict:
    """A slice [start, end): the registry's figures over it, the requests sent in it, its GPU samples."""
    if quiet.holds(start, end):
        figures = copy.deepcopy(quiet.figures)
    else:
        window = Window(TIMESLICE, {repeat_of(lines[0]): ((start, end),)})  # one load: one repeat's axis
        # a request that ended before the slice or was sent after it holds nothing of it
        inside = [line for line in ok if line["send_ms"] < end and (line.get("end_ms") or line["send_ms"]) >= start]
        figures = figures_over(inside, window, TIMESLICE)
    return {"start_ms": _r(start), "end_ms": _r(end), **figures,
            "requests_sent": sum(1 for line in lines if start <= line["send_ms"] < end),
            **(gpu_in(gpu, start, end) if gpu else {})}


class Quiet:
    """Where nothing was seen: a slice with no request's chunk or end in it, and no request
    without chunk times alive in it, has the figures of a slice with no requests (0 tok/s, no
    TTFT, no gap), computed once. A load far longer than its slices (up to MAX_TIMESLICES of
    them) is mostly such slices, and the registry's figures cost the same over an empty one."""

    def __init__(self, ok: list[dict], repeat: int):
        seen = [t for line in ok for t in (line.get("chunk_ms") or [])]
        seen += [line["end_ms"] for line in ok if line.get("end_ms") is not None]
        self.instants = np.sort(np.asarray(seen, dtype=float))
        self.unchunked = [line for line in ok if not chunked(line)]
        self.figures = figures_over([], Window(TIMESLICE, {repeat: ((0.0, 1.0),)}), TIMESLICE)

    def holds(self, start: float, end: float) -> bool:
        first = int(np.searchsorted(self.instants, start, side="left"))
        if first < self.instants.size and self.instants[first] < end:
            return False
        return not any(line["send_ms"] < end and (line.get("end_ms") or line["send_ms"]) >= start
                       for line in self.unchunked)


def timeslices(lines: list[dict], slice_s: float, gpu_samples: list[Any] = (), run_start: Optional[float] = None) -> list[dict]:
    """One load's slices from its measured request lines (warm-up excluded) and, placed by
    its ``run_start`` (perf_counter s), the GPU samples read during it."""
    lines = [line for line in lines if not line.get("warmup") and line.get("send_ms") is not None]
    if not lines:
        return []
    ok = [line for line in lines if line.get("ok")]
    gpu = [((s.t - run_start) * 1000.0, s) for s in gpu_samples] if run_start is not None else []
    edges = slice_edges(lines, slice_s)
    quiet = Quiet(ok, repeat_of(lines[0]))
    return [one_slice(lines, ok, a, b, gpu, quiet) for a, b in zip(edges, edges[1:])]


def timeslices_block(lines: list[dict], slice_s: float, gpu_samples: list[Any] = (),
                     run_starts: Optional[list[float]] = None) -> dict[str, Any]:
    """The arm's `timeslices` block: per repeat (its own time axis), its slices."""
    repeats = sorted({int(line.get("repeat") or 0) for line in lines})
    by_repeat = {k: [line for line in lines if int(line.get("repeat") or 0) == k] for k in repeats}
    measured = [[line for line in part if not line.get("warmup") and line.get("send_ms") is not None]
                for part in by_repeat.values()]
    width = max([slice_s, *(slice_width(part, slice_s) for part in measured if part)])
    starts = run_starts or []
    block: dict[str, Any] = {"slice_s": width, "repeats": [
        {"repeat": k, "slices": timeslices(by_repeat[k], width, gpu_samples, starts[k] if k < len(starts) else None)}
        for k in repeats]}
    if width > slice_s:
        block["note"] = (f"record.timeslice_s={slice_s:g} would cut the load into more than {MAX_TIMESLICES} slices; "
                         f"each slice is {width:.3g} s wide instead")
    return block
