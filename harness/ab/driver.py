"""`specgate ab`: side A and side B (two builds, two images, two configs) measured in
alternating rounds on this machine, and judged on their paired differences.

Every round measures each arm on both sides, one after the other, in the round's order (ABBA
by default: AB, BA, AB, ...), each with a fresh server (two big servers rarely fit on the GPUs
at once; `ab.keep_up=true` keeps both up for every round instead). A side's server is
started, measured and stopped by the measurement every driver shares (harness/run/arm.py),
so a side is measured exactly as a run measures an arm.

Everything a user can get wrong is found before the first server starts (exit 4). A round
fails when a side's server cannot start, dies, or a request fails: the A/B stops there (the
rounds after it would measure a broken side), judges the rounds that counted and exits 1,
its record saying which rounds counted. Ctrl-C or SIGTERM stops the current load and server
and closes the record as interrupted (exit 2). Record: harness/ab/record.py; gate:
harness/gates/ab.py (through the registry); docs/ab.md.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.exit_status import FAILED, INTERRUPTED, PASSED, UNDECIDED
from harness.ab.plan import SIDES, ABPlan
from harness.ab.record import ABRecord, measurement_name
from harness.gates.change import FIRST_LOOK, Sequential
from harness.gates.ab import still_open
from harness.gates.client_bound import judge as judge_client
from harness.gates.reference import comparisons
from harness.gates.registry import ABContext, judge
from harness.gates.verdict import MORE_ROUNDS, Verdict, failed, undecided, undecided_sentence
from harness.load import print_progress
from harness.measure.metrics import ArmResult
from harness.measure.registry import metric_value, number
from harness.run.arm import ArmFailed, ArmSession
from harness.interrupts import Interrupts, sigint_ignored
from harness.record.kinds import AB
from harness.run.driver import Driver
from harness.run.outcome import ArmOutcome
from harness.record.secrets import Redactor
from harness.servers import ServerError, Session, build_image, remove_dead_sessions_leftovers

INTERRUPTED_EXIT = INTERRUPTED


class RoundFailed(Exception):
    """A side could not be measured in a round (one sentence): the A/B stops there."""


@dataclass
class RoundPair:
    """One round of one arm as the gate reads it: each side's request lines and result."""

    round: int  # 1-based
    lines: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # side -> its measured request lines
    results: dict[str, ArmResult] = field(default_factory=dict)
    gpus: dict[str, dict] = field(default_factory=dict)  # side -> its GPU block over the load (telemetry)


class SideServer:
    """One side's server for one arm: started, loaded once per round it serves, stopped."""

    def __init__(self, plan: ABPlan, record: ABRecord, session: Session, arm: str, side: str,
                 round_index: int | None):
        self.arm_name, self.side, self.record = arm, side, record
        arm_cfg = plan.arm(side, arm)
        self.arm = dataclasses.replace(arm_cfg, name=measurement_name(arm, side, round_index))
        self.outcome = ArmOutcome(self.arm.name, backend=arm_cfg.cfg.backend.kind, choices=arm_cfg.choices)
        self.session = ArmSession(self.arm, self.outcome, record.recorder, session)

    def start(self, block: dict[str, Any], where: str) -> None:
        block["status"] = "starting"
        try:
            self.session.start()
        except ArmFailed as exc:
            block.update(status=self.outcome.status, error=self.record.scrub(str(exc)), server=self.outcome.server)
            raise RoundFailed(f"{where}: {block['error']}") from None
        block["server"] = self.outcome.server

    def load(self, block: dict[str, Any], round_index: int, where: str) -> tuple[list[dict[str, Any]], ArmResult]:
        """One load of the arm's workload; its lines (flagged with the round and side) and figures."""
        block["status"] = "measuring"
        first = len(self.outcome.request_lines)
        sampler = self.session.start_telemetry()
        try:
            _, result = self.session.run_workload(self.arm.cfg.workload, round_index, sampler, self.live_line(where),
                                                  round=round_index + 1, side=self.side)
        except ArmFailed as exc:
            block.update(status=self.outcome.status, error=self.record.scrub(str(exc)))
            raise RoundFailed(f"{where}: {block['error']}") from None
        finally:
            if sampler is not None:
                self.session.finish_telemetry(sampler)
        result.client.update(judge_client(result, result.client, self.arm.cfg.gate.client_bound))
        block.update(status="measured", **figures_of(result, self.arm.cfg.gate), gpu=gpu_state(self.outcome.gpu))
        if not self.session.server.is_alive():
            block.update(status="server_died", error=self.record.scrub(
                f"the server {self.session.server.exit_description()} during the load"))
            raise RoundFailed(f"{where}: {block['error']}")
        if result.requests_failed:
            block.update(status="requests_failed", error=self.record.scrub(
                f"{result.requests_failed} of {result.requests_failed + result.requests_ok} requests failed "
                f"({', '.join(result.errors)})"))
            raise RoundFailed(f"{where}: {block['error']}")
        return self.outcome.request_lines[first:], result

    def stop(self) -> None:
        with sigint_ignored():  # a second Ctrl-C must not cut the server's stop short
            self.session.stop()

    def live_line(self, where: str):
        if not sys.stderr.isatty():
            return None
        return lambda snapshot: print_progress(snapshot, label=f"[{where}] ")


def figures_of(result: ArmResult, gate) -> dict[str, Any]:
    """A side's figures in one round as ab.json keeps them: the compared metrics, the load."""
    return {"figures": {c.metric: rounded(number(metric_value(result, c.metric))) for c in comparisons(gate)},
            "requests_ok": result.requests_ok, "requests_failed": result.requests_failed,
            "duration_s": rounded(result.duration_s),
            "client_bound": bool((result.client or {}).get("client_bound"))}


def gpu_state(gpu: dict | None) -> dict | None:
    """What the GPUs did during the load, in brief (the per-GPU clock ratio and throttling)."""
    if not gpu or not gpu.get("gpus"):
        return None if not gpu else {"unavailable": gpu.get("unavailable")}
    return {str(block.get("index", uuid)): {"sm_clock_ratio_under_load": block.get("sm_clock_ratio_under_load"),
                                            "throttle_fraction_under_load": block.get("throttle_fraction_under_load")}
            for uuid, block in gpu["gpus"].items()}


def rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


class ABRun:
    """The rounds of one A/B, filling the record and the pairs the gate reads."""

    def __init__(self, plan: ABPlan, record: ABRecord, interrupts: Interrupts | None = None, gate: Any = None):
        self.plan, self.record, self.session = plan, record, Session()
        # what judges the pairs: the experiment's gate, or a caller's (a bisect's probe: half the ends' change)
        self.gate = gate if gate is not None else plan.base.base.gate
        self.interrupts = interrupts or Interrupts()
        self.pairs: dict[str, list[RoundPair]] = {name: [] for name in plan.arm_names}
        self.cleaned: set = set()

    @property
    def sequential(self) -> Sequential | None:
        """ab.rounds=auto: each look's share of the error, over every arm's compared metrics."""
        if not self.plan.sequential:
            return None
        return Sequential(self.plan.rounds, len(self.plan.arm_names) * len(comparisons(self.gate)))

    def run(self) -> None:
        self.session.run, self.session.record = self.record.path.name, str(self.record.path.resolve())
        self.images_ready()
        if self.plan.keep_up:
            for arm in self.plan.arm_names:
                self.run_kept_up(arm)
        else:
            for round_index in range(self.plan.rounds):
                for arm in self.plan.arm_names:
                    if arm not in self.record.settled:
                        self.run_fresh_round(arm, round_index)
                        self.settle(arm)
                if len(self.record.settled) == len(self.plan.arm_names):
                    break

    def images_ready(self) -> None:
        """Every side's image found or built before the first round: a side that does not build
        (a bisect's unbuildable commit) stops the A/B before either side is measured."""
        for arm in self.plan.arm_names:
            for side in SIDES:
                try:
                    build_image(self.plan.arm(side, arm).cfg)
                except ServerError as exc:
                    raise RoundFailed(f"arm '{arm}', side {side}: {self.record.scrub(str(exc))}") from None
                self.interrupts.check()

    def settle(self, arm: str) -> None:
        """ab.rounds=auto: after each look, is every verdict of this arm decided (passed or
        failed), or inconclusive for a reason more rounds cannot mend (a round's client or GPU
        in trouble)? Then its rounds end, and the record says why; at ab.max_rounds they end
        whatever the verdicts say."""
        pairs = self.pairs[arm]
        if not self.plan.sequential or len(pairs) < FIRST_LOOK:
            return
        verdicts = judge("ab", ABContext(self.gate, {arm: pairs}, self.sides(), self.sequential))
        open_ = still_open(verdicts)
        if not open_:
            mended = [v for v in verdicts if v.status == "inconclusive"]
            why = (f"{len(mended)} verdict(s) inconclusive for a reason more rounds cannot mend ({mended[0].cause})"
                   if mended else "every verdict decided")
            self.record.settled[arm] = f"stopped after round {len(pairs)}: {why}"
        elif len(pairs) >= self.plan.rounds:
            names = ", ".join(v.name for v in open_)
            self.record.settled[arm] = (f"ab.max_rounds={self.plan.rounds} reached with {len(open_)} verdict(s) "
                                        f"undecided ({names})")
        if arm in self.record.settled:
            say(f"arm '{arm}': {self.record.settled[arm]}")
            self.record.save()

    def sides(self) -> dict[str, str]:
        return {side: self.plan.describe(side) for side in SIDES}

    def clean_engine(self, arm: str, side: str) -> None:
        """What dead sessions left on a side's engine goes first, once, as in a run."""
        cfg = self.plan.arm(side, arm).cfg
        engine = (cfg.backend.kind, cfg.backend.docker_host)
        if engine not in self.cleaned:
            self.cleaned.add(engine)
            remove_dead_sessions_leftovers(cfg, self.session)

    def run_fresh_round(self, arm: str, round_index: int) -> None:
        order = self.plan.order_of(round_index)
        entry, pair = self.record.round_entry(arm, round_index, order), RoundPair(round_index + 1)
        self.pairs[arm].append(pair)
        for side in order:
            self.clean_engine(arm, side)
            server, block = SideServer(self.plan, self.record, self.session, arm, side, round_index), {}
            entry[side] = block
            where = f"round {round_index + 1}, arm '{arm}', side {side}"
            say(f"{where}: starting ({self.plan.describe(side)})")
            try:
                server.start(block, where)
                self.interrupts.check()
                pair.lines[side], pair.results[side] = server.load(block, round_index, where)
                pair.gpus[side] = server.outcome.gpu or {}
            finally:
                server.stop()
                self.record.save()
            self.interrupts.check()
        self.count(entry, pair)

    def run_kept_up(self, arm: str) -> None:
        servers: dict[str, SideServer] = {}
        try:
            for side in SIDES:
                self.clean_engine(arm, side)
                servers[side] = SideServer(self.plan, self.record, self.session, arm, side, None)
                servers[side].start({}, f"arm '{arm}', side {side}")
                self.interrupts.check()
            for round_index in range(self.plan.rounds):
                order = self.plan.order_of(round_index)
                entry, pair = self.record.round_entry(arm, round_index, order), RoundPair(round_index + 1)
                self.pairs[arm].append(pair)
                for side in order:
                    entry[side] = block = {"server": servers[side].outcome.server}
                    where = f"round {round_index + 1}, arm '{arm}', side {side}"
                    try:
                        pair.lines[side], pair.results[side] = servers[side].load(block, round_index, where)
                        pair.gpus[side] = servers[side].outcome.gpu or {}
                    finally:
                        self.record.save()
                    self.interrupts.check()
                self.count(entry, pair)
                self.settle(arm)
                if arm in self.record.settled:
                    break
        finally:
            for server in servers.values():
                server.stop()

    def count(self, entry: dict[str, Any], pair: RoundPair) -> None:
        entry["counted"] = all(side in pair.lines for side in SIDES)
        self.record.save()
        line = "; ".join(f"{side} " + ", ".join(f"{m} {v:g}" for m, v in (entry[side].get("figures") or {}).items()
                                                if v is not None) for side in entry["order"])
        say(f"round {entry['round']}: {line}")

    def verdicts(self) -> list[Verdict]:
        return judge("ab", ABContext(self.gate, self.pairs, self.sides(), self.sequential))


def plan_undecided(plan: ABPlan, verdicts: list[Verdict]) -> bool:
    """gate.undecided=exit and a verdict the size of a regression left undecided."""
    return plan.base.base.gate.undecided == "exit" and bool(undecided(verdicts))


def say(line: str) -> None:
    """The terminal is a sink like the record: what a server answered may quote a secret."""
    print(f"specgate ab: {Redactor().text(line)}", flush=True)


class ABDriver(Driver):
    """Check both sides, then the rounds. Exit status: 0 every round measured and no verdict
    failed; 1 otherwise; 6 none failed but one the size of a regression stayed undecided
    (gate.undecided=exit); 2 interrupted (4 is the caller's, for a ConfigError raised before
    anything starts)."""

    command, kind = "ab", AB

    def compose(self, tokens: list[str], conf_dir: Path) -> ABPlan:
        return ABPlan.of(tokens, Path(conf_dir))

    def plan(self, plan: ABPlan, command: list[str]) -> ABRun:
        record = ABRecord(plan, command)
        say(f"{plan.base.name}: A = {plan.describe('A')}; B = {plan.describe('B')}; {plan.rounds_words} "
            f"({plan.order.upper()}, {'servers kept up' if plan.keep_up else 'fresh servers'}); record {record.path}")
        return ABRun(plan, record)

    def measure(self, ab: ABRun, interrupts: Interrupts) -> None:
        ab.interrupts = interrupts
        try:
            ab.run()
        except RoundFailed as exc:
            counted = [str(p.round) for p in next(iter(ab.pairs.values()), []) if len(p.lines) == 2]
            ab.record.stopped = (f"{exc}; the A/B stopped there; rounds that counted: "
                                 f"{', '.join(counted) or 'none'}")

    def interrupted(self, ab: ABRun) -> int:
        ab.record.stopped = "interrupted (Ctrl-C or SIGTERM); the verdicts use the rounds that ended before"
        ab.record.finish(ab.verdicts(), INTERRUPTED_EXIT, interrupted=True)
        print(f"specgate ab: interrupted; record {ab.record.path}", file=sys.stderr)
        return INTERRUPTED_EXIT

    def record(self, ab: ABRun) -> int:
        record = ab.record
        if record.stopped:
            print(f"specgate ab: {Redactor().text(record.stopped)}", file=sys.stderr, flush=True)
        verdicts = ab.verdicts()
        status = FAILED if record.stopped or failed(verdicts) else PASSED
        if status == PASSED and plan_undecided(ab.plan, verdicts):
            status = UNDECIDED  # a regression-sized change the rounds could not decide is no pass
            say(undecided_sentence(verdicts, MORE_ROUNDS))
        record.finish(verdicts, status, interrupted=False)
        for verdict in verdicts:
            print(f"specgate ab gate: {Redactor().text(verdict.line())}", flush=True)
        say(f"exit status {status}; summary {record.path / 'summary.md'}")
        return status
