"""A bisect's record: `<record.root>/<UTC timestamp>_<exp>_bisect/`, made by the one record
writer (harness/record/recorder.py, kind "bisect": redacted, atomic):

    bisect.json     the key, its values (the first good, the last bad; a commit's subject in
                    `described`), each probe (the value,
                    its outcome against the good end, why, its A/B record and rounds), the
                    first bad value (or the values it is among), why it stopped, the exit
                    status; `status` running from the start, then finished or interrupted
    summary.md      the same in words and a table
    steps/          each probe's A/B record (harness/ab/record.py), whole
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import __version__
from harness.bisect.plan import BisectPlan
from harness.bisect.search import Search
from harness.record.recorder import Recorder
from harness.record.store import FINISHED, INTERRUPTED, RUNNING
from harness.report.tables import markdown_table


class BisectRecord:
    def __init__(self, plan: BisectPlan, command: list[str]):
        self.plan, self.command = plan, command
        self.recorder = Recorder(plan.base, kind="bisect")
        self.recorder.learn_secrets(plan.common)
        self.search: Search | None = None
        self.exit_status: int | None = None
        self.save()

    @property
    def path(self) -> Path:
        return self.recorder.path

    @property
    def steps_root(self) -> Path:
        return self.path / "steps"

    def data(self, status: str) -> dict[str, Any]:
        plan, search = self.plan, self.search
        return {
            "experiment": plan.base.name,
            "description": plan.base.description,
            "harness_version": __version__,
            "command": plan.base.shown_command(self.command),
            **self.recorder.status_fields(status),
            "exit_status": self.exit_status,
            "key": plan.key, "values": plan.values, "good": plan.good, "bad": plan.bad,
            "described": plan.described,
            "common_overrides": plan.common,
            "probes": [p.to_json() for p in search.probes] if search else [],
            "first_bad": search.first_bad if search else None,
            "candidates": search.candidates if search else [],
            "stopped": search.stopped if search else None,
            "bracket": search.bracket if search else None,
        }

    def save(self, status: str = RUNNING) -> None:
        self.recorder.write_data(self.data(status))

    def finish(self, exit_status: int, interrupted: bool) -> None:
        self.exit_status = exit_status
        data = self.data(INTERRUPTED if interrupted else FINISHED)
        self.recorder.write_data(data)
        self.recorder.write_summary(summary(data))
        self.recorder.point_latest()


def verdict_line(data: dict[str, Any]) -> str:
    """The bisect's finding in one sentence."""
    key = data["key"]
    if data.get("first_bad") is not None:
        return (f"first bad value: {key}={data['first_bad']}{described(data, data['first_bad'])} (the value before it "
                f"is the same as {data['good']})")
    if data.get("candidates"):
        return (f"the first bad value is one of {', '.join(data['candidates'])} (the ones before the last "
                f"could not be measured)")
    if data.get("status") == INTERRUPTED:
        bracket = f": {data['bracket']}" if data.get("bracket") else ""
        return f"interrupted before it found the first bad value; the probes that ended are kept{bracket}"
    return f"no first bad value: {data.get('stopped') or 'not searched'}"


def described(data: dict[str, Any], value: str) -> str:
    """` ("its commit's subject")` where the value is a commit, else nothing."""
    words = (data.get("described") or {}).get(value)
    return f' ("{words}")' if words else ""


def probe_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["probe", "value", "against", "outcome", "A/B rounds", "why", "A/B record"]
    rows = [[str(n), f"{data['key']}={p['value']}{described(data, p['value'])}", str(data["good"]), p["outcome"],
             "–" if p.get("rounds") is None else str(p["rounds"]), p["why"], Path(p["record"]).name if p.get("record") else "–"]
            for n, p in enumerate(data.get("probes") or [], 1)]
    return header, rows


def summary(data: dict[str, Any]) -> str:
    header, rows = probe_rows(data)
    lines = [f"# specgate bisect: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}: **{verdict_line(data)}**", "",
             f"{data['key']} over {len(data['values'])} values, {data['good']} (good) to {data['bad']} (bad): "
             f"{', '.join(data['values'])}; each probe an A/B against {data['good']} (steps/)", ""]
    lines += markdown_table(header, rows) if rows else ["no probe ended"]
    lines += ["", "Re-run: `" + " ".join(data["command"]) + "`"]
    return "\n".join(lines) + "\n"
