"""Why a launched sweep's point ended as it did (harness/sweep/launch.py `explain_the_rest`),
against a fake engine: a point whose job the engine ended or signalled (out of time, cancelled)
says so in its `error` whether or not its pytest recorded an exit status first; a point whose
job ended normally gets no error; a point without an exit status fails with the engine's reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.compose import compose
from harness.sweep.jobs import ended_by_engine, failure_in_log
from harness.sweep.launch import explain_the_rest
from harness.sweep.record import SweepRecord, summary

STEPD_TIMEOUT = "slurmstepd-vm: error: *** JOB 12 ON vm CANCELLED AT 2026-12-06T18:27:30 DUE TO TIME LIMIT ***\n"
SUBMITIT_CAUGHT = ("submitit WARNING (2026-12-06 18:27:00,329) - Caught signal SIGUSR2 on vm: this job is timed-out.\n"
                   "submitit WARNING (2026-12-06 18:27:00,612) - Bypassing signal SIGCONT\n")
UNCOMPLETED = "UncompletedJobError: Job not requeued because: timed-out too many times."


class FakeJobs:
    """What explain_the_rest asks of an engine, as a SLURM sweep's would answer: one job folder
    per point (its log written by the test), the state slurmctld remembers, what the task raised."""

    def __init__(self, points: Path, states: dict[int, str | None], raised: dict[int, str | None] | None = None):
        self.points, self.states, self.raised = points, states, raised or {}
        self.asked: list[str] = []

    def folders(self, points: Path) -> dict[int, Path]:
        found = {num: points / ".submitit" / str(12 + num) for num in self.states}
        for folder in found.values():
            folder.mkdir(parents=True, exist_ok=True)
        return found

    def log(self, folder: Path) -> Path | None:
        log = folder / f"{folder.name}_0_log.err"
        return log if log.is_file() else None

    def state(self, folder: Path) -> str | None:
        self.asked.append(folder.name)
        return self.states[int(folder.name) - 12]

    def failed_result(self, folder: Path) -> str | None:
        return self.raised.get(int(folder.name) - 12)


@pytest.fixture
def record(tmp_path) -> SweepRecord:
    return SweepRecord(compose(["+exp=sim_smoke", "backend=process", f"record.root={tmp_path}"]), ["specgate", "sweep"], [])


def points(record: SweepRecord, *exit_statuses: int | None) -> list[dict]:
    """One entry per point; those with an exit status ended as collect() leaves them."""
    entries = [record.add_run(str(num), [f"workload.concurrency={num + 1}"]) for num in range(len(exit_statuses))]
    for entry, status in zip(entries, exit_statuses):
        if status is not None:
            record.run_ended(entry, status)
    return entries


def write_log(record: SweepRecord, num: int, text: str) -> None:
    folder = record.path / "points" / ".submitit" / str(12 + num)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{12 + num}_0_log.err").write_text(text)


def test_a_point_that_exited_2_before_its_jobs_time_limit_keeps_its_status_and_names_the_time_out(record, capsys):
    entries = points(record, 2, 2)
    write_log(record, 0, "submitit WARNING (2026-12-06 18:27:29,001) - Bypassing signal SIGTERM\n" + STEPD_TIMEOUT)
    write_log(record, 1, SUBMITIT_CAUGHT)  # slurmctld has forgotten the job, or it COMPLETED: the log still says
    explain_the_rest(record, entries, FakeJobs(record.path / "points", {0: "SLURM job 12 TIMEOUT (TimeLimit)", 1: None}),
                     app_status=1)
    first, second = json.loads((record.path / "sweep.json").read_text())["points"]
    assert (first["exit_status"], first["status"], first["job_log"]) == (2, "no_record", "points/.submitit/12/12_0_log.err")
    assert first["error"] == ("its job ran out of time: SLURM job 12 TIMEOUT (TimeLimit); "
                              "JOB 12 ON vm CANCELLED AT 2026-12-06T18:27:30 DUE TO TIME LIMIT")
    assert (second["exit_status"], second["error"]) == (2, "its job ran out of time: Caught signal SIGUSR2 on vm: "
                                                           "this job is timed-out.")
    assert "point 0 exited 2: its job ran out of time: SLURM job 12 TIMEOUT" in capsys.readouterr().err
    # the sweep's summary says why, with the log
    assert ("- 0: its job ran out of time: SLURM job 12 TIMEOUT (TimeLimit); JOB 12 ON vm CANCELLED AT "
            "2026-12-06T18:27:30 DUE TO TIME LIMIT (log: points/.submitit/12/12_0_log.err)") in summary(record.data)


def test_a_point_whose_job_completed_with_a_clean_log_gets_no_error(record):
    entries = points(record, 0, 1)
    write_log(record, 0, "submitit INFO - Job completed successfully\n")
    jobs = FakeJobs(record.path / "points", {0: None, 1: None})
    explain_the_rest(record, entries, jobs, app_status=0)
    for entry, status in zip(json.loads((record.path / "sweep.json").read_text())["points"], (0, 1)):
        assert (entry["exit_status"], "error" in entry) == (status, False)
    assert entries[0]["job_log"] == "points/.submitit/12/12_0_log.err" and entries[1]["job_log"] is None
    assert jobs.asked == ["12", "13"]  # the engine was asked about each, and said nothing
    assert "Why points failed" not in summary(record.data)


def test_a_point_that_exited_4_refused_on_its_node_keeps_its_sentence_as_the_error(record):
    entries = points(record, 4)
    write_log(record, 0, "ERROR: specgate: experiment 'eagle_k2' needs an NVIDIA GPU machine (...)\n")
    explain_the_rest(record, entries, FakeJobs(record.path / "points", {0: None}), app_status=1)
    assert (entries[0]["exit_status"], entries[0]["error"]) == (4, "specgate: experiment 'eagle_k2' needs an NVIDIA "
                                                                   "GPU machine (...)")


def test_a_point_without_an_exit_status_fails_with_the_engines_reason(record, capsys):
    entries = points(record, None, None, None, None)
    write_log(record, 0, SUBMITIT_CAUGHT)
    write_log(record, 1, "slurmstepd-vm: error: *** JOB 13 ON vm CANCELLED AT 2026-12-06T18:30:00 ***\n")
    write_log(record, 2, "Traceback (most recent call last):\n  File \"x\", line 1\nTimeoutError: read timed out\n")
    jobs = FakeJobs(record.path / "points", {0: None, 1: "SLURM job 13 CANCELLED", 2: None, 3: None},
                    raised={0: UNCOMPLETED})
    explain_the_rest(record, entries, jobs, app_status=1)
    timed_out, cancelled, raised, silent = json.loads((record.path / "sweep.json").read_text())["points"]
    for entry in (timed_out, cancelled, raised, silent):
        assert (entry["status"], entry["exit_status"]) == ("job_failed", None)
    assert timed_out["error"] == f"its job ran out of time: {UNCOMPLETED}"  # what the task raised, before the log
    assert cancelled["error"] == ("its job was cancelled: SLURM job 13 CANCELLED; "
                                  "JOB 13 ON vm CANCELLED AT 2026-12-06T18:30:00")
    # the task's own TimeoutError is no time limit of the engine's: its words, unclassified
    assert raised["error"] == "TimeoutError: read timed out"
    assert (silent["error"], silent["job_log"]) == ("its job ended without the point's exit status", None)
    assert f"point 0 failed: its job ran out of time: {UNCOMPLETED}" in capsys.readouterr().err


@pytest.mark.parametrize("words, what", [
    (("SLURM job 12 TIMEOUT (TimeLimit)",), "ran out of time"),
    (("SLURM job 12 COMPLETING (TimeLimit)",), "ran out of time"),  # still ending: its Reason says why
    ((None, "JOB 12 ON vm CANCELLED AT 2026-12-06T18:27:30 DUE TO TIME LIMIT"), "ran out of time"),
    (("SLURM job 12 CANCELLED", "JOB 12 ON vm CANCELLED AT 2026-12-06T18:27:30"), "was cancelled"),
    (("SLURM job 12 PREEMPTED",), "was preempted"),
    ((None, "Caught signal SIGUSR2 on vm: this job is preempted."), "was preempted"),
    (("SLURM job 12 NODE_FAIL (NodeDown)",), "lost its node"),
    (("SLURM job 12 OUT_OF_MEMORY", None), None),
    ((None, None), None),
])
def test_what_the_engine_did_to_a_job_is_read_off_its_words(words, what):
    assert ended_by_engine(*words) == what


def test_submitits_line_on_the_time_limit_signal_is_the_logs_engine_word(tmp_path):
    log = tmp_path / "12_0_log.err"
    log.write_text(SUBMITIT_CAUGHT)
    assert failure_in_log(log) == "Caught signal SIGUSR2 on vm: this job is timed-out."
    log.write_text(SUBMITIT_CAUGHT + STEPD_TIMEOUT)  # slurmstepd's, when the limit came too
    assert failure_in_log(log) == "JOB 12 ON vm CANCELLED AT 2026-12-06T18:27:30 DUE TO TIME LIMIT"
