"""A sweep ready to run: its record with one entry per point, and how each point runs.
The driver makes it (harness/sweep/driver.py); a launcher runs it (harness/sweep/launchers.py).
`SweepPoints` is the step before: the points composed and checked, nothing written yet."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.sweep.record import SweepRecord


@dataclass
class SweepPlan:
    """A sweep ready to run: its record with one entry per point, and how each point runs."""

    record: SweepRecord
    entries: list[dict]  # sweep.json's point entries, in point order
    point_runs: list[list[str]]  # each point's overrides as its pytest gets them
    overrides: list[str]  # the sweep's own overrides (a launched sweep's app expands them again)
    launcher_overrides: list[str]  # hydra/launcher=..., hydra.launcher.KEY=...
    conf_dir: Path
    pytest_options: list[str]
    gates: Any  # the experiment's sweep_gate block
    launcher: Any = None  # where the points run (harness/sweep/launchers.py)
    statuses: list[int] = field(default_factory=list)  # the points' exit statuses as the basic launcher got them


@dataclass
class SweepPoints:
    """The sweep's points composed and checked, and the launcher that will run them."""

    overrides: list[str]  # the sweep's own overrides, launcher settings apart
    launcher_overrides: list[str]
    pytest_options: list[str]
    conf_dir: Path
    launcher: Any
    points: list[Any]  # harness.config.compose.SweepPoint, in order
    experiments: list[Any]  # each point's Experiment
