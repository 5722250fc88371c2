"""`specgate report CAPACITY_DIR`: one self-contained HTML page for a capacity record
(harness/capacity/record.py), beside the run report (harness/report/html.py, whose chart helper
it borrows): each SLO'd statistic and the goodput against the load, per arm, with the SLO
line and each arm's capacity marked, then every probe. Template: templates/capacity.html.j2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from matplotlib.figure import Figure

from harness.capacity.record import capacity_words, probes_table
from harness.report.html import ARM_COLORS, figure_uri, write_record_page


def write_capacity_report(folder: Path, out: Optional[Path] = None) -> Path:
    """Render `folder`'s capacity.json to HTML (default `<folder>/report.html`); return its path."""
    return write_record_page(folder, "capacity.json", "capacity record", "capacity.html.j2", context, out)


def context(data: dict[str, Any], label: str) -> dict[str, Any]:
    arms = data.get("arms") or {}
    start = (data.get("search") or {}).get("start", 0)
    return {
        "label": label,
        "data": data,
        "slos": [f"{s['metric']}.{s['statistic']} ≤ {s['limit_ms']:g} ms" for s in data.get("slos") or []],
        "capacities": [(arm, capacity_words(block, start).replace("**", "")) for arm, block in arms.items()],
        "charts": [chart for chart in (slo_chart(data, slo) for slo in data.get("slos") or []) if chart]
                  + [c for c in [goodput_chart(data)] if c],
        "probes": probes_table(data),
    }


def series(data: dict[str, Any], value) -> dict[str, list[tuple[float, float]]]:
    """arm -> [(load, value)] sorted by load, probes without the value left out."""
    found = {}
    for arm, block in (data.get("arms") or {}).items():
        points = sorted((p["load"], value(p)) for p in block.get("probes") or [] if value(p) is not None)
        if points:
            found[arm] = points
    return found


def load_chart(data: dict[str, Any], points: dict[str, list[tuple[float, float]]], ylabel: str,
               limit: float | None = None) -> Optional[str]:
    if not points:
        return None
    fig = Figure(figsize=(6.4, 3.4), layout="constrained")
    ax = fig.add_subplot()
    for index, (arm, curve) in enumerate(points.items()):
        color = ARM_COLORS[index % len(ARM_COLORS)]
        ax.plot([x for x, _ in curve], [y for _, y in curve], "o-", color=color, label=arm)
        capacity = ((data.get("arms") or {}).get(arm) or {}).get("capacity")
        if capacity is not None:
            ax.axvline(capacity, color=color, linestyle=":", linewidth=1)
    if limit is not None:
        ax.axhline(limit, color="#b42318", linestyle="--", linewidth=1, label=f"SLO {limit:g} ms")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{data.get('dimension', 'load')} (dotted: each arm's capacity)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return figure_uri(fig)


def slo_chart(data: dict[str, Any], slo: dict[str, Any]) -> Optional[str]:
    metric, stat = slo["metric"], slo["statistic"]
    points = series(data, lambda p: (p.get(metric) or {}).get(stat))
    return load_chart(data, points, f"{metric.removesuffix('_ms')} {stat} (ms)", slo["limit_ms"])


def goodput_chart(data: dict[str, Any]) -> Optional[str]:
    return load_chart(data, series(data, lambda p: p.get("goodput_rps")), "goodput (req/s meeting every SLO)")
