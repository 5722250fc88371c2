"""`specgate report BISECT_DIR`: one self-contained HTML page for a bisect record
(harness/bisect/record.py): what it found, the values, and each probe with its A/B's outcome.
Template: templates/bisect.html.j2 (it extends the one shared head)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from harness.bisect.record import probe_rows, verdict_line
from harness.report.html import write_record_page


def write_bisect_report(folder: Path, out: Optional[Path] = None) -> Path:
    """Render `folder`'s bisect.json to HTML (default `<folder>/report.html`); return its path."""
    return write_record_page(folder, "bisect.json", "bisect record", "bisect.html.j2", context, out)


def context(data: dict[str, Any], label: str) -> dict[str, Any]:
    header, rows = probe_rows(data)
    probed = {p["index"]: p["outcome"] for p in data.get("probes") or []}
    values = [{"value": v, "outcome": probed.get(i, ""), "first_bad": v == data.get("first_bad")}
              for i, v in enumerate(data.get("values") or [])]
    return {"label": label, "data": data, "finding": verdict_line(data), "values": values,
            "probes": SimpleNamespace(header=header, rows=rows)}
