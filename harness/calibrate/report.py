"""`specgate report CALIBRATION_DIR`: one self-contained HTML page for a calibration record
(harness/calibrate/record.py): its runs, then the noise profile (per arm and metric the runs'
values, their median and between-run spread) or why an arm has none. The tables are the
summary's own rows. Template: templates/calibration.html.j2 on the shared head.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from harness.calibrate.record import PROFILE_HEADER, RUNS_HEADER, profile_rows, run_rows
from harness.gates.profile import PROFILE_FILE, NoiseProfile
from harness.report.html import write_record_page


def write_calibration_report(folder: Path, out: Optional[Path] = None) -> Path:
    """Render `folder`'s calibration.json (and noise_profile.json, once written) to HTML
    (default `<folder>/report.html`); return its path."""
    profile = NoiseProfile.read(folder) if (Path(folder) / PROFILE_FILE).is_file() else None
    return write_record_page(folder, "calibration.json", "calibration record", "calibration.html.j2",
                             lambda data, label: context(data, label, profile), out)


def context(data: dict[str, Any], label: str, profile: NoiseProfile | None) -> dict[str, Any]:
    uncovered = ((data.get("profile") or {}).get("uncovered") or {}) if profile is None else profile.uncovered
    return {"label": label, "data": data, "profile_file": PROFILE_FILE,
            "runs": SimpleNamespace(header=RUNS_HEADER, rows=run_rows(data.get("runs") or [])),
            "profile": SimpleNamespace(header=PROFILE_HEADER, rows=profile_rows(profile) if profile else []),
            "uncovered": sorted(uncovered.items())}
