"""`specgate report AB_DIR`: one self-contained HTML page for an A/B record
(harness/ab/record.py): the sides, the verdicts on the paired change, each compared figure
per round for side A and side B (so a drift the pairs cancelled is there to see), and every
round's table. Template: templates/ab.html.j2; chart helper from harness/report/html.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from matplotlib.figure import Figure

from harness.ab.plan import SIDES
from harness.ab.record import round_rows, rounds_words
from harness.report.html import ARM_COLORS, figure_uri, write_record_page


def write_ab_report(folder: Path, out: Optional[Path] = None) -> Path:
    """Render `folder`'s ab.json to HTML (default `<folder>/report.html`); return its path."""
    return write_record_page(folder, "ab.json", "A/B record", "ab.html.j2", context, out)


def context(data: dict[str, Any], label: str) -> dict[str, Any]:
    metrics, arms = data.get("metrics") or [], data.get("arms") or {}
    tables = [(arm, SimpleNamespace(**dict(zip(("header", "rows"), round_rows(metrics, rounds)))))
              for arm, rounds in arms.items()]
    charts = [c for arm, rounds in arms.items() for m in metrics if (c := round_chart(arm, m, rounds))]
    return {"label": label, "data": data, "tables": tables, "charts": charts, "rounds": rounds_words(data)}


def round_chart(arm: str, metric: str, rounds: list[dict[str, Any]]) -> Optional[str]:
    """The metric per round, side A and side B: the pairs the verdict is drawn from."""
    points = {side: [(e["round"], ((e.get(side) or {}).get("figures") or {}).get(metric)) for e in rounds]
              for side in SIDES}
    points = {side: [(x, y) for x, y in found if y is not None] for side, found in points.items()}
    if not any(points.values()):
        return None
    fig = Figure(figsize=(6.4, 3.0), layout="constrained")
    ax = fig.add_subplot()
    for index, (side, curve) in enumerate(points.items()):
        ax.plot([x for x, _ in curve], [y for _, y in curve], "o-", color=ARM_COLORS[index % len(ARM_COLORS)],
                label=f"side {side}")
    ax.set_xticks([e["round"] for e in rounds])
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(arm, fontsize=10)
    ax.legend(fontsize=8)
    return figure_uri(fig)
