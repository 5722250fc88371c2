"""A calibration's record: `<record.root>/<UTC timestamp>_<exp>_calibration/`, made by the one
record writer (harness/record/recorder.py, kind "calibration": redacted, atomic).

    config.yaml, overrides.yaml, arms/<arm>/config.yaml   what every run measured
    runs/run_<i>/<UTC timestamp>_<exp>/   each run's own record (its record.root is runs/run_<i>)
    calibration.json    the runs: overrides, record, exit status, which arms each measured;
                        `status` running, finished or interrupted; `profile` the arms profiled
                        and those left without one (and why)
    noise_profile.json  the noise profile (harness/gates/profile.py), written once every run
                        ended; never by an interrupted calibration
    summary.md          arm x metric: the values, their median and between-run spread
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.compose import Experiment
from harness.gates.profile import PROFILE_FILE, NoiseProfile
from harness.record.store import FINISHED, INTERRUPTED, RunData
from harness.sweep.runs import WholeRunsRecord
from harness.measure.registry import resolve


class CalibrationRecord(WholeRunsRecord):
    """The calibration's folder and its calibration.json, rewritten (atomically) after every run:
    the runs' bookkeeping is a sweep's (harness/sweep/runs.py)."""

    kind, folder = "calibration", "runs"

    def __init__(self, experiment: Experiment, command: list[str], runs: int):
        super().__init__(experiment, command, runs_asked=runs, after={"profile": None})
        self.results: dict[str, dict[str, Any]] = {}  # run label -> its results.json, for the profile

    def read_back(self, entry: dict[str, Any], record: Path, run: RunData) -> None:
        """Each arm's status (`measured` counts towards the profile, whatever its gates said);
        a finished run's results kept for the profile."""
        entry["arms"] = {arm: (block or {}).get("status") for arm, block in run.arms.items()}
        if run.finished:
            self.results[entry["label"]] = run.data

    def write_profile(self, profile: NoiseProfile) -> None:
        self.recorder.record.write_json(PROFILE_FILE, profile.to_json())
        self.data["profile"] = {"file": PROFILE_FILE, "arms": sorted(profile.arms), "uncovered": profile.uncovered}

    def finish(self, exit_status: int, interrupted: bool, profile: NoiseProfile | None) -> None:
        self.close(exit_status, interrupted)
        if interrupted:
            self.data["runs_finished"] = [e["label"] for e in self.data["runs"] if e["status"] == FINISHED]
        self.save()
        self.recorder.write_summary(summary(self.recorder.redactor.data(self.data), profile))


PROFILE_HEADER = ["arm", "metric", "n", "median", "between-run sd", "values"]
RUNS_HEADER = ["run", "exit", "status", "arms"]


def profile_rows(profile: NoiseProfile) -> list[list[str]]:
    """Per arm and metric: its runs' values, their median and between-run spread, as shown."""
    rows = []
    for arm, noise in profile.arms.items():
        for path, metric in noise.metrics.items():
            shown = resolve(path).format
            values = ", ".join(shown(v) for v in metric.values)
            rows.append([arm, path, str(metric.n), shown(metric.median), f"{metric.spread:.2%}", values])
    return rows


def run_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    """Per run: its exit status, its record's status, each arm's status."""
    return [[r["label"], str(r["exit_status"]), str(r["status"]),
             ", ".join(f"{a}: {s}" for a, s in r["arms"].items()) or "–"] for r in runs]


def markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def summary(data: dict[str, Any], profile: NoiseProfile | None) -> str:
    """The runs, then the profile: per arm and metric its values, median and between-run spread."""
    runs = data["runs"]
    lines = [f"# specgate calibrate: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}, "
             f"{len(runs)} of {data['runs_asked']} run(s) started", "", *markdown(RUNS_HEADER, run_rows(runs))]
    failed = [r["label"] for r in runs if r["exit_status"] not in (0, None) and r["status"] == FINISHED]
    if failed:
        lines += ["", f"Gates failed in {', '.join(failed)}; their figures were measured and count."]
    if data["status"] == INTERRUPTED:
        finished = ", ".join(data.get("runs_finished") or []) or "none"
        lines += ["", f"**Interrupted**: no noise profile was written (runs that finished: {finished})."]
        return "\n".join(lines) + "\n"
    if profile is not None and profile.arms:
        lines += ["", "## Noise profile", "",
                  f"`{PROFILE_FILE}`: the between-run sd is the sample sd of ln(value) over the runs (≈ the "
                  f"relative sd). Judge a run against it with `gate.baseline=<this folder>`.", "",
                  *markdown(PROFILE_HEADER, profile_rows(profile))]
        notes = [f"- {arm}: {note}" for arm, noise in profile.arms.items() for note in noise.notes]
        if notes:
            lines += ["", *notes]
    uncovered = (profile.uncovered if profile is not None else {}) or {}
    if uncovered or profile is None or not profile.arms:
        lines += ["", "## No profile", ""]
        lines += [f"- {arm}: {why}" for arm, why in uncovered.items()] or ["- no arm was measured in enough runs"]
    return "\n".join(lines) + "\n"
