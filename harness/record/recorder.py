"""The one record writer: every driver's record (a run's, a sweep's, a capacity search's, a calibration's;
harness/record/kinds.py) is made and written through a Recorder, so each is named the same
way, redacted by the one policy and written atomically. Created on first use (a run that
measures nothing writes nothing).

The recorder knows where things go (config, overrides, each arm's config and server log,
the per-request columns, the folder for telemetry's CSV/PNG, the kind's JSON, summary.md, the CI step summary); the
driver tells it what to write. Layout: see harness/record/store.py and README "Reading a run record".
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from harness.config.compose import Experiment
from harness.record.kinds import KINDS
from harness.record.store import RUN_STATUSES, RUNNING, Redactor, RunRecord


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def append_step_summary(text: str) -> None:
    """In GitHub Actions, the summary goes to the job's page too."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")


class Recorder:
    def __init__(self, experiment: Experiment, kind: str = "run"):
        self.experiment = experiment
        self.kind = KINDS[kind]  # run | sweep | capacity | calibration: the folder's name, its JSON, what else it holds
        # what the record learns before it exists (a sweep's overrides) counts too
        self.redactor = Redactor(readable=experiment.base.record.readable_env)
        self.redactor.learn(list(experiment.overrides))  # the command line as typed, quotes and spaces included
        self.started_utc = utc_now()  # the driver began now, whenever its folder is first needed
        self._record: RunRecord | None = None
        self.write_error: str | None = None  # the first write that failed mid-run (a full disk), in words

    @property
    def started(self) -> bool:
        return self._record is not None

    @property
    def record(self) -> RunRecord:
        """The record folder, made (with the configs in it) the first time it is needed."""
        if self._record is None:
            self._record = self.create()
        return self._record

    @property
    def path(self) -> Path:
        return self.record.path

    def create(self) -> RunRecord:
        experiment = self.experiment
        configs = {arm.name: OmegaConf.to_container(arm.cfg, resolve=True) for arm in experiment.arms}
        base = OmegaConf.to_container(experiment.base, resolve=True)
        for data in (base, *configs.values()):
            self.redactor.learn(data)
        record = RunRecord(Path(experiment.base.record.root), experiment.name, self.redactor, kind=self.kind)
        if self.kind.writes_configs:
            record.write_yaml("config.yaml", base)
            # written from the typed experiment: each secret as its fingerprint
            record.write_yaml("overrides.yaml", {"command_line": experiment.shown_overrides,
                                                 "arms": {a.name: a.shown_overrides for a in experiment.arms}})
            for name, data in configs.items():
                record.write_yaml(f"arms/{name}/config.yaml", data)
        return record

    def learn_secrets(self, data: Any) -> None:
        """Secrets the record must never show that no config holds (a sweep's overrides:
        `server.env.HF_TOKEN=...`); kept in memory only."""
        self.redactor.learn(data)

    def scrub(self, text: str) -> str:
        """The record's redaction of free text (server logs, messages)."""
        return self.record.redactor.text(text)

    def server_log(self, arm: str) -> Path:
        return self.record.arm_dir(arm) / "server.log"

    def scrub_server_log(self, arm: str) -> None:
        if self._record is not None:
            self.guarded(f"server log of arm {arm}", lambda: self._record.scrub_file(f"arms/{arm}/server.log"))

    def guarded(self, what: str, write: Callable[[], None]) -> None:
        """One write of a record that exists: an OSError (a full disk, a folder gone read-only)
        is said once, in one sentence, and the run goes on. What was measured stays in memory
        for the terminal's summary and for every later write, each tried again (results.json
        is whole each time, so one that succeeds later holds everything)."""
        try:
            write()
        except OSError as exc:
            if self.write_error is None:
                self.write_error = f"cannot write the record's {what} in {self.path}: {exc.strerror or exc}"
                print(f"specgate: {self.write_error}; measuring goes on, the figures stay in this terminal's "
                      f"summary, and each later write of the record is tried again", file=sys.stderr, flush=True)

    def add_requests(self, arm: str, lines: list[dict[str, Any]]) -> None:
        self.guarded(f"requests of arm {arm}", lambda: self.record.add_requests(arm, lines))

    def write_arm_files(self, arm: str, what: str, write: Callable[[Path], None]) -> None:
        """Files another package writes into an arm's folder (the telemetry's CSV and plot:
        harness/telemetry/summary.py write_files), guarded as every write of the record."""
        self.guarded(f"{what} of arm {arm}", lambda: write(self.record.arm_dir(arm)))

    def status_fields(self, status: str) -> dict[str, Any]:
        """What every kind's JSON says of itself: its kind (`record_kind`: run, sweep, ...; what
        a reader checks before taking it as a reference), and its state: `running` from the
        start (so a record a killed process left says so), then `finished` or `interrupted`, with when."""
        if status not in RUN_STATUSES:
            raise ValueError(f"a record's status is one of {', '.join(RUN_STATUSES)}, not {status!r}")
        return {"record_kind": self.kind.name, "status": status, "started_utc": self.started_utc,
                "finished_utc": None if status == RUNNING else utc_now()}

    def write_data(self, data: dict[str, Any]) -> None:
        """The record's JSON (results.json, sweep.json or capacity.json), status and all."""
        if self._record is None:
            self.record.write_data(data)  # the first write makes the folder: a failure there stops the run
        else:
            self.guarded(self.kind.data_file, lambda: self.record.write_data(data))

    def point_latest(self) -> None:
        """`<root>/latest` names this record once the run has ended (finished or interrupted)."""
        if self._record is not None:
            self.guarded("latest link", self._record.point_latest)

    def write_summary(self, text: str) -> None:
        self.guarded("summary.md", lambda: self.record.write_text("summary.md", text))
        if self.kind.step_summary:
            append_step_summary(self.record.redactor.text(text))
