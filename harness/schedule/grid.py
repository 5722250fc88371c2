"""A sweep over concurrency x k read back for the schedule: per concurrency, the speculative
arm's run at each k beside the plain arm that ran in the same point. The sweep must be a
finished sweep's folder whose every point ran, with a plain arm and at least two values of k;
anything else is a ScheduleError in one sentence, before anything is written."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.schema import DrafterConfig
from harness.record.store import RecordError, read_run, safe_name, RunData

SWEEP_FILE = "sweep.json"
MEASURED = "measured"  # an arm's status once its load ran


class ScheduleError(Exception):
    """A sweep the schedule cannot be read from (one sentence)."""


@dataclass
class Cell:
    """One speculative run: the arm at draft length k, concurrency c, and its point's plain arm."""

    concurrency: int
    k: int
    speedup: float  # output tok/s over the plain arm's in the same point (sweep.json's figure)
    point: str  # the point's label
    run: RunData  # the point's run record (both arms' requests)
    drafter: DrafterConfig  # the arm's drafter config as it ran


@dataclass
class Grid:
    sweep: Path
    arm: str  # the speculative arm
    plain_arm: str
    engine: str  # server.engine of the arm
    cells: list[Cell] = field(default_factory=list)

    @property
    def concurrencies(self) -> list[int]:
        return sorted({cell.concurrency for cell in self.cells})

    def at(self, concurrency: int) -> list[Cell]:
        return sorted((c for c in self.cells if c.concurrency == concurrency), key=lambda c: c.k)


def read_grid(sweep: Path, arm: str | None = None) -> Grid:
    """The sweep's cells for the speculative `arm` (default: the only one), or ScheduleError."""
    data = sweep_data(Path(sweep))
    points = data.get("points") or []
    if failed := [p["label"] for p in points if p.get("status") != "finished" or not p.get("record")]:
        raise ScheduleError(f"{sweep} has points that did not run to the end ({', '.join(failed)}); a schedule "
                            f"needs every point measured, so re-run the sweep")
    first = read_point(Path(sweep), points[0]) if points else None
    plain_arm = first.data.get("plain_arm") if first else None
    if not plain_arm:
        raise ScheduleError(f"{sweep}'s experiment has no plain_arm, so no speedup and no 'plain wins'; "
                            f"add a plain-decoding arm and set plain_arm")
    if arm == plain_arm:
        raise ScheduleError(f"--arm names the plain arm '{arm}', which drafts nothing; name a speculative arm")
    arm = arm or only_speculative_arm(sweep, points, plain_arm)
    grid = Grid(Path(sweep), arm, plain_arm, "")
    for point in points:
        grid.cells.append(cell_of(Path(sweep), point, arm, plain_arm, grid))
    check_shape(grid)
    return grid


def sweep_data(sweep: Path) -> dict[str, Any]:
    try:
        data = json.loads((sweep / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise ScheduleError(f"{sweep} is not a sweep's folder (no readable {SWEEP_FILE}); "
                            f"give the folder `specgate sweep` wrote") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list) or not data["points"]:
        raise ScheduleError(f"{sweep}/{SWEEP_FILE} lists no points, so there is nothing to schedule")
    if data.get("status") != "finished":
        raise ScheduleError(f"{sweep} is a sweep that did not finish (status {data.get('status')}); "
                            f"re-run it to the end")
    return data


def read_point(sweep: Path, point: dict[str, Any]) -> RunData:
    try:
        return read_run(sweep / point["record"])
    except RecordError as exc:
        raise ScheduleError(f"point {point['label']}'s record cannot be read: {exc}") from None


def only_speculative_arm(sweep: Path, points: list[dict[str, Any]], plain_arm: str) -> str:
    arms = sorted({a for p in points for a in p.get("arms") or {} if a != plain_arm})
    if len(arms) != 1:
        raise ScheduleError(f"{sweep} has {len(arms)} speculative arms ({', '.join(arms) or 'none'}); "
                            f"name the one to schedule with --arm")
    return arms[0]


def cell_of(sweep: Path, point: dict[str, Any], arm: str, plain_arm: str, grid: Grid) -> Cell:
    figures, plain = (point.get("arms") or {}).get(arm), (point.get("arms") or {}).get(plain_arm)
    label = point["label"]
    if figures is None:
        raise ScheduleError(f"point {label} has no arm '{arm}'; arms: {', '.join(point.get('arms') or {})}")
    for name, block in ((arm, figures), (plain_arm, plain or {})):
        if block.get("status") != MEASURED:
            raise ScheduleError(f"point {label}'s arm '{name}' was not measured (status {block.get('status')}); "
                                f"a schedule needs every point measured, so re-run the sweep")
    if figures.get("speedup") is None or not figures.get("concurrency"):
        raise ScheduleError(f"point {label}'s arm '{arm}' has no speedup at a concurrency (an open loop, or a "
                            f"plain arm that made no tokens); the schedule needs both")
    run = read_point(sweep, point)
    cfg = arm_config(run, arm, label)
    drafter = drafter_of(cfg, arm, label)
    if not drafter.algorithm or drafter.num_steps is None:
        raise ScheduleError(f"point {label}'s arm '{arm}' does not speculate (drafter '{drafter.name}'), "
                            f"so it has no k to schedule")
    grid.engine = str((cfg.get("server") or {}).get("engine"))
    return Cell(int(figures["concurrency"]), int(drafter.num_steps), float(figures["speedup"]), label, run, drafter)


def arm_config(run: RunData, arm: str, label: str) -> dict[str, Any]:
    """The arm's config as its record wrote it (interpolations resolved then)."""
    cfg = run.arm_config(arm)
    if cfg is None:
        raise ScheduleError(f"point {label}'s arm '{arm}' has no readable config "
                            f"({run.path.parent / 'arms' / safe_name(arm) / 'config.yaml'})")
    return cfg


def drafter_of(cfg: dict[str, Any], arm: str, label: str) -> DrafterConfig:
    """The arm's drafter as the schema types it: what an engine's schedule form reads."""
    try:
        return DrafterConfig(**(cfg.get("drafter") or {}))
    except TypeError as exc:  # a key today's schema does not have
        raise ScheduleError(f"point {label}'s arm '{arm}' has a drafter config today's schema cannot read ({exc})") from None


def check_shape(grid: Grid) -> None:
    """At least two k values, each concurrency with every k once."""
    ks = sorted({cell.k for cell in grid.cells})
    if len(ks) < 2:
        raise ScheduleError(f"{grid.sweep} sweeps one k only ({grid.arm} at k={ks[0]}); a schedule chooses "
                            f"between k values, so sweep drafter.num_steps over two or more")
    for c in grid.concurrencies:
        found = [cell.k for cell in grid.at(c)]
        if len(found) != len(set(found)):
            raise ScheduleError(f"{grid.sweep} has k={found} more than once at concurrency {c} (another key is "
                                f"swept too); a schedule needs one run per concurrency and k")
