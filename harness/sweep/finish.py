"""The end of a sweep, however its points ran: the sweep gates judged on every point, the
record closed, the exit status (0 only if every point exited 0 and no sweep gate failed or was
undecided; 6 when nothing failed but a point left a regression-sized change undecided, or the
points' intervals could not decide a sweep gate)."""

from __future__ import annotations

import sys
from typing import Any

from harness.exit_status import FAILED, INTERRUPTED, PASSED, UNDECIDED
from harness.gates.registry import judge
from harness.gates.verdict import failed, undecided
from harness.sweep.junit import junit_target, write_sweep_junit
from harness.sweep.record import SweepRecord

INTERRUPTED_EXIT = INTERRUPTED  # pytest's status for a run stopped by Ctrl-C


def finish_sweep(record: SweepRecord, statuses: list[int | None], gates: Any) -> int:
    """Every point ended: the sweep gates judged on them, the record closed; the exit status
    of :func:`sweep_status`."""
    verdicts = judge("sweep", record.gate_context(gates))  # the registry's sweep gates
    record.add_verdicts(verdicts)
    status = sweep_status(statuses, failed(verdicts), bool(undecided(verdicts)))
    record.finish(status, interrupted=False)
    write_junit(record)
    for verdict in verdicts:
        print(f"specgate sweep gate: {verdict.line()}", flush=True)
    print(f"specgate sweep: {statuses.count(0)} of {len(statuses)} point(s) exited 0; "
          f"summary {record.path / 'summary.md'}", flush=True)
    return status


def sweep_status(statuses: list[int | None], gate_failed: bool, gate_undecided: bool = False) -> int:
    """0 when every point exited 0 and every sweep gate passed (or could not be evaluated); 6
    when none failed but a point left a regression-sized change undecided (it exited 6) or the
    points' intervals could not decide a sweep gate; 1 otherwise."""
    if gate_failed or any(s not in (PASSED, UNDECIDED) for s in statuses):
        return FAILED
    return UNDECIDED if UNDECIDED in statuses or gate_undecided else PASSED


def write_junit(record: SweepRecord) -> None:
    """The sweep's `--junitxml` file, when one was asked for: every point's tests and the sweep's gates."""
    target, _ = junit_target(record.data.get("pytest_options") or [])
    if target is not None:
        write_sweep_junit(target, record.path / "points", record.data["points"], record.data.get("sweep_gates") or [],
                          record.redactor.text)


def finish_interrupted(record: SweepRecord, status: int = INTERRUPTED_EXIT) -> int:
    """A Ctrl-C (or SIGTERM) stopped the sweep: the record closed as interrupted."""
    record.finish(status, interrupted=True)
    write_junit(record)
    print(f"specgate sweep: interrupted; record {record.path}", file=sys.stderr)
    return status
