"""Is a reference run a fair comparison? A regression gate compares this run with a
recorded one (gate.baseline); that is only meaningful when both measured the same thing:
the same engine, the same model and the same workload. Otherwise a "regression" is just
the change of workload, and the merge gate cries wolf (or hides a real one).

What must match, per arm present in both runs: `server.engine`, the model
(`server.model_path`, by its last path component when it is a local path, so a record
made in another checkout still matches) and every `workload` key except those that only
size or bound the load (how many requests, how long, the warm-up, the timeouts): those
change the number of samples, not what one sample measures.

The reference's configs are read from the record (`arms/<arm>/config.yaml`); a key the
reference does not have (an older record) or that was redacted cannot be compared and is
left out. `gate.baseline_mismatch` says what a mismatch does: `fail` (the default: a
config error before any server starts) or `warn` (compare anyway, said in the header and
the summary). In a history folder, runs that measured something else are left out of the
history, with a note; only when none is left is that a mismatch of the whole baseline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from omegaconf import OmegaConf

from harness.secrets import FINGERPRINT, key_id
from harness.config.compose import ConfigError, Experiment
from harness.gates.profile import NoiseProfile
from harness.load.datasets import dataset_digest
from harness.load.trace import trace_digest
from harness.record.store import REDACTED, RunData

# Workload keys that size or bound a load rather than shape each request.
LOAD_SIZE_KEYS = frozenset({"num_prompts", "duration_s", "warmup_requests", "timeout_s", "first_byte_timeout_s"})


def identity(cfg: Mapping[str, Any], digest: bool = False) -> dict[str, Any]:
    """What one arm measured, as flat `group.key -> value` pairs; with ``digest``, the
    dataset (and trace) file's sha256 as it is now (for this run's own config: a reference's file may
    have changed since, so its digest is what its results.json recorded)."""
    server = cfg.get("server") or {}
    found = {"server.engine": server.get("engine"), "server.model": model_name(server.get("model_path"))}
    workload = cfg.get("workload") or {}
    for key, value in workload.items():
        if key not in LOAD_SIZE_KEYS:
            found[f"workload.{key}"] = value
    if digest and workload.get("dataset"):
        found["workload.dataset_sha256"] = dataset_digest(workload["dataset"])
    if digest and workload.get("trace"):
        found["workload.trace_sha256"] = trace_digest(workload["trace"])
    if digest and workload.get("trace") and workload.get("trace_content"):  # the text a replay's prompts were drawn from
        found["workload.trace_content_sha256"] = dataset_digest(workload["trace_content"])
    return found


ACCEPTANCE, OWN_ACCEPTANCE = "acceptance", "the drafter's own"


def arm_identity(arm: Any, digest: bool = True) -> dict[str, Any]:
    """This run's arm's identity (with ``digest``, the dataset's included: what results.json
    records of it), and whose acceptance it measured: the drafter's own, or one forced for a
    benchmark (what forces it, in words); a forced record is no reference for a real one."""
    found = identity(OmegaConf.to_container(arm.cfg, resolve=True), digest=digest)
    found[ACCEPTANCE] = f"forced: {arm.benchmark_only}" if arm.benchmark_only else OWN_ACCEPTANCE
    return found


def model_name(path: Any) -> Any:
    """A local model path by its folder name (checkouts differ); a hub id as it is."""
    if isinstance(path, str) and path.startswith("/"):
        return Path(path).name
    return path




def differences(current: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """`key: X there, Y here` for each identity key both configs have and that differs."""
    return identity_differences(identity(current), identity(reference))


def identity_differences(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """`key: X there, Y here` for each key of two identities (identity()) that both have and that differs."""
    out = []
    for key, value in theirs.items():
        if key not in mine or value == REDACTED or mine[key] == REDACTED:
            continue
        if value != mine[key]:
            out.append(f"{key}: {value!r} there, {mine[key]!r} here")
    return out


def recorded_identity(run: RunData, arm: str) -> dict[str, Any] | None:
    """What the reference's arm measured: the identity its results.json carries (records
    since it did: the check needs no file beside it), else from the config.yaml beside it,
    else None (a lone results.json of an older record: nothing to check against)."""
    block = run.arms.get(arm) or {}
    if isinstance(block.get("identity"), dict):
        return block["identity"]
    recorded = run.arm_config(arm)
    return identity(recorded) if recorded is not None else None


def run_differences(experiment: Experiment, run: RunData) -> dict[str, list[str]]:
    """Per arm measured in both: what the reference measured differently ({} when nothing)."""
    found = {}
    for arm in experiment.arms:
        if arm.name not in run.arms:
            continue
        recorded = recorded_identity(run, arm.name)
        if recorded is None:
            continue
        diff = identity_differences(arm_identity(arm), recorded)
        if diff and run.data.get("fingerprint_key") not in (None, key_id()) and any(FINGERPRINT.search(d) for d in diff):
            diff.append("the reference's secrets were fingerprinted with another key (another machine's): set "
                        "SPECGATE_FINGERPRINT_KEY to that key to compare them")
        if diff:
            found[arm.name] = diff
    return found


def describe(run: RunData, diffs: dict[str, list[str]]) -> str:
    arm, diff = next(iter(diffs.items()))
    more = f" (and {len(diffs) - 1} other arm(s))" if len(diffs) > 1 else ""
    return f"the reference run {run.label} measured arm '{arm}' differently{more}: {'; '.join(diff)}"


def check_baseline(experiment: Experiment, runs: list[RunData]) -> tuple[list[RunData], list[str]]:
    """The runs to compare with (the reference last) and notes to show; ConfigError when the
    reference measured something else and gate.baseline_mismatch is `fail`, or measured none
    of this run's arms."""
    kept, notes = same_measurement(experiment, runs)
    check_comparable(experiment, kept[-1])
    return kept, notes


def measured(block: Any) -> bool:
    """Whether an arm block of a reference measured something (older records say so only by their requests)."""
    return isinstance(block, dict) and (block.get("status") == "measured" or bool(block.get("requests")))


def check_comparable(experiment: Experiment, run: RunData) -> None:
    """A configured reference that no arm of this run can be compared to is a mistake (every
    baseline gate would be skipped and a merge gated on nothing): ConfigError, whatever
    gate.baseline_mismatch says."""
    if any(measured(run.arms.get(arm)) for arm in experiment.arm_names):
        return
    theirs = ", ".join(f"{arm} ({block.get('status', 'no status') if isinstance(block, dict) else 'not an arm'})"
                       for arm, block in run.arms.items())
    raise ConfigError(f"gate.baseline: the reference run {run.label} measured none of this run's arms "
                      f"({', '.join(experiment.arm_names)}; it has {theirs or 'no arm at all'}), so no gate can "
                      f"compare with it: point gate.baseline at a finished run of this experiment, or leave it unset")


def same_measurement(experiment: Experiment, runs: list[RunData]) -> tuple[list[RunData], list[str]]:
    """The runs that measured what this run measures, and notes; ConfigError on a mismatch
    gate.baseline_mismatch=fail does not let through."""
    policy = experiment.base.gate.baseline_mismatch  # fail | warn (checked with the config)
    mismatched = {run.label: (run, d) for run in runs if (d := run_differences(experiment, run))}
    if not mismatched:
        return runs, []
    if policy == "warn":
        return runs, [f"gate.baseline_mismatch=warn: comparing anyway, though {describe(run, d)}"
                      for run, d in mismatched.values()]
    if len(runs) > 1 and len(mismatched) < len(runs):  # a history: drop the odd ones out
        kept = [run for run in runs if run.label not in mismatched]
        return kept, [f"gate.baseline: left out of the history, as {describe(run, d)}" for run, d in mismatched.values()]
    run, diff = next(iter(mismatched.values()))
    raise ConfigError(f"gate.baseline: {describe(run, diff)}; its numbers would judge that change, not this "
                      f"run's: measure the same thing, or set gate.baseline_mismatch=warn to compare anyway")


def check_profile(experiment: Experiment, profile: NoiseProfile) -> list[str]:
    """The same rules for a noise profile (gate.baseline=<calibration folder>): each arm it
    profiles must have measured what this run's arm of that name measures (the identity the
    calibration kept), and it must profile at least one of this run's arms. Notes to show
    (arms it cannot judge, a mismatch gate.baseline_mismatch=warn lets through); ConfigError
    when it judges nothing here or measured something else under `fail`."""
    shared = [arm for arm in experiment.arms if arm.name in profile.arms]
    if not shared:
        theirs = ", ".join(sorted(profile.arms)) or "none"
        raise ConfigError(f"gate.baseline: the noise profile {profile.label} (of experiment '{profile.experiment}') "
                          f"profiles none of this run's arms ({', '.join(experiment.arm_names)}; it has {theirs}): "
                          f"calibrate this experiment (specgate calibrate +exp={experiment.name})")
    notes = [f"gate.baseline: the noise profile has no arm '{arm.name}' "
             f"({profile.uncovered.get(arm.name, 'not in the calibrated experiment')})"
             for arm in experiment.arms if arm.name not in profile.arms]
    diffs = {arm.name: d for arm in shared
             if (d := identity_differences(arm_identity(arm, digest=False), profile.arms[arm.name].identity))}
    if not diffs:
        return notes
    arm, diff = next(iter(diffs.items()))
    more = f" (and {len(diffs) - 1} other arm(s))" if len(diffs) > 1 else ""
    said = f"the noise profile {profile.label} measured arm '{arm}' differently{more}: {'; '.join(diff)}"
    if experiment.base.gate.baseline_mismatch == "warn":
        return notes + [f"gate.baseline_mismatch=warn: comparing anyway, though {said}"]
    raise ConfigError(f"gate.baseline: {said}; its spread would judge that change, not this run's: calibrate "
                      f"the same thing, or set gate.baseline_mismatch=warn to compare anyway")
