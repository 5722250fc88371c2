"""`specgate history DIR`: a history (harness/history/folder.py) in words and in pictures.

The text is one Markdown table per arm (one row per run: when it started, its folder, each
headline metric), a footnote mark `[n]` on the value where a change point's new segment
starts and the footnotes below the table (the metric, the means either side, the relative
change, the p-value), then the members that were skipped and why.

The page (default DIR/history.html) is self-contained like `specgate report`'s (inline CSS,
charts as PNG data URIs drawn with matplotlib's Agg canvas, the chart helpers shared with
harness/report/html.py, its template in harness/report/templates/ on the shared head, harness/report/page.py):
one plot per arm × metric, the values over time, each segment's mean as a flat line and a
dashed vertical line where a change point starts, the same tables and notes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from harness.history.changepoints import ChangePoint
from harness.history.folder import History, Run, known_metric
from harness.report.html import arm_color, figure_uri
from harness.report.page import render, write_page
from harness.report.tables import MISSING, heading, markdown_table, value_cell

PAGE = "history.html"
CHANGE_COLOR = "#b42318"


# --- the words -----------------------------------------------------------------------------

def metric_heading(path: str) -> str:
    entry = known_metric(path)
    return heading(entry) if entry is not None else path


def metric_value_text(path: str, value: Optional[float]) -> str:
    entry = known_metric(path)
    if entry is not None:
        return value_cell(entry, value)
    return MISSING if value is None else f"{value:.4g}"


def run_time(run: Run) -> str:
    return run.started.strftime("%Y-%m-%d %H:%M:%S")


def change_sentence(history: History, path: str, run: Run, point: ChangePoint) -> str:
    """`output tok/s: from 2026...Z_sim_smoke on, mean 1800.2 -> 1710.5 (-5.0 %), p = 0.005`."""
    change = point.relative_change
    shift = "" if change is None else f" ({change * 100:+.1f} %)"
    return (f"{metric_heading(path)}: from {run.label} on, mean {metric_value_text(path, point.mean_before)} -> "
            f"{metric_value_text(path, point.mean_after)}{shift}, p = {point.p_value:.3g}")


def arm_table(history: History, arm: str) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, footnotes) of one series (an arm, or one config of it): a run per row, a
    `[n]` where change point n starts."""
    marks: dict[tuple[str, str], str] = {}  # (run label, metric) -> its footnote mark
    notes: list[str] = []
    mixed = history.mixed_configs(arm)
    for path in history.metrics:
        for run, point in history.change_points(arm, path):
            mark = f"[{len(notes) + 1}]"
            marks[(run.label, path)] = mark
            notes.append(f"{mark} {change_sentence(history, path, run, point)}")
    header = ["started (UTC)", "run", *(metric_heading(p) for p in history.metrics)]
    rows = []
    own = history.of(arm).arm  # a series is an arm, or one config of it
    for run in history.runs_of(arm):
        cells = [metric_value_text(p, run.value(own, p)) + (" " + marks[(run.label, p)] if (run.label, p) in marks else "")
                 for p in history.metrics]
        rows.append([run_time(run), run.label, *cells])
    return header, rows, ([mixed] if mixed else []) + notes


def history_text(history: History) -> str:
    """The whole history in Markdown: a table per arm with its change points, the skipped members."""
    lines = [f"# specgate history: {history.experiment}", "",
             f"{len(history.runs)} run(s) in {history.folder}, oldest first; change points by E-divisive means "
             f"(alpha {history.alpha:g}, {history.permutations} permutations, seed {history.seed}).", ""]
    for arm in history.series_names:
        header, rows, notes = arm_table(history, arm)
        lines += [f"## {arm}", "", *markdown_table(header, rows), ""]
        changes = [note for note in notes if not note.startswith("note: ")]
        lines += [*notes, ""] if changes else [*notes, "no change point in any metric.", ""]
    if history.skipped:
        lines += [f"## skipped ({len(history.skipped)})", "", *(f"- {note}" for note in history.skipped), ""]
    return "\n".join(lines)


# --- the page ------------------------------------------------------------------------------

def write_history_page(history: History, out: Optional[Path] = None) -> Path:
    """Render the history to one HTML file (default DIR/history.html); return its path."""
    out = Path(out) if out is not None else history.folder / PAGE
    return write_page(out, render("history.html.j2", page_context(history)), "the history page")


def page_context(history: History) -> dict[str, Any]:
    arms = history.arms
    sections = []
    for arm in history.series_names:
        header, rows, notes = arm_table(history, arm)
        charts = [{"metric": metric_heading(p), "uri": chart(history, arm, p, arm_color(arms, history.of(arm).arm))}
                  for p in history.metrics]
        sections.append({"arm": arm, "header": header, "rows": rows, "notes": notes,
                         "charts": [c for c in charts if c["uri"]]})
    return {"experiment": history.experiment, "folder": str(history.folder), "runs": len(history.runs),
            "first": run_time(history.runs[0]), "last": run_time(history.runs[-1]),
            "alpha": f"{history.alpha:g}", "permutations": history.permutations, "seed": history.seed,
            "arms": sections, "skipped": history.skipped,
            "generated_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}


def chart(history: History, arm: str, path: str, color: str) -> Optional[str]:
    """The arm's metric over time: the runs as points, each segment's mean as a flat line, a
    dashed line where each change point starts (labelled with its change). None: no values."""
    series = history.series(arm, path)
    if not series:
        return None
    times = [run.started for run, _ in series]
    values = [value for _, value in series]
    found = history.change_points(arm, path)
    fig = Figure(figsize=(10, 3.2), layout="constrained")
    ax = fig.subplots()
    ax.plot(times, values, marker="o", ms=4, lw=1, color=color, label=f"{arm}: {metric_heading(path)}")
    edges = [0, *(point.index for _, point in found), len(series)]
    for start, end in zip(edges[:-1], edges[1:]):
        segment = values[start:end]
        ax.hlines(sum(segment) / len(segment), times[start], times[end - 1], colors="#444444", lw=1.4, alpha=0.7)
    for run, point in found:
        change = point.relative_change
        ax.axvline(run.started, color=CHANGE_COLOR, ls="--", lw=1.2)
        ax.annotate(("change" if change is None else f"{change * 100:+.1f} %") + f"  p={point.p_value:.3g}",
                    (run.started, 1.0), xycoords=("data", "axes fraction"), xytext=(4, -12),
                    textcoords="offset points", color=CHANGE_COLOR, fontsize=9)
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set(title=f"{arm}: {metric_heading(path)}", ylabel=metric_heading(path))
    ax.grid(alpha=0.3)
    return figure_uri(fig)
