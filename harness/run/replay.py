"""Re-run a recorded experiment exactly as recorded, and say how far the numbers moved.

A replay takes each arm's composed config from the record (`arms/<arm>/config.yaml`), not
today's conf/ files, which may have changed since: it says so when they differ. Extra
overrides (key=value) apply on top, e.g. `server.sim.decode_step_ms=4.4`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config.compose import Arm, ConfigError, Experiment, explain, masked, override_key, publish
from harness.run.compose import compose, policy_of, validate
from harness.gates.reference import allowed_change, noise_band
from harness.measure.registry import metric_value, noise_metrics
from harness.engines.legacy import upgrade_config
from harness.load.datasets import dataset_digest
from harness.load.trace import trace_digest
from harness.secrets import BOOK, FINGERPRINT
from harness.record.store import REDACTED, RecordError, RunData, read_run
from harness.config.schema import SpecgateConfig


def read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"{path.parent} is not a specgate run record (no {path.name})")
    return yaml.safe_load(path.read_text())


def typed(data: dict, where: str):
    upgrade_config(data)  # a record from before build kinds were recipes
    try:
        return OmegaConf.merge(OmegaConf.structured(SpecgateConfig), data)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{where} does not fit today's schema: {explain(exc, Path('.'))}") from None


def apply_overrides(cfg, overrides: list[str]):
    """key=value overrides on a recorded config. Group choices (workload=chat_short) would
    read today's conf/, which a replay must not: those are refused in one sentence."""
    for override in overrides:
        key, sep, value = override.partition("=")
        key = key.lstrip("+")
        if not sep or override.startswith("~"):
            raise ConfigError(f"replay takes key=value overrides; '{override}' is not one")
        if "." not in key and isinstance(OmegaConf.select(cfg, key), (dict, type(cfg))):
            raise ConfigError(f"replay cannot switch the group '{key}' (it would read today's conf/); "
                              f"override its keys instead, e.g. {key}.<key>=<value>")
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}={value}"]))
        except OmegaConfBaseException as exc:
            raise ConfigError(explain(exc, Path("."))) from None
    return cfg


def replay_experiment(run_dir: Path, overrides: list[str], conf_dir: Path) -> tuple[Experiment, list[str]]:
    """The recorded experiment, typed and validated, plus notes on what differs today."""
    run_dir = Path(run_dir).resolve()
    base_data = read_yaml(run_dir / "config.yaml")
    recorded_overrides = read_yaml(run_dir / "overrides.yaml") or {}
    arm_overrides = recorded_overrides.get("arms") or {}
    base = apply_overrides(typed(base_data, f"{run_dir}/config.yaml"), overrides)
    arms = []
    for name in (base_data.get("arms") or {"default": []}):
        cfg = apply_overrides(typed(read_yaml(run_dir / "arms" / name / "config.yaml"), f"arm '{name}'"), overrides)
        OmegaConf.set_readonly(cfg, True)
        policy = policy_of(cfg)
        check_secrets_given(masked(cfg, policy), f"arm '{name}'")
        arms.append(Arm(name=name, cfg=cfg, overrides=list(arm_overrides.get(name, [])), choices={}, policy=policy))
    OmegaConf.set_readonly(base, True)
    policy = policy_of(base)
    experiment = Experiment(name=base.name, description=base.description, base=masked(base, policy), arms=arms,
                            policy=policy, overrides=list(recorded_overrides.get("command_line") or []) + list(overrides))
    publish(experiment)
    validate(experiment)
    check_datasets_unchanged(experiment, run_dir)
    notes = [f"replaying {run_dir.name}: the recorded config, not today's conf/"]
    notes += redacted_notes(base_data) + conf_drift_notes(experiment, recorded_overrides, overrides, conf_dir)
    return experiment, notes


def check_datasets_unchanged(experiment: Experiment, run_dir: Path) -> None:
    """A replay sends the recorded run's prompts: a dataset or trace file edited since (its
    sha256 in results.json differs from today's) would send others, so it stops the replay."""
    try:
        arms = read_run(run_dir).arms
    except RecordError:
        return  # read_replayed says what is wrong with it
    for arm in experiment.arms:
        identity = (arms.get(arm.name) or {}).get("identity") or {}
        for key, digest in (("dataset", dataset_digest), ("trace", trace_digest), ("trace_content", dataset_digest)):
            recorded, path = identity.get(f"workload.{key}_sha256"), arm.cfg.workload.get(key)
            if recorded and path and (today := digest(path)) != recorded:
                raise ConfigError(f"--replay: workload.{key} {path} has changed since the recording (sha256 "
                                  f"{recorded[:12]}... then, {(today or 'unreadable')[:12]}... now): a replay would "
                                  f"send other prompts; restore the file or run the experiment anew")


def read_replayed(run_dir: Path) -> tuple[RunData, list[str]]:
    """The replayed record's results, read once before anything starts: the drift at the end
    compares with them, so a results.json that cannot be read stops the replay here (a
    config error), not after every arm has run. A record of a run that did not finish
    replays, with a note: its drift covers only what it had measured."""
    try:
        replayed = read_run(Path(run_dir).resolve())
    except RecordError as exc:
        raise ConfigError(f"--replay: {exc}") from None
    if replayed.finished:
        return replayed, []
    return replayed, [f"the replayed record is {replayed.incompleteness}: the drift covers only what it measured"]


def check_secrets_given(cfg: DictConfig, where: str) -> None:
    """A recorded config holds its secrets as fingerprints: each must be given again (an
    override with its value) before a server starts, or the server would get the fingerprint."""
    plain = flatten(OmegaConf.to_container(cfg, resolve=True))
    missing = [path for path, value in plain.items() if isinstance(value, str)
               and any(mark not in BOOK.by_fingerprint for mark in FINGERPRINT.findall(value))]
    if missing:
        raise ConfigError(f"--replay: {where}: the record holds secrets only as fingerprints at {', '.join(missing)}; "
                          f"give each value again as an override (e.g. {missing[0]}=VALUE)")


def redacted_notes(data: dict) -> list[str]:
    hidden = [path for path, value in flatten(data).items()
              if value == REDACTED or (isinstance(value, str) and FINGERPRINT.search(value))]
    return [f"the record hides secrets at {', '.join(hidden)}: supply them with overrides"] if hidden else []


def conf_drift_notes(experiment: Experiment, recorded: dict, extra: list[str], conf_dir: Path) -> list[str]:
    """Compose today's conf/ with the recorded command line and list what changed."""
    extra_keys = {override_key(o) for o in extra}
    try:
        today = compose(list(recorded.get("command_line") or []), conf_dir)
    except ConfigError as exc:
        return [f"today's conf/ no longer composes the recorded overrides ({exc})"]
    notes = []
    for arm in experiment.arms:
        if arm.name not in today.arm_names:
            notes.append(f"today's conf/ has no arm '{arm.name}'")
            continue
        now = flatten(OmegaConf.to_container(today.arm(arm.name).cfg, resolve=True))
        then = flatten(OmegaConf.to_container(arm.cfg, resolve=True))
        changed = sorted(k for k in set(now) | set(then)
                         if now.get(k) != then.get(k) and not any(k.startswith(e) for e in extra_keys))
        if changed:
            shown = ", ".join(f"{k}: {then.get(k)!r} recorded, {now.get(k)!r} today" for k in changed[:6])
            more = f" (+{len(changed) - 6} more)" if len(changed) > 6 else ""
            notes.append(f"conf/ has changed since the recording for arm '{arm.name}': {shown}{more}")
    return notes


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): data}


def drift_rows(old: dict, new: dict, gate) -> list[dict[str, Any]]:
    """Each metric of each arm, old vs new: relative change, and flagged when outside the
    noise band (from the repeats of both runs; at least the tolerance)."""
    rows = []
    for arm, new_block in new.get("arms", {}).items():
        old_block = old.get("arms", {}).get(arm)
        if not old_block or not new_block.get("requests"):
            continue
        for metric in noise_metrics():
            before, after = metric_value(old_block, metric), metric_value(new_block, metric)
            if before is None or after is None or not before:
                continue
            change = (after - before) / before
            band = allowed_change(metric, before, gate.tolerance, noise_band(
                (old_block.get("noise") or {}).get(metric), (new_block.get("noise") or {}).get(metric)), gate)
            rows.append({"arm": arm, "metric": metric, "old": before, "new": after, "change": change,
                         "band": band, "flagged": abs(change) > band})
    return rows


def drift_table(rows: list[dict[str, Any]], old_label: str) -> str:
    lines = [f"## Drift vs {old_label}", "",
             "| arm | metric | old | new | change | band | |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "**outside the band**" if r["flagged"] else "ok"
        lines.append(f"| {r['arm']} | {r['metric']} | {r['old']:.2f} | {r['new']:.2f} | {r['change']:+.1%} | "
                     f"±{r['band']:.1%} | {flag} |")
    if not rows:
        lines.append("| - | no metric measured in both runs | | | | | |")
    flagged = sum(r["flagged"] for r in rows)
    lines += ["", f"{flagged} of {len(rows)} metric(s) moved outside the noise band."]
    return "\n".join(lines) + "\n"

