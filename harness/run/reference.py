"""What `gate.baseline` names, resolved once, by the kind of record it is, into one
:class:`Reference` that every driver and gate reads:

    none         gate.baseline unset: nothing to compare with
    calibration  a calibration folder (calibration.json) or its noise_profile.json: the noise
                 profile of K identical runs (harness/gates/profile.py)
    history      a folder of run records (runs/main): each arm's runs since its last change point
                 made into a noise profile; with too few of them, the newest run is the reference
                 and the others its history band
    run          one run record (runs/<ts>_<exp>, runs/latest or its results.json)

Resolving reads the record(s), checks that they measured what this run measures (the identity
check, harness/gates/baseline_match.py) and that gate.compare parses; what it cannot read or
accept is a ConfigError with one sentence (the entry points' exit status 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from harness.config.compose import ConfigError, Experiment
from harness.gates.baseline_match import arm_identity, check_baseline, check_profile
from harness.gates.profile import NoiseProfile, is_profile
from harness.gates.reference import comparisons
from harness.measure.samples import COLUMNS as SAMPLE_COLUMNS
from harness.record.requests import RequestColumns
from harness.record.store import RecordError, RunData, is_history, read_reference_runs, safe_name


@dataclass(frozen=True)
class Reference:
    """What a verdict is judged against: the run(s) compared with (oldest first, the reference
    run last), the noise profile, how verdicts name it (the label) and the notes its
    resolution made (runs left out, a mismatch let through)."""

    kind: ClassVar[str] = "none"
    label: str = ""  # gate.baseline as given
    runs: tuple[RunData, ...] = ()
    profile: NoiseProfile | None = None
    notes: tuple[str, ...] = ()

    @property
    def run(self) -> RunData | None:
        """The reference run (the newest of a history), or None when a profile judges instead."""
        return self.runs[-1] if self.runs else None

    @property
    def history(self) -> tuple[RunData, ...]:
        """The older runs of a history folder, oldest first (none for a single run)."""
        return self.runs[:-1]

    def arm(self, name: str) -> dict | None:
        """This arm's block in the reference run, if any."""
        return self.run.arms.get(name) if self.run is not None else None

    def history_arms(self, name: str) -> list[dict]:
        """The arm's block in every run of a history, the reference run included ([] for a single run)."""
        if not self.history:
            return []
        return [run.arms[name] for run in self.runs if isinstance(run.arms.get(name), dict)]

    def requests(self, name: str) -> RequestColumns | list:
        """The reference run's requests of this arm: only the columns its samples need."""
        return self.run.request_columns(name, SAMPLE_COLUMNS) if self.run is not None else []


class NoReference(Reference):
    kind = "none"


class RunReference(Reference):
    kind = "run"


class CalibrationReference(Reference):
    kind = "calibration"


class HistoryReference(Reference):
    kind = "history"


def resolve_reference(experiment: Experiment) -> Reference:
    """gate.baseline, read once by its kind (module docstring); ConfigError, one sentence, for
    one that cannot be read or measured something else."""
    path = experiment.base.gate.baseline
    if not path:
        return NoReference(label=str(path))
    label, folder = str(path), Path(str(path))
    if is_profile(path):
        try:
            profile = NoiseProfile.read(folder)
        except RecordError as exc:
            raise ConfigError(f"gate.baseline: {exc}") from None
        check_comparisons(experiment)
        return CalibrationReference(label, profile=profile, notes=tuple(check_profile(experiment, profile)))
    history = is_history(folder)
    if history and (profile := history_profile(experiment, folder)) is not None:
        return HistoryReference(label, profile=profile, notes=tuple(check_profile(experiment, profile)))
    try:
        runs, notes = read_reference_runs(folder)
    except RecordError as exc:
        raise ConfigError(f"gate.baseline: {exc}") from None
    check_comparisons(experiment)
    kept, mismatch_notes = check_baseline(experiment, runs)
    return (HistoryReference if history else RunReference)(label, runs=tuple(kept), notes=tuple(notes + mismatch_notes))


def check_comparisons(experiment: Experiment) -> None:
    try:
        comparisons(experiment.base.gate)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def history_profile(experiment: Experiment, folder: Path) -> NoiseProfile | None:
    """A history folder (gate.baseline=runs/main) as the reference distribution: per arm, the
    runs of this experiment since the last change point of any compared metric (E-divisive
    means, harness/history/), made into a noise profile; a run is then judged against that
    segment's median and spread. None when no arm has MIN_RUNS runs since its last change
    point (or the folder holds fewer than two of this experiment's runs): the newest run is
    then the reference, as for a single reference run."""
    from harness.history.folder import read_history

    check_comparisons(experiment)
    paths = [c.metric for c in comparisons(experiment.base.gate)]
    try:
        history = read_history(folder, paths, experiment=experiment.name)
    except RecordError:
        return None
    arms, uncovered = {}, {}
    for arm in experiment.arm_names:
        name = history.series_measuring(arm, arm_identity(experiment.arm(arm))) if arm in history.arms else None
        if name is None:
            if arm in history.arms:  # the history measured this arm in other configs only
                configs = ", ".join(s for s in history.series_names if history.of(s).arm == arm)
                uncovered[arm] = f"no run in the history measured it in this run's config (it holds {configs})"
            continue
        segments = [history.since_last_change(name, m) for m in paths if history.series(name, m)]
        if not segments:
            continue
        segment = min(segments, key=len)  # the latest change of any compared metric starts it
        part = NoiseProfile.from_results([run.results for run in segment], str(folder), metrics=paths,
                                         run_labels=[run.label for run in segment],
                                         identities={arm: recorded_identity(segment[-1].path, arm)})
        if arm in part.arms:
            arms[arm] = part.arms[arm]
        else:
            uncovered[arm] = part.uncovered.get(arm, "not measured") + (
                f" since the last change point ({segment[0].label})" if len(segment) < len(history.runs_of(name)) else "")
    if not arms:
        return None
    label = f"{folder} (a history: each arm's runs since its last change point)"
    return NoiseProfile(label, experiment.name, tuple(run.label for run in history.runs), arms, uncovered,
                        {"history": str(folder), "skipped": list(history.skipped)})


def recorded_identity(record: Path, arm: str) -> dict:
    """What an arm of a recorded run measured (harness/gates/baseline_match.py's identity)."""
    import yaml

    from harness.gates.baseline_match import identity

    try:
        cfg = yaml.safe_load((Path(record) / "arms" / safe_name(arm) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return identity(cfg) if isinstance(cfg, dict) else {}
