"""Run a sweep's points through Hydra's own launcher plugins (hydra-submitit-launcher:
`submitit_slurm`, `submitit_local`, and the presets in conf/hydra/launcher/; the launcher
classes are in harness/sweep/launchers.py). specgate does not schedule anything: it runs the
Hydra app harness/sweep/app.py with `--multirun` and the sweep's overrides, and Hydra's
sweeper and launcher do the fan-out. Meanwhile it watches the points' folders (a shared
filesystem, for SLURM) and writes each point into sweep.json as it ends.

A job that ends without its point's exit status (cancelled, out of time, its node lost, the
task raised) is a failed point with the engine's reason and the path of its log; a point
whose pytest recorded its exit status before the engine ended or signalled its job keeps it,
and gets the same reason (`its job ran out of time: ...`). Ctrl-C
(or SIGTERM) cancels every job of the sweep and waits until none is left.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from harness.interrupts import exit_status, sigint_ignored, wait_for_exit
from harness.record.atomic import atomic_write
from harness.record.secrets import Redactor
from harness.servers.log import ServerLog
from harness.servers.srun import SWEEP_JOB_PREFIX
from harness.sweep.jobs import ended_by_engine, engine_in_log, failure_in_log, wait_until_none
from harness.sweep.plan import SweepPlan
from harness.sweep.point import EXIT_STATUS_FILE
from harness.sweep.record import SweepRecord

POLL_S = 1.0
APP_GRACE_S = 10  # the app's time to see that its last job is gone
CANCEL_GRACE_S = 150  # scancel's SIGTERM, then SLURM's KillWait (30 s) and the points' teardown


def quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "\\'") + "'"


def app_command(overrides: list[str], launcher_overrides: list[str], launcher, record: SweepRecord,
                conf_dir: Path) -> list[str]:
    """The Hydra app with the sweep's own overrides (Hydra expands the same points again) and
    where its jobs go: points/ of the sweep record, each job's Hydra folder in points/.jobs/."""
    ours = [f"hydra.sweep.dir={quoted(record.path / 'points')}", "hydra.sweep.subdir=.jobs/${hydra.job.num}",
            *launcher.naming(job_name(record)), "hydra.output_subdir=null", *launcher.job_overrides()]
    return [sys.executable, "-m", "harness.sweep.app", "--multirun", f"--config-path={conf_dir}",
            "--config-name=config", *overrides, *ours, *launcher_overrides]  # the user's launcher settings win


def job_name(record: SweepRecord) -> str:
    """The name of every job of the sweep: squeue finds them by it, `specgate clean` too."""
    return f"{SWEEP_JOB_PREFIX}{record.path.name}"


def run_launched(sweep: SweepPlan, launcher) -> None:
    """Submit through the Hydra app, follow the points to their end, each into its entry;
    KeyboardInterrupt once a Ctrl-C cancelled every job. `launcher` is a launcher of
    harness/sweep/launchers.py that runs the app (its job overrides, its jobs)."""
    record, entries, conf_dir = sweep.record, sweep.entries, sweep.conf_dir
    overrides, launcher_overrides = sweep.overrides, sweep.launcher_overrides
    record.data["launcher"] = {"engine": launcher.name, "overrides": launcher_overrides, "job_name": job_name(record),
                               "conf_dir": str(conf_dir), "log": "launcher.log"}
    record.save()
    redactor = Redactor()
    redactor.learn([*overrides, *launcher_overrides])
    app = subprocess.Popen(app_command(overrides, launcher_overrides, launcher, record, conf_dir), env=launcher.app_environment(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
    # the app's own output (Hydra's, submitit's log lines, which repeat the overrides), redacted
    ServerLog(record.path / "launcher.log", redactor.text).follow(iter(lambda: app.stdout.read1(65536), b""), "launcher-log")
    jobs = launcher.jobs(app, job_name(record))
    try:
        follow(record, entries, app, jobs, redactor)
    except KeyboardInterrupt:
        cancel(record, entries, app, jobs)
        raise
    explain_the_rest(record, entries, jobs, app.returncode)
    drop_pickles(record.path / "points" / ".submitit")


def follow(record: SweepRecord, entries: list[dict], app: subprocess.Popen, jobs, redactor: Redactor) -> None:
    """Until the app has exited and the engine has none of the sweep's jobs left (the app
    stops waiting at the first failed job; the others still run their points)."""
    idle_since, scrubbed = None, False
    while True:
        collect(record, entries)
        alive, left = exit_status(app) is None, jobs.outstanding()
        submitted = jobs.submitted(record.path / "points")
        if (submitted or not alive) and not scrubbed:  # the sweeper wrote it before submitting
            scrubbed = scrub_multirun_yaml(record.path / "points" / "multirun.yaml", redactor)
        if not alive and not left:
            collect(record, entries)
            return
        if alive and not left and submitted:
            # every job is gone but the app still waits on one: without SLURM's accounting
            # (sacct), submitit cannot tell that a job cancelled before it began has ended
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > APP_GRACE_S:
                stop_app(app)
        time.sleep(POLL_S)


def scrub_multirun_yaml(path: Path, redactor: Redactor) -> bool:
    """Hydra's sweeper saves the whole composed config (multirun.yaml) as the sweep starts,
    unconditionally: rewritten through the redaction as soon as it is there."""
    if not path.is_file():
        return False
    atomic_write(path, yaml.safe_dump(redactor.data(yaml.safe_load(path.read_text(encoding="utf-8"))), sort_keys=False))
    return True


def stop_app(app: subprocess.Popen) -> None:
    """The app alone (not its process group, where local jobs' points may be stopping)."""
    app.terminate()
    try:
        wait_for_exit(app, 30)
    except subprocess.TimeoutExpired:
        app.kill()
        app.wait()


def collect(record: SweepRecord, entries: list[dict]) -> None:
    """Each point whose job has written its exit status, into sweep.json once."""
    for entry in entries:
        done = record.run_root(entry["label"]) / EXIT_STATUS_FILE
        if entry["exit_status"] is None and entry["status"] == "not_run" and done.is_file():
            status = int(done.read_text().strip())
            record.run_ended(entry, status)
            failed = "; ".join(entry.get("failed_gates") or [])
            print(f"specgate sweep: point {entry['label']} exited {status}"
                  + (f", failing {failed}" if failed else ""), flush=True)


def explain_the_rest(record: SweepRecord, entries: list[dict], jobs, app_status: int | None,
                     otherwise: str = "its job ended without the point's exit status") -> None:
    """Every point without an exit status failed: why, from the engine and the job's log. A
    point with one keeps it (and its record's status), and gets an `error` too where the
    engine ended or signalled its job (out of time, cancelled, preempted, its node lost: the
    point's pytest, stopped like a Ctrl-C, may have exited 2 first), or its log says why it
    stopped (its config refused on the node)."""
    folders = jobs.folders(record.path / "points")
    for num, entry in enumerate(entries):
        folder = folders.get(num)
        log = jobs.log(folder) if folder else None
        shown_log = str(log.relative_to(record.path)) if log else None
        if entry["exit_status"] is not None:
            entry["job_log"] = shown_log
            why = job_reason(jobs, folder, log) if folder else None
            if why:
                entry["error"] = why
                print(f"specgate sweep: point {entry['label']} exited {entry['exit_status']}: {why}",
                      file=sys.stderr, flush=True)
            continue
        if folder is None:
            why = failure_in_log(record.path / "launcher.log")  # e.g. sbatch's own refusal
            reason = (f"no job was submitted for it{': ' + why if why else ''} "
                      f"(the launcher exited {app_status}; see launcher.log)")
        else:
            reason = job_reason(jobs, folder, log) or otherwise
        record.point_failed(entry, reason, shown_log)
        print(f"specgate sweep: point {entry['label']} failed: {reason}", file=sys.stderr, flush=True)
    record.save()


def job_reason(jobs, folder: Path, log: Path | None) -> str | None:
    """Why a point's job ended as it did: the engine's state (`SLURM job 12 TIMEOUT (TimeLimit)`),
    then what the task raised as submitit kept it, else the log's last word; led by what the
    engine did to the job (`its job ran out of time: ...`) where the engine's own words say.
    None when neither says anything (a job that COMPLETED, with a clean log)."""
    state, raised, in_log = jobs.state(folder), jobs.failed_result(folder), failure_in_log(log)
    submitits = raised if raised and "UncompletedJobError" in raised else None  # not the task's own
    what = ended_by_engine(state, engine_in_log(log), submitits)
    words = "; ".join(w for w in (state, raised or in_log) if w)
    if not words:
        return None
    return f"its job {what}: {words}" if what else words


def drop_pickles(submitit_dir: Path) -> None:
    """submitit's pickled submissions and results hold the whole config, unredacted: once
    every point is accounted for they say nothing more (the jobs' logs stay)."""
    for pickled in submitit_dir.glob("*/*.pkl"):
        pickled.unlink()


def cancel(record: SweepRecord, entries: list[dict], app: subprocess.Popen, jobs) -> None:
    """Cancel every job of the sweep, wait until the engine has none left, say why each point
    without an exit status failed (the driver then closes the sweep as interrupted, exit 2).
    A second Ctrl-C meanwhile is ignored: the points' teardown runs."""
    with sigint_ignored():
        print("specgate sweep: interrupted; cancelling the sweep's jobs", file=sys.stderr, flush=True)
        jobs.cancel(app)
        stop_app(app)
        if not wait_until_none(jobs, CANCEL_GRACE_S):
            jobs.kill()
            wait_until_none(jobs, 30)
        collect(record, entries)
        explain_the_rest(record, entries, jobs, app.returncode, otherwise="cancelled: the sweep was interrupted")
        drop_pickles(record.path / "points" / ".submitit")
