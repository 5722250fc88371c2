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
import os
import signal
import subprocess
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import harness.config.compose  # noqa: F401  (registers the schema the config tree's defaults name)
from harness.interrupts import ignore_time_limit_signal, sigint_default_and_unblocked, sigint_ignored, sigint_raises
from harness.record.atomic import atomic_write
from harness.record.secrets import Redactor
from harness.sweep.ray_cluster import CANCEL_GRACE_S as CANCELLED_TASKS_S, RAY_POINT_LOG, RAY_TASK_FAILED
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


def run_as_ray_task(command: list[str], log: Path) -> int:
    """The point's pytest under a Ray task, its output into `log` (a Ray worker's output
    lands in Ray's session folder, among every other worker's). A cancelled task (`ray.cancel`:
    the driver's Ctrl-C) raises KeyboardInterrupt here, between two short waits: the pytest
    gets SIGINT then, once, and the task waits for its teardown and returns its status (2)."""
    with open(log, "ab") as out:
        child = subprocess.Popen(command, env=point_environment(), preexec_fn=stopped_with_this_worker,
                                 stdout=out, stderr=subprocess.STDOUT)
    # Ray cancels by raising the interrupt Python would raise for SIGINT, which its workers
    # ignore: handled here while the point runs (a task runs in the worker's main thread)
    told = False
    with sigint_raises():
        while True:
            try:
                return interrupted_as_2(child.wait(timeout=0.5))  # back in Python often, where Ray's cancellation raises
            except subprocess.TimeoutExpired:
                continue
            except KeyboardInterrupt:
                if not told:
                    child.send_signal(signal.SIGINT)
                    told = True


def interrupted_as_2(status: int) -> int:
    """A pytest that ends on an interrupt it did not catch (a SIGINT during its own teardown)
    exits by SIGINT, as Python does for an uncaught KeyboardInterrupt (status -2): that is an
    interrupted point, which pytest and specgate say with 2."""
    return 2 if status == -signal.SIGINT else status


def say_ray_node(log: Path) -> None:
    """The point log's first line: which Ray node ran the point (a cluster has several)."""
    import socket

    import ray

    node = ray.get_runtime_context().get_node_id()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"specgate: this point runs on Ray node {node} ({socket.gethostname()}, "
                  f"{ray.util.get_node_ip_address()})\n")


def stopped_with_this_worker() -> None:
    """A Ray worker killed under its task (`ray.kill`, the OOM killer, its node gone) leaves no
    one to stop the point's pytest: the kernel sends it SIGINT then, and it stops its servers
    as under Ctrl-C (its record `interrupted`); the point fails with Ray's reason. Its own
    process group: the raylet SIGKILLs a dead worker's group, which would cut that short. A Ray
    worker blocks and ignores SIGINT, which a child inherits: restored."""
    import ctypes

    ignore_time_limit_signal()
    sigint_default_and_unblocked()
    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG (Linux)


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
    task is cancelled, each stops its point's pytest (run_as_ray_task), and the driver waits
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
    if job.launcher._target_.endswith("RayLauncher"):
        log = Path(job.runtime.output_dir) / RAY_POINT_LOG
        say_ray_node(log)
        status = run_as_ray_task(command, log)
    else:
        status = run_here(command)
    atomic_write(sweep_dir / "points" / point["label"] / EXIT_STATUS_FILE, f"{status}\n")
    return status


if __name__ == "__main__":
    every_ray_task_returns()
    run_one_point()
