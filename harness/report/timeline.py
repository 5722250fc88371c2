"""An arm's figures over time as one inline SVG for the report: a panel per figure the arm's
timeslices carry (the registry's timeline metrics, each computed over its slice by
harness/measure/timeslices.py, then GPU clock and power), on one time axis, with the steady
window (harness/measure/steady.py) shaded in every panel, so warm-up, throttling or a server
that slows down mid-run are seen beside the window the speedup was measured over. This page
reads the slices' figures and the registry's labels and units; it computes none. Plain SVG
text: no script, nothing loaded."""

from __future__ import annotations

from html import escape
from typing import Any, Callable, Optional

from markupsafe import Markup

from harness.measure.registry import metric_value, timeline_metrics

WIDTH, PANEL, LEFT, RIGHT, GAP = 900, 90, 70, 20, 22
# the GPU's figures per slice (telemetry's, not metrics of the requests): (label, key, unit)
GPU_SERIES = (("GPU SM clock", "sm_clock_mhz", "MHz"), ("GPU power", "power_w", "W"))


def series() -> list[tuple[str, Callable[[dict], Any], str]]:
    """(label, how to read a slice's value, unit), drawn in this order where the slices have values:
    the registry's timeline metrics, then the GPU's."""
    figures = [(m.short_label, lambda s, path=m.path: metric_value(s, path), m.unit) for m in timeline_metrics()]
    return figures + [(label, lambda s, key=key: s.get(key), unit) for label, key, unit in GPU_SERIES]


def steady_span(steady: dict[str, Any] | None, repeat: int = 0) -> Optional[tuple[float, float]]:
    """The repeat's steady window (ms), None when it was inconclusive or not measured."""
    if not steady or steady.get("inconclusive"):
        return None
    windows = steady.get("windows_ms")
    if windows:
        window = windows[repeat] if repeat < len(windows) else None
        return (float(window[0]), float(window[1])) if window else None
    if steady.get("start_ms") is None or steady.get("end_ms") is None:
        return None
    return float(steady["start_ms"]), float(steady["end_ms"])


def timeline_svg(arm: str, timeslices: dict[str, Any] | None, steady: dict[str, Any] | None,
                 color: str = "#1f77b4") -> Optional[Markup]:
    """The first repeat's slices as stacked panels (None when the arm has no slices)."""
    repeats = (timeslices or {}).get("repeats") or []
    slices = repeats[0].get("slices") if repeats else None
    if not slices:
        return None
    panels = [(label, unit, [(s, read(s)) for s in slices]) for label, read, unit in series()]
    panels = [(label, unit, points) for label, unit, points in panels if any(v is not None for _, v in points)]
    t0, t1 = slices[0]["start_ms"], slices[-1]["end_ms"]
    x = lambda t: LEFT + (t - t0) / max(t1 - t0, 1e-9) * (WIDTH - LEFT - RIGHT)  # noqa: E731
    height = len(panels) * (PANEL + GAP) + 30
    span = steady_span(steady)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(arm)}: figures over time">']
    for k, (label, unit, points) in enumerate(panels):
        top = k * (PANEL + GAP) + GAP
        parts += panel(label, unit, points, top, x, span, color)
    parts.append(axis(t0, t1, x, height - 8))
    parts.append("</svg>")
    return Markup("".join(parts))


def panel(label: str, unit: str, points: list[tuple[dict, Optional[float]]], top: float, x, span, color: str) -> list[str]:
    values = [v for _, v in points if v is not None]
    low, high = min(0.0, min(values)), max(values) or 1.0
    y = lambda v: top + PANEL - (v - low) / max(high - low, 1e-9) * PANEL  # noqa: E731
    out = [f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{PANEL}" fill="#fafafa" stroke="#ddd"/>']
    if span is not None:
        out.append(f'<rect class="steady" x="{x(span[0]):.1f}" y="{top}" width="{max(0.0, x(span[1]) - x(span[0])):.1f}" '
                   f'height="{PANEL}" fill="#2ca02c" fill-opacity="0.12"><title>steady window</title></rect>')
    # each slice's value at its middle, a gap where a slice has none
    runs, current = [], []
    for s, v in points:
        if v is None:
            runs, current = (runs + [current] if current else runs), []
        else:
            current.append(f"{x((s['start_ms'] + s['end_ms']) / 2):.1f},{y(v):.1f}")
    runs += [current] if current else []
    out += [f'<polyline points="{" ".join(run)}" fill="none" stroke="{color}" stroke-width="2"/>' for run in runs]
    out += [f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="2.5" fill="{color}"/>' for run in runs for p in run]
    out.append(f'<text x="{LEFT}" y="{top - 5}" font-size="12" font-family="sans-serif">{escape(label)} ({escape(unit)})</text>')
    out.append(f'<text x="{LEFT - 6}" y="{top + 10}" font-size="10" text-anchor="end" font-family="sans-serif">{high:.4g}</text>')
    out.append(f'<text x="{LEFT - 6}" y="{top + PANEL}" font-size="10" text-anchor="end" font-family="sans-serif">{low:.4g}</text>')
    return out


def axis(t0: float, t1: float, x, baseline: float) -> str:
    """Seconds of the run (the requests' time axis, as the steady window is given), at both ends and the middle."""
    ticks = [t0, (t0 + t1) / 2, t1]
    return "".join(f'<text x="{x(t):.1f}" y="{baseline}" font-size="10" text-anchor="middle" '
                   f'font-family="sans-serif">{t / 1000.0:.2f} s</text>' for t in ticks)
