"""The bookkeeping of a record made of whole runs, each its own pytest whose run record lies in
`<folder>/<label>/` inside it: a sweep's points (points/), a calibration's runs (runs/). One
entry per run in the record's JSON (its overrides, record, exit status, status, arms), read back
from the run's own record once its pytest has exited; the JSON rewritten (atomically, redacted:
the one record writer) after every run. What each kind reads off a run's record is its own
(`read_back`); running the runs is harness/sweep/point.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from harness.config.compose import Experiment
from harness.record.recorder import Recorder
from harness.record.secrets import Redactor
from harness.record.store import FINISHED, INTERRUPTED, RUNNING, RecordError, RunData, read_run, record_in


class WholeRunsRecord:
    """A record of whole runs (see the module's docstring)."""

    kind: ClassVar[str]  # the record kind (harness/record/kinds.py)
    folder: ClassVar[str]  # where the runs' records lie, and the JSON's key of their entries

    def __init__(self, experiment: Experiment, command: list[str], **fields: Any):
        """`fields`: the kind's own keys of its JSON, placed before `exit_status` (after the
        entries: `after`, a dict)."""
        after = fields.pop("after", {})
        self.recorder = Recorder(experiment, kind=self.kind)
        self.data: dict[str, Any] = {"experiment": experiment.name, **self.recorder.status_fields(RUNNING),
                                     "command": experiment.shown_command(command), **fields, "exit_status": None,
                                     self.folder: [], **after}

    @property
    def path(self) -> Path:
        """Absolute: every run's record.root is inside it, and a run may run elsewhere (a SLURM node)."""
        return self.recorder.path.absolute()

    @property
    def redactor(self) -> Redactor:
        return self.recorder.redactor

    def run_root(self, label: str) -> Path:
        return self.path / self.folder / label

    def learn_secrets(self, overrides: list[str]) -> None:
        """The secrets the overrides carry (`server.env.HF_TOKEN=...`): kept in memory, where
        the runs' commands need them, but never written."""
        self.recorder.learn_secrets(overrides)

    def add_run(self, label: str, overrides: list[str], **fields: Any) -> dict[str, Any]:
        """The run's entry (`fields`: the kind's own, after its label), not run yet."""
        entry = {"label": label, **fields, "overrides": overrides, "record": None, "exit_status": None,
                 "status": "not_run", "arms": {}}
        self.data[self.folder].append(entry)
        return entry

    def run_ended(self, entry: dict[str, Any], exit_status: int | None) -> None:
        """What the run's record says, read back now that its pytest has exited."""
        entry["exit_status"] = exit_status
        record = record_in(self.run_root(entry["label"]))
        if record is None:
            entry["status"] = "no_record"
        else:
            entry["record"] = str(record.relative_to(self.path))
            try:
                run = read_run(record)
                entry["status"] = run.status
                self.read_back(entry, record, run)
            except RecordError as exc:
                entry["status"], entry["error"] = "unreadable", str(exc)
        self.save()

    def read_back(self, entry: dict[str, Any], record: Path, run: RunData) -> None:
        """What this kind keeps of a readable run record (`record`, its folder) in the run's entry."""
        raise NotImplementedError

    def save(self) -> None:
        self.recorder.write_data(self.data)

    def close(self, exit_status: int, interrupted: bool, **fields: Any) -> None:
        """The status and exit status set (and the kind's `fields`); the caller saves and summarises."""
        self.data.update(self.recorder.status_fields(INTERRUPTED if interrupted else FINISHED), exit_status=exit_status,
                         **fields)
