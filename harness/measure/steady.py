"""The steady window of a load, found in its own request timeline, and the figures over it.

A whole-load throughput ratio weighs the ramp-in (slots filling, arrivals building up) and
the tail (slots emptying) as much as the part where the server runs at the load it was
asked for, and the two arms of a comparison spend different shares of their load there. So
speedup and break-even are measured over the steady window (docs/measurement.md,
"The steady window"):

* closed loop (``concurrency`` slots): from the first moment every slot is busy to the
  last moment one goes idle for good; a slot that frees and is refilled at once (the next
  request of a closed loop) does not end it;
* open loop (a request rate): from one median request lifetime (E2E) after the first
  send, when the arrivals have ramped in, to the last send, after which the load drains.

A window shorter than ``min_fraction`` of the load (first send to last end) is
inconclusive with the reason, never a number. This module only chooses the window (and,
for a closed loop, its stretches with every slot decoding, ``measured_spans``); the figures
over it are the metric registry's (harness/measure/registry.py, the metrics whose entry
names the steady window), counted as harness/measure/window.py says: a request's tokens grow
linearly between its chunks, so an edge between two chunks takes its share; decode step and
verify cycle come from the gaps between consecutive chunks that both arrived inside a stretch.

Everything reads request lines (requests.jsonl's shape: ``send_ms``, ``end_ms``,
``chunk_ms``, ``chunk_tokens``, ``completion_tokens``, ``spec_verify_ct``, ``ok``), so a
recorded run can be re-read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.measure.registry import OUTPUT_RATE, STEADY, figures_over, metric, metric_value, over_window, put
from harness.measure.samples import Evidence
from harness.measure.window import Window, repeat_of

CLOSED, OPEN = "closed_loop", "open_loop"


@dataclass
class SteadyWindow:
    """Where the load was stationary (ms on the record's request-time axis), or why there is no such window."""

    rule: str  # CLOSED | OPEN
    load_start_ms: float
    load_end_ms: float
    start_ms: Optional[float] = None
    end_ms: Optional[float] = None
    inconclusive: Optional[str] = None  # one sentence: why there are no steady figures

    @property
    def seconds(self) -> float:
        return 0.0 if self.start_ms is None else max(0.0, self.end_ms - self.start_ms) / 1000.0

    @property
    def share(self) -> float:
        """The window's share of the whole load (first send to last end)."""
        load = self.load_end_ms - self.load_start_ms
        return self.seconds * 1000.0 / load if load > 0 else 0.0


def _occupancy_events(lines: list[dict]) -> list[tuple[float, int]]:
    """(time, +1 at a send / -1 at an end), an end before a send at the same instant."""
    events = [(line["send_ms"], 1) for line in lines]
    events += [(line["end_ms"], -1) for line in lines if line.get("end_ms") is not None]
    return sorted(events, key=lambda e: (e[0], e[1]))


def closed_loop_window(lines: list[dict], concurrency: int) -> tuple[Optional[float], Optional[float], int]:
    """(first moment all `concurrency` slots are busy, last moment one of them goes idle for
    good, the most in flight at once). Ends and sends that fall together are a slot refilled,
    so occupancy is judged after every event at one instant."""
    busy, peak, start, end = 0, 0, None, None
    events = _occupancy_events(lines)
    for i, (t, step) in enumerate(events):
        busy += step
        if i + 1 < len(events) and events[i + 1][0] == t:
            continue  # the instant's other events first
        peak = max(peak, busy)
        if busy >= concurrency:
            start = t if start is None else start
            end = None  # full again: an earlier drop was a slot refilled
        elif start is not None and end is None:
            end = t
    return start, end, peak


def steady_window(lines: list[dict], concurrency: int, request_rate: Optional[float],
                  min_fraction: float) -> SteadyWindow:
    """The steady window of one load's measured requests (warm-up excluded by the caller)."""
    lines = [line for line in lines if line.get("send_ms") is not None]
    rule = OPEN if request_rate else CLOSED
    if not lines:
        return SteadyWindow(rule, 0.0, 0.0, inconclusive="no measured request was sent, so there is no steady window")
    first = min(line["send_ms"] for line in lines)
    last = max(line["end_ms"] if line.get("end_ms") is not None else line["send_ms"] for line in lines)
    window = SteadyWindow(rule, first, last)
    if rule == CLOSED:
        window.start_ms, window.end_ms, peak = closed_loop_window(lines, concurrency)
        if window.start_ms is None:
            window.inconclusive = (f"never were all {concurrency} slots busy at once (at most {peak} requests in "
                                   f"flight), so the load has no steady state at concurrency {concurrency}")
            return window
        window.end_ms = last if window.end_ms is None else window.end_ms
        what = f"all {concurrency} slots busy"
    else:
        lifetimes = [line["end_ms"] - line["send_ms"] for line in lines if line.get("end_ms") is not None]
        window.start_ms = first + (float(np.median(lifetimes)) if lifetimes else 0.0)
        window.end_ms = max(line["send_ms"] for line in lines)
        what = "from one median request lifetime after the first send to the last send"
    if rule == OPEN and window.end_ms <= window.start_ms:
        window.inconclusive = (f"the requests' median lifetime ({(window.start_ms - first) / 1000.0:.2f} s) is longer "
                               f"than the arrivals lasted ({(window.end_ms - first) / 1000.0:.2f} s), so they never "
                               f"came to balance the departures: the load is too short, or the server falls behind "
                               f"its arrivals")
    elif window.end_ms <= window.start_ms or window.share < min_fraction:
        window.inconclusive = (f"the steady window ({what}) is {window.seconds:.2f} s, {window.share:.0%} of the "
                               f"load's {(last - first) / 1000.0:.2f} s, under record.steady_min_fraction "
                               f"{min_fraction:.0%}: the load is too short to have a steady state")
    return window


def decoding_spans(ok: list[dict], concurrency: int, start_ms: float, end_ms: float) -> list[tuple[float, float]]:
    """The stretches of [start, end] in which `concurrency` requests are decoding at once
    (each between its first and its last chunk): the server's running batch is the
    concurrency. A slot whose next request is sent but not yet prefilled runs the batch one
    short, which past a compute-bound knee makes every other request's step faster."""
    events = sorted([(line["chunk_ms"][0], 1) for line in ok if len(line.get("chunk_ms") or []) >= 2]
                    + [(line["chunk_ms"][-1], -1) for line in ok if len(line.get("chunk_ms") or []) >= 2],
                    key=lambda e: (e[0], e[1]))
    spans, busy, opened = [], 0, None
    for t, step in events:
        busy += step
        if busy >= concurrency and opened is None:
            opened = t
        elif busy < concurrency and opened is not None:
            a, b = max(opened, start_ms), min(t, end_ms)
            spans += [(a, b)] if b > a else []
            opened = None
    return spans


DECODING_SHARE_MIN = 0.5  # fewer decoding-at-full-batch stretches than this share of the window: use the window


def measured_spans(ok: list[dict], window: SteadyWindow, concurrency: int) -> list[tuple[float, float]]:
    """What the steady figures are measured over: a closed loop's stretches of the window with
    every slot decoding, where they cover at least DECODING_SHARE_MIN of it (requests with chunk
    times), else the whole window; an open loop's whole window."""
    whole = [(window.start_ms, window.end_ms)]
    if window.rule != CLOSED:
        return whole
    spans = decoding_spans(ok, concurrency, window.start_ms, window.end_ms)
    covered = sum(b - a for a, b in spans)
    return spans if covered >= DECODING_SHARE_MIN * (window.end_ms - window.start_ms) else whole


def steady_figures(lines: list[dict], concurrency: int, request_rate: Optional[float],
                   min_fraction: float) -> dict[str, Any]:
    """The `steady` block of an arm: its window and, when conclusive, the registry's figures
    over the stretches it measures (output tok/s, decode step, verify cycle: the metrics whose
    entry names the steady window). `lines`: the load's measured request lines."""
    window = steady_window(lines, concurrency, request_rate, min_fraction)
    # the concurrency lets a reader cut the figure's own stretches again (rate_evidence)
    block: dict[str, Any] = {"rule": window.rule, "concurrency": concurrency,
                             "start_ms": _r(window.start_ms), "end_ms": _r(window.end_ms),
                             "window_s": _r(window.seconds), "share_of_load": _r(window.share),
                             "inconclusive": window.inconclusive}
    for key in figure_keys():
        put(block, key, None)
    if window.inconclusive:
        return block
    ok = completed(lines)
    spans = measured_spans(ok, window, concurrency)
    seconds = sum(b - a for a, b in spans) / 1000.0
    # no completed request (all cancelled or failed), or no time to divide by: a throughput
    # of 0 would be divided by (a speedup against this arm), so the figures are missing, said why
    if not ok or seconds <= 0:
        block["inconclusive"] = no_rate_reason(lines, ok)
        return block
    measured = Window(STEADY, {k: tuple(spans) for k in {repeat_of(line) for line in ok}}, shared_edges=True)
    block.update(figures_over(ok, measured, STEADY), completion_tokens=_r(sum(measured.tokens(line) for line in ok), 1),
                 measured_share=_r(seconds / window.seconds) if window.seconds else None)
    return block


def figure_keys() -> list[str]:
    """The steady block's figures: the registry's metrics measured over the steady window."""
    return [m.path for m in over_window(STEADY)]


def completed(lines: list[dict]) -> list[dict]:
    """The lines the steady figures count: measured, successful, with a token count."""
    return [line for line in lines if line.get("ok") and line.get("completion_tokens") is not None
            and not line.get("warmup")]


def no_rate_reason(lines: list[dict], ok: list[dict]) -> str:
    """Why a steady window holds no rate: no measured request completed in it, or none had a span."""
    if ok:
        return "the completed requests span no time inside the steady window, so it has no rate"
    cancelled = sum(1 for line in lines if line.get("cancelled"))
    return (f"no measured request completed ({len(lines) - cancelled} failed, {cancelled} cancelled by the "
            f"client), so the steady window has no output rate")


def combine(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeats' steady blocks: each figure the median of the conclusive repeats'; inconclusive
    (the first repeat's reason) only when no repeat had a steady window."""
    conclusive = [b for b in blocks if b and not b.get("inconclusive")]
    if not conclusive:
        return dict(blocks[0]) if blocks else {}
    combined = {"rule": conclusive[0]["rule"], "concurrency": conclusive[0].get("concurrency"),
                "repeats_conclusive": len(conclusive), "inconclusive": None,
                "windows_ms": [windows_of(b)[0] if windows_of(b) else None for b in blocks]}
    for key in ("window_s", "share_of_load", *figure_keys()):  # a figure's dotted path nests, as in results.json
        values = [v for b in conclusive if (v := metric_value(b, key)) is not None]
        put(combined, key, _r(float(np.median(values))) if values else None)
    return combined


def windows_of(block: dict[str, Any]) -> list[Optional[list[float]]]:
    """Each repeat's steady window [start, end] in ms (None for a repeat without one)."""
    if not block or block.get("inconclusive"):
        return []
    if "windows_ms" in block:
        return list(block["windows_ms"])
    return [[block["start_ms"], block["end_ms"]]]


def rate_evidence(lines: list[dict], block: dict[str, Any], concurrency: Optional[int] = None) -> Optional[Evidence]:
    """The steady figure's samples, to resample for its interval: the registry's output rate
    over the stretches each repeat's steady figure was measured over (measured_spans: the
    window's stretches with every slot decoding, or the whole window), in equal pieces. A
    repeat's pieces' mean is its figure, so the figure is the point of this interval
    (harness/measure/estimate.py). `concurrency`: the load's (the block says it since it was
    recorded; a block written before is cut over its whole window)."""
    window = measured_window(lines, block, concurrency)
    if window is None:
        return None
    found = metric(OUTPUT_RATE).samples.evidence(completed(lines), window)
    return found if found.groups_count else None


def measured_window(lines: list[dict], block: dict[str, Any], concurrency: Optional[int] = None) -> Optional[Window]:
    """The window every repeat's steady figures were measured over, cut again from its lines
    and its block (None when no repeat had one)."""
    concurrency = concurrency or block.get("concurrency")
    spans: dict[int, tuple] = {}
    for repeat, window in enumerate(windows_of(block)):
        mine = [line for line in completed(lines) if repeat_of(line) == repeat]
        if window is None or not mine:
            continue
        steady = SteadyWindow(block.get("rule", CLOSED), window[0], window[1], window[0], window[1])
        spans[repeat] = tuple(measured_spans(mine, steady, concurrency) if concurrency else [(window[0], window[1])])
    return Window(STEADY, spans, shared_edges=True) if spans else None


def _r(x: Optional[float], nd: int = 4) -> Optional[float]:
    return None if x is None else round(float(x), nd)
