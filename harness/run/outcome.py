"""What measuring one arm produced, as one typed value: its status, the server it ran on,
its metrics, its GPU block and the server's own counters over the same window.

The runner keeps one `ArmOutcome` per arm; the recorder turns them into results.json; the
suites read them (through the arm-run object) and the gates judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.measure.metrics import ArmResult

# starting -> measuring -> measured, or one of the ways an arm ends without a measurement
STATUSES = ("not_run", "starting", "measuring", "measured", "server_failed", "server_died", "interrupted")


@dataclass
class ArmOutcome:
    name: str
    backend: str = ""
    choices: dict[str, str] = field(default_factory=dict)  # group -> option, e.g. {"drafter": "eagle3_k25"}
    status: str = "not_run"
    error: str | None = None  # one sentence (and a log tail) when the arm was not measured
    server: dict[str, Any] = field(default_factory=dict)  # what the backend says about the server it ran
    server_version: str | None = None
    result: ArmResult | None = None
    gpu: dict[str, Any] | None = None  # the telemetry block (or why telemetry could not run)
    server_windows: list[dict[str, Any]] = field(default_factory=list)  # /metrics differenced, one per repeat
    # figures where client and server disagree (harness/measure/agreement.py); [] all agreed, None nothing compared
    client_server_disagreement: list[dict[str, Any]] | None = None
    environment: list[dict[str, Any]] | None = None  # configured variables as each server process has them
    request_lines: list[dict[str, Any]] = field(default_factory=list)  # the record's request lines (kept in memory for verdicts)
    interrupted_load: dict[str, Any] | None = None  # {repeat, finished, in_flight} of a load cut by Ctrl-C/SIGTERM
    timeslices: dict[str, Any] | None = None  # the arm's figures over time (harness/measure/timeslices.py)
    model: str | None = None  # the model name every request was sent to (from /v1/models and server.served_model_name)
    identity: dict[str, Any] | None = None  # what the arm measured (engine, model, workload, dataset sha256): gate.baseline's check
    # per load (repeat, capacity probe): whether the prefix cache was emptied before its measured requests, or why not
    prefix_cache_resets: list[dict[str, Any]] = field(default_factory=list)
    fleet: dict[str, Any] | None = None  # a fleet's router policy, each worker's figures and the imbalance (measure/fleet.py)

    @property
    def measured(self) -> bool:
        return self.result is not None

    def to_json(self, versus_plain: dict[str, Any] | None = None) -> dict[str, Any]:
        """The arm's block of results.json; `versus_plain` adds the cross-arm numbers
        (speedup and break-even against the plain arm)."""
        block: dict[str, Any] = {"status": self.status, "backend": self.backend, "choices": self.choices}
        for key in ("error", "model", "identity", "server", "server_version", "environment", "interrupted_load", "fleet"):
            value = getattr(self, key)
            if value not in (None, {}):
                block[key] = value
        if self.server_windows:
            block["server_metrics"] = self.server_windows
        if self.prefix_cache_resets:
            block["prefix_cache_resets"] = self.prefix_cache_resets
        if self.client_server_disagreement is not None:
            block["client_server_disagreement"] = self.client_server_disagreement
        if self.result is not None:
            block.update(self.result.to_json())
            block.update(versus_plain or {})
        if self.gpu is not None:
            block["gpu"] = self.gpu
        if self.timeslices:
            block["timeslices"] = self.timeslices
        return block
