"""The jobs a launched sweep submitted, as the engine that runs them sees them: which are
still pending or running, how to cancel them all, and why one ended without its point's
exit status. One class per engine: SLURM (submitit_slurm) and this machine's processes
(submitit_local). Nothing here schedules anything; it asks the engine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from harness.servers.processes import live_processes

# slurmstepd's last words in a job's log, e.g. `*** JOB 12 ON vm CANCELLED AT ... DUE TO TIME LIMIT ***`
STEPD_LINE = re.compile(r"\*\*\* (JOB|STEP) \S+ ON \S+ (CANCELLED|FAILED|PREEMPTED|NODE FAIL)[^*]*\*\*\*")
# submitit's, as its handler catches the engine's signal near the time limit (SIGUSR2) or on a preemption
SUBMITIT_SIGNAL_LINE = re.compile(r"Caught signal \S+ on \S+: this job is (?:timed-out|preempted)\.")
# what the engine did to a job, read off its words (its state, slurmstepd's or submitit's line,
# submitit's UncompletedJobError), the first that matches: a time limit's `CANCELLED AT ... DUE TO
# TIME LIMIT` ran out of time, not merely cancelled
ENDED_BY = ((re.compile(r"TIMEOUT|TimeLimit|DUE TO TIME LIMIT|timed-out"), "ran out of time"),
            (re.compile(r"PREEMPT|[Pp]reempt"), "was preempted"),
            (re.compile(r"NODE_FAIL|NODE FAIL|NodeDown"), "lost its node"),
            (re.compile(r"CANCELLED|[Cc]ancel"), "was cancelled"))
COMPLETING_WAIT_S = 10  # a job still COMPLETING (its processes ending) is asked again this long


def submitted_jobs(submitit_dir: Path) -> dict[int, Path]:
    """Hydra's job number -> the submitit folder of the job that ran it (each job folder holds
    the pickled submission, whose third argument is the job number the launcher gave it)."""
    from submitit.core.utils import DelayedSubmission

    found = {}
    for pickled in sorted(submitit_dir.glob("*/*_submitted.pkl")):
        try:
            found[int(DelayedSubmission.load(pickled).args[2])] = pickled.parent
        except Exception:  # a half-written or foreign pickle says nothing about our points
            continue
    return found


def job_log(folder: Path) -> Path | None:
    """The job's log: its stderr (where tracebacks and slurmstepd's words go), or its stdout
    when the stderr is empty (the point's pytest writes there)."""
    logs = sorted(folder.glob("*_log.err")) + sorted(folder.glob("*_log.out"))
    return next((log for log in logs if log.stat().st_size), logs[0] if logs else None)


def log_lines(log: Path | None) -> list[str]:
    if log is None or not log.is_file():
        return []
    return [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]


def engine_in_log(log: Path | None) -> str | None:
    """The engine's own word in a job log: slurmstepd's line (the job's, `JOB 5 ON vm CANCELLED
    AT ...`, before its step's), else submitit's on catching the engine's signal (`Caught signal
    SIGUSR2 on vm: this job is timed-out.`)."""
    lines = log_lines(log)
    said = [m.group(0).strip("* ") for m in map(STEPD_LINE.search, lines) if m]
    if said:
        return sorted(said, key=lambda words: not words.startswith("JOB"))[0]
    caught = [m.group(0) for m in map(SUBMITIT_SIGNAL_LINE.search, lines) if m]
    return caught[-1] if caught else None


def failure_in_log(log: Path | None) -> str | None:
    """The engine's or the task's last word in a job log: the engine's (slurmstepd's line,
    submitit's on its signal), else the sentence the point's pytest refused its config with,
    else a Python traceback's last line."""
    said = engine_in_log(log)
    if said:
        return said
    lines = log_lines(log)
    usage = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: specgate: ")]
    if usage:  # the point's pytest refused its config on that node (exit 4): its one sentence
        return usage[-1]
    if "Traceback (most recent call last):" in lines:
        return lines[-1]
    return None


def failed_result(folder: Path) -> str | None:
    """The task's exception as submitit pickled it: the job raised (submitit's own error), or
    Hydra caught what the task raised and returned it as a failed JobReturn."""
    from submitit.core.utils import pickle_load

    for result in folder.glob("*_result.pkl"):
        try:
            outcome, value = pickle_load(result)
        except Exception:
            continue
        if outcome == "error":
            return str(value).strip().splitlines()[-1]
        try:
            value.return_value  # a failed JobReturn raises what the task raised
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def ended_by_engine(*words: str | None) -> str | None:
    """What the engine did to a job (`ran out of time`, `was preempted`, `lost its node`, `was
    cancelled`), from the engine's words only (its state, a log's engine_in_log, submitit's
    UncompletedJobError), never a task's own output: a point's `TimeoutError` is no time limit."""
    for said in filter(None, words):
        for pattern, what in ENDED_BY:
            if pattern.search(said):
                return what
    return None


class SubmititJobs:
    """What submitit's jobs leave in the sweep record: a folder per job in points/.submitit/."""

    def submitted(self, points: Path) -> bool:
        """Whether the launcher has submitted (the sweeper wrote multirun.yaml before that)."""
        return any((points / ".submitit").glob("*/*_submitted.pkl"))

    def folders(self, points: Path) -> dict[int, Path]:
        return submitted_jobs(points / ".submitit")

    def log(self, folder: Path) -> Path | None:
        return job_log(folder)

    def failed_result(self, folder: Path) -> str | None:
        return failed_result(folder)


class SlurmJobs(SubmititJobs):
    """The sweep's SLURM jobs, found by the job name specgate gave them."""

    def __init__(self, job_name: str):
        self.job_name = job_name

    def outstanding(self) -> list[str]:
        done = subprocess.run(["squeue", "--noheader", f"--name={self.job_name}", "--format=%i"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout.split()

    def cancel(self, app: subprocess.Popen) -> None:
        """The submitting app first (so that it submits nothing more), then every job of the
        sweep: scancel's SIGTERM reaches each point's pytest, which stops its servers; SLURM
        kills what is left after its KillWait."""
        app.terminate()
        subprocess.run(["scancel", f"--name={self.job_name}"], capture_output=True, timeout=30)

    def kill(self) -> None:
        subprocess.run(["scancel", "--signal=KILL", f"--name={self.job_name}"], capture_output=True, timeout=30)

    def state(self, folder: Path) -> str | None:
        """`CANCELLED`, `TIMEOUT`, `NODE_FAIL`...: what slurmctld still remembers of the job
        (for MinJobAge after it ended; the folder's name is the job id submitit got). A job
        still COMPLETING (its processes being ended) is asked again for COMPLETING_WAIT_S; if it
        is still ending then, its Reason (`TimeLimit`) is all it says."""
        deadline = time.monotonic() + COMPLETING_WAIT_S
        while True:
            done = subprocess.run(["scontrol", "--oneliner", "show", "job", folder.name],
                                  capture_output=True, text=True, timeout=30)
            found = re.search(r"JobState=(\S+)(?: Reason=(\S+))?", done.stdout)
            if not found:
                return None
            state, reason = found.groups()
            if state != "COMPLETING" or time.monotonic() > deadline:
                break
            time.sleep(1)
        if state == "COMPLETED":  # the batch script ended normally: says nothing of the point
            return None
        if state == "COMPLETING" and reason in (None, "None"):  # not ended yet, and no reason given
            return None
        # the Reason of a cancelled job is only why it last waited (`Resources`): left out
        said = reason not in (None, "None") and not state.startswith("CANCELLED")
        return f"SLURM job {folder.name} {state}" + (f" ({reason})" if said else "")


class LocalJobs(SubmititJobs):
    """submitit_local's jobs: processes in the submitting app's process group (its job
    controllers outlive the app when it exits early, so the group is what is watched)."""

    def __init__(self, group: int):
        self.group = group

    def outstanding(self) -> list[str]:
        return [str(pid) for pid in group_members(self.group)]

    def cancel(self, app: subprocess.Popen) -> None:
        """SIGINT to the whole group, as a Ctrl-C would: each point's pytest stops its servers."""
        stop_group(app, signal.SIGINT)

    def kill(self) -> None:
        for pid in group_members(self.group):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def state(self, folder: Path) -> str | None:
        return None


def stop_group(app: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(app.pid, sig)
    except ProcessLookupError:
        pass


def group_members(group: int) -> list[int]:
    """Live processes (not zombies, which nothing may reap here) whose process group is `group`."""
    return [pid for pid, fields in live_processes() if int(fields[2]) == group]


def wait_until_none(jobs, timeout_s: float, poll_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while jobs.outstanding():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
