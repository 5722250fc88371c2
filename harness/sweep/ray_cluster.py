"""What specgate needs of Ray to run a sweep's points as Ray tasks (`hydra/launcher=ray`,
Hydra's hydra-ray-launcher): that a cluster it is told to join answers, before any point
starts; the settings every sweep's local Ray instance gets (a small object store, no
dashboard, its files in a folder specgate owns, a point never retried); which of the sweep's
processes are still there and how to stop them; and Ray's logs, copied into the sweep
record through the redaction once the instance is gone.

The Hydra app (harness/sweep/app.py) is the Ray driver. It runs in a session of its own,
and a local Ray instance it starts (GCS, raylet, workers, the points' pytests under them)
stays in that session: the session is what is watched and stopped, as the process group is
for submitit's local executor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from harness.config.compose import ConfigError
from harness.interrupts import wait_for_exit
from harness.load import ray_clients
from harness.servers.processes import live_processes, stat_fields

# what the Hydra app (harness/sweep/app.py, which imports Hydra) writes: kept here as text
RAY_POINT_LOG = "point.log"  # the point's pytest output, in its job's folder points/.jobs/<n>/
RAY_TASK_FAILED = "specgate: job {num}'s Ray task failed: "  # a line of launcher.log

ADDRESS_KEY = "hydra.launcher.ray.init.address"
APP_END_S = 30  # the driver's ray.shutdown() once its tasks have returned
CANCEL_GRACE_S = 150  # each point's pytest stops its servers after its SIGINT (as under Ctrl-C)
# what every sweep's Ray gets; `kill_child_processes_on_worker_exit` off: a point's pytest
# must outlive a worker that dies, to stop its servers (Ray would SIGKILL it with the worker)
RAY_ENV = {"RAY_kill_child_processes_on_worker_exit": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def check_address(address) -> None:
    """A cluster to join must answer now: one sentence (exit 4) rather than a driver that
    waits on it while every point is marked failed. `null` starts a local instance."""
    try:
        ray_clients.check_address(address, ADDRESS_KEY)
    except ray_clients.RayAddressError as exc:
        raise ConfigError(str(exc)) from None


def local_overrides(temp_dir: Path | None) -> list[str]:
    """The launcher settings of a sweep's own local Ray instance (before the user's, which win)."""
    ours = ["++hydra.launcher.ray.init.address=local",  # a new instance, never one already running here
            "++hydra.launcher.ray.init.include_dashboard=false",
            "++hydra.launcher.ray.init.object_store_memory=100000000",  # 100 MB: points pass no data through it
            "++hydra.launcher.ray.init.log_to_driver=true",
            "++hydra.launcher.ray.remote.max_retries=0"]  # a point whose worker died failed; never run twice
    if temp_dir is not None:
        ours.append(f"++hydra.launcher.ray.init._temp_dir={temp_dir}")
    return ours


def joining_overrides() -> list[str]:
    """Joining a cluster: its object store is its own (Ray refuses the setting then, and the
    plugin would set one), and so are its files."""
    return ["++hydra.launcher.ray.init.object_store_memory=null", "++hydra.launcher.ray.remote.max_retries=0"]


def make_temp_dir() -> Path:
    """Ray's root folder for the sweep's local instance: short (its sockets live there, and a
    Unix socket's path has at most 107 bytes, which a record's path can exceed) and owned by
    this sweep; its logs are copied into the record (`keep_logs`) and the folder removed."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="specgate-ray-"))


def keep_logs(temp_dir: Path, into: Path, redact) -> None:
    """Ray's own logs (GCS, raylet, workers) into the sweep record, each through the
    redaction, then the instance's folder removed (sockets, spilled objects, the session)."""
    for session in temp_dir.glob("session_2*"):  # not session_latest, a link to it
        for log in sorted((session / "logs").rglob("*")):
            if log.is_file() and not log.is_symlink():
                target = into / log.relative_to(session / "logs")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(redact(log.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
    ray_clients.remove_ray_folder(str(temp_dir))


class RayJobs:
    """The sweep's Ray tasks as processes of the app's session: the app (the driver), the Ray
    instance it started, its workers and the points' pytests under them (each in a process
    group of its own, harness/sweep/app.py)."""

    def __init__(self, session: int, launcher_log: Path):
        self.session, self.launcher_log = session, launcher_log

    def outstanding(self) -> list[str]:
        return [str(pid) for pid, _ in session_members(self.session)]

    def cancel(self, app: subprocess.Popen) -> None:
        """SIGINT to each point's pytest (not to Ray: its task then returns the point's status,
        2), and a wait until they have stopped their servers; then the app ends the instance."""
        points = [pid for pid, _ in session_members(self.session) if is_ray_worker(parent_of(pid))]
        for pid in points:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        if not points:  # a cluster's workers are not ours: the driver cancels its tasks (app.py)
            app.send_signal(signal.SIGINT)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while any(not gone(pid) for pid in points) and time.monotonic() < deadline:
            time.sleep(0.5)
        try:  # its tasks returned: the app ends Ray itself (a SIGTERM would leave Ray's agents a minute)
            wait_for_exit(app, APP_END_S if points else CANCEL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        for pid, _ in session_members(self.session):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def submitted(self, points: Path) -> bool:
        """A task has begun (Hydra makes each job's folder in its worker, after the sweeper
        wrote multirun.yaml)."""
        return (points / ".jobs").is_dir()

    def folders(self, points: Path) -> dict[int, Path]:
        jobs = points / ".jobs"
        return {int(d.name): d for d in jobs.iterdir() if d.name.isdigit()} if jobs.is_dir() else {}

    def log(self, folder: Path) -> Path | None:
        return folder / RAY_POINT_LOG if (folder / RAY_POINT_LOG).is_file() else None

    def failed_result(self, folder: Path) -> str | None:
        return None  # Ray's result objects live in its object store, not in the record

    def state(self, folder: Path) -> str | None:
        """What the driver got instead of the task's result (`WorkerCrashedError: ...`,
        `TaskCancelledError`), as the app wrote it to its log (harness/sweep/app.py)."""
        if not self.launcher_log.is_file():
            return None
        prefix = RAY_TASK_FAILED.format(num=folder.name)
        said = [line.split(prefix, 1)[1] for line in self.launcher_log.read_text(errors="replace").splitlines()
                if prefix in line]
        # Ray's own lines from the raylet (colored) may land on the same line: cut off
        return f"Ray task {said[-1].split(chr(27))[0].strip()}" if said else None


def session_members(session: int) -> list[tuple[int, int]]:
    """(pid, process group) of the live processes (not zombies) of `session`."""
    return [(pid, int(fields[2])) for pid, fields in live_processes() if int(fields[3]) == session]


def gone(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is None or fields[0] == "Z"


def parent_of(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else 0


def is_ray_worker(pid: int) -> bool:
    """A Ray worker names itself `ray::<task>` (its process title)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False
