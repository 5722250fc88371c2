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
from harness.record.recorder import Recorder
from harness.record.store import FINISHED, INTERRUPTED, RUNNING, RecordError, record_in, read_run
from harness.measure.registry import resolve


class CalibrationRecord:
    """The calibration's folder and its calibration.json, rewritten (atomically) after every run."""

    def __init__(self, experiment: Experiment, command: list[str], runs: int):
        self.recorder = Recorder(experiment, kind="calibration")
        self.results: dict[str, dict[str, Any]] = {}  # run label -> its results.json, for the profile
        self.data: dict[str, Any] = {"experiment": experiment.name, **self.recorder.status_fields(RUNNING),
                                     "command": experiment.shown_command(command), "runs_asked": runs, "exit_status": None, "runs": [],
                                     "profile": None}

    @property
    def path(self) -> Path:
        return self.recorder.path.absolute()

    def run_root(self, label: str) -> Path:
        return self.path / "runs" / label

    def learn_secrets(self, overrides: list[str]) -> None:
        self.recorder.learn_secrets(overrides)

    def add_run(self, label: str, overrides: list[str]) -> dict[str, Any]:
        entry = {"label": label, "overrides": overrides, "record": None, "exit_status": None,
                 "status": "not_run", "arms": {}}
        self.data["runs"].append(entry)
        return entry

    def run_ended(self, entry: dict[str, Any], exit_status: int) -> None:
        """What the run's record says, read back now that its pytest has exited: its status
        and each arm's (`measured` counts towards the profile, whatever its gates said)."""
        entry["exit_status"] = exit_status
        record = record_in(self.run_root(entry["label"]))
        if record is None:
            entry["status"] = "no_record"
        else:
            entry["record"] = str(record.relative_to(self.path))
            try:
                run = read_run(record)
                entry["status"] = run.status
                entry["arms"] = {arm: (block or {}).get("status") for arm, block in run.arms.items()}
                if run.finished:
                    self.results[entry["label"]] = run.data
            except RecordError as exc:
                entry["status"], entry["error"] = "unreadable", str(exc)
        self.save()

    def save(self) -> None:
        self.recorder.write_data(self.data)

    def write_profile(self, profile: NoiseProfile) -> None:
        self.recorder.record.write_json(PROFILE_FILE, profile.to_json())
        self.data["profile"] = {"file": PROFILE_FILE, "arms": sorted(profile.arms), "uncovered": profile.uncovered}

    def finish(self, exit_status: int, interrupted: bool, profile: NoiseProfile | None) -> None:
        self.data.update(self.recorder.status_fields(INTERRUPTED if interrupted else FINISHED), exit_status=exit_status)
        if interrupted:
            self.data["runs_finished"] = [e["label"] for e in self.data["runs"] if e["status"] == FINISHED]
        self.save()
        self.recorder.write_summary(summary(self.recorder.redactor.data(self.data), profile))


def profile_table(profile: NoiseProfile) -> list[str]:
    lines = ["| arm | metric | n | median | between-run sd | values |", "| --- | --- | --- | --- | --- | --- |"]
    for arm, noise in profile.arms.items():
        for path, metric in noise.metrics.items():
            shown = resolve(path).format
            values = ", ".join(shown(v) for v in metric.values)
            lines.append(f"| {arm} | {path} | {metric.n} | {shown(metric.median)} | {metric.spread:.2%} | {values} |")
    return lines


def summary(data: dict[str, Any], profile: NoiseProfile | None) -> str:
    """The runs, then the profile: per arm and metric its values, median and between-run spread."""
    runs = data["runs"]
    lines = [f"# specgate calibrate: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}, "
             f"{len(runs)} of {data['runs_asked']} run(s) started", "",
             "| run | exit | status | arms |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['label']} | {r['exit_status']} | {r['status']} | "
              f"{', '.join(f'{a}: {s}' for a, s in r['arms'].items()) or '–'} |" for r in runs]
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
                  *profile_table(profile)]
        notes = [f"- {arm}: {note}" for arm, noise in profile.arms.items() for note in noise.notes]
        if notes:
            lines += ["", *notes]
    uncovered = (profile.uncovered if profile is not None else {}) or {}
    if uncovered or profile is None or not profile.arms:
        lines += ["", "## No profile", ""]
        lines += [f"- {arm}: {why}" for arm, why in uncovered.items()] or ["- no arm was measured in enough runs"]
    return "\n".join(lines) + "\n"
