"""`specgate report SWEEP_DIR`: one self-contained HTML page for a sweep record: the break-even map.

It reads the sweep's sweep.json (harness/sweep/record.py) and shows: the verdict (points'
exit statuses and sweep gates), each speculative arm's crossover in words, the measured
break-even accept length per concurrency (harness/sweep/break_even.py: speedup against accept
length, and the break-even against concurrency beside the formula's and the real drafter's
accept length), the speedup over
the plain arm against concurrency (a line at 1.0, the crossover marked), throughput per GPU against
throughput per user for every arm on one chart with its Pareto frontier, the accept length
against the break-even accept length per point, the sweep gates' verdicts and the point x arm
table. Like the run report (harness/report/html.py, whose chart helpers it shares) it has no
external reference: inline CSS, charts as PNG data URIs, no scripts.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from harness.record.store import FINISHED, INTERRUPTED
from harness.exit_status import UNDECIDED
from harness.measure.registry import OUTPUT_RATE, STEADY, metric, read
from harness.report.html import ARM_COLORS, figure_uri, show
from harness.report.page import ReportError, render, write_page
from harness.gates.sweep import others_of, point_concurrency
from harness.report.tables import Row, metric_table
from harness.sweep.record import break_even_label

PASSED, FAILED, NOT_EVALUABLE = "passed", "failed", "not_evaluable"  # sweep.json's verdict statuses

SWEEP_FILE = "sweep.json"


def write_sweep_report(sweep_dir: Path, out: Optional[Path] = None) -> Path:
    """Render `sweep_dir`'s sweep.json to one HTML file (default `<sweep>/report.html`)."""
    sweep_dir = Path(sweep_dir)
    data = read_sweep(sweep_dir)
    out = Path(out) if out is not None else sweep_dir / "report.html"
    return write_page(out, render("sweep_report.html.j2", sweep_context(data, sweep_dir.name)))


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{sweep_dir / SWEEP_FILE} cannot be read as a sweep record ({exc}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ReportError(f"{sweep_dir / SWEEP_FILE} is not a sweep record (it has no list of points).")
    return data


# --- the sweep as the template sees it ----------------------------------------------------

def sweep_context(data: dict[str, Any], label: str) -> dict[str, Any]:
    points = [p for p in data["points"] if isinstance(p, dict)]
    gates = [v for v in data.get("sweep_gates") or [] if isinstance(v, dict)]
    crossovers = [x for x in data.get("crossovers") or [] if isinstance(x, dict)]
    break_even = [x for x in data.get("break_even_accept_length") or [] if isinstance(x, dict)]
    curves = speedup_curves(points)
    pareto = pareto_points(points)
    return {
        "label": label,
        "experiment": str(data.get("experiment") or label),
        "facts": facts(data, points),
        "verdict": verdict(data, points, gates),
        "crossovers": [f"{x.get('arm')}{with_words(x.get('with'))} {x.get('words', '')}" for x in crossovers],
        "break_even": [f"{break_even_label(x)}: {x.get('words', '')}" for x in break_even],
        "break_even_speedup_chart": break_even_speedup_chart(break_even),
        "break_even_map_chart": break_even_map_chart(break_even),
        "gates": [gate_row(v) for v in gates],
        "pareto_chart": pareto_chart(pareto),
        "pareto_frontier": frontier_words(pareto),
        "speedup_chart": speedup_chart(curves, crossovers),
        "accept_chart": accept_chart(curves),
        "columns": figure_table(points).header,
        "rows": table_rows(points),
        "generated_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def with_words(others: Any) -> str:
    return f" with {', '.join(others)}" if others else ""


def facts(data: dict[str, Any], points: list[dict[str, Any]]) -> list[tuple[str, str]]:
    command = data.get("command")
    if isinstance(command, list):
        command = shlex.join(str(c) for c in command)
    exited = [p.get("exit_status") for p in points]
    rows = [("command", command), ("started", data.get("started_utc")), ("finished", data.get("finished_utc")),
            ("status", data.get("status")), ("exit status", data.get("exit_status")),
            ("points", f"{len(points)}, {exited.count(0)} exited 0")]
    return [(k, str(v)) for k, v in rows if v not in (None, "")]


def verdict(data: dict[str, Any], points: list[dict[str, Any]], gates: list[dict[str, Any]]) -> dict[str, str]:
    if data.get("status") == INTERRUPTED:
        return {"status": "failed", "text": "INTERRUPTED"}
    if data.get("status") != FINISHED:
        return {"status": "failed", "text": "INCOMPLETE: the sweep has not finished"}
    parts = [f"{n} point(s) exited non-zero"] if (n := sum(p.get("exit_status") not in (0, UNDECIDED) for p in points)) else []
    parts += [f"point {p.get('label')} failed {'; '.join(p['failed_gates'])}" for p in points if p.get("failed_gates")]
    parts += [f"{n} sweep gate(s) failed"] if (n := sum(v.get("status") == FAILED for v in gates)) else []
    if parts:
        return {"status": "failed", "text": "FAILED: " + "; ".join(parts)}
    open_ = [f"{n} point(s) left a change undecided"] if (n := sum(p.get("exit_status") == UNDECIDED for p in points)) else []
    open_ += [f"{n} sweep gate(s) undecided"] if (n := sum(bool(v.get("undecided")) for v in gates)) else []
    if open_:  # could not decide is not passed (exit status 6)
        return {"status": "skipped", "text": "UNDECIDED: " + "; ".join(open_)}
    return {"status": "passed", "text": "PASSED"}


def gate_row(v: dict[str, Any]) -> dict[str, str]:
    status = v.get("status")
    css = {PASSED: "passed", FAILED: "failed", NOT_EVALUABLE: "skipped"}.get(status, "skipped")
    return {"status": str(status).replace("_", " "), "css": css, "name": str(v.get("name", "")),
            "arm": str(v.get("arm", "")) + with_words(v.get("with")), "value": show(v.get("value")),
            "threshold": show(v.get("threshold")), "detail": str(v.get("detail", ""))}


def figure_table(points: list[dict[str, Any]]):
    """The registry's sweep figures of every point x arm (harness/report/tables.py)."""
    rows = [Row([], figures if isinstance(figures, dict) else {})
            for point in points for _, figures in ((point.get("arms") or {}).items() or [("–", {})])]
    return metric_table("sweep", [], rows)


def table_rows(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells = iter(figure_table(points).rows)
    rows = []
    for point in points:
        arms = point.get("arms") or {}
        for arm, figures in (arms.items() if arms else [("–", {})]):
            figures = figures if isinstance(figures, dict) else {}
            rows.append({"point": str(point.get("label", "")), "exit": show(point.get("exit_status")) or "–",
                         "arm": arm, "status": str(figures.get("status") or point.get("status") or "–"),
                         "concurrency": show(figures.get("concurrency")) or "–",
                         "cells": next(cells),
                         "bad": point.get("exit_status") != 0})
    return rows


def figure_of(figures: dict[str, Any], path: str) -> Any:
    """A sweep figure under its registry key or the spelling an older sweep.json used."""
    return read(figures, metric(path))


# --- the break-even map --------------------------------------------------------------------

def speedup_curves(points: list[dict[str, Any]]) -> dict[tuple[str, tuple[str, ...]], list[tuple[int, dict]]]:
    """Per speculative arm (one with a speedup somewhere) and setting of the other swept keys:
    its (concurrency, figures) by concurrency, the points that measured a speedup."""
    curves: dict[tuple[str, tuple[str, ...]], list[tuple[int, dict]]] = {}
    for point in points:
        for arm, figures in (point.get("arms") or {}).items():
            concurrency = point_concurrency(point, arm)
            if concurrency and isinstance(figures, dict) and figures.get("speedup") is not None:
                curves.setdefault((arm, others_of(point)), []).append((concurrency, figures))
    return {key: sorted(found, key=lambda x: x[0]) for key, found in curves.items()}


def curve_label(arm: str, others: tuple[str, ...]) -> str:
    return arm + (f" ({', '.join(o.rsplit('.', 1)[-1] for o in others)})" if others else "")


def concurrency_axis(ax, curves: dict) -> None:
    """A log2 concurrency axis whose ticks are the swept concurrencies."""
    swept = sorted({c for found in curves.values() for c, _ in found})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(swept))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(c) for c in swept])
    ax.set_xlabel("concurrency (requests in flight; log scale)")
    ax.grid(alpha=0.3)


def speedup_chart(curves: dict, crossovers: list[dict[str, Any]]) -> Optional[str]:
    """Speedup over the plain arm against concurrency, one line per curve, a line at 1.0 and
    each crossover marked where it is interpolated."""
    if not curves:
        return None
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.subplots()
    ax.axhline(1.0, color="#444444", lw=1.2, ls="--", label="1.0x: speculation breaks even")
    for index, ((arm, others), found) in enumerate(curves.items()):
        color = ARM_COLORS[(index + 1) % len(ARM_COLORS)]
        ax.plot([c for c, _ in found], [f["speedup"] for _, f in found], marker="o", lw=2, color=color,
                label=curve_label(arm, others))
        whole = [(c, f["speedup_whole"]) for c, f in found if f.get("speedup_whole") is not None]
        if whole and any(f.get("basis") == "steady" for _, f in found):  # the end-to-end figure, for comparison
            ax.plot([c for c, _ in whole], [v for _, v in whole], marker=".", lw=1, ls=":", color=color,
                    label=f"{curve_label(arm, others)}, whole load")
        mark_crossover(ax, crossover_of(crossovers, arm, others), color)
    ax.set(title="Speedup over plain decoding by concurrency (steady windows)", ylabel="speedup (output tok/s ratio)")
    highest = max(f["speedup"] for found in curves.values() for _, f in found)
    ax.set_ylim(0.0, max(1.2, highest) * 1.1)  # from 0, so a ratio reads as a length
    concurrency_axis(ax, curves)
    ax.legend(fontsize=9, frameon=False)
    return figure_uri(fig)


def crossover_of(crossovers: list[dict[str, Any]], arm: str, others: tuple[str, ...]) -> Optional[dict]:
    return next((x for x in crossovers if x.get("arm") == arm and tuple(x.get("with") or ()) == others), None)


def mark_crossover(ax, crossover: Optional[dict], color: str) -> None:
    """A crossover between two points: a dotted drop line and its value; none when it pays
    nowhere or everywhere swept (the words say which)."""
    at = crossover.get("pays_through") if crossover else None
    points = crossover.get("points") if crossover else None
    if at is None or not points or all(s >= 1.0 for _, s in points):
        return
    ax.axvline(at, color=color, lw=1.2, ls=":")
    ax.plot([at], [1.0], marker="X", markersize=11, color=color, zorder=5)
    ax.annotate(f"crossover ~{at:.1f}", (at, 1.0), textcoords="offset points", xytext=(8, 10), color=color,
                fontsize=10, fontweight="bold")


def accept_chart(curves: dict) -> Optional[str]:
    """Per curve: the measured accept length and the break-even accept length (verify cycle ÷
    plain decode step) against concurrency: speculation pays where the first is above."""
    shown = {key: [(c, f) for c, f in found if figure_of(f, "accept_length") is not None]
             for key, found in curves.items()}
    shown = {key: found for key, found in shown.items() if found}
    if not shown:
        return None
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.subplots()
    for index, ((arm, others), found) in enumerate(shown.items()):
        color = ARM_COLORS[(index + 1) % len(ARM_COLORS)]
        xs = [c for c, _ in found]
        ax.plot(xs, [figure_of(f, "accept_length") for _, f in found], marker="o", lw=2, color=color,
                label=f"{curve_label(arm, others)}: accept length")
        even = [(c, b) for c, f in found if (b := figure_of(f, "break_even_accept_length")) is not None]
        if even:
            ax.plot([c for c, _ in even], [b for _, b in even], marker="s", lw=1.6, ls="--", color=color,
                    label=f"{curve_label(arm, others)}: break-even (verify cycle ÷ plain step)")
    ax.set(title="Accept length against break-even accept length", ylabel="tokens per verify cycle")
    concurrency_axis(ax, shown)
    ax.legend(fontsize=9, frameon=False)
    return figure_uri(fig)


# --- the break-even accept length measured (sweep.json's break_even_accept_length) ------------

def break_even_series(entry: dict[str, Any]) -> str:
    """Which line an entry is on in the map over concurrency: its k and other swept keys."""
    parts = ([f"k={entry['k']}"] if entry.get("k") is not None else []) + list(entry.get("with") or [])
    return ", ".join(parts)


def break_even_speedup_chart(entries: list[dict[str, Any]]) -> Optional[str]:
    """Speedup against the measured accept length, one line per group (concurrency) with each
    point's interval, a line at 1.0, the measured break-even marked on it with its interval
    (an arrow where an end is open), and the real drafters' arms as stars."""
    shown = [e for e in entries if valid_points(e)]
    if not shown:
        return None
    fig = Figure(figsize=(9, 4.8), layout="constrained")
    ax = fig.subplots()
    ax.axhline(1.0, color="#444444", lw=1.2, ls="--", label="1.0x: speculation breaks even")
    for index, entry in enumerate(shown):
        color = ARM_COLORS[(index + 1) % len(ARM_COLORS)]
        series = break_even_series(entry)
        label = f"concurrency {entry.get('concurrency')}" + (f" ({series})" if series else "")
        found = valid_points(entry)
        xs, ys = [p[0] for p in found], [p[1] for p in found]
        errors = [[y - (p[2] or [y, y])[0] for p, y in zip(found, ys)], [(p[2] or [y, y])[1] - y for p, y in zip(found, ys)]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", lw=2, capsize=3, color=color, label=label)
        mark_break_even(ax, entry, color, min(xs), max(xs))
        for real in entry.get("real") or []:
            if isinstance(real.get("accept_length"), (int, float)) and isinstance(real.get("speedup"), (int, float)):
                ax.plot([real["accept_length"]], [real["speedup"]], marker="*", markersize=17, color=color,
                        markeredgecolor="black", ls="none", zorder=6)
    ax.plot([], [], marker="*", markersize=13, color="#bbbbbb", markeredgecolor="black", ls="none",
            label="a real drafter's arm (acceptance not forced)")
    ax.set(title="Speedup over plain decoding against the measured accept length",
           xlabel="accept length (tokens per verify cycle, as measured)", ylabel="speedup (output tok/s ratio)")
    highest = max(p[1] for e in shown for p in valid_points(e))
    ax.set_ylim(0.0, max(1.2, highest) * 1.12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, frameon=False, loc="upper left")
    return figure_uri(fig)


def valid_points(entry: dict[str, Any]) -> list[list]:
    """The entry's [accept length, speedup, interval] whose first two are numbers."""
    return [p for p in entry.get("points") or [] if isinstance(p, list) and len(p) == 3
            and all(isinstance(v, (int, float)) for v in p[:2])]


def mark_break_even(ax, entry: dict[str, Any], color: str, lowest: float, highest: float) -> None:
    """The measured break-even on the 1.0 line, its interval as a bar along it (to the swept
    range's end and an arrow where that end is open)."""
    at = entry.get("measured")
    if not isinstance(at, (int, float)):
        return
    low, high = entry.get("interval") or (at, at)
    left, right = low if low is not None else lowest, high if high is not None else highest
    ax.plot([left, right], [1.0, 1.0], color=color, lw=5, alpha=0.45, solid_capstyle="butt", zorder=4)
    for end, open_, marker in ((left, low is None, "<"), (right, high is None, ">")):
        if open_:
            ax.plot([end], [1.0], marker=marker, markersize=9, color=color, zorder=5)
    ax.plot([at], [1.0], marker="X", markersize=12, color=color, markeredgecolor="black", zorder=6)
    ax.annotate(f"{at:.2f}", (at, 1.0), textcoords="offset points", xytext=(6, -16), color=color,
                fontsize=10, fontweight="bold")


def break_even_map_chart(entries: list[dict[str, Any]]) -> Optional[str]:
    """Accept length against concurrency, per series (k, other swept keys): the measured
    break-even with its interval band, the formula's (verify cycle ÷ plain step) dashed, and the
    real drafters' measured accept length overlaid: above the band, speculation pays."""
    series: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if isinstance(entry.get("concurrency"), int):
            series.setdefault(break_even_series(entry), []).append(entry)
    if not series:
        return None
    fig = Figure(figsize=(9, 4.8), layout="constrained")
    ax = fig.subplots()
    for index, (name, found) in enumerate(series.items()):
        color = ARM_COLORS[(index + 1) % len(ARM_COLORS)]
        found = sorted(found, key=lambda e: e["concurrency"])
        draw_measured(ax, found, color, name)
        formula = [(e["concurrency"], e["formula"]) for e in found if isinstance(e.get("formula"), (int, float))]
        if formula:
            ax.plot(*zip(*formula), marker="s", lw=1.5, ls="--", color=color,
                    label=f"break-even by formula (verify cycle ÷ plain step){', ' + name if name else ''}")
        draw_real(ax, found, index)
    ax.set(title="Break-even accept length by concurrency: measured, formula, and the real drafter",
           ylabel="accept length (tokens per verify cycle)")
    concurrency_axis(ax, {name: [(e["concurrency"], e) for e in found] for name, found in series.items()})
    ax.legend(fontsize=9, frameon=False)
    return figure_uri(fig)


def draw_measured(ax, found: list[dict[str, Any]], color: str, name: str) -> None:
    """The measured break-even per concurrency and its interval as a band (an open end drawn to
    the swept accept lengths' end); a concurrency with no crossing marked where it lies: a
    triangle up past the highest length swept, down below the lowest."""
    measured = [e for e in found if isinstance(e.get("measured"), (int, float))]
    if measured:
        xs = [e["concurrency"] for e in measured]
        low = [band_end(e, 0) for e in measured]
        high = [band_end(e, 1) for e in measured]
        ax.fill_between(xs, low, high, color=color, alpha=0.2, lw=0)
        ax.errorbar(xs, [e["measured"] for e in measured],
                    yerr=[[m - lo for m, lo in zip((e["measured"] for e in measured), low)],
                          [hi - m for m, hi in zip((e["measured"] for e in measured), high)]],
                    marker="o", lw=2.2, capsize=4, color=color,
                    label=f"break-even measured, with its interval{', ' + name if name else ''}")
    for entry in found:
        lengths = [p[0] for p in valid_points(entry)]
        if entry.get("measured") is None and lengths:
            pays = all(p[1] >= 1.0 for p in valid_points(entry))
            ax.plot([entry["concurrency"]], [min(lengths) if pays else max(lengths)], marker="v" if pays else "^",
                    markersize=10, color=color, ls="none")


def band_end(entry: dict[str, Any], end: int) -> float:
    """An end of the entry's interval; where it is open (or missing), the swept lengths' end."""
    interval = entry.get("interval") or [None, None]
    if isinstance(interval[end], (int, float)):
        return interval[end]
    if not entry.get("interval"):
        return entry["measured"]
    lengths = [p[0] for p in valid_points(entry)] or [entry["measured"]]
    return min(lengths) if end == 0 else max(lengths)


def draw_real(ax, found: list[dict[str, Any]], index: int) -> None:
    """Each real drafter's arm: its measured accept length per concurrency, stars."""
    arms: dict[str, list[tuple[int, float]]] = {}
    for entry in found:
        for real in entry.get("real") or []:
            if isinstance(real.get("accept_length"), (int, float)):
                arms.setdefault(str(real.get("arm")), []).append((entry["concurrency"], real["accept_length"]))
    for offset, (arm, values) in enumerate(arms.items()):
        color = ARM_COLORS[(index + offset + 3) % len(ARM_COLORS)]
        values = sorted(set(values))
        ax.plot([c for c, _ in values], [v for _, v in values], marker="*", markersize=15, lw=1.5, color=color,
                markeredgecolor="black", label=f"{arm}: its accept length (pays where above the band)")


# --- throughput per GPU against throughput per user -----------------------------------------

@dataclass(frozen=True)
class ParetoPoint:
    """One arm at one point: what a deployment gets (per GPU) against what a user sees."""

    series: str  # the arm, and the point's other swept settings
    concurrency: int | None
    per_user: float  # tok/s one request streams at: 1000 / its TPOT p50
    per_gpu: float  # the arm's output tok/s (steady window where measured) / the GPUs its server holds
    per_gpu_known: bool  # False: the config named no GPU count; per_gpu is per server


def pareto_points(points: list[dict[str, Any]]) -> list[ParetoPoint]:
    """Every arm of every point that measured both a TPOT and a throughput."""
    found = []
    for point in points:
        for arm, figures in (point.get("arms") or {}).items():
            if not isinstance(figures, dict):
                continue
            tpot = figure_of(figures, "tpot_ms.p50")
            rate = figure_of(figures, f"{STEADY}.{OUTPUT_RATE}")  # the steady window's, else the whole load's
            rate = rate if rate is not None else figure_of(figures, OUTPUT_RATE)
            if not tpot or tpot <= 0 or rate is None:
                continue
            gpus = figures.get("gpus")
            known = isinstance(gpus, int) and gpus > 0
            found.append(ParetoPoint(curve_label(arm, others_of(point)), point_concurrency(point, arm),
                                     1000.0 / tpot, rate / (gpus if known else 1), known))
    return found


def frontier(found: list[ParetoPoint]) -> list[ParetoPoint]:
    """The points no other point beats on both axes (more per GPU and more per user), by
    throughput per user: the best any arm offers at each interactivity."""
    best = []
    for p in sorted(found, key=lambda p: (-p.per_user, -p.per_gpu)):
        if not best or p.per_gpu > best[-1].per_gpu:
            best.append(p)
    return best


def frontier_words(found: list[ParetoPoint]) -> list[str]:
    """The frontier from the most interactive end: which arm, at which concurrency."""
    return [f"{p.series} at concurrency {p.concurrency if p.concurrency is not None else 'open loop'}: "
            f"{p.per_user:.1f} tok/s per user, {p.per_gpu:.1f} tok/s per {'GPU' if p.per_gpu_known else 'server'}"
            for p in frontier(found)]


def pareto_chart(found: list[ParetoPoint]) -> Optional[str]:
    """Throughput per GPU against throughput per user, one line per arm through its
    concurrencies (each dot labelled c=N), the Pareto frontier over all arms behind them."""
    if not found:
        return None
    per = "GPU" if all(p.per_gpu_known for p in found) else "server"
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.subplots()
    best = frontier(found)
    ax.plot([p.per_user for p in best], [p.per_gpu for p in best], color="#999999", lw=6, alpha=0.35,
            solid_capstyle="round", label="Pareto frontier (no arm does better on both)")
    for index, series in enumerate(dict.fromkeys(p.series for p in found)):
        line = sorted((p for p in found if p.series == series), key=lambda p: p.per_user)
        color = ARM_COLORS[index % len(ARM_COLORS)]
        ax.plot([p.per_user for p in line], [p.per_gpu for p in line], marker="o", lw=2, color=color, label=series)
        for p in line:
            if p.concurrency is not None:
                ax.annotate(f"c={p.concurrency}", (p.per_user, p.per_gpu), textcoords="offset points",
                            xytext=(5, 5), fontsize=8, color=color)
    ax.set(title=f"Throughput per {per} against throughput per user",
           xlabel="tok/s per user (1000 / TPOT p50)", ylabel=f"output tok/s per {per}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, frameon=False)
    return figure_uri(fig)
