"""`specgate capacity`: per arm, ONE server (the suites' own lifecycle, harness/run/arm.py), then
probes of growing load on it, each one load of the arm's workload at that concurrency or
request rate, judged against the SLOs (harness/capacity/slo.py) by the search (harness/capacity/search.py).

Everything a user can get wrong is found before the first server starts (exit 4). Ctrl-C or
SIGTERM stops the probe and the server and closes the record as interrupted (exit 2).
Record: harness/capacity/record.py; gate: harness/gates/capacity.py (judged through the registry); README "Capacity under SLOs".
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.exit_status import FAILED, INTERRUPTED, PASSED
from harness.run.arm import ArmFailed, ArmSession
from harness.interrupts import Interrupts, sigint_ignored
from harness.record.kinds import CAPACITY
from harness.run.driver import Driver
from harness.capacity.search import CapacityConfigError, SearchSettings, search
from harness.capacity.record import CapacityRecord
from harness.config.compose import Arm, ConfigError, Experiment
from harness.run.compose import compose
from harness.gates.registry import CapacityContext, judge
from harness.gates.verdict import Verdict, failed
from harness.load import print_progress
from harness.run.outcome import ArmOutcome
from harness.servers import Session, remove_dead_sessions_leftovers
from harness.capacity.slo import METRICS, STATISTICS, Slo, goodput, misses, slos_of
from harness.run.preflight import preflight
from harness.measure.metrics import ArmResult
from harness.measure.registry import in_scope, metric_value, number

INTERRUPTED_EXIT = INTERRUPTED


def check_experiment(experiment: Experiment) -> tuple[list[Slo], SearchSettings]:
    """The SLOs and the search settings, or a ConfigError: what `pytest` checks before a server
    starts, plus the capacity keys, which every arm must share (arms compared under different
    objectives would not be compared at all)."""
    base = experiment.base
    for arm in experiment.arms:
        for key in ("slo", "capacity"):
            if arm.cfg[key] != base[key]:
                raise ConfigError(f"arm '{arm.name}' sets its own {key}.*; set {key} for the whole experiment, "
                                  f"so every arm is held to the same search")
    slos = slos_of(base)
    if not slos:
        raise ConfigError(f"specgate capacity needs at least one SLO, e.g. slo.tpot_ms.p99=50 (metrics: "
                          f"{', '.join(METRICS)}; statistics: {', '.join(STATISTICS)})")
    try:
        settings = SearchSettings.of(base.capacity)
    except CapacityConfigError as exc:
        raise ConfigError(str(exc)) from None
    preflight(experiment)
    return slos, settings


def probe_workload(workload: DictConfig, capacity: DictConfig, load: float, first: bool) -> DictConfig:
    """The arm's workload at one probe's load. A probe sends enough requests for its
    percentiles (`rounds` per request slot, or `probe_s` seconds of arrivals), never fewer
    than the workload's own num_prompts; only the first probe of a server warms it up."""
    probe = OmegaConf.to_container(workload, resolve=True)
    if capacity.dimension == "concurrency":
        probe.update(concurrency=int(load), request_rate=None)
        wanted = capacity.rounds * int(load)
    else:  # open loop: the cap on requests in flight must not hide the queue from the server
        probe.update(request_rate=float(load), concurrency=max(int(workload.concurrency), capacity.max_in_flight))
        wanted = math.ceil(load * capacity.probe_s)
    probe["num_prompts"] = max(int(workload.num_prompts or 0), wanted)
    if not first:
        probe["warmup_requests"] = 0
    return OmegaConf.create(probe)


class ProbeAborted(Exception):
    """The server died during a probe: the search cannot go on."""


@dataclass
class ArmCapacity:
    """One arm's search as capacity.json keeps it."""

    name: str
    status: str = "not_run"  # not_run, searching, finished, server_failed, server_died, interrupted
    capacity: float | None = None
    first_miss: float | None = None
    reached_max: bool = False
    probes: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def at_capacity(self) -> dict[str, Any] | None:
        """The probe at the capacity (the last one at that load, should it repeat)."""
        found = [p for p in self.probes if p["load"] == self.capacity and p["met"]]
        return found[-1] if found else None

    @property
    def failed_probes(self) -> list[dict[str, Any]]:
        return [p for p in self.probes if p.get("failed_requests")]

    def to_json(self) -> dict[str, Any]:
        at = self.at_capacity
        return {"status": self.status, "capacity": self.capacity, "first_miss": self.first_miss,
                "reached_max": self.reached_max, "goodput_rps": at["goodput_rps"] if at else None,
                "at_capacity": at, "error": self.error, "server": self.server, "probes": self.probes}


class ArmSearch:
    """One arm: its server started once, probed at each load the search asks for, stopped."""

    def __init__(self, arm: Arm, record: CapacityRecord, session: Session, slos: list[Slo],
                 settings: SearchSettings, found: ArmCapacity):
        self.arm, self.record, self.slos, self.settings, self.found = arm, record, slos, settings, found
        self.outcome = ArmOutcome(arm.name, backend=arm.cfg.backend.kind, choices=arm.choices)
        self.session = ArmSession(arm, self.outcome, record.recorder, session)

    def run(self) -> None:
        try:
            self.session.start()
            self.found.status, self.found.server = "searching", self.outcome.server
            self.record.save()
            result = search(self.probe, self.settings)
            self.found.capacity, self.found.first_miss = result.capacity, result.first_miss
            self.found.reached_max, self.found.status = result.reached_max, "finished"
        except ArmFailed as exc:
            self.found.status, self.found.error = self.outcome.status, self.record.scrub(str(exc))
        except ProbeAborted as exc:
            self.found.status, self.found.error = "server_died", self.record.scrub(str(exc))
        except KeyboardInterrupt:
            self.found.status = "interrupted"
            raise
        finally:
            with sigint_ignored():  # a second Ctrl-C must not cut the server's stop short
                self.session.stop()
            self.found.server = self.outcome.server or self.found.server

    def probe(self, load: float) -> bool:
        """One load on the running server: its figures recorded, whether it met every SLO."""
        number = len(self.found.probes)
        workload = probe_workload(self.arm.cfg.workload, self.arm.cfg.capacity, load, first=number == 0)
        try:
            load_result, result = self.session.run_workload(workload, 0, None, self.live_line(), probe=number)
        except ArmFailed as exc:
            raise ProbeAborted(str(exc)) from None
        missed = misses(result, self.slos)
        failed = result.requests_failed
        if failed:  # a load the server answers with errors is not served within any SLO
            missed.append(f"{failed} of {failed + result.requests_ok} requests failed ({', '.join(result.errors)})")
        good, good_rps = goodput(load_result, self.slos)
        entry = {"probe": number, "load": load, "met": not missed, "misses": missed, "failed_requests": failed,
                 "requests_ok": result.requests_ok, "good_requests": good, "goodput_rps": rounded(good_rps),
                 "duration_s": rounded(result.duration_s), **probe_figures(result)}
        self.found.probes.append(entry)
        self.record.save()
        say(f"{self.arm.name}: {self.record.dimension} {load:g}: "
            f"{'met every SLO' if not missed else 'missed ' + '; '.join(missed)} (goodput {good_rps or 0:.2f} req/s)")
        if not self.session.server.is_alive():
            raise ProbeAborted(f"arm '{self.arm.name}': the server {self.session.server.exit_description()} "
                               f"during the probe at {self.record.dimension} {load:g}")
        return not missed


    def live_line(self):
        """The load's live progress line on a terminal; in a log, the line each probe ends with is enough."""
        if not sys.stderr.isatty():
            return None
        return lambda snapshot: print_progress(snapshot, label=f"[{self.arm.name}] ")


def probe_figures(result: ArmResult) -> dict[str, Any]:
    """A probe's figures: every statistic of each SLO'able distribution (what an SLO and its
    chart read), and the registry's other capacity metrics under their paths."""
    figures: dict[str, Any] = {metric: result.stat(metric).to_json() for metric in METRICS}
    figures.update({m.path: rounded(number(metric_value(result, m.path)))
                    for m in in_scope("capacity") if m.family not in METRICS})
    return figures


def rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def say(line: str) -> None:
    print(f"specgate capacity: {line}", flush=True)


@dataclass
class CapacityPlan:
    """The checked experiment, its SLOs and search, the record and each arm's search as it goes."""

    experiment: Experiment
    slos: list[Slo]
    settings: SearchSettings
    record: CapacityRecord | None = None
    found: dict[str, ArmCapacity] = field(default_factory=dict)


class CapacityDriver(Driver):
    """Check everything, then search each arm in turn (the plain arm first). Exit status: 0
    every gate passed and every probe measured; 1 otherwise; 2 interrupted (4 is the caller's,
    for the ConfigError raised before anything starts)."""

    command, kind = "capacity", CAPACITY

    def compose(self, tokens: list[str], conf_dir: Path) -> CapacityPlan:
        experiment = compose(tokens, conf_dir)
        return CapacityPlan(experiment, *check_experiment(experiment))

    def plan(self, plan: CapacityPlan, command: list[str]) -> CapacityPlan:
        plan.record = CapacityRecord(plan.experiment, command, plan.slos, plan.settings)
        plan.found = {arm.name: ArmCapacity(arm.name) for arm in plan.experiment.arms}
        plan.record.arms = plan.found
        say(f"{plan.experiment.name}, arms {', '.join(plan.found)}, "
            f"SLOs {', '.join(f'{s.name} ≤ {s.limit_ms:g} ms' for s in plan.slos)}")
        return plan

    def measure(self, plan: CapacityPlan, interrupts: Interrupts) -> None:
        session, cleaned, record = Session(), set(), plan.record
        for arm in ordered(plan.experiment):
            engine = (arm.cfg.backend.kind, arm.cfg.backend.docker_host)
            if engine not in cleaned:  # what dead sessions left on this engine goes first, as in a run
                cleaned.add(engine)
                remove_dead_sessions_leftovers(arm.cfg, session)
            session.run, session.record = record.path.name, str(record.path.resolve())
            ArmSearch(arm, record, session, plan.slos, plan.settings, plan.found[arm.name]).run()

    def interrupted(self, plan: CapacityPlan) -> int:
        plan.record.finish(capacity_verdicts(plan.experiment, plan.found, plan.settings), INTERRUPTED_EXIT,
                           interrupted=True)
        print(f"specgate capacity: interrupted; record {plan.record.path}", file=sys.stderr)
        return INTERRUPTED_EXIT

    def record(self, plan: CapacityPlan) -> int:
        verdicts = capacity_verdicts(plan.experiment, plan.found, plan.settings)
        measured = all(a.status == "finished" and not a.failed_probes for a in plan.found.values())
        status = PASSED if measured and not failed(verdicts) else FAILED
        plan.record.finish(verdicts, status, interrupted=False)
        for verdict in verdicts:  # as `specgate sweep` prints its gates
            print(f"specgate capacity gate: {verdict.line()}", flush=True)
        say(f"exit status {status}; summary {plan.record.path / 'summary.md'}")
        return status


def capacity_verdicts(experiment: Experiment, found: dict[str, ArmCapacity], settings: SearchSettings) -> list[Verdict]:
    """The registry's capacity gates on every arm's search."""
    unit = "concurrent requests" if settings.integer else "req/s"
    return judge("capacity", CapacityContext(experiment.base.gate, found, unit, settings.start))


def ordered(experiment: Experiment) -> list[Arm]:
    """The plain-decoding arm first, as the suites run them."""
    plain = experiment.plain_arm
    return sorted(experiment.arms, key=lambda arm: arm.name != plain)
