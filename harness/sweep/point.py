"""One point of a sweep as its own pytest process: its label, its overrides (its record
inside the sweep's), its command line, and running it until it ends or is stopped. Every
launcher runs a point this way: here (the basic launcher) or inside a job (app.py); a
calibration runs its runs this way too (`run_in_turn`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from harness import PROJECT_ROOT, SUITES_DIR
from harness.config.compose import SweepPoint, override_key
from harness.interrupts import exit_status, ignore_time_limit_signal, sigint_ignored, wait_for_exit
from harness.record.secrets import Redactor
from harness.sweep.junit import point_options

STOP_GRACE_S = (120, 30)  # after SIGINT, then after SIGTERM: time for a point to stop its servers
EXIT_STATUS_FILE = "exit_status"  # in points/<label>/: the point's pytest exit status, once it ended


def label(index: int, point: SweepPoint, redactor: Redactor) -> str:
    """`1_concurrency-4_num_steps-2`: the point's number and what it picked, as a folder name
    (no `=` or `,`, which an override's value could not carry unquoted); a secret value
    (`+server.env.HF_TOKEN=a,b`) is `redacted` there, as everywhere."""
    shown = [redactor.override_label(o) for o in point.swept]
    picks = [f"{override_key(o).rsplit('.', 1)[-1]}-{o.split('=', 1)[1]}" for o in shown]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "_".join([str(index), *picks]))[:120]


def point_overrides(overrides: list[str], point_root: Path) -> list[str]:
    """The point's overrides as its pytest gets them: its record goes inside the sweep's."""
    kept = [o for o in overrides if override_key(o) != "record.root"]
    quoted = str(point_root).replace("'", "\\'")  # Hydra's quoted string: the path as it is
    return [*kept, f"record.root='{quoted}'"]


def point_command(overrides: list[str], conf_dir: Path, pytest_options: list[str]) -> list[str]:
    """The point's pytest; a `--junitxml` of the sweep becomes the point's own file in its folder
    (harness/sweep/junit.py merges them when the sweep ends)."""
    options = point_options(pytest_options, point_root_of(overrides)) if point_root_of(overrides) else pytest_options
    return [sys.executable, "-m", "pytest", str(SUITES_DIR), "-p", "harness.plugin", "--conf-dir", str(conf_dir),
            *options, *overrides]


def point_root_of(overrides: list[str]) -> Path | None:
    """The point's folder, from the record.root override point_overrides() gave it."""
    for override in overrides:
        if override_key(override) == "record.root":
            value = override.split("=", 1)[1]
            if value.startswith("'") and value.endswith("'"):
                value = value[1:-1].replace("\\'", "'")
            return Path(value)
    return None


def point_environment() -> dict[str, str]:
    """This process's environment, with the project on PYTHONPATH (a point may run from anywhere)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}


def run_in_turn(record, runs: list[list[str]], conf_dir: Path, pytest_options: list[str], statuses: list[int],
                announce) -> list[int]:
    """Each run's pytest in turn here (`runs`: each one's overrides, in the order of the
    record's entries, harness/sweep/runs.py), its entry read back as it ends and its exit status
    appended to `statuses`: a sweep's points under the basic launcher, a calibration's runs. A
    run stopped by Ctrl-C (or SIGTERM) raises KeyboardInterrupt once it has ended."""
    for overrides, entry in zip(runs, record.data[record.folder]):
        print(announce(entry), flush=True)
        status, interrupted = run_point(point_command(overrides, conf_dir, pytest_options))
        statuses.append(status)
        record.run_ended(entry, status)
        if interrupted:
            raise KeyboardInterrupt
    return statuses


def run_in_job(command: list[str]) -> int:
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


def run_point(command: list[str]) -> tuple[int, bool]:
    """The point's pytest and whether a Ctrl-C (or SIGTERM) stopped it. Its own process group,
    so that one Ctrl-C reaches it once, from here: SIGINT (then SIGTERM), with time to stop
    its servers and close its record as interrupted."""
    child = subprocess.Popen(command, env=point_environment(), start_new_session=True)
    try:
        return child.wait(), False
    except KeyboardInterrupt:
        return stop(child), True


def stop(child: subprocess.Popen) -> int:
    """SIGINT, then SIGTERM, then SIGKILL, each after a grace period. A second Ctrl-C while
    the point stops its servers is ignored, so it cannot cut that short and leave one behind."""
    with sigint_ignored():
        return signal_until_gone(child)


def signal_until_gone(child: subprocess.Popen) -> int:
    for sig, grace in zip((signal.SIGINT, signal.SIGTERM), STOP_GRACE_S):
        if exit_status(child) is not None:
            break
        child.send_signal(sig)
        try:
            wait_for_exit(child, grace)
        except subprocess.TimeoutExpired:
            continue
    if exit_status(child) is None:
        child.kill()
    return child.wait()
