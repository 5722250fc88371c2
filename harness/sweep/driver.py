"""`specgate sweep`: one whole experiment (every arm, every suite, its own run record and exit
status) per point of a Hydra sweep: run one after another on this machine, as Hydra's
`basic` launcher does (the default), or with `hydra/launcher=submitit_slurm|submitit_local`
as jobs of that engine, through Hydra's own launcher (harness/sweep/launchers.py).

Every point is composed and checked before the first server starts, so a bad value in the
last point stops the sweep at once (exit 4). Each point then runs as its own pytest process:
nothing (a server, a signal handler, a cached config) leaks from one point into the next.
Record layout: harness/sweep/record.py and README "Sweeps".
"""

from __future__ import annotations

from pathlib import Path

from harness.config.compose import ConfigError, Experiment, SweepPoint, is_sweep, override_key, sweep_points
from harness.run.compose import compose
from harness.sweep.launchers import is_launcher_override, launcher_of
from harness.sweep.finish import INTERRUPTED_EXIT, finish_interrupted, finish_sweep
from harness.sweep.plan import SweepPlan, SweepPoints
from harness.sweep.point import label, point_overrides
from harness.sweep.record import SweepRecord
from harness.interrupts import Interrupts
from harness.record.kinds import SWEEP
from harness.run.driver import Driver, split_tokens
from harness.run.preflight import check_experiment


def check_points(points: list[SweepPoint], conf_dir: Path, here: bool = True) -> list[Experiment]:
    """Compose every point, and check what pytest would check before starting a server. What
    a machine must have (a GPU, the model's files, an interpreter) is checked only when the
    points run `here`: on a cluster each point's own pytest checks its node."""
    if any(override_key(o) == "record.root" for point in points for o in point.swept):
        raise ConfigError("record.root cannot be swept: the sweep's own folder holds every point's record")
    if any(override_key(o).startswith("sweep_gate.") for point in points for o in point.swept):
        raise ConfigError("sweep_gate cannot be swept: its gates judge the whole sweep, once")
    experiments = []
    for index, point in enumerate(points):
        try:
            experiment = compose(point.overrides, conf_dir)
            check_experiment(experiment, here)  # what the point's pytest checks (the machine: only here)
        except ConfigError as exc:
            raise ConfigError(f"sweep point {index} ({' '.join(point.swept) or 'no sweep'}): {exc}") from None
        experiments.append(experiment)
    return experiments


class SweepDriver(Driver):
    """Expand, check every point, then hand them to the launcher the overrides pick
    (harness/sweep/launchers.py): one after another here (hydra/launcher=basic, the default),
    or as jobs of an engine through Hydra's launcher. Exit status: 0 only if every point
    exited 0 and no sweep gate failed, else 1; 2 when interrupted."""

    command, kind = "sweep", SWEEP

    def compose(self, tokens: list[str], conf_dir: Path) -> SweepPoints:
        return self.compose_points(*split_tokens(tokens), conf_dir)

    def compose_points(self, overrides: list[str], pytest_options: list[str], conf_dir: Path) -> SweepPoints:
        launcher_overrides = [o for o in overrides if is_launcher_override(o)]
        overrides = [o for o in overrides if not is_launcher_override(o)]
        if any(is_sweep(o) for o in launcher_overrides):
            raise ConfigError(f"{next(o for o in launcher_overrides if is_sweep(o))}: the launcher's settings cannot be swept")
        launcher = launcher_of(launcher_overrides, conf_dir)
        points = sweep_points(overrides)
        experiments = check_points(points, conf_dir, here=launcher.points_run_here)
        return SweepPoints(overrides, launcher_overrides, pytest_options, conf_dir, launcher, points, experiments)

    def plan(self, sweep: SweepPoints, command: list[str]) -> SweepPlan:
        points, first, options = sweep.points, sweep.experiments[0], sweep.pytest_options
        record = SweepRecord(first, command, options)
        record.learn_secrets([*sweep.overrides, *options, *(o for p in points for o in p.overrides)])
        labels = [label(n, p, record.redactor) for n, p in enumerate(points)]
        runs = [point_overrides(p.overrides, record.run_root(name)) for p, name in zip(points, labels)]
        entries = [record.add_run(name, overrides, swept=p.swept) for p, name, overrides in zip(points, labels, runs)]
        record.save()
        print(f"specgate sweep: {len(points)} point(s) of {first.name} on {sweep.launcher.name}; record {record.path}",
              flush=True)
        return SweepPlan(record, entries, runs, sweep.overrides, sweep.launcher_overrides, sweep.conf_dir, options,
                         first.base.sweep_gate, sweep.launcher)

    def measure(self, sweep: SweepPlan, interrupts: Interrupts) -> None:
        sweep.launcher.run(sweep)

    def record(self, sweep: SweepPlan) -> int:
        return finish_sweep(sweep.record, [e["exit_status"] for e in sweep.entries], sweep.gates)

    def interrupted(self, sweep: SweepPlan) -> int:
        """The sweep's record closed as interrupted: exit 2, or the stopped point's own non-zero status."""
        last = sweep.statuses[-1] if sweep.statuses else 0
        return finish_interrupted(sweep.record, last if last != 0 else INTERRUPTED_EXIT)


def run_sweep(overrides: list[str], pytest_options: list[str], conf_dir: Path, command: list[str]) -> int:
    """A sweep whose overrides and pytest options are told apart already (the plugin's `--multirun`)."""
    driver = SweepDriver()
    return driver.drive(driver.compose_points(overrides, pytest_options, conf_dir), command)
