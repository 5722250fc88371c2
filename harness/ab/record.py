"""An A/B's record: `<record.root>/<UTC timestamp>_<exp>_ab/`, made by the one record writer
(harness/record/recorder.py, kind "ab": redacted, atomic):

    config.yaml, overrides.yaml   side A's composed config and every measurement's overrides
    arms/<arm>.<side><round>/     one measurement (a fresh server per side and round):
                                  config.yaml, server.log, requests.parquet (each row with its
                                  `round` and `side`); with ab.keep_up, arms/<arm>.<side>/ holds
                                  that side's one server and every round's requests
    ab.json                       the sides, per arm and round each side's figures and status,
                                  which rounds counted, the verdicts, the exit status; `status`
                                  running from the start, then finished or interrupted
    summary.md                    the same in words and tables
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from harness import __version__
from harness.ab.plan import SIDES, ABPlan
from harness.config.compose import Experiment
from harness.gates.reference import comparisons
from harness.gates.verdict import Verdict
from harness.record.recorder import Recorder
from harness.record.store import FINISHED, INTERRUPTED, RUNNING, safe_name


def measurement_name(arm: str, side: str, round_index: int | None) -> str:
    """`eagle3.B2`: arm eagle3, side B, round 2 (1-based); `eagle3.B` for a server kept up."""
    return f"{arm}.{side}" if round_index is None else f"{arm}.{side}{round_index + 1}"


def record_experiment(plan: ABPlan) -> Experiment:
    """The experiment the record writer is given: one 'arm' per measurement, each with its
    side's composed config, so every server's config is in the record as a run's is."""
    rounds = [None] if plan.keep_up else list(range(plan.rounds))
    arms = [dataclasses.replace(plan.arm(side, name), name=measurement_name(name, side, r),
                                overrides=[*plan.own[side], *plan.arm(side, name).overrides])
            for r in rounds for name in plan.arm_names for side in SIDES]
    return dataclasses.replace(plan.base, arms=arms, overrides=plan.common)


class ABRecord:
    def __init__(self, plan: ABPlan, command: list[str]):
        self.plan, self.command = plan, command
        self.recorder = Recorder(record_experiment(plan), kind="ab")
        for side in SIDES:
            self.recorder.learn_secrets(plan.own[side])
        self.arms: dict[str, list[dict[str, Any]]] = {name: [] for name in plan.arm_names}  # arm -> its rounds
        self.verdicts: list[Verdict] = []
        self.exit_status: int | None = None
        self.stopped: str | None = None  # why the A/B ended before its last round, in words
        self.settled: dict[str, str] = {}  # ab.rounds=auto: arm -> why its rounds ended, in words
        self.save()

    @property
    def path(self) -> Path:
        return self.recorder.path

    def scrub(self, text: str) -> str:
        return self.recorder.scrub(text)

    def round_entry(self, arm: str, round_index: int, order: tuple[str, str]) -> dict[str, Any]:
        entry = {"round": round_index + 1, "order": "".join(order), "counted": False, "A": None, "B": None}
        self.arms[arm].append(entry)
        return entry

    def data(self, status: str) -> dict[str, Any]:
        plan = self.plan
        return {
            "experiment": plan.base.name,
            "description": plan.base.description,
            "harness_version": __version__,
            "command": self.plan.base.shown_command(self.command),
            **self.recorder.status_fields(status),
            "exit_status": self.exit_status,
            "rounds": plan.rounds, "order": plan.order, "keep_up": plan.keep_up,
            "sequential": self.sequential_block(),
            "common_overrides": plan.common,
            "sides": {side: {"overrides": plan.own[side], "what": plan.describe(side)} for side in SIDES},
            "metrics": [c.metric for c in comparisons(plan.base.base.gate)],
            "plain_arm": plan.base.plain_arm,
            "arms": self.arms,
            "stopped": self.stopped,
            "gates": [v.to_json() for v in self.verdicts],
        }

    def prune_unrun(self) -> None:
        """The measurements planned up front whose round never started (an A/B that stopped
        early; ab.rounds=auto deciding before ab.max_rounds) hold only the config written at
        the start: they go, so the record's folders are what ran."""
        if self.plan.keep_up:
            return
        for arm, entries in self.arms.items():
            for round_index in range(len(entries), self.plan.rounds):
                for side in SIDES:
                    folder = self.path / "arms" / safe_name(measurement_name(arm, side, round_index))
                    if folder.is_dir() and {p.name for p in folder.iterdir()} <= {"config.yaml"}:
                        shutil.rmtree(folder)

    def sequential_block(self) -> dict[str, Any] | None:
        """ab.rounds=auto: each arm's rounds run and why they ended (null for fixed rounds)."""
        plan = self.plan
        if not plan.sequential:
            return None
        return {"max_rounds": plan.rounds, "rounds_run": self.rounds_run(), "why": dict(self.settled)}

    def rounds_run(self) -> dict[str, int]:
        """Per arm, the rounds that counted (both sides measured)."""
        return {arm: sum(1 for e in entries if e["counted"]) for arm, entries in self.arms.items()}

    def save(self, status: str = RUNNING) -> None:
        self.recorder.write_data(self.data(status))

    def finish(self, verdicts: list[Verdict], exit_status: int, interrupted: bool) -> None:
        self.verdicts, self.exit_status = verdicts, exit_status
        self.recorder.guarded("measurements that never ran", self.prune_unrun)
        data = self.data(INTERRUPTED if interrupted else FINISHED)
        self.recorder.write_data(data)
        self.recorder.write_summary(summary(data))
        self.recorder.point_latest()


def cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def rounds_words(data: dict[str, Any]) -> str:
    sequential = data.get("sequential")
    if not sequential:
        return f"{data['rounds']} rounds"
    ran = sorted((sequential.get("rounds_run") or {}).values()) or [0]
    counted = str(ran[0]) if ran[0] == ran[-1] else f"{ran[0]}-{ran[-1]}"
    return f"{counted} rounds (ab.rounds=auto, up to {sequential['max_rounds']}: stopped once decided)"


def summary(data: dict[str, Any]) -> str:
    gates = [Verdict.from_json(g, "ab") for g in data["gates"]]
    counts = {s: sum(v.status == s for v in gates) for s in ("passed", "failed", "inconclusive")}
    lines = [f"# specgate ab: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}: "
             f"{counts['passed']} passed, {counts['failed']} failed, {counts['inconclusive']} inconclusive "
             f"(B against A over {rounds_words(data)}, {data['order'].upper()} order, "
             f"{'both servers kept up' if data['keep_up'] else 'fresh servers every round'})", "",
             f"- A: {data['sides']['A']['what']}", f"- B: {data['sides']['B']['what']}"]
    if data.get("stopped"):
        lines += ["", f"Stopped early: {data['stopped']}"]
    for arm, why in ((data.get("sequential") or {}).get("why") or {}).items():
        lines += ["", f"Rounds of arm {arm}: {why}"]
    if gates:
        lines += ["", "## Verdicts", ""] + [f"- {v.line()}" for v in gates]
    for arm, rounds in data["arms"].items():
        lines += ["", f"## {arm}: each round", "", rounds_table(data["metrics"], rounds)]
    lines += ["", "Re-run: `" + " ".join(data["command"]) + "` (each side's composed config is in arms/*/config.yaml)."]
    return "\n".join(lines) + "\n"


def round_rows(metrics: list[str], rounds: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """round x side: order, status, each compared metric, whether the round counted."""
    header = ["round", "order", "side", "status", *metrics, "counted"]
    rows = []
    for entry in rounds:
        for side in SIDES:
            block = entry.get(side) or {}
            figures = block.get("figures") or {}
            status = block.get("status", "not run") + (f" ({block['error']})" if block.get("error") else "")
            rows.append([str(entry["round"]), entry["order"], side, status, *(cell(figures.get(m)) for m in metrics),
                         "yes" if entry.get("counted") else "no"])
    return header, rows


def rounds_table(metrics: list[str], rounds: list[dict[str, Any]]) -> str:
    header, rows = round_rows(metrics, rounds)
    return "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
                      *("| " + " | ".join(row) + " |" for row in rows)])
