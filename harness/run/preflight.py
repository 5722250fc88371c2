"""What must hold before any server starts, for every driver (the pytest plugin, `specgate
sweep`, `specgate capacity`): the machine has what the experiment needs (a GPU where one is
needed, the interpreter a build names), each drafter fits its target, and the reference run
or noise profile (gate.baseline) is readable and measured the same thing.

:func:`check_experiment` is every check a run makes once its experiment is composed, in one
call: `pytest suites/` (`specgate run`) and `specgate show` both make it, so `show`, the
"check my config" command, refuses exactly what `run` refuses, in the same sentence.

Each problem is a :class:`ConfigError` with one sentence; the entry point decides how to say
it (pytest's usage error, the CLI's exit status 4). No pytest here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.config.compose import ConfigError, Experiment, remote_engine
from harness.engines import engine_of
from harness.gates.baseline_match import check_baseline, check_profile
from harness.gates.profile import NoiseProfile, is_profile
from harness.gates.reference import comparisons
from harness.record.store import RecordError, RunData, is_history, read_reference_runs, safe_name
from harness.run.drafter_fit import DrafterMismatch, check_drafter_fit
from harness.telemetry.driver import nvidia_driver_status


@dataclass
class Checked:
    """What the checks before a run read: the reference run(s) of gate.baseline, its noise profile, their notes."""

    baseline: list[RunData] = field(default_factory=list)  # the reference last, older runs of a folder before it
    notes: list[str] = field(default_factory=list)
    profile: NoiseProfile | None = None


def check_experiment(experiment: Experiment, here: bool = True) -> Checked:
    """Every check a run makes before any server starts, once its experiment is composed (which
    checked every key and number): gate.compare's comparisons, the reference run or noise
    profile, then this machine (preflight; not when the run is to start elsewhere, ``here``
    False: a cluster node checks itself). A ConfigError (one sentence) for the first that fails."""
    if experiment.base.gate.compare:  # a malformed comparison is a mistake with or without a reference
        check_comparisons(experiment)
    baseline, notes = load_baseline(experiment)
    profile = load_profile(experiment)
    if here:
        preflight(experiment)
    return Checked(baseline, notes, profile)


def preflight(experiment: Experiment) -> None:
    """What this machine must have before any server starts: a GPU where one is needed, a
    drafter that fits its target, the interpreter a build names. One sentence each."""
    require_gpu_if_needed(experiment)
    for arm in experiment.arms:
        try:
            if not checkpoints_elsewhere(arm):
                check_drafter_fit(arm.cfg)
        except DrafterMismatch as exc:
            raise ConfigError(f"arm '{arm.name}': {exc}") from None
        python = arm.cfg.build.python
        needs_python = arm.cfg.backend.kind == "process" or arm.cfg.build.kind == "host_venv"  # docker mounts its venv
        if needs_python and python and not os.path.exists(python):
            raise ConfigError(f"arm '{arm.name}': build.python {python} does not exist; "
                              f"`make install` sets up the venvs the project's builds use")


def checkpoints_elsewhere(arm) -> bool:
    """On a remote engine the checkpoints are that machine's: the drafter-fit check reads
    them only where this machine sees them too (a shared filesystem), and says when not."""
    cfg, remote = arm.cfg, remote_engine(arm.cfg)
    if remote is None or not cfg.drafter.algorithm or not engine_of(cfg).checks_drafter_fit:
        return False
    if all(os.path.exists(p) for p in (cfg.server.model_path, cfg.drafter.model_path) if p):
        return False
    print(f"specgate: arm '{arm.name}': the checkpoints are on {remote}, not on this machine: the drafter-fit "
          f"check is left to the server there", file=sys.stderr)
    return True


def require_gpu_if_needed(experiment: Experiment) -> None:
    # an attached server or a remote engine has its GPUs on another machine
    needing = [a for a in experiment.arms
               if a.cfg.server.requires_gpu and a.cfg.backend.kind != "attach" and not remote_engine(a.cfg)]
    if not needing:
        return
    present, why = nvidia_driver_status()
    if not present:
        server = needing[0].cfg.server.name
        raise ConfigError(
            f"experiment '{experiment.name}' needs an NVIDIA GPU machine (server '{server}' has "
            f"requires_gpu: true) but this machine has no NVIDIA driver ({why}); run it on the GPU box, "
            f"or use backend=attach backend.url=... against a running server")


def load_baseline(experiment: Experiment) -> tuple[list[RunData], list[str]]:
    """The reference run (gate.baseline) or, for a folder of past runs, all of them that
    finished (the newest is the reference), read, checked to have measured the same thing,
    and its comparisons parsed before anything starts; with notes to show (runs a folder
    left out, a mismatch gate.baseline_mismatch=warn lets through)."""
    path = experiment.base.gate.baseline
    if not path:
        return [], []
    if (profile := load_profile(experiment)) is not None:  # judged against it instead (gates/profile.py)
        check_comparisons(experiment)
        return [], check_profile(experiment, profile)
    try:
        reference, notes = read_reference_runs(Path(path))
    except RecordError as exc:
        raise ConfigError(f"gate.baseline: {exc}") from None
    check_comparisons(experiment)
    kept, mismatch_notes = check_baseline(experiment, reference)
    return kept, notes + mismatch_notes


def check_comparisons(experiment: Experiment) -> None:
    try:
        comparisons(experiment.base.gate)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_profile(experiment: Experiment) -> NoiseProfile | None:
    """The noise profile gate.baseline names (a calibration folder or its noise_profile.json,
    harness/gates/profile.py), read; or a history folder's runs since their last change point
    made into one (history_profile); None when it names neither. A torn or missing profile
    is one sentence (ConfigError)."""
    path = experiment.base.gate.baseline
    if path and not is_profile(path) and is_history(Path(path)):
        return history_profile(experiment, Path(path))
    if not is_profile(path):
        return None
    try:
        return NoiseProfile.read(Path(path))
    except RecordError as exc:
        raise ConfigError(f"gate.baseline: {exc}") from None


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
        segments = [history.since_last_change(arm, m) for m in paths if history.series(arm, m)]
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
                f" since the last change point ({segment[0].label})" if len(segment) < len(history.runs) else "")
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
