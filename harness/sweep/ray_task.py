"""A point of a sweep as a Ray task (hydra-ray-launcher runs the Hydra app's task function,
harness/sweep/app.py, as a Ray task): the point's pytest under the task, its output into the
point's log, stopped once when Ray cancels the task, and stopped by the kernel when the worker
under it dies. The Ray launcher's `run_job` (harness/sweep/launchers.py) runs a point this way;
the Ray instance itself is harness/sweep/ray_cluster.py's."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from harness.interrupts import ignore_time_limit_signal, sigint_default_and_unblocked, sigint_raises, wait_for_exit
from harness.sweep.point import point_environment
from harness.sweep.ray_cluster import RAY_POINT_LOG


def run_point_as_task(command: list[str], output_dir: Path) -> int:
    """The point's pytest as this Ray task, its output in the job's folder (RAY_POINT_LOG),
    which begins with the node that ran it."""
    log = output_dir / RAY_POINT_LOG
    say_ray_node(log)
    return run_as_ray_task(command, log)


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
                return interrupted_as_2(wait_for_exit(child, 0.5))  # back in Python often, where Ray's cancellation raises
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
