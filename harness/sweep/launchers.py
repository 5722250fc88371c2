"""Where a sweep's points run: one class per Hydra launcher specgate supports, and the one
registry of them (`LAUNCHERS`, by the class name of the launcher config's `_target_`).

A launcher says which Hydra launcher it stands for, what it adds to every point's job
(`job_overrides`), how the jobs it submitted are followed (`jobs`, harness/sweep/jobs.py),
whether the points run on this machine (then this machine is checked for them before the
sweep starts), runs the sweep's points (`run`), and how one job of the Hydra app runs its
point (`run_job`: a submitit job waits on it, a Ray task runs it under Ray's cancellation). `basic` runs each point's pytest in
turn here; the submitit and Ray launchers run the Hydra app harness/sweep/app.py with
`--multirun` (harness/sweep/launch.py). A new launcher is one class here and a line in
`LAUNCHERS`; nothing else branches on which launcher runs a sweep.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import ClassVar


from harness.config.compose import launcher_config, ConfigError, override_key
from harness.sweep import point
from harness.sweep.jobs import LocalJobs, SlurmJobs
from harness.sweep import ray_cluster, ray_task
from harness.sweep.launch import run_launched
from harness.sweep.plan import SweepPlan
from harness.sweep.point import point_environment
from harness.record.secrets import Redactor

# what specgate itself sets on a launched sweep (inside its record, so that it finds the jobs)
SPECGATE_OWNS = ("hydra.sweep.", "hydra.launcher.name", "hydra.launcher.submitit_folder")


class Launcher:
    """Where the points of a sweep run (see the module's docstring)."""

    hydra_target: ClassVar[str]  # the class name of the Hydra launcher config's _target_
    name: ClassVar[str]  # what the sweep record calls it (sweep.json launcher.engine): basic, slurm, local
    points_run_here: ClassVar[bool] = True  # False: on other machines, which check themselves

    def job_overrides(self) -> list[str]:
        """Hydra overrides every job of this launcher gets, before the user's launcher settings."""
        return []

    def naming(self, job_name: str) -> list[str]:
        """The override that gives the sweep's jobs their name (submitit's: what `squeue` finds)."""
        return [f"hydra.launcher.name={job_name}"]

    def check(self, config) -> None:
        """What the launcher's composed settings (`config`, hydra.launcher) must satisfy
        beyond their schema, before any point starts: a ConfigError's one sentence."""

    def app_environment(self) -> dict[str, str]:
        """The Hydra app's environment (its jobs inherit it on this machine)."""
        return point_environment()

    def jobs(self, app: subprocess.Popen, job_name: str):
        """The jobs the Hydra app submitted, as their engine sees them (harness/sweep/jobs.py)."""
        raise NotImplementedError

    def run(self, sweep: SweepPlan) -> None:
        """Run every point of `sweep` into its record's entries (this class: through the Hydra
        app, harness/sweep/launch.py); KeyboardInterrupt once a Ctrl-C stopped them. The driver
        closes the record (harness/sweep/driver.py)."""
        run_launched(sweep, self)

    def run_job(self, command: list[str], output_dir: Path) -> int:
        """Inside one job of the Hydra app (harness/sweep/app.py): its point's pytest (`command`)
        run to its end, its exit status (`output_dir`: the job's own folder)."""
        return point.run_in_job(command)


class BasicLauncher(Launcher):
    """Hydra's default: each point's pytest in turn on this machine (no Hydra app, no jobs)."""

    hydra_target = "BasicLauncher"
    name = "basic"

    def run(self, sweep: SweepPlan) -> None:
        point.run_in_turn(sweep.record, sweep.point_runs, sweep.conf_dir, sweep.pytest_options, sweep.statuses,
                          lambda entry: f"specgate sweep: point {entry['label']}")


class SubmititSlurmLauncher(Launcher):
    """hydra-submitit-launcher's SLURM executor: one job per point, found by its job name."""

    hydra_target = "SlurmLauncher"
    name = "slurm"
    points_run_here = False  # each point's pytest checks its own node

    def job_overrides(self) -> list[str]:
        """A SLURM point never shares its node: its server owns every GPU there (sbatch
        --exclusive). Placed before the user's launcher settings, so that
        `~hydra.launcher.additional_parameters.exclusive` can take it back (a CPU-only cluster)."""
        return ["++hydra.launcher.additional_parameters.exclusive=true"]

    def jobs(self, app: subprocess.Popen, job_name: str) -> SlurmJobs:
        return SlurmJobs(job_name)


class SubmititLocalLauncher(Launcher):
    """hydra-submitit-launcher's local executor: one process per point on this machine."""

    hydra_target = "LocalLauncher"
    name = "local"

    def jobs(self, app: subprocess.Popen, job_name: str) -> LocalJobs:
        return LocalJobs(app.pid)


class RayLauncher(Launcher):
    """hydra-ray-launcher: each point a Ray task, on a local Ray instance the sweep starts and
    ends (harness/sweep/ray_cluster.py: its settings, its processes, its logs), or on the
    cluster at hydra.launcher.ray.init.address, which must answer before anything starts."""

    hydra_target = "RayLauncher"
    name = "ray"

    def __init__(self):
        self.joining = False  # hydra.launcher.ray.init.address set: a cluster of other machines
        self.temp_dir: Path | None = None  # the local instance's folder, while the sweep runs
        self.record_path: Path | None = None

    @property
    def points_run_here(self) -> bool:  # a cluster's nodes check themselves, as SLURM's do
        return not self.joining

    def naming(self, job_name: str) -> list[str]:
        return []  # Ray's tasks are found as processes of the app's session, not by a name

    def job_overrides(self) -> list[str]:
        return ray_cluster.joining_overrides() if self.joining else ray_cluster.local_overrides(self.temp_dir)

    def check(self, config) -> None:
        import inspect

        import ray

        init = dict(config.ray.init)
        unknown = [k for k in init if not k.startswith("_") and k not in inspect.signature(ray.init).parameters]
        if unknown:
            raise ConfigError(f"hydra.launcher.ray.init.{unknown[0]}: not an argument of ray.init "
                              f"(ray {ray.__version__}: https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html)")
        ray_cluster.check_address(init.get("address"))
        self.joining = init.get("address") not in (None, "", "local")

    def app_environment(self) -> dict[str, str]:
        return {**point_environment(), **ray_cluster.RAY_ENV}

    def run_job(self, command: list[str], output_dir: Path) -> int:
        return ray_task.run_point_as_task(command, output_dir)

    def jobs(self, app: subprocess.Popen, job_name: str) -> ray_cluster.RayJobs:
        return ray_cluster.RayJobs(app.pid, self.record_path / "launcher.log")

    def run(self, sweep: SweepPlan) -> None:
        """Through the Hydra app, with the local instance's files in a folder of the sweep's
        own; once every process of it is gone, Ray's logs go into the record (redacted)."""
        self.record_path, self.temp_dir = sweep.record.path, None if self.joining else ray_cluster.make_temp_dir()
        try:
            run_launched(sweep, self)
        finally:
            if self.temp_dir is not None:
                redactor = Redactor()
                redactor.learn([*sweep.overrides, *sweep.launcher_overrides])
                ray_cluster.keep_logs(self.temp_dir, sweep.record.path / "ray_logs", redactor.text)
            self.temp_dir = None


LAUNCHERS: dict[str, Launcher] = {launcher.hydra_target: launcher for launcher in
                                  (BasicLauncher(), SubmititSlurmLauncher(), SubmititLocalLauncher(), RayLauncher())}


def is_launcher_override(override: str) -> bool:
    """`hydra/launcher=...`, `hydra.launcher.partition=...`: the launcher's, not a point's."""
    return override_key(override).startswith(("hydra/", "hydra."))


def launcher_of(launcher_overrides: list[str], conf_dir: Path) -> Launcher:
    """The launcher the overrides pick. Its settings are composed as the app will get them,
    so a misspelt launcher or parameter is one sentence before anything starts."""
    if not launcher_overrides:
        return LAUNCHERS[BasicLauncher.hydra_target]
    owned = [o for o in launcher_overrides if override_key(o).startswith(SPECGATE_OWNS)]
    if owned:
        raise ConfigError(f"{owned[0]}: specgate sets where a launched sweep's jobs go and what they are called "
                          f"(inside the sweep record, so that it finds them)")
    choice = [o for o in launcher_overrides if override_key(o) == "hydra/launcher"]
    target = str(launcher_config(choice, conf_dir).get("_target_", "")).rsplit(".", 1)[-1]
    if target not in LAUNCHERS:
        raise ConfigError(f"launcher {target or '?'}: specgate sweep runs points with hydra/launcher=basic, "
                          f"submitit_local, submitit_slurm or ray (or a preset of them in conf/hydra/launcher/)")
    launcher = LAUNCHERS[target]
    launcher.check(launcher_config([*launcher.job_overrides(), *launcher_overrides], conf_dir))
    return launcher


