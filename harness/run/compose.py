"""compose(overrides) -> Experiment: the experiment composed and typed by harness/config/compose.py,
then every name it gives checked against the registry that owns it, before any server starts.

The config package knows the schema; the names in a config refer to things owned above it:
gates (their registry, then the gate settings that read its arms: per-category floors, a
mismatched reference, the lossless comparison), engines (their own checks), backends, build
kinds, telemetry sources, request APIs, and the files a workload reads (datasets, traces,
tokenizers) or the Ray cluster it names. Each mistake raises `ConfigError` with one sentence, as the schema's own do. Every
driver, the CLI and the plugin compose through here; a replay checks a recorded experiment
with `validate`. What composing itself needs of the engines (where a config's secrets sit, how an
older shape reads today) is handed to the config package from here, as `REGISTRIES`.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness.config.compose import (BASELINE_MISMATCH, DEFAULT_CONF_DIR, Arm, ConfigError, Experiment, Registries,
                                    compose_typed, remote_engine)
from harness.config import compose as typed
from harness.config.schema import BUILD_KINDS, SpecgateConfig, WorkloadConfig
from harness.engines import ENGINES, EngineConfigError
from harness.engines.legacy import upgrade_config
from harness.gates.reference import INCONCLUSIVE, UNDECIDED
from harness.gates.registry import GateConfigError, check_gate_config
from harness.load.datasets import DatasetError, load_dataset
from harness.limits import MAX_TIMESLICES
from harness.load.ray_clients import PLACEMENTS, RayAddressError, check_address
from harness.load.requests import REQUEST_FUNCS
from harness.load.sizing import SizingError, local_tokenizer
from harness.load.plan import trace_corpus
from harness.load.trace import TraceError, replay_of
from harness.servers import BACKENDS
from harness.servers.git_source import GitSourceError, commit_of, repository
from harness.secrets import Policy
from harness.telemetry.base import NOT_SAMPLING, SOURCES

KNOWN_KINDS = {
    "backend": set(BACKENDS),
    "build": set(BUILD_KINDS),
    "telemetry": {*SOURCES, *NOT_SAMPLING},
}


def policy_of(cfg: DictConfig) -> Policy:
    """Where this config's secrets sit: its engine's readable flags, the readable variables."""
    every_engines_env = tuple(p for engine in ENGINES.values() for p in engine.readable_env)  # as the scrubber reads them
    return Policy.for_engine(ENGINES.get(cfg.server.engine), (*every_engines_env, *cfg.record.readable_env))


REGISTRIES = Registries(policy_of=policy_of, upgrade=upgrade_config)


def compose(overrides: list[str], conf_dir: Path = DEFAULT_CONF_DIR) -> Experiment:
    """Compose the experiment the overrides name, and each of its arms: typed against the
    schema, and every name checked against what owns it."""
    experiment = compose_typed(overrides, conf_dir, REGISTRIES)
    check_names(experiment)
    return experiment


def validate(experiment: Experiment) -> None:
    """An experiment made elsewhere (a replay's recorded configs): the schema's checks, then the names."""
    typed.validate(experiment)
    check_names(experiment)


def check_names(experiment: Experiment) -> None:
    """The gate section: every registered gate, whatever its scope (a sweep or capacity gate's
    wrong arm is wrong in any run), then the settings that read its arms; then each arm's names."""
    try:
        check_gate_config(experiment.base, experiment.arm_names, experiment.plain_arm)
    except GateConfigError as exc:
        raise ConfigError(str(exc)) from None
    gate = experiment.base.gate
    if gate.inconclusive not in INCONCLUSIVE:
        raise ConfigError(f"gate.inconclusive '{gate.inconclusive}' is unknown; valid: {', '.join(INCONCLUSIVE)}")
    if gate.undecided not in UNDECIDED:
        raise ConfigError(f"gate.undecided '{gate.undecided}' is unknown; valid: {', '.join(UNDECIDED)}")
    check_per_category_floors("min_accept_length", gate.min_accept_length)
    if gate.baseline_mismatch not in BASELINE_MISMATCH:
        raise ConfigError(f"gate.baseline_mismatch '{gate.baseline_mismatch}' is unknown; "
                          f"valid: {', '.join(BASELINE_MISMATCH)}")
    check_lossless(experiment)
    for arm in experiment.arms:
        check_arm_names(arm)


def check_arm_names(arm: Arm) -> None:
    cfg = arm.typed
    for group, kind in (("backend", cfg.backend.kind), ("build", cfg.build.kind), ("telemetry", cfg.telemetry.source)):
        if kind not in KNOWN_KINDS[group]:
            valid = ", ".join(sorted(KNOWN_KINDS[group]))
            raise ConfigError(f"arm '{arm.name}': {group} '{kind}' is not available; valid: {valid}")
    attached = cfg.backend.kind == "attach"  # a server someone else started: no build of ours
    if cfg.server.engine not in ENGINES:
        raise ConfigError(f"arm '{arm.name}': server.engine '{cfg.server.engine}' is unknown; "
                          f"valid: {', '.join(sorted(ENGINES))}")
    engine = ENGINES[cfg.server.engine]
    if not attached and cfg.build.engine and cfg.build.engine != engine.name:
        raise ConfigError(f"arm '{arm.name}': the build carries engine '{cfg.build.engine}' but server "
                          f"'{cfg.server.name}' is for engine '{engine.name}'; pick a build and a server of one engine")
    check_remote_engine(arm)
    if cfg.build.kind == "git" and not attached:
        check_git_build(arm)
    if cfg.telemetry.source == "sim" and not engine.simulates_gpus and not attached:
        raise ConfigError(f"arm '{arm.name}': telemetry=sim reads the simulator's GPU model, and engine "
                          f"'{engine.name}' has none")
    workload = cfg.workload
    if workload.api not in REQUEST_FUNCS:
        raise ConfigError(f"workload.api '{workload.api}' is unknown; valid: {', '.join(REQUEST_FUNCS)}")
    try:
        engine.check(cfg)
    except EngineConfigError as exc:
        raise ConfigError(f"arm '{arm.name}': {exc}") from None
    arm.benchmark_only = engine.forced_acceptance(cfg)
    if workload.trace is None and workload.shared_prefix is None and workload.dataset is not None:
        check_dataset(workload.dataset)
    if workload.tokenizer is not None:
        check_tokenizer(workload.tokenizer)
    check_client_placement(workload)
    if workload.trace is not None:
        check_trace(workload)
    elif workload.trace_content is not None:
        raise ConfigError(f"workload.trace_content={workload.trace_content} draws a trace replay's prompts from a corpus, "
                          f"but workload.trace is not set; for a dataset's own rows set workload.dataset instead")
    check_timeslices(cfg)


def check_git_build(arm: Arm) -> None:
    """build.kind=git: a repository and a commit git can give, and a backend that builds images
    (the process backend starts the harness's own code: every commit would run the same)."""
    cfg = arm.typed
    if cfg.backend.kind != "docker":
        raise ConfigError(f"arm '{arm.name}': build.kind=git builds an image of {cfg.build.repo or 'a repository'}, "
                          f"and backend={cfg.backend.kind} starts no image: use backend=docker")
    try:
        commit_of(repository(cfg.build.repo), cfg.build.git_ref)
    except GitSourceError as exc:
        raise ConfigError(f"arm '{arm.name}': {exc}") from None


def check_per_category_floors(key: str, thresholds) -> None:
    """`gate.<key>: {arm: 2.0}` or `{arm: {all: 2.0, code: 2.5}}`: numbers, nothing else."""
    for arm, value in thresholds.items():
        entries = value.items() if isinstance(value, DictConfig) else [(None, value)]
        for category, floor in entries:
            if isinstance(floor, bool) or not isinstance(floor, (int, float)):
                where = f"gate.{key}.{arm}" + (f".{category}" if category is not None else "")
                raise ConfigError(f"{where} must be a number (or, per category, {{all: 2.0, code: 2.5}}), "
                                  f"got {floor!r}")


# Workload keys that decide what a request generates: arms compared by gate.lossless must share them.
OUTPUT_SHAPING_KEYS = ("api", "prompt", "input_len", "dataset", "trace", "trace_block_size", "trace_content", "max_turns",
                       "tokenizer", "max_tokens", "ignore_eos", "temperature", "seed", "shared_prefix")


def check_lossless(experiment: Experiment) -> None:
    """gate.lossless compares outputs request by request under greedy decoding: both arms
    at temperature 0, sending the same requests."""
    for name, spec in experiment.base.gate.lossless.items():
        if spec.against == name:
            raise ConfigError(f"gate.lossless.{name}.against names arm '{name}' itself; compare it with another "
                              f"arm (e.g. the plain-decoding one)")
        arm, against = experiment.arm(name), experiment.arm(spec.against)
        for compared in (arm, against):
            temperature = compared.cfg.workload.temperature
            if temperature != 0:
                where = "" if temperature == experiment.base.workload.temperature else f" in arm '{compared.name}'"
                raise ConfigError(f"gate.lossless compares outputs under greedy decoding: workload.temperature "
                                  f"must be 0, got {temperature}{where}")
        for key in OUTPUT_SHAPING_KEYS:
            if arm.cfg.workload[key] != against.cfg.workload[key]:
                raise ConfigError(f"gate.lossless compares arm '{name}' with '{spec.against}' request by request, "
                                  f"but they send different requests: workload.{key} is {arm.cfg.workload[key]!r} in "
                                  f"'{name}' and {against.cfg.workload[key]!r} in '{spec.against}' (set it for the "
                                  f"whole experiment, not in one arm's overrides)")


def check_remote_engine(arm: Arm) -> None:
    """A remote engine's server must be reachable from here, and its GPUs are not this
    machine's: NVML or nvidia-smi here would sample the wrong GPUs (or none)."""
    cfg, remote = arm.typed, remote_engine(arm.typed)
    if remote is None:
        return
    from harness.servers.docker import LOOPBACK, unreachable_publish  # the docker SDK only for a docker engine

    why = unreachable_publish(cfg.backend.docker_host, cfg.backend.publish_host)
    if why:
        raise ConfigError(f"arm '{arm.name}': {why}")
    if cfg.telemetry.source in ("nvml", "smi") and remote not in LOOPBACK:
        raise ConfigError(f"arm '{arm.name}': telemetry={cfg.telemetry.source} samples this machine's GPUs, but the "
                          f"server runs on {remote}; run specgate on {remote} itself to sample its GPUs, "
                          f"or set telemetry=off")


def check_dataset(dataset: str) -> None:
    """workload.dataset must be a readable file of well-formed rows: a bad one is found
    here, before any server starts, not mid-load."""
    try:
        load_dataset(dataset)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None


def check_trace(workload: WorkloadConfig) -> None:
    """workload.trace must be a readable, sorted trace whose window holds requests, replayed
    at its own times from one load process: found here, before any server starts."""
    for key, why in (("request_rate", "its arrivals are the trace's timestamps"),
                     ("duration_s", "its requests are the trace's (bound them with workload.trace_end_s or "
                                    "workload.num_prompts)")):
        if getattr(workload, key) is not None:
            raise ConfigError(f"workload.{key} cannot be set with workload.trace: {why}; set workload.{key}=null")
    if workload.client_processes > 1:
        raise ConfigError(f"workload.client_processes={workload.client_processes}: a trace replay runs in one load "
                          f"process; set workload.client_processes=1")
    try:
        trace_corpus(workload, replay_of(workload))
    except (TraceError, DatasetError) as exc:  # the trace, or the corpus its prompts are drawn from
        raise ConfigError(str(exc)) from None


def check_timeslices(cfg: SpecgateConfig) -> None:
    """record.timeslice_s cuts each load into slices (harness/measure/timeslices.py): where the
    load's length is known before it starts (workload.duration_s, a trace replay's schedule),
    more than MAX_TIMESLICES of them is refused here; any other load's slices are widened to fit."""
    workload, width = cfg.workload, cfg.record.timeslice_s
    if workload.trace is not None:
        span = replay_of(workload).offsets_s[-1]
        what = f"the trace replay's {span:g} s"
    elif workload.duration_s is not None:
        span = workload.duration_s
        what = f"a load of workload.duration_s={span:g} s"
    else:
        return
    if span / width > MAX_TIMESLICES:
        raise ConfigError(f"record.timeslice_s={width:g} cuts {what} into {span / width:.3g} slices, "
                          f"more than {MAX_TIMESLICES}; set record.timeslice_s to at least {span / MAX_TIMESLICES:.3g}")


def check_tokenizer(folder: str) -> None:
    """workload.tokenizer must be a tokenizer this machine can read, found before any server starts."""
    try:
        local_tokenizer(folder)
    except SizingError as exc:
        raise ConfigError(str(exc)) from None


def check_client_placement(workload: WorkloadConfig) -> None:
    """workload.client_placement: local or ray; a Ray cluster named must answer now."""
    if workload.client_placement not in PLACEMENTS:
        raise ConfigError(f"workload.client_placement={workload.client_placement}: one of {', '.join(PLACEMENTS)}")
    if workload.client_placement != "ray":
        if workload.ray_address is not None:
            raise ConfigError(f"workload.ray_address={workload.ray_address}: only with workload.client_placement=ray")
        return
    try:
        check_address(workload.ray_address, "workload.ray_address")
    except RayAddressError as exc:
        raise ConfigError(str(exc)) from None
