"""`specgate schedule SWEEP_DIR`: read the sweep, choose per concurrency, write the schedule."""

from __future__ import annotations

from pathlib import Path

from harness.gates.change import CONFIDENCE
from harness.schedule.choice import choose
from harness.schedule.grid import ScheduleError, read_grid
from harness.schedule.ranges import batch_ranges
from harness.schedule.write import schedule_data, write_schedule


def make_schedule(sweep: Path, arm: str | None = None, confidence: float = CONFIDENCE) -> tuple[dict, list[Path]]:
    """The schedule's data and the files written; ScheduleError (nothing written) for bad input."""
    if not 0.5 <= confidence < 1.0:
        raise ScheduleError(f"--confidence is a one-sided confidence in [0.5, 1), e.g. 0.95, got {confidence}")
    grid = read_grid(Path(sweep), arm)
    choices = choose(grid, confidence)
    data = schedule_data(grid, choices, batch_ranges(choices), confidence)
    return data, write_schedule(Path(sweep), data)
