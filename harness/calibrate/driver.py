"""`specgate calibrate +exp=NAME [k=v ...] calibrate.runs=K`: K identical whole runs of the
experiment, one after another, then the noise profile of their figures (harness/gates/profile.py)
that `gate.baseline=<the calibration's folder>` judges a later run against.

Each run is its own pytest process exactly as a sweep's point runs (harness/sweep/point.py):
nothing (a server, a warm cache, a signal handler) carries from one run into the next, so the
spread between them is what the machine does between runs. Every run is composed and checked
before the first starts; fewer than 3 runs, or a sweep, is one sentence (exit 4) before
anything starts. A run whose gates failed still counts (its figures were measured); a run that
did not measure an arm does not count for that arm, and an arm measured in fewer than 3 runs
has no profile (exit 1, said in the summary). Ctrl-C or SIGTERM stops the current run as a
sweep's point is stopped and writes no profile (exit 2; the record says which runs finished).
Record layout: harness/calibrate/record.py.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from harness.exit_status import INTERRUPTED
from harness.calibrate.record import CalibrationRecord
from harness.config.compose import ConfigError, Experiment, is_sweep
from harness.run.compose import compose
from harness.gates.baseline_match import LOAD_SIZE_KEYS, arm_identity
from harness.gates.profile import NoiseProfile
from harness.measure.registry import compared_by_default
from harness.record.recorder import utc_now
from harness.interrupts import Interrupts
from harness.record.kinds import CALIBRATION
from harness.run.driver import Driver, split_tokens
from harness.run.preflight import check_experiment
from harness.sweep.point import point_overrides, run_in_turn

INTERRUPTED_EXIT = INTERRUPTED  # pytest's status for a run stopped by Ctrl-C


def check_calibration(overrides: list[str], conf_dir: Path) -> Experiment:
    """The experiment to calibrate, composed and checked; a ConfigError (one sentence) for
    anything that would make the runs not identical or too few."""
    swept = [o for o in overrides if is_sweep(o)]
    if swept:
        raise ConfigError(f"specgate calibrate repeats one configuration; {swept[0]} sweeps several "
                          f"(calibrate each value on its own, or use specgate sweep)")
    return compose(overrides, conf_dir)  # calibrate.runs's bounds are the schema's (at least gates/profile.py's MIN_RUNS)


def selected_arms(pytest_options: list[str], experiment: Experiment) -> list[str]:
    """The arms the runs measure, as each run's pytest selects them (harness/plugin.py): those
    `--arm` names (repeatable, or `--arm a,b`), or the arm `-k` names exactly; every arm
    otherwise. A deselected arm is not profiled (nor counted as missing). An arm that is not
    one is a ConfigError before anything starts."""
    wanted, keyword = [], None
    for previous, option in zip([None, *pytest_options], pytest_options):
        if previous == "--arm":
            wanted += option.split(",")
        elif option.startswith("--arm="):
            wanted += option.split("=", 1)[1].split(",")
        elif previous == "-k":
            keyword = option.strip()
    wanted = [name for name in wanted if name]
    if not wanted and keyword in experiment.arm_names:
        wanted = [keyword]
    for name in wanted:
        if name not in experiment.arm_names:
            raise ConfigError(f"--arm {name}: no such arm in experiment '{experiment.name}'; "
                              f"arms: {', '.join(experiment.arm_names)}")
    return [name for name in experiment.arm_names if name in wanted] if wanted else list(experiment.arm_names)


def check_runs(run_overrides: list[list[str]], conf_dir: Path) -> None:
    """The runs composed and checked as their own pytest will check them, before the first
    starts. They differ only in their record folder (siblings in a calibration folder not made
    yet, so one check of it holds for all): the first stands for every one (composing K
    identical configs took K seconds before anything started)."""
    try:
        check_experiment(compose(run_overrides[0], conf_dir))
    except ConfigError as exc:
        raise ConfigError(f"calibration run 1: {exc}") from None


def compared_metrics(experiment: Experiment) -> list[str]:
    """What the profile holds: the registry's default-compared metrics and gate.compare's."""
    paths = [m.path for m in compared_by_default()]
    return paths + [str(p) for p in experiment.base.gate.compare if str(p) not in paths]


def what_was_measured(experiment: Experiment) -> tuple[dict[str, dict], dict[str, dict]]:
    """Per arm: its identity (what baseline_match compares) and its load's size."""
    identities, sizes = {}, {}
    for arm in experiment.arms:
        cfg = OmegaConf.to_container(arm.cfg, resolve=True)
        identities[arm.name] = arm_identity(arm, digest=False)
        sizes[arm.name] = {k: v for k, v in (cfg.get("workload") or {}).items() if k in LOAD_SIZE_KEYS}
    return identities, sizes


@dataclass
class Calibration:
    """The experiment to calibrate, the arms its runs measure, how it runs; the record once opened."""

    experiment: Experiment
    arms: list[str]
    overrides: list[str]
    pytest_options: list[str]
    conf_dir: Path
    record: CalibrationRecord | None = None
    run_overrides: list[list[str]] = field(default_factory=list)


class CalibrateDriver(Driver):
    """Check, run the K runs, write the profile. Exit status: 0 when every arm has a profile,
    1 when an arm has none, 2 when interrupted (no profile written)."""

    command, kind = "calibrate", CALIBRATION

    def compose(self, tokens: list[str], conf_dir: Path) -> Calibration:
        overrides, pytest_options = split_tokens(tokens)
        experiment = check_calibration(overrides, conf_dir)
        arms = selected_arms(pytest_options, experiment)
        # checked as they will run, each in a folder of its own (where is all that differs), before any folder is made
        somewhere = Path(experiment.base.record.root).absolute() / "calibration"
        check_runs([point_overrides(overrides, somewhere / label) for label in labels(experiment)], conf_dir)
        return Calibration(experiment, arms, overrides, pytest_options, conf_dir)

    def plan(self, calibration: Calibration, command: list[str]) -> Calibration:
        experiment, overrides = calibration.experiment, calibration.overrides
        record = calibration.record = CalibrationRecord(experiment, command, experiment.base.calibrate.runs)
        calibration.run_overrides = [point_overrides(overrides, record.run_root(label)) for label in labels(experiment)]
        record.learn_secrets([*overrides, *calibration.pytest_options])
        for label, run_overrides in zip(labels(experiment), calibration.run_overrides):
            record.add_run(label, run_overrides)
        record.save()
        print(f"specgate calibrate: {experiment.base.calibrate.runs} identical run(s) of {experiment.name}; "
              f"record {record.path}", flush=True)
        return calibration

    def measure(self, calibration: Calibration, interrupts: Interrupts) -> None:
        runs = calibration.experiment.base.calibrate.runs
        run_in_turn(calibration.record, calibration.run_overrides, calibration.conf_dir, calibration.pytest_options, [],
                    lambda entry: f"specgate calibrate: {entry['label']} of {runs}")

    def interrupted(self, calibration: Calibration) -> int:
        record = calibration.record
        record.finish(INTERRUPTED_EXIT, interrupted=True, profile=None)
        done = len(record.data.get("runs_finished") or [])
        print(f"specgate calibrate: interrupted after {done} of {record.data['runs_asked']} finished run(s); "
              f"no noise profile written; record {record.path}", file=sys.stderr)
        return INTERRUPTED_EXIT

    def record(self, calibration: Calibration) -> int:
        return finish(calibration.record, calibration.experiment, calibration.arms)


def labels(experiment: Experiment) -> list[str]:
    return [f"run_{i}" for i in range(1, experiment.base.calibrate.runs + 1)]


def finish(record: CalibrationRecord, experiment: Experiment, arms: list[str] | None = None) -> int:
    """The profile from the runs that finished, written when it covers any arm; 0 when it covers
    every arm the runs measured (`arms`: those selected, every arm when None)."""
    arms = list(experiment.arm_names) if arms is None else arms
    identities, sizes = what_was_measured(experiment)
    about = {"experiment": experiment.name, "host": platform.node(), "started_utc": record.data["started_utc"],
             "finished_utc": utc_now(), "runs_asked": len(record.data["runs"]), "load_size": sizes,
             "record": str(record.path)}
    labels = [entry["label"] for entry in record.data["runs"]]
    # a run that did not finish (it died, or left no readable record) offers no arm
    results = [record.results.get(label) or {"experiment": experiment.name, "arms": {}} for label in labels]
    offered = NoiseProfile.from_results(results, label=str(record.path), metrics=compared_metrics(experiment),
                                        run_labels=labels, identities=identities, about=about)
    missing = {arm: f"measured in none of the {len(labels)} runs" for arm in arms
               if arm not in offered.arms and arm not in offered.uncovered}
    uncovered = {arm: why for arm, why in {**offered.uncovered, **missing}.items() if arm in arms}
    profile = NoiseProfile(offered.label, experiment.name, offered.runs,
                           {arm: noise for arm, noise in offered.arms.items() if arm in arms}, uncovered, offered.about)
    if profile.arms:
        record.write_profile(profile)
    status = 0 if not profile.uncovered else 1
    record.finish(status, interrupted=False, profile=profile)
    for arm, why in profile.uncovered.items():
        print(f"specgate calibrate: arm '{arm}' has no noise profile: {why}", file=sys.stderr)
    deselected = [arm for arm in experiment.arm_names if arm not in arms]
    if deselected:
        print(f"specgate calibrate: {', '.join(deselected)} deselected (--arm): not measured, not profiled", flush=True)
    if profile.arms:
        print(f"specgate calibrate: noise profile of {', '.join(profile.arms)} over {len(record.results)} finished run(s): "
              f"{record.path / 'noise_profile.json'}; judge a run against it with gate.baseline={record.path}",
              flush=True)
    return status

