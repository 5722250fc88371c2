"""The Hydra app that `specgate sweep ... hydra/launcher=X` runs with `--multirun`, so that
Hydra's own sweeper expands the points and Hydra's launcher (submitit's SLURM or local
executor, or Ray's) runs them, each as one job on whatever machine the engine picks.

The task function runs exactly one point: the point whose number is Hydra's `job.num`, as
the sweep record's sweep.json lists it (specgate wrote it before submitting, and checked
every point then). It runs that point's pytest as a job of its launcher runs one (the
launcher's `run_job`, harness/sweep/launchers.py: a submitit job, a Ray task), writes the
point's exit status into the point's folder (which the submitting side polls), and returns
it. The sweep record is found from `hydra.sweep.dir`, which specgate sets to its points/.
What stays here of Ray is the patch of Hydra's Ray plugin (`every_ray_task_returns`), which
needs Hydra's own types.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import harness.config.compose  # noqa: F401  (registers the schema the config tree's defaults name)
from harness.config.schema import SpecgateConfig
from harness.interrupts import sigint_ignored
from harness.record.atomic import atomic_write
from harness.record.secrets import Redactor
from harness.sweep.launchers import LAUNCHERS
from harness.sweep.ray_cluster import CANCEL_GRACE_S as CANCELLED_TASKS_S, RAY_TASK_FAILED
from harness.sweep.point import EXIT_STATUS_FILE, point_command, point_overrides


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


def untyped_schema() -> None:
    """The schema node the config tree's defaults name, as plain values. Every point was composed
    and checked by specgate before anything was submitted, and is again by its own pytest: the
    app's composition only expands the sweep, and Hydra's typed merge refuses what specgate's
    takes (`+gate.min_speedup.eagle4={over: baseline, ratio: 1.3}`, a new entry of a typed
    mapping: harness/config/compose.py's split_new_entries), which left every point unsubmitted."""
    plain = OmegaConf.to_container(OmegaConf.structured(SpecgateConfig), enum_to_str=True)
    ConfigStore.instance().store(name="specgate_schema", node=plain)


def every_ray_task_returns() -> None:
    """hydra-ray-launcher takes its tasks' results in turn (`ray.get`), and a task whose worker
    died raises there: the app would end, and the Ray instance and every other point with it.
    Each such task becomes a failed job instead (Hydra raises the first once all have
    returned), so the other points run on, as SLURM's jobs do when one is cancelled."""
    try:
        from hydra_plugins.hydra_ray_launcher import _core
    except ImportError:  # the plugin is not installed: no Ray sweep here
        return
    import itertools
    import types

    import ray
    from hydra.core.utils import JobReturn, JobStatus

    job_numbers = itertools.count()  # the plugin gets its tasks' results in job order, one batch of all
    submitted = []
    submit = _core.launch_job_on_ray

    def launch_job_on_ray(*args, **kwargs):
        submitted.append(submit(*args, **kwargs))
        return submitted[-1]

    def get(ref):
        num = next(job_numbers)
        try:
            return ray.get(ref)
        except KeyboardInterrupt:
            cancel_and_wait(submitted)
            raise
        except ray.exceptions.RayError as exc:
            print(f"{RAY_TASK_FAILED.format(num=num)}{type(exc).__name__}: {str(exc).strip().splitlines()[0]}",
                  flush=True)
            return JobReturn(status=JobStatus.FAILED, _return_value=exc)

    _core.ray = types.SimpleNamespace(get=get)  # the one name the plugin's launch() uses of ray
    _core.launch_job_on_ray = launch_job_on_ray


def cancel_and_wait(refs: list) -> None:
    """The driver's Ctrl-C (specgate's, on a cluster whose processes it cannot signal): every
    task is cancelled, each stops its point's pytest (harness/sweep/ray_task.py), and the driver waits
    for them before it goes (Ray would end a gone driver's tasks without that teardown)."""
    import ray

    with sigint_ignored():
        for ref in refs:
            ray.cancel(ref)
        ray.wait(refs, num_returns=len(refs), timeout=CANCELLED_TASKS_S)


@hydra.main(config_path=None, config_name="config", version_base=None)
def run_one_point(cfg: DictConfig) -> int:
    job = HydraConfig.get()
    sweep_dir = Path(job.sweep.dir).parent
    task = list(job.overrides.task)  # the point's own overrides, secrets included (sweep.json has them redacted)
    point = this_point(sweep_dir, job.job.num, task)
    overrides = point_overrides(task, sweep_dir / "points" / point["label"])
    command = point_command(overrides, Path(point["conf_dir"]), point["pytest_options"])
    launcher = LAUNCHERS[job.launcher._target_.rsplit(".", 1)[-1]]  # how a job of this launcher runs its point
    status = launcher.run_job(command, Path(job.runtime.output_dir))
    atomic_write(sweep_dir / "points" / point["label"] / EXIT_STATUS_FILE, f"{status}\n")
    return status


if __name__ == "__main__":
    untyped_schema()
    every_ray_task_returns()
    run_one_point()
