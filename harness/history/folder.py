"""A folder of run records read as one experiment's history.

    DIR/<UTC timestamp>_<exp>/results.json          a run record (record.root's layout)
    DIR/<any folder>/<UTC timestamp>_<exp>/...      run records one level down (e.g. the runs
                                                    of a calibration, or a sweep point's folder
                                                    copied in), read as members too

Each run's results.json is read through the one reader (harness/record/store.py) and nothing
else. A member that is torn or unfinished (no results.json, JSON that does not read, a run
that still says `running` or was interrupted, no start time) is skipped with a note: a
history of thirty runs is not lost to one that died. What makes the folder no history at all
is one sentence (RecordError, exit 4 from `specgate history`): a path that is no folder, fewer
than two usable runs, runs of more than one experiment (pick one with `--experiment`).

The runs are ordered by their start time (`started_utc`, else the timestamp the folder's name
starts with). Runs of one experiment may still have measured different configs (a sweep's
points copied into one folder: concurrency 1 and 2): such an arm is split into one series per
config (its runs' recorded identities), each named by the keys that differ (`eagle3
(workload.concurrency=2)`) and noting the split, never read as one series; a run judged
against the history (gate.baseline) is judged against its own config's series only. Per arm, the headline metrics are the registry's `compared_by_default()` (the
figures a reference-run gate compares unasked) plus any path asked for; each metric's change
points come from harness/history/changepoints.py over the runs that measured it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence

from harness.history.changepoints import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, ChangePoint, change_points
from harness.measure.metrics import read_result
from harness.measure.registry import OUTPUT_RATE, Metric, compared_by_default, metric_value, number, read, resolve
from harness.record.kinds import KINDS
from harness.record.store import RecordError, RunData, read_run

STAMP = "%Y%m%dT%H%M%SZ"  # how a record folder's name starts (harness/record/store.py RunRecord)
MIN_RUNS = 2


@dataclass(frozen=True)
class Run:
    """One usable member of a history: a finished run record."""

    path: Path  # the record folder
    label: str  # its path under the history folder (`calib/20260101T...Z_sim_smoke` when nested)
    started: datetime  # UTC
    experiment: str
    results: dict[str, Any]  # its results.json

    @property
    def arms(self) -> dict[str, Any]:
        arms = self.results.get("arms")
        return arms if isinstance(arms, dict) else {}

    def value(self, arm: str, path: str) -> Optional[float]:
        """The arm's figure at a metric path (registered spellings and aliases too); None
        when the arm or the figure is missing or not a number."""
        block = self.arms.get(arm)
        if not isinstance(block, dict):
            return None
        entry = known_metric(path)
        if entry is None or entry.between_arms:  # not an arm's own figure: the block's key (cross-arm: _vs_<plain>)
            return number(read(block, entry, self.results.get("plain_arm")) if entry else metric_value(block, path))
        result = read_result(arm, block)  # the one reader of an arm's block, old spellings too
        return None if result is None else number(metric_value(result, path))


@dataclass
class History:
    """The usable runs of one experiment, oldest first, what was skipped and why, and each
    arm's metrics over them with their change points."""

    folder: Path
    runs: list[Run]
    skipped: list[str]  # one sentence per member left out
    metrics: list[str]  # the headline metric paths, in table order
    alpha: float = DEFAULT_ALPHA
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    _found: dict[tuple[str, str], list[tuple[Run, ChangePoint]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._series: dict[str, Series] = {}
        for arm in self.arms:
            for series in split_by_config(arm, [run for run in self.runs if arm in run.arms]):
                self._series[series.name] = series

    @property
    def experiment(self) -> str:
        return self.runs[0].experiment

    @property
    def arms(self) -> list[str]:
        """Every arm, in the order it first appears."""
        names: list[str] = []
        for run in self.runs:
            names += [arm for arm in run.arms if arm not in names]
        return names

    @property
    def series_names(self) -> list[str]:
        """Every series: an arm, or one per config where its runs measured it in several
        (`eagle3 (workload.concurrency=2)`), in the order the arms first appear."""
        return list(self._series)

    def of(self, name: str) -> "Series":
        """A series by its name (an arm measured in one config is named by the arm alone)."""
        try:
            return self._series[name]
        except KeyError:
            split = [s.name for s in self._series.values() if s.arm == name]
            raise KeyError(f"{name}: measured in several configs, read as the series {', '.join(split)}"
                           if split else f"{name}: no such arm in the history") from None

    def runs_of(self, name: str) -> list[Run]:
        return list(self.of(name).runs)

    def series(self, name: str, metric: str) -> list[tuple[Run, float]]:
        """(run, value) of every run of the series that measured the metric, oldest first."""
        series = self.of(name)
        return [(run, value) for run in series.runs if (value := run.value(series.arm, metric)) is not None]

    def change_points(self, name: str, metric: str) -> list[tuple[Run, ChangePoint]]:
        """Each change point of the series' metric with the run its new segment starts at."""
        key = (name, metric)
        if key not in self._found:
            points = self.series(name, metric)
            found = change_points([v for _, v in points], alpha=self.alpha, permutations=self.permutations,
                                  seed=self.seed)
            self._found[key] = [(points[c.index][0], c) for c in found]
        return self._found[key]

    def mixed_configs(self, name: str) -> Optional[str]:
        """One note when the series is one of several an arm was split into because its runs
        measured it in different configs (a sweep's points copied into one folder); None else."""
        return self.of(name).note

    def series_measuring(self, arm: str, identity: dict[str, Any]) -> Optional[str]:
        """The name of the arm's series whose runs measured what `identity` says (the keys both
        have agree), or None: for a run judged against the history, only its own config's runs."""
        for series in self._series.values():
            if series.arm == arm and (series.identity is None or same_config(identity, series.identity)):
                return series.name
        return None

    def since_last_change(self, name: str, metric: str) -> list[Run]:
        """The runs of the series that measured its metric from its last change point on (the
        segment the newest run belongs to); every run that measured it when there is none."""
        runs = [run for run, _ in self.series(name, metric)]
        found = self.change_points(name, metric)
        return runs[found[-1][1].index:] if found else runs


@dataclass(frozen=True)
class Series:
    """One arm measured in one config: the runs a change point is looked for over. Runs that
    measured an arm in different configs are never one series: a change of config is no
    change of the build."""

    name: str  # the arm, or `arm (key=value, ...)` where its runs measured it in several configs
    arm: str
    runs: tuple[Run, ...]
    identity: Optional[dict[str, Any]]  # what its runs measured (their recorded identity); None: not recorded
    note: Optional[str] = None  # why the arm was split, where it was


def same_config(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Two identities (harness/gates/baseline_match.py identity) agree on every key both have:
    JSON's spelling of each value, as results.json holds it."""
    shown = lambda value: json.dumps(value, sort_keys=True, default=str)  # noqa: E731
    return all(shown(mine[key]) == shown(value) for key, value in theirs.items() if key in mine)


def recorded_identity_of(run: Run, arm: str) -> Optional[dict[str, Any]]:
    block = run.arms.get(arm)
    identity = block.get("identity") if isinstance(block, dict) else None
    return identity if isinstance(identity, dict) else None


def split_by_config(arm: str, runs: list[Run]) -> list[Series]:
    """The arm's runs as one series per config they measured (their recorded identities; a
    run that recorded none is its own `config not recorded` series where others differ)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        identity = recorded_identity_of(run, arm)
        groups.setdefault(json.dumps(identity, sort_keys=True, default=str), []).append(run)
    if len(groups) == 1:
        (members,) = groups.values()
        return [Series(arm, arm, tuple(members), recorded_identity_of(members[0], arm))]
    identities = {key: recorded_identity_of(members[0], arm) for key, members in groups.items()}
    keys = [k for k in dict.fromkeys(k for identity in identities.values() if identity for k in identity)
            if len({json.dumps((identity or {}).get(k), sort_keys=True, default=str)
                    for identity in identities.values() if identity is not None}) > 1]
    def label(identity: Optional[dict]) -> str:
        if identity is None:
            return f"{arm} (config not recorded)"
        return f"{arm} ({', '.join(f'{k}={json.dumps(identity.get(k), default=str)}' for k in keys)})"
    names = [label(identities[key]) for key in groups]
    note = (f"note: these runs measured {arm} in {len(groups)} configs (differing in {', '.join(keys) or 'what they recorded'}), "
            f"so each is a series of its own, never one: {'; '.join(f'{n}: {len(m)} run(s)' for n, m in zip(names, groups.values()))}")
    return [Series(name, arm, tuple(members), identities[key], note)
            for name, (key, members) in zip(names, groups.items())]


def known_metric(path: str) -> Optional[Metric]:
    """The registry's entry for a path (another statistic of a registered distribution too)."""
    try:
        return resolve(path)
    except KeyError:
        return None


def read_history(folder: Path, metrics: Sequence[str] = (), experiment: Optional[str] = None, *,
                 alpha: float = DEFAULT_ALPHA, permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0) -> History:
    """The history in `folder`: its usable runs of one experiment, oldest first, the headline
    metrics plus `metrics`. A RecordError (one sentence) when it is no history."""
    folder = Path(folder)
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise RecordError(f"{folder} {why}; give a folder of run records (e.g. runs/).")
    runs, skipped = read_members(folder)
    runs, skipped = one_experiment(folder, runs, skipped, experiment)
    if len(runs) < MIN_RUNS:
        raise RecordError(f"{folder} holds {len(runs)} usable run record(s)"
                          f"{f' ({len(skipped)} skipped: ' + '; '.join(skipped) + ')' if skipped else ''}; "
                          f"a history needs at least {MIN_RUNS}.")
    runs.sort(key=lambda run: (run.started, run.label))
    history = History(folder, runs, skipped, headline_metrics(metrics), alpha, permutations, seed)
    check_asked_metrics(history, metrics)
    return history


def headline_metrics(asked: Sequence[str]) -> list[str]:
    """The metrics a reference-run gate compares unasked, then those asked for (once each)."""
    paths = [m.path for m in compared_by_default()]
    return paths + [p for p in dict.fromkeys(asked) if p not in paths]


def check_asked_metrics(history: History, asked: Sequence[str]) -> None:
    """A metric asked for that no run of any arm has is a typo, not an empty plot."""
    for path in asked:
        if not any(run.value(arm, path) is not None for run in history.runs for arm in run.arms):
            raise RecordError(f"--metric {path}: no run in {history.folder} has a number at arms.<arm>.{path} "
                              f"(give a path of results.json's arm block, e.g. {OUTPUT_RATE}, ttft_ms.p99, "
                              f"requests.failed).")


# --- the members -------------------------------------------------------------------------------

def read_members(folder: Path) -> tuple[list[Run], list[str]]:
    """Every usable run in the folder and one level down, and a note per member left out."""
    runs: list[Run] = []
    skipped: list[str] = []
    for entry in member_folders(folder):
        if (entry / "results.json").is_file():
            candidates = [entry]
        else:
            candidates = [sub for sub in member_folders(entry) if (sub / "results.json").is_file()]
            if not candidates:
                skipped.append(f"{entry.name}: {not_a_run(entry)}")
                continue
        for path in candidates:
            run = read_member(folder, path, skipped)
            if run is not None:
                runs.append(run)
    return runs, skipped


def member_folders(folder: Path) -> list[Path]:
    """The folders in `folder`, by name; links (`latest` names a member again) and hidden
    folders (a launcher's .jobs) are not members."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def not_a_run(entry: Path) -> str:
    """Why a folder with no results.json is left out, in words."""
    kind = next((k for k in KINDS.values() if (entry / k.data_file).is_file()), None)
    if kind is not None and kind.name != "run":
        return (f"a {kind.name} record, not a run record (its runs differ by config; give one of its "
                f"points' folders to see that point's history)") if kind.name == "sweep" else \
            f"a {kind.name} record, not a run record"
    return "no results.json (a torn record, or no run record at all)"


def read_member(folder: Path, path: Path, skipped: list[str]) -> Optional[Run]:
    """A finished run record as a Run, or None with a note in `skipped`."""
    label = path.relative_to(folder).as_posix()
    try:
        data = read_run(path)
    except RecordError as exc:
        skipped.append(f"{label}: {exc}")
        return None
    if not data.finished:
        skipped.append(f"{label}: {data.incompleteness}")
        return None
    started = start_time(data, path.name)
    if started is None:
        skipped.append(f"{label}: no start time (results.json has no started_utc and the folder's name "
                       f"does not start with a timestamp)")
        return None
    experiment = str(data.data.get("experiment") or path.name.partition("_")[2])
    return Run(path=path, label=label, started=started, experiment=experiment, results=data.data)


def start_time(data: RunData, name: str) -> Optional[datetime]:
    """When the run started: results.json's started_utc, else its folder's timestamp; UTC."""
    stamp = data.data.get("started_utc")
    try:
        started = datetime.fromisoformat(str(stamp)) if stamp else datetime.strptime(name.split("_")[0], STAMP)
    except ValueError:
        return None
    return started.replace(tzinfo=timezone.utc) if started.tzinfo is None else started.astimezone(timezone.utc)


def one_experiment(folder: Path, runs: list[Run], skipped: list[str],
                   experiment: Optional[str]) -> tuple[list[Run], list[str]]:
    """The runs of one experiment: the one asked for, or the only one there is."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.experiment] = counts.get(run.experiment, 0) + 1
    held = ", ".join(f"{name} ({n} run{'s' if n > 1 else ''})" for name, n in sorted(counts.items()))
    if experiment is None:
        if len(counts) > 1:
            raise RecordError(f"{folder} holds runs of {len(counts)} experiments: {held}; "
                              f"pick one with --experiment NAME.")
        return runs, skipped
    if experiment not in counts:
        raise RecordError(f"{folder} holds no finished run of experiment {experiment!r}"
                          f"{'; it holds ' + held if held else ''}.")
    others = [run.label for run in runs if run.experiment != experiment]
    note = [f"left out {len(others)} run(s) of other experiments than {experiment}: {', '.join(others)}"] if others else []
    return [run for run in runs if run.experiment == experiment], skipped + note
