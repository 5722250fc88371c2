"""The run record of one run: created on first use (a run that measures nothing writes
nothing), with every file redacted and written atomically.

The recorder knows where things go (config, overrides, each arm's config and server log,
the per-request columns, telemetry CSV/PNG, results.json, summary.md, the CI step summary); the
runner tells it what to write. Layout: see harness/record/store.py and README "Reading a run record".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.config.compose import Experiment
from harness.record.store import Redactor, RunRecord
from harness.telemetry.sampler import Telemetry
from harness.telemetry.summary import plot_png, write_csv


def append_step_summary(text: str) -> None:
    """In GitHub Actions, the summary goes to the job's page too."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")


class Recorder:
    def __init__(self, experiment: Experiment, kind: str = ""):
        self.experiment = experiment
        self.kind = kind  # "" for a run; e.g. "capacity": the folder is <ts>_<exp>_capacity
        self._record: RunRecord | None = None

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
        redactor = Redactor()
        configs = {arm.name: OmegaConf.to_container(arm.cfg, resolve=True) for arm in experiment.arms}
        base = OmegaConf.to_container(experiment.base, resolve=True)
        for data in (base, *configs.values()):
            redactor.learn(data)
        name = f"{experiment.name}_{self.kind}" if self.kind else experiment.name
        record = RunRecord(Path(experiment.base.record.root), name, redactor)
        record.write_yaml("config.yaml", base)
        record.write_yaml("overrides.yaml", {"command_line": experiment.overrides,
                                             "arms": {a.name: a.overrides for a in experiment.arms}})
        for name, data in configs.items():
            record.write_yaml(f"arms/{name}/config.yaml", data)
        return record

    def scrub(self, text: str) -> str:
        """The record's redaction of free text (server logs, messages)."""
        return self.record.redactor.text(text)

    def server_log(self, arm: str) -> Path:
        return self.record.arm_dir(arm) / "server.log"

    def scrub_server_log(self, arm: str) -> None:
        if self._record is not None:
            self._record.scrub_file(f"arms/{arm}/server.log")

    def add_requests(self, arm: str, lines: list[dict[str, Any]]) -> None:
        self.record.add_requests(arm, lines)

    def write_telemetry(self, arm: str, telemetry: Telemetry) -> None:
        folder = self.record.arm_dir(arm)
        write_csv(folder / "telemetry.csv", telemetry)
        if telemetry.samples:
            plot_png(folder / "telemetry.png", telemetry)

    def write_results(self, results: dict[str, Any]) -> None:
        self.record.write_json("results.json", results)

    def point_latest(self) -> None:
        """`<root>/latest` names this record once the run has ended (finished or interrupted)."""
        if self._record is not None:
            self._record.point_latest()

    def write_summary(self, text: str) -> None:
        self.record.write_text("summary.md", text)
        append_step_summary(self.record.redactor.text(text))
