"""A capacity search's record: `<record.root>/<UTC timestamp>_<exp>_capacity/`, made by the one
record writer (harness/record/recorder.py, kind "capacity": redacted, atomic), so it holds what
a run record holds of its config:

    config.yaml, overrides.yaml, arms/<arm>/config.yaml   the composed config (re-run it with
                                                          the `command` in capacity.json)
    arms/<arm>/server.log   the arm's server, up for all its probes
    arms/<arm>/requests.parquet  every probe's requests, each row with its `probe` (docs/record.md)
    capacity.json           the SLOs, the search, per arm its capacity, goodput there and
                            every probe's figures, the gate verdicts and the exit status;
                            `status` running from the start, then finished or interrupted
    summary.md              the same in words and tables
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import __version__
from harness.capacity.search import SearchSettings
from harness.config.compose import Experiment
from harness.gates.verdict import Verdict
from harness.record.store import FINISHED, INTERRUPTED, RUNNING
from harness.record.recorder import Recorder
from harness.capacity.slo import Slo
from harness.report.tables import Row, Table, metric_table


class CapacityRecord:
    def __init__(self, experiment: Experiment, command: list[str], slos: list[Slo], settings: SearchSettings):
        self.recorder = Recorder(experiment, kind="capacity")
        self.experiment, self.command, self.slos, self.settings = experiment, command, slos, settings
        self.dimension = str(experiment.base.capacity.dimension)
        self.arms: dict[str, Any] = {}  # arm -> ArmCapacity (harness/capacity/driver.py), filled as it searches
        self.verdicts: list[Verdict] = []
        self.exit_status: int | None = None
        self.save()  # the folder and a capacity.json that says `running`, before any server starts

    @property
    def path(self) -> Path:
        return self.recorder.path

    def scrub(self, text: str) -> str:
        return self.recorder.scrub(text)

    def data(self, status: str) -> dict[str, Any]:
        capacity = self.experiment.base.capacity
        return {
            "experiment": self.experiment.name,
            "description": self.experiment.description,
            "harness_version": __version__,
            "command": self.experiment.shown_command(self.command),
            **self.recorder.status_fields(status),  # running, finished or interrupted, as a run record's
            "exit_status": self.exit_status,
            "dimension": self.dimension,
            "slos": [slo.to_json() for slo in self.slos],
            "search": {"start": self.settings.start, "max": self.settings.maximum, "growth": self.settings.growth,
                       "tolerance": self.settings.tolerance if not self.settings.integer else None,
                       "rounds": capacity.rounds if self.settings.integer else None,
                       "probe_s": None if self.settings.integer else capacity.probe_s},
            "plain_arm": self.experiment.plain_arm,
            "arms": {name: searched.to_json() for name, searched in self.arms.items()},
            "gates": [v.to_json() for v in self.verdicts],
        }

    def save(self, status: str = RUNNING) -> None:
        self.recorder.write_data(self.data(status))

    def finish(self, verdicts: list[Verdict], exit_status: int, interrupted: bool) -> None:
        self.verdicts, self.exit_status = verdicts, exit_status
        status = INTERRUPTED if interrupted else FINISHED
        data = self.data(status)
        self.recorder.write_data(data)
        self.recorder.write_summary(summary(data))


def cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"


def stat(block: dict[str, Any] | None, key: str) -> str:
    return cell((block or {}).get(key))


def capacity_words(block: dict[str, Any], start: float) -> str:
    if block["status"] != "finished":
        return f"not measured ({block['status']}{': ' + block['error'] if block.get('error') else ''})"
    if block["capacity"] is None:
        return f"below {start:g}: even the first probe missed"
    bound = " (capacity.max reached: a lower bound)" if block["reached_max"] else f", first miss at {cell(block['first_miss'])}"
    return f"**{cell(block['capacity'])}**{bound}; goodput there {cell(block['goodput_rps'])} req/s"


def summary(data: dict[str, Any]) -> str:
    slos = ", ".join(f"{s['metric']}.{s['statistic']} ≤ {s['limit_ms']:g} ms" for s in data["slos"])
    lines = [f"# specgate capacity: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}; the largest {data['dimension']} "
             f"at which every SLO was met ({slos})", ""]
    lines += [f"- {arm}: {capacity_words(block, data['search']['start'])}" for arm, block in data["arms"].items()]
    if data["gates"]:
        lines += ["", "## Gates", ""] + [f"- {Verdict.from_json(g, 'capacity').line()}" for g in data["gates"]]
    lines += ["", "## Probes", "", *probes_table(data).markdown()]
    lines += ["", "Re-run: `" + " ".join(data["command"]) + "` (the composed config is in config.yaml)."]
    return "\n".join(lines) + "\n"


def probes_table(data: dict[str, Any]) -> Table:
    """arm x probe: the load, whether it met every SLO, the registry's capacity metrics
    (harness/report/tables.py), goodput, failures and what it missed."""
    rows = [Row([arm, str(p["probe"]), cell(p["load"]), "yes" if p["met"] else "no"], p,
                [cell(p.get("goodput_rps")), str(p.get("failed_requests", "–")), "; ".join(p.get("misses") or []) or "–"])
            for arm, block in (data.get("arms") or {}).items() for p in block.get("probes") or []]
    return metric_table("capacity", ["arm", "#", str(data.get("dimension", "load")), "met"], rows,
                        ["goodput req/s", "failed", "missed"])
