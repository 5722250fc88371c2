"""The end of a sweep, however its points ran: the sweep gates judged on every point, the
record closed, the exit status (0 only if every point exited 0 and no sweep gate failed)."""

from __future__ import annotations

import sys
from typing import Any

from harness.exit_status import INTERRUPTED
from harness.gates.registry import judge
from harness.gates.verdict import failed
from harness.sweep.junit import junit_target, write_sweep_junit
from harness.sweep.record import SweepRecord

INTERRUPTED_EXIT = INTERRUPTED  # pytest's status for a run stopped by Ctrl-C


def finish_sweep(record: SweepRecord, statuses: list[int | None], gates: Any) -> int:
    """Every point ended: the sweep gates judged on them, the record closed; 0 only if every
    point exited 0 and no sweep gate failed, else 1."""
    verdicts = judge("sweep", record.gate_context(gates))  # the registry's sweep gates
    record.add_verdicts(verdicts)
    status = 0 if all(s == 0 for s in statuses) and not failed(verdicts) else 1
    record.finish(status, interrupted=False)
    write_junit(record)
    for verdict in verdicts:
        print(f"specgate sweep gate: {verdict.line()}", flush=True)
    print(f"specgate sweep: {statuses.count(0)} of {len(statuses)} point(s) exited 0; "
          f"summary {record.path / 'summary.md'}", flush=True)
    return status


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
