"""The Hydra app that `specgate sweep ... hydra/launcher=X` runs with `--multirun`, so that
Hydra's own sweeper expands the points and Hydra's launcher (submitit's SLURM or local
executor) runs them, each as one job on whatever machine the engine picks.

The task function runs exactly one point: the point whose number is Hydra's `job.num`, as
the sweep record's sweep.json lists it (specgate wrote it before submitting, and checked
every point then). It runs that point's pytest, as the basic launcher would, writes the
point's exit status into the point's folder (which the submitting side polls), and returns
it. The sweep record is found from `hydra.sweep.dir`, which specgate sets to its points/.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import harness.config.compose  # noqa: F401  (registers the schema the config tree's defaults name)
from harness.record.atomic import atomic_write
from harness.record.secrets import Redactor
from harness.sweep.point import EXIT_STATUS_FILE, point_command, point_environment, point_overrides, signal_until_gone


def this_point(sweep_dir: Path, job_num: int, task_overrides: list[str]) -> dict:
    """The sweep.json entry of this job, checked against the overrides Hydra gave the job,
    so that a job can never run another point's configuration."""
    data = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    entry = data["points"][job_num]
    redactor = Redactor()  # sweep.json holds the overrides as written: any secret redacted
    redactor.learn(task_overrides)
    shown = redactor.data(list(task_overrides))
    missing = [o for o in entry["swept"] if o not in shown]
    if missing:
        raise RuntimeError(f"job {job_num} was given {' '.join(task_overrides)}, but sweep.json's point "
                           f"{entry['label']} swept {' '.join(missing)}: not running another point's config")
    return {**entry, "conf_dir": data["launcher"]["conf_dir"], "pytest_options": data["pytest_options"]}


def run_here(command: list[str]) -> int:
    """The point's pytest in this job's process group: the engine's signals (scancel's
    SIGTERM, the local executor's SIGINT to the group) reach it directly, and it stops its
    servers as it would under Ctrl-C; this job only waits for it (a second signal from here
    could cut that teardown short).

    Near the time limit submitit's own signal (SIGUSR2, `signal_delay_s` before it) raises in
    this job instead: the point is then stopped as by a Ctrl-C, its servers with it, before
    the job ends with submitit's error and SLURM kills whatever is left."""
    child = subprocess.Popen(command, env=point_environment(), preexec_fn=ignore_time_limit_signal)
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue
    except BaseException:
        signal_until_gone(child)
        raise


def ignore_time_limit_signal() -> None:
    """SLURM sends the time-limit signal (SIGUSR2) to every process of the job, and its default
    action ends a process at once: the point's pytest ignores it and is stopped by this job."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


@hydra.main(config_path=None, config_name="config", version_base=None)
def run_one_point(cfg: DictConfig) -> int:
    job = HydraConfig.get()
    sweep_dir = Path(job.sweep.dir).parent
    task = list(job.overrides.task)  # the point's own overrides, secrets included (sweep.json has them redacted)
    point = this_point(sweep_dir, job.job.num, task)
    overrides = point_overrides(task, sweep_dir / "points" / point["label"])
    status = run_here(point_command(overrides, Path(point["conf_dir"]), point["pytest_options"]))
    atomic_write(sweep_dir / "points" / point["label"] / EXIT_STATUS_FILE, f"{status}\n")
    return status


if __name__ == "__main__":
    run_one_point()
