"""Runs an experiment's arms, one at a time: server up, load, summary, record. No pytest here
(plugin.py drives it), so the same steps serve `specgate` and the suites.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from harness import __version__
from harness.client import ClientError, ServerClient
from harness.config import Arm, Experiment
from harness.gate import Verdict
from harness.load import run_load
from harness.metric_registry import cross_arm
from harness.metrics import ArmResult, apply_server_window, combine_repeats, summarize
from harness.server_metrics import Snapshot, parse as parse_metrics, window as metrics_window
from harness.record import Redactor, RunRecord, load_results
from harness.replay import drift_rows, drift_table
from harness.images import ImageError
from harness.servers import Server, ServerError, Session, make_server, prepare_backend
from harness.summary import format_summary
from harness.telemetry.base import TelemetryUnavailable, make_source, resolve_uuids
from harness.telemetry.sampler import Sampler
from harness.telemetry.summary import plot_png, summarize as summarize_telemetry, write_csv


@functools.lru_cache(maxsize=1)
def harness_version() -> dict[str, Any]:
    """The package version and, from a git checkout, the commit and whether it was dirty."""
    root = Path(__file__).resolve().parent.parent
    info: dict[str, Any] = {"version": __version__, "git_commit": None, "git_dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return info
    if commit.returncode == 0:
        info.update(git_commit=commit.stdout.strip(), git_dirty=bool(status.stdout.strip()))
    return info


def append_step_summary(text: str) -> None:
    """In GitHub Actions, the summary goes to the job's page too."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")


class ArmFailed(Exception):
    """An arm could not be measured (server failed to start, died, or answered nothing)."""


@dataclass
class ArmRun:
    """A measured arm whose server is still up (the API suite talks to it)."""

    arm: Arm
    server: Server
    client: ServerClient
    result: ArmResult
    model: str

    @property
    def cfg(self):
        return self.arm.cfg

    @property
    def name(self) -> str:
        return self.arm.name


@dataclass
class Runner:
    experiment: Experiment
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    progress: Callable[[str, Any], None] | None = None  # (arm, ProgressSnapshot)
    results: dict[str, ArmResult] = field(default_factory=dict)
    arm_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    servers: dict[str, Server] = field(default_factory=dict)
    gpu: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> the `gpu` block of results.json
    notes: list[str] = field(default_factory=list)  # said at the start and in the summary (e.g. replay drift of conf/)
    baseline: dict | None = None  # gate.baseline's results.json
    replay_of: Path | None = None  # the record a replay re-runs
    session: Session = field(default_factory=Session)
    prepared_engines: set = field(default_factory=set)
    started_utc: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    _record: RunRecord | None = None

    # --- the record is created on first use: a run that measures nothing writes nothing
    @property
    def record(self) -> RunRecord:
        if self._record is None:
            redactor = Redactor()
            redactor.learn(OmegaConf.to_container(self.experiment.base, resolve=True))
            for arm in self.experiment.arms:
                redactor.learn(OmegaConf.to_container(arm.cfg, resolve=True))
            self._record = RunRecord(Path(self.experiment.base.record.root), self.experiment.name, redactor)
            self.session.run = self._record.path.name
            self._record.write_yaml("config.yaml", OmegaConf.to_container(self.experiment.base, resolve=True))
            self._record.write_yaml("overrides.yaml", {"command_line": self.experiment.overrides,
                                                        "arms": {a.name: a.overrides for a in self.experiment.arms}})
            for arm in self.experiment.arms:
                self._record.write_yaml(f"arms/{arm.name}/config.yaml", OmegaConf.to_container(arm.cfg, resolve=True))
        return self._record

    def open_arm(self, name: str) -> ArmRun:
        """Start the arm's server and measure its workload; the server stays up until close_arm."""
        arm = self.experiment.arm(name)
        log_path = self.record.arm_dir(name) / "server.log"
        server = make_server(name, arm.cfg, log_path, self.session)
        self.servers[name] = server
        self.arm_status[name] = {"status": "starting", "backend": arm.cfg.backend.kind, "choices": arm.choices}
        try:
            self.prepare(arm)
            server.start()
        except (ServerError, ImageError) as exc:
            self.arm_status[name]["server"] = server.describe()
            self.fail_arm(name, "server_failed", str(exc))
        self.arm_status[name].update(status="measuring", server=server.describe())
        client = ServerClient(server.base_url)
        try:
            model = client.served_model()
            self.arm_status[name]["server_version"] = client.server_version()
        except ClientError as exc:
            self.fail_arm(name, "server_failed", f"arm '{name}': the server is healthy but its info routes fail: {exc}")
        result = self.measure(arm, server, client, model)
        self.results[name] = result
        if not server.is_alive():
            self.fail_arm(name, "server_died", server.failure(
                f"arm '{name}': the server {server.exit_description()} during the load "
                f"({result.requests_failed} requests failed)").args[0])
        self.arm_status[name]["status"] = "measured"
        self.save()
        return ArmRun(arm=arm, server=server, client=client, result=result, model=model)

    def measure(self, arm: Arm, server: Server, client: ServerClient, model: str) -> ArmResult:
        """The workload `gate.repeats` times on one server, GPUs sampled across all of them."""
        progress = (lambda snapshot: self.progress(arm.name, snapshot)) if self.progress else None
        sampler = self.start_telemetry(arm, server)
        repeats = []
        try:
            for repeat in range(max(1, arm.cfg.gate.repeats)):
                before: list[Snapshot] = []  # the server's counters once the warm-up is done
                load = run_load(arm.cfg.workload, server.base_url, model, progress=progress,
                                on_tokens_flowing=sampler.mark_load_start if sampler and not repeat else None,
                                on_measured_start=lambda: before.append(self.metrics_snapshot(client)))
                self.record.add_requests(arm.name, [{**r.to_json(), "repeat": repeat} for r in load.records])
                result = summarize(arm.name, load, self.server_accept_length(client, arm))
                server_side = self.server_window(arm, before, client)
                self.arm_status[arm.name].setdefault("server_metrics", []).append(server_side)
                repeats.append(apply_server_window(result, load, server_side))
                if not server.is_alive():
                    break
        finally:
            if sampler is not None:
                self.finish_telemetry(arm, sampler)
        return combine_repeats(arm.name, repeats)

    def start_telemetry(self, arm: Arm, server: Server) -> Sampler | None:
        """Sample the server's GPUs from before the load; None when telemetry is off or
        cannot run here (the reason goes into the arm's `gpu` block, and the GPU suite
        skips with it)."""
        settings = arm.cfg.telemetry
        if settings.source == "off":
            return None
        try:
            source = make_source(settings.source, base_url=server.base_url)
            wanted = list(settings.gpus) if settings.gpus else server.gpu_ids()
            uuids = resolve_uuids(source, wanted) if wanted else None
            source.open(uuids, None)
        except TelemetryUnavailable as exc:
            self.gpu[arm.name] = {"source": settings.source, "unavailable": str(exc)}
            return None
        sampler = Sampler(source, interval_s=settings.interval_s, ramp_in_s=settings.ramp_in_s)
        sampler.start()
        time.sleep(settings.idle_s)  # the idle snapshot, before the warm-up touches the GPUs
        sampler.mark_idle_end()
        return sampler

    def finish_telemetry(self, arm: Arm, sampler: Sampler) -> None:
        """Close the load window, sample a little longer, then summarize, plot, record."""
        sampler.mark_load_end()
        try:
            time.sleep(arm.cfg.telemetry.after_s)
        finally:
            telemetry = sampler.stop()
            sampler.source.close()
        block = summarize_telemetry(telemetry)
        block["ramp_in_s"] = telemetry.ramp_in_s
        self.gpu[arm.name] = block
        folder = self.record.arm_dir(arm.name)
        write_csv(folder / "telemetry.csv", telemetry)
        if telemetry.samples:
            plot_png(folder / "telemetry.png", telemetry)

    def prepare(self, arm: Arm) -> None:
        engine = (arm.cfg.backend.kind, arm.cfg.backend.docker_host)
        if engine not in self.prepared_engines:
            self.prepared_engines.add(engine)
            prepare_backend(arm.cfg, self.session)

    def metrics_snapshot(self, client: ServerClient) -> Snapshot | None:
        try:
            return parse_metrics(client.metrics_text())
        except (ClientError, ValueError):
            return None  # a server without /metrics: the window stays empty

    def server_window(self, arm: Arm, before: list, client: ServerClient) -> dict[str, Any]:
        """The server's own TTFT/ITL means and (vLLM) speculation counters over this load."""
        after = self.metrics_snapshot(client)
        if not before or before[0] is None or after is None:
            return {}
        return metrics_window(arm.cfg.server.engine, before[0], after)

    def server_accept_length(self, client: ServerClient, arm: Arm) -> float | None:
        """The server-cumulative accept length: only a labelled fallback (it includes warm-up)."""
        if not arm.cfg.drafter.algorithm:
            return None
        try:
            return client.server_accept_length()
        except ClientError:
            return None

    def fail_arm(self, name: str, status: str, message: str) -> None:
        self.arm_status[name].update(status=status, error=message)
        self.close_arm(name)
        self.save()
        raise ArmFailed(message)

    def close_arm(self, name: str) -> None:
        server = self.servers.pop(name, None)
        if server is not None:
            server.stop()
            if self._record is not None:
                self._record.scrub_file(f"arms/{name}/server.log")

    def note_environment(self, name: str, processes: list, keys: list[str]) -> None:
        """The configured variables as each server process really has them (record only)."""
        self.arm_status[name]["environment"] = [
            {"pid": p.pid, "name": p.name, "cmdline": p.command[:300], "vars": {k: p.environ.get(k) for k in keys}} for p in processes]
        self.save()

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        self.verdicts += verdicts
        if self._record is not None:
            self.save()

    # --- derived, cross-arm numbers --------------------------------------------------
    def comparison(self, name: str) -> dict[str, float | None]:
        """The registry's cross-arm metrics of an arm against the plain arm (none for the plain arm)."""
        plain = self.results.get(self.experiment.plain_arm or "")
        if plain is None or name == self.experiment.plain_arm:
            return {}
        return cross_arm(self.results[name], plain)

    def results_json(self, finished: bool = False, interrupted: bool = False) -> dict[str, Any]:
        arms = {}
        for arm in self.experiment.arms:
            block: dict[str, Any] = dict(self.arm_status.get(arm.name, {"status": "not_run"}))
            if arm.name in self.results:
                block.update(self.results[arm.name].to_json())
                block.update({f"{k}_vs_{self.experiment.plain_arm}": v for k, v in self.comparison(arm.name).items()})
            if arm.name in self.gpu:
                block["gpu"] = self.gpu[arm.name]
            arms[arm.name] = block
        return {
            "experiment": self.experiment.name,
            "description": self.experiment.description,
            "harness_version": __version__,
            "host": socket.gethostname(),
            "command": self.command,
            "started_utc": self.started_utc,
            "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds") if finished else None,
            "interrupted": interrupted,
            "harness": harness_version(),
            "replay_of": str(self.replay_of) if self.replay_of else None,
            "baseline": self.experiment.base.gate.baseline,
            "notes": self.notes,
            "plain_arm": self.experiment.plain_arm,
            "arms": arms,
            "gates": [v.to_json() for v in self.verdicts],
        }

    def save(self, finished: bool = False, interrupted: bool = False) -> None:
        self.record.write_json("results.json", self.results_json(finished, interrupted))

    def baseline_arm(self, name: str) -> dict | None:
        return (self.baseline or {}).get("arms", {}).get(name)

    @property
    def baseline_label(self) -> str:
        return str(self.experiment.base.gate.baseline)

    def drift(self) -> list[dict[str, Any]]:
        if self.replay_of is None:
            return []
        return drift_rows(load_results(self.replay_of), self.results_json(), self.experiment.base.gate)

    def summary(self) -> str:
        text = format_summary(self.experiment, self.results, self.arm_status, self.verdicts,
                              {name: self.comparison(name) for name in self.results}, self.gpu, self.notes)
        if self.replay_of is not None:
            text += "\n" + drift_table(self.drift(), self.replay_of.name)
        return text

    def finish(self, interrupted: bool = False) -> Path | None:
        """Stop every server; write results.json and summary.md if anything was recorded."""
        for name in list(self.servers):
            self.close_arm(name)
        if self._record is None:
            return None
        for status in self.arm_status.values():
            if interrupted and status.get("status") in ("starting", "measuring"):
                status["status"] = "interrupted"
        self.save(finished=True, interrupted=interrupted)
        summary = self.summary()
        self.record.write_text("summary.md", summary)
        append_step_summary(self.record.redactor.text(summary))
        return self.record.path
