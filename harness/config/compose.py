"""Compose an experiment from the Hydra config tree: the only module that knows Hydra.

`compose_typed(overrides)` turns command-line overrides (`+exp=sim_smoke workload.max_tokens=64`)
into an `Experiment`: one config per arm, typed and checked against the schema. Everything a
user can get wrong here raises `ConfigError` with one sentence that names the key and the
valid choices. What a config's names refer to (gates, engines, backends, datasets ...) is
checked above the registries that own them: `harness.run.compose.compose` is both, the
composition every caller uses. What the composition needs to know of the engines (where a
config's secrets sit, how an older shape reads today) it is handed as `Registries`, so this
package imports nothing above the floor.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib.resources
import io
import itertools
import dataclasses
import os
import pickle
import difflib
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, MutableMapping
from pathlib import Path
from urllib.parse import urlparse

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness import PROJECT_ROOT
from harness.config import schema
from harness.config.numbers import NumberError, check_numbers
from harness.secrets import BOOK, FINGERPRINT, Policy, leaves, masked_override
from harness.config.schema import ENGINE_BLOCKS, SpecgateConfig

DEFAULT_CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_ARM = "default"
BASELINE_MISMATCH = ("fail", "warn")  # gate.baseline_mismatch: what a reference that measured something else does


ConfigStore.instance().store(name="specgate_schema", node=SpecgateConfig)
# `${project_root:}` in a config: this checkout's folder, for paths to things the set-up
# builds here (the engine venvs, the tiny models). Records keep the resolved absolute path.
if not OmegaConf.has_resolver("project_root"):
    OmegaConf.register_new_resolver("project_root", lambda: str(DEFAULT_CONF_DIR.parent))
# `${chain_draft_tokens:${drafter.num_steps}}`: a chain of k drafted tokens verifies k + 1, so a
# sweep over drafter.num_steps (specgate schedule) keeps num_draft_tokens in step with it; no
# steps (the arm served plain: drafter=none), no draft tokens.
if not OmegaConf.has_resolver("chain_draft_tokens"):
    OmegaConf.register_new_resolver("chain_draft_tokens", lambda steps: None if steps is None else int(steps) + 1)


class ConfigError(Exception):
    """A config the user wrote cannot be composed or validated (one sentence)."""


@dataclass(frozen=True)
class Registries:
    """What composing needs from the registries above the config (harness/run/compose.py hands
    it in): `policy_of(cfg)`, where a config's secrets sit (its engine's readable flags and
    variables), and `upgrade(cfg)`, a config in an older shape (old build kinds, old server
    keys) rewritten in place as today's (harness/engines/legacy.py)."""

    policy_of: Callable[[DictConfig], Policy]
    upgrade: Callable[[MutableMapping[str, Any]], Any]


@dataclass
class Arm:
    name: str
    cfg: DictConfig  # the fully composed config of this arm (read-only; secrets as fingerprints)
    overrides: list[str]  # the arm's own overrides on top of the experiment, as typed
    choices: dict[str, str]  # group -> option picked, e.g. {"drafter": "eagle3_k25"}
    policy: Policy  # where this arm's secrets sit (its engine's readable flags), decided when it was composed
    # what forces this arm's acceptance, in words (its engine's reading, set by harness/run/compose.py
    # once the engine is known); None: the drafter's own. Such an arm is benchmark-only
    benchmark_only: str | None = field(default=None, compare=False)
    # the same config as the schema's dataclasses, made once here: what engines and servers read
    # (the DictConfig stays for what needs OmegaConf: interpolation, the record's YAML)
    typed: SpecgateConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.typed = OmegaConf.to_object(self.cfg)

    @property
    def shown_overrides(self) -> list[str]:
        """The arm's overrides as they may be written or printed: secrets as fingerprints."""
        return shown_overrides(self.overrides, [self.policy])


@dataclass
class Experiment:
    name: str
    description: str
    base: DictConfig  # the composed config before arm overrides
    arms: list[Arm]
    policy: Policy  # where the base config's secrets sit
    overrides: list[str] = field(default_factory=list)  # from the command line, as typed (secrets in clear)

    @property
    def shown_overrides(self) -> list[str]:
        """The command line as it may be written or printed: secrets as fingerprints."""
        return self.shown(self.overrides)

    def shown(self, overrides: list[str]) -> list[str]:
        """Overrides that apply to every arm (the command line's, an A/B side's), as they may be
        written or printed: a flag's value readable only where every arm's engine reads it."""
        return shown_overrides(overrides, [self.policy, *(arm.policy for arm in self.arms)])

    def shown_command(self, tokens: list[str]) -> list[str]:
        """A command line (`specgate sweep ... +server.env.X=V -k ...`) as a record may hold it:
        each override's secrets as fingerprints, options as they are."""
        is_override = [("=" in t and not t.startswith("-")) for t in tokens]
        shown = iter(self.shown([t for t, o in zip(tokens, is_override) if o]))
        return [next(shown) if o else t for t, o in zip(tokens, is_override)]

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    @property
    def arm_names(self) -> list[str]:
        return [arm.name for arm in self.arms]

    @property
    def plain_arm(self) -> str | None:
        return self.base.plain_arm


OVERRIDE_TOKEN = re.compile(r"^(\+{1,2}|~)?[A-Za-z_][\w.@/-]*(=|$)")


# pytest's and specgate's own options that take a value (`-k EXPR`, `--conf-dir DIR`): the
# token after one is that value, never a Hydra override (the plugin asks pytest's parser
# for the full set and falls back to these)
PYTEST_VALUE_OPTIONS = frozenset({"-k", "-m", "-o", "-p", "-c", "--override-ini", "--rootdir", "--basetemp",
                                  "--junitxml", "--conf-dir", "--replay", "--arm"})


def is_override(token: str, previous: str | None, value_options: set[str] = PYTEST_VALUE_OPTIONS) -> bool:
    """A Hydra override: `key=value`, `+key=value`, `~key`, that is not a path on disk and
    not the value of a preceding pytest option (`-k a=b`, `-o x=y`)."""
    if token.startswith("-") or previous in value_options:
        return False
    if not OVERRIDE_TOKEN.match(token) or ("=" not in token and not token.startswith("~")):
        return False
    return not os.path.exists(token.split("::")[0])


def override_key(override: str) -> str:
    """`+workload.max_tokens=5` -> `workload.max_tokens` (the part that names what changes)."""
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(arm_overrides: list[str], user_overrides: list[str]) -> list[str]:
    """Arm overrides first, the command line last and winning over an arm on the same key."""
    user_keys = {override_key(o) for o in user_overrides}
    kept = [o for o in arm_overrides if override_key(o) not in user_keys]
    return kept + list(user_overrides)


@dataclass
class SweepPoint:
    overrides: list[str]  # the point's whole command line: one value for every key
    swept: list[str]  # the `key=value`s this point picked from the sweeps, in command-line order


def sweep_points(overrides: list[str]) -> list[SweepPoint]:
    """The points of a sweep, expanded as Hydra's multirun does (its override grammar and its
    basic sweeper): `a=1,2 b=range(2,6,2)` is the product a=1 b=2, a=1 b=4, a=2 b=2, a=2 b=4,
    the first key changing slowest. Overrides that sweep nothing are kept as written (the
    basic sweeper would turn `~key` into `~key=null`, which deletes only a null)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(f"cannot parse the override: {first_line(str(exc))}") from None
    sweeps = [o for o in parsed if o.is_sweep_override()]
    combinations = sweep_combinations(sweeps)
    points = []
    for combination in combinations:
        picked = {choice.split("=", 1)[0]: choice for choice in combination}
        point, swept = [], []
        for override, text in zip(parsed, overrides):
            key = override.get_key_element()
            if not override.is_sweep_override():
                point.append(text)
            elif picked[key] not in swept:  # a key swept twice: Hydra keeps the last sweep, placed once
                point.append(picked[key])
                swept.append(picked[key])
        points.append(SweepPoint(point, swept))
    return points


def sweep_combinations(sweeps: list) -> list[tuple[str, ...]]:
    """Every combination of the swept values, as `key=value` strings, in Hydra's basic
    sweeper's order (the last key varies fastest; a key swept twice keeps its first place and
    its last values), through Hydra's public override API."""
    by_key: dict[str, list[str]] = {}
    for override in sweeps:
        if not override.is_discrete_sweep():  # interval(0,1): a sweeper that samples, not a list
            raise ConfigError(f"{override.input_line}: only lists, range() and choice() can be swept here, "
                              f"not an interval")
        key = override.get_key_element()
        by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        if not by_key[key]:
            raise ConfigError(f"{override.input_line} gives no values to sweep (e.g. range(1,1) is empty; "
                              f"range(1,5) is 1, 2, 3, 4)")
    return list(itertools.product(*by_key.values()))


def is_sweep(override: str) -> bool:
    """`key=1,2`, `key=range(...)`, `key=choice(...)`: several values, one experiment each."""
    try:
        return OverridesParser.create().parse_override(override).is_sweep_override()
    except HydraException:
        return False  # compose says what is wrong with it


def compose_config(overrides: list[str], conf_dir: Path, registries: Registries) -> tuple[DictConfig, dict[str, str]]:
    """One Hydra composition; returns the config (without `hydra`) and the group choices."""
    conf_dir = Path(conf_dir).resolve()
    if not (conf_dir / "config.yaml").is_file():
        raise ConfigError(f"no config tree at {conf_dir} (expected {conf_dir / 'config.yaml'})")
    key = (tuple(overrides), str(conf_dir), tree_fingerprint(conf_dir), id(registries), os.getcwd(),
           hash(frozenset(os.environ.items())))
    if key not in _composed:
        cfg, choices = composed_once(list(overrides), conf_dir, registries)
        _composed[key] = pickle.dumps((cfg, choices), protocol=pickle.HIGHEST_PROTOCOL)
        if len(_composed) > COMPOSED_KEPT:
            _composed.popitem(last=False)
    _composed.move_to_end(key)
    return pickle.loads(_composed[key])


# The compositions of this process, by everything a composition reads: the overrides, the
# whole tree's text, the registries, the working folder and the environment (an interpolation
# in a defaults list is resolved while composing). A composition is a tenth of a second and
# unpickling one a thousandth: a process that composes an experiment again (a test suite, which
# composes sim_smoke a hundred times) gets a copy of the first. Kept pickled, not as configs:
# ~20 kB each, and no graph of nodes for the interpreter to tear down at exit (256 kept configs
# took two seconds there). Failures are not kept.
COMPOSED_KEPT = 256  # compositions, the least recently used forgotten first
_composed: collections.OrderedDict[tuple, bytes] = collections.OrderedDict()


def tree_fingerprint(conf_dir: Path) -> str:
    """A digest of every file under `conf_dir`, by path and text (a file edited, added or
    removed changes it)."""
    digest = hashlib.blake2b(digest_size=16)
    for root, dirs, files in os.walk(conf_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest.update(f"{os.path.relpath(path, conf_dir)}\0".encode() + f.read() + b"\0")
    return digest.hexdigest()


def composed_once(overrides: list[str], conf_dir: Path, registries: Registries) -> tuple[DictConfig, dict[str, str]]:
    overrides, entries = split_new_entries(list(overrides))
    try:
        cfg = hydra_config(conf_dir, overrides)
        for entry in entries:  # merged, as the experiment's own YAML would be (new keys allowed
            OmegaConf.set_struct(cfg, False)  # in the mapping only: the schema types still refuse typos)
            cfg = OmegaConf.merge(cfg, entry)
            OmegaConf.set_struct(cfg, True)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(explain(exc, conf_dir)) from None
    except (AssertionError, AttributeError) as exc:  # OmegaConf's, when a key is set inside a null block
        raise ConfigError(inside_null_block(overrides) or f"cannot apply the overrides: {exc}") from None
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra")}
    with open_dict(cfg):
        del cfg["hydra"]
        registries.upgrade(cfg)  # a conf tree (or command line) in an older shape: build kinds, server keys
    OmegaConf.set_readonly(cfg, True)
    return cfg, choices


def split_new_entries(overrides: list[str]) -> tuple[list[str], list[dict]]:
    """`+gate.min_speedup.eagle4.ratio=1.3` or `+gate.min_speedup.eagle4={over: baseline}`
    adds an entry to a mapping whose values are a schema type (arm -> {over, ratio}). Hydra
    adds it as an empty mapping first, which the type refuses; OmegaConf's merge takes it
    whole. A block the schema leaves null by default (`workload.shared_prefix`) is the same:
    Hydra cannot set a key inside it, nor the block whole (OmegaConf fails inside), where a
    merge fills it as a YAML file does. So such overrides become nested data merged after
    composing, and the rest stays Hydra's: (Hydra's overrides, the entries to merge)."""
    kept, entries = [], []
    for override in overrides:
        path = override_key(override).split(".")
        merged = in_optional_block(path) or (override.startswith("+") and typed_entry_at(path) is not None)
        if override.startswith("~") or "=" not in override or not merged:
            kept.append(override)
            continue
        try:
            value = OverridesParser.create().parse_override(override).value()
        except HydraException:
            kept.append(override)  # Hydra says what is wrong with it
            continue
        for key in reversed(path):
            value = {key: value}
        entries.append(value)
    return kept, entries


def optional_of(kind: Any) -> Any:
    """X for a schema type Optional[X], else None."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else None


def unwrapped(kind: Any) -> Any:
    """A schema type without its Optional: X for Optional[X], the type itself otherwise."""
    return optional_of(kind) or kind


def in_optional_block(path: list[str], node: type = SpecgateConfig) -> bool:
    """Whether `path` is a block the schema types Optional[a dataclass] (null by default), or
    a key inside one; an engine's options block (`server.vllm`) is not: a key set inside it
    on another engine's server is refused (:func:`inside_null_block`)."""
    if len(path) > 1 and path[0] == "server" and path[1] in ENGINE_BLOCKS:
        return False
    for part in path:
        kind = typing.get_type_hints(node).get(part) if dataclasses.is_dataclass(node) else None
        if kind is None:
            return False
        if dataclasses.is_dataclass(optional_of(kind)):
            return True
        node = kind
    return False


def typed_entry_at(path: list[str], node: type = SpecgateConfig) -> int | None:
    """The index in `path` of an entry of a mapping whose values are a schema dataclass, or None."""
    for index, part in enumerate(path):
        kind = typing.get_type_hints(node).get(part)
        if kind is None:
            return None
        kind = unwrapped(kind)
        if dataclasses.is_dataclass(kind):
            node = kind
            continue
        if typing.get_origin(kind) in (dict, typing.Dict):
            value_type = typing.get_args(kind)[1] if typing.get_args(kind) else None
            has_entry = index + 1 < len(path)
            return index + 1 if has_entry and dataclasses.is_dataclass(value_type) else None
        return None
    return None


def compose_typed(overrides: list[str], conf_dir: Path, registries: Registries) -> Experiment:
    """Compose the experiment the overrides name, and each of its arms, checked against the
    schema (keys, types, bounds, references between arms). The names a config gives of things
    that registries own (gates, engines, backends, datasets ...) are checked above those
    registries, by harness/run/compose.py's `compose`, the one every caller uses."""
    swept = [o for o in overrides if is_sweep(o)]
    if swept:
        raise ConfigError(f"{swept[0]} gives several values (a sweep); run it with `specgate sweep` (or pytest --multirun), "
                          f"which runs one whole experiment per point")
    check_added_keys(overrides, conf_dir)
    check_deleted_keys(overrides, conf_dir)
    check_empty_gates(overrides)
    base, base_choices = compose_config(overrides, conf_dir, registries)
    try:  # a number the experiment or the command line got wrong, before every arm is composed with it
        check_numbers(base)  # (validate checks the base first too: the same sentence, sooner)
    except NumberError as exc:
        raise ConfigError(str(exc)) from None
    arm_specs = OmegaConf.to_container(base.arms) or {DEFAULT_ARM: []}
    arms = []
    for name, arm_overrides in arm_specs.items():
        merged = merge_overrides(list(arm_overrides), overrides)
        try:
            check_added_keys(list(arm_overrides), conf_dir)
            check_deleted_keys(list(arm_overrides), conf_dir)
            if picks_what_the_base_has(list(arm_overrides), overrides, base_choices):
                cfg, choices = pickle.loads(pickle.dumps(base)), dict(base_choices)  # a copy: Hydra's would be
            else:
                cfg, choices = compose_config(merged, conf_dir, registries)
        except ConfigError as exc:
            raise ConfigError(f"arm '{name}': {exc}") from None
        cfg = resolve_auto_telemetry(cfg)
        policy = registries.policy_of(cfg)
        arms.append(Arm(name=name, cfg=masked(cfg, policy), overrides=list(arm_overrides), choices=choices,
                        policy=policy))
    base = resolve_auto_telemetry(base)
    policy = registries.policy_of(base)
    experiment = Experiment(name=base.name, description=base.description, base=masked(base, policy), arms=arms,
                            policy=policy, overrides=list(overrides))
    publish(experiment)
    validate(experiment)
    return experiment


GROUP_PICK = re.compile(r"^([A-Za-z_][\w/]*)=([A-Za-z0-9_][\w.-]*)$")  # `drafter=none`: a group, an option


def picks_what_the_base_has(arm_overrides: list[str], overrides: list[str], base_choices: dict[str, str]) -> bool:
    """Whether each of the arm's own overrides that the command line leaves it (merge_overrides)
    picks, in a config group, the option the base already has (`baseline: [drafter=none]` where
    the experiment's drafter is none): Hydra then composes the same defaults list, so the arm's
    config is the base's, and composing it again would only take the time."""
    given = {override_key(o) for o in overrides}
    for override in arm_overrides:
        if override_key(override) in given:
            continue  # the command line's own wins over the arm's
        pick = GROUP_PICK.match(override)
        if pick is None or pick[2] == "null" or base_choices.get(pick[1]) != pick[2]:
            return False
    return True


def masked(cfg: DictConfig, policy: Policy) -> DictConfig:
    """`cfg` with every secret, by where it sits (`policy`), as its fingerprint (harness/secrets.py);
    the values stay in the process's BOOK for the launch. Only the changed leaves are set, so
    the config keeps its interpolations and types."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    changes = changed_leaves(plain, policy.mask(plain))
    if not changes:
        return cfg
    OmegaConf.set_readonly(cfg, False)
    with open_dict(cfg):
        for path, value in changes:
            OmegaConf.update(cfg, path, value, merge=False)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def changed_leaves(before: Any, after: Any, path: str = "") -> list[tuple[str, Any]]:
    """(dotted path, new value) for each leaf that changed; a list changes whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [change for key in before
                for change in changed_leaves(before[key], after[key], f"{path}.{key}" if path else str(key))]
    return [] if before == after else [(path, after)]


def shown_overrides(overrides: list[str], policies: list[Policy]) -> list[str]:
    """Overrides with their secrets as fingerprints: a flag's value is readable only where every
    config's policy reads it (the command line applies to every arm)."""
    policy = policies[0]
    common = [f for f in policy.readable_flags if all(f in p.readable_flags for p in policies)]
    shared = Policy(readable_env=policy.readable_env, readable_flags=tuple(common),
                    readable_json_keys=policy.readable_json_keys)
    return [masked_override(o, shared) for o in overrides]


def publish(experiment: Experiment) -> None:
    """The values the record shows anyway (arm names, the model path, every readable config
    value): free text never loses them to a secret that happens to equal one."""
    BOOK.add_public([experiment.name, *experiment.arm_names])
    for cfg in [experiment.base, *(arm.cfg for arm in experiment.arms)]:
        BOOK.add_public(v for v in leaves(OmegaConf.to_container(cfg, resolve=True)) if not FINGERPRINT.search(v))
    for arm in experiment.arms:
        BOOK.add_public(arm.choices.values())


def check_empty_gates(overrides: list[str]) -> None:
    """`gate.min_capacity={}` on the command line asks for a gate and configures no arm of it:
    it would judge nothing, silently. (A conf file's `{}` is a default, not a request.)"""
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key.split(".")[0] in ("gate", "sweep_gate") and re.fullmatch(r"\{\s*\}", value.strip()):
            raise ConfigError(f"{key}={{}} configures the gate for no arm, so it would judge nothing: name an arm "
                              f"(e.g. {key}.eagle3=...), or leave {key} out (to switch off an arm the experiment "
                              f"gates, delete its entry: ~{key}.eagle3)")


def check_added_keys(overrides: list[str], conf_dir: Path) -> None:
    """`+key=value` adds a key, which Hydra allows anywhere: a typo (`+workload.max_tokns=5`)
    would be silently ignored. Only keys the schema knows may be added (and anything under
    a free-form mapping such as server.env or a per-arm gate threshold); `+exp=NAME` adds a group."""
    for override in overrides:
        if not override.startswith("+") or "=" not in override:
            continue
        key = override_key(override)
        if "/" in key or ("." not in key and (Path(conf_dir) / key).is_dir()):
            continue  # a config group (+exp=NAME)
        if not schema_knows(key.split(".")):
            raise ConfigError(unknown_key(key, override) + "; `+` adds only keys the schema knows")


def check_deleted_keys(overrides: list[str], conf_dir: Path) -> None:
    """`~key` deletes a key. A key of the typed schema is one every config has (the code reads
    it), so deleting it would only fail later, obscurely: say how to turn it off instead.
    Entries of a mapping (`~server.env.HF_HOME`, `~arms.eagle3`) and groups may go."""
    for override in overrides:
        if not override.startswith("~"):
            continue
        key = override_key(override)
        if "/" in key or ("." not in key and (Path(conf_dir) / key).is_dir()):
            continue  # a config group: the defaults list, which Hydra checks
        if schema_knows(key.split("."), entries=False):
            instead = (f"delete its entries instead (e.g. ~{key}.eagle3)" if schema_mapping(key.split("."))
                       else f"set it instead (e.g. {key}=null where it may be null)")
            raise ConfigError(f"{override} would delete '{key}', which every config has; {instead}")


def schema_mapping(path: list[str]) -> bool:
    """Whether the dotted `path` is a mapping of the typed schema (gate.min_speedup, server.env)."""
    node: type = SpecgateConfig
    for part in path:
        hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        if part not in hints:
            return False
        node = unwrapped(hints[part])
    return typing.get_origin(node) in (dict, typing.Dict)


def schema_knows(path: list[str], node: type = SpecgateConfig, entries: bool = True) -> bool:
    """Whether the dotted `path` is a key of the typed schema (or, with `entries`, lies under
    a mapping such as server.env)."""
    for index, part in enumerate(path):
        hints = typing.get_type_hints(node)
        if part not in hints:
            return False
        kind = hints[part]
        kind = unwrapped(kind)
        if dataclasses.is_dataclass(kind):
            node = kind
            continue
        if typing.get_origin(kind) in (dict, typing.Dict):
            return entries or index == len(path) - 1  # a free-form mapping: any key below it
        return index == len(path) - 1  # a value: nothing below it
    return True


def resolve_auto_telemetry(cfg: DictConfig) -> DictConfig:
    """`telemetry.source: auto` (the default) samples NVML when the server needs a GPU and
    nothing otherwise, so a GPU experiment never skips its clock gates for want of a
    setting. Resolved here, so records and `specgate show` say what actually ran."""
    if cfg.telemetry.source != "auto":
        return cfg
    cfg = cfg.copy()
    OmegaConf.set_readonly(cfg, False)
    here = not remote_engine(cfg)  # NVML sees this machine's GPUs, not a remote engine's
    cfg.telemetry.source = "nvml" if cfg.server.requires_gpu and here else "off"
    OmegaConf.set_readonly(cfg, True)
    return cfg


def remote_engine(cfg: SpecgateConfig | DictConfig) -> str | None:
    """The host of the arm's Docker engine when it is reached over the network, else None (the
    typed config, or the composed one while it is being resolved)."""
    return remote_engine_host(cfg.backend.docker_host) if cfg.backend.kind == "docker" else None


def remote_engine_host(docker_host: str | None) -> str | None:
    """The host name of a Docker engine reached over the network (ssh://user@gpu-box,
    tcp://gpu-box:2376), or None for the local socket (including DOCKER_HOST=unix://...)."""
    if docker_host and not docker_host.startswith(("unix://", "npipe://")):
        return urlparse(docker_host).hostname or None
    return None


def validate(experiment: Experiment) -> None:
    """Every number against the schema first (a NaN passes every later `<=`), then the checks
    the schema cannot express: the plain arm, required values, values that exclude each other.
    The gate section (its arms, after the registry's checks) and what a name refers to (an
    engine, a backend, a dataset ...) are checked by harness/run/compose.py."""
    for where, cfg in [("", experiment.base)] + [(f"arm '{arm.name}': ", arm.cfg) for arm in experiment.arms]:
        try:
            check_numbers(cfg)
        except NumberError as exc:
            raise ConfigError(f"{where}{exc}") from None
    names = set(experiment.arm_names)
    if experiment.plain_arm is not None and experiment.plain_arm not in names:
        raise ConfigError(f"plain_arm '{experiment.plain_arm}' is not an arm; arms: {', '.join(sorted(names))}")
    for name in experiment.base.break_even_arms:
        if name not in names or name == experiment.plain_arm:
            what = "the plain arm, which drafts nothing" if name == experiment.plain_arm else "not an arm"
            raise ConfigError(f"break_even_arms names '{name}', {what}; name speculative arms of: "
                              f"{', '.join(sorted(names - {experiment.plain_arm}))}")
    if experiment.base.break_even_arms and experiment.plain_arm is None:
        raise ConfigError("break_even_arms needs plain_arm: a break-even is where speculation's speed equals plain decoding's")
    for arm in experiment.arms:
        validate_arm(arm)


def validate_arm(arm: Arm) -> None:
    cfg = arm.typed
    attached = cfg.backend.kind == "attach"  # a server someone else started: no build of ours
    if attached and not cfg.backend.url:
        raise ConfigError("backend=attach needs backend.url=http://HOST:PORT (the running server)")
    if attached and not re.match(r"^https?://[^/]+", cfg.backend.url):
        raise ConfigError(f"backend.url '{cfg.backend.url}' is not an http(s) URL, e.g. http://127.0.0.1:30000")
    if attached and re.match(r"^https?://[^/]+/.*v1/?$", cfg.backend.url):
        raise ConfigError(f"backend.url '{cfg.backend.url}' ends in /v1: give the server's root, e.g. "
                          f"{cfg.backend.url.rstrip('/')[:-3].rstrip('/')} (specgate adds /v1/chat/completions, /health ... itself)")
    check_fleet(cfg)
    check_nodes(cfg)
    workload = cfg.workload
    if workload.trace is not None:
        if workload.shared_prefix is not None:
            raise ConfigError("workload.trace and workload.shared_prefix are two prompt sources: set one "
                              "(a trace rebuilds its own shared prefixes from hash_ids)")
        # a trace (which wins over the rest) is checked by harness/run/compose.py, once the numbers it reads are
    elif workload.shared_prefix is not None:
        check_shared_prefix(workload)
    elif workload.dataset is None and workload.prompt is None and workload.input_len is None:
        raise ConfigError(f"workload '{workload.name}' needs a trace, a dataset, a prompt, an input_len or a shared_prefix")
    if workload.num_prompts is None and workload.duration_s is None and workload.trace is None:
        raise ConfigError(f"workload '{workload.name}' needs num_prompts or duration_s")
    if workload.client_processes > workload.concurrency:
        raise ConfigError(f"workload.client_processes={workload.client_processes} is more than workload.concurrency="
                          f"{workload.concurrency}: each load process needs at least one request in flight")
    check_record_root(cfg.record.root)
    own_lengths = workload.dataset is not None or workload.trace is not None  # per row, per request
    check_cancel(workload.cancel, None if own_lengths else workload.max_tokens)


def check_nodes(cfg: schema.SpecgateConfig) -> None:
    """server.nnodes > 1: nodes of one server started here, meeting on this machine's loopback."""
    if cfg.backend.network not in ("bridge", "host"):
        raise ConfigError(f"backend.network '{cfg.backend.network}' is unknown; valid: bridge, host")
    if cfg.server.nnodes == 1:
        return
    if cfg.backend.kind == "attach":
        raise ConfigError(f"server.nnodes={cfg.server.nnodes} starts the server's nodes, and backend=attach starts "
                          f"nothing: attach to node 0's address instead (server.nnodes=1)")
    on_this_machine(cfg, f"server.nnodes={cfg.server.nnodes} runs its nodes", "they meet", "the nodes")


def check_fleet(cfg: schema.SpecgateConfig) -> None:
    """server.workers > 1 starts the workers and SGLang's router in front of them (harness/servers/fleet.py):
    a backend that starts servers, a policy the router has, and no router flag specgate sets itself."""
    router = cfg.router
    if router.policy not in schema.ROUTER_POLICIES:
        raise ConfigError(f"router.policy '{router.policy}' is unknown; valid: {', '.join(schema.ROUTER_POLICIES)}")
    own = owned_flags(router.args, schema.ROUTER_OWN_FLAGS)
    if own:
        raise ConfigError(f"router.args sets {', '.join(own)}, which specgate sets itself from server.workers, the "
                          f"workers' ports and router.policy; remove {'it' if len(own) == 1 else 'them'}")
    if cfg.server.workers > 1 and cfg.backend.kind == "attach":
        raise ConfigError(f"server.workers={cfg.server.workers} starts a fleet, and backend=attach starts nothing: "
                          f"attach to the fleet's router instead (backend.url=http://ROUTER:PORT, server.workers=1)")
    if router.disaggregated:
        check_split(cfg)


def owned_flags(args: list[str], owned: tuple[str, ...]) -> list[str]:
    """The flags among `args` (`--flag` or `--flag=value`) that specgate sets itself."""
    return sorted({arg.split("=", 1)[0] for arg in args} & set(owned))


def check_split(cfg: schema.SpecgateConfig) -> None:
    """router.prefill and router.decode split each request over a prefill and a decode worker
    behind the router's --pd-disaggregation: both counted, and the fleet is theirs alone."""
    router = cfg.router
    if not (router.prefill and router.decode):
        raise ConfigError(f"router.prefill={router.prefill}, router.decode={router.decode}: a split fleet needs "
                          f"both (e.g. router.prefill=1 router.decode=1), or neither")
    if cfg.server.workers > 1:
        raise ConfigError(f"router.prefill={router.prefill} and router.decode={router.decode} make the fleet's "
                          f"workers; server.workers={cfg.server.workers} would make another: leave it at 1")
    if cfg.backend.kind == "attach":
        raise ConfigError("router.prefill and router.decode start a split fleet, and backend=attach starts nothing: "
                          "attach to the fleet's router instead (backend.url=http://ROUTER:PORT)")
    own = owned_flags(cfg.server.extra_args, schema.DISAGGREGATION_FLAGS)
    if own:
        raise ConfigError(f"server.extra_args sets {', '.join(own)}, which specgate sets itself on each worker of a "
                          f"split fleet (router.prefill, router.decode, router.transfer_backend); remove "
                          f"{'it' if len(own) == 1 else 'them'}")
    on_this_machine(cfg, "router.prefill/decode run their workers",
                    "the decode side reaches the prefill side's bootstrap port", "the fleet")


def on_this_machine(cfg: schema.SpecgateConfig, what: str, meeting: str, run: str) -> None:
    """Parts that meet on this machine's loopback (docker: on the host's network) cannot be
    containers of a remote engine, whose loopback is that box's."""
    if cfg.backend.kind == "docker" and remote_engine_host(cfg.backend.docker_host):
        raise ConfigError(f"{what} on the host's network so that {meeting} on loopback, which a remote engine's "
                          f"({cfg.backend.docker_host}) is not this machine's; run {run} on that box itself")


def check_cancel(cancel: schema.CancelConfig, max_tokens: int | None = None) -> None:
    """workload.cancel cuts each chosen request at one point: after so many tokens or so many ms;
    ``max_tokens``: what every request asks for (None when a dataset or trace says per request)."""
    both_or_neither = (cancel.after_tokens is None) == (cancel.after_ms is None)
    if both_or_neither and (cancel.fraction or cancel.after_tokens is not None):
        given = "both" if cancel.after_tokens is not None else "neither"
        raise ConfigError(f"workload.cancel needs exactly one of after_tokens and after_ms (where the client closes "
                          f"a cancelled request's stream), got {given}")
    if cancel.fraction and max_tokens is not None and cancel.after_tokens is not None \
            and cancel.after_tokens >= max_tokens:
        # a request ends with its max_tokens-th token, before its cut: nothing would be cancelled
        # (a dataset's or a trace's own output lengths may be longer: not judged here)
        raise ConfigError(f"workload.cancel.after_tokens={cancel.after_tokens} is not below workload.max_tokens="
                          f"{max_tokens}: every request would end before its cut, and none be cancelled")


def check_shared_prefix(workload: schema.WorkloadConfig) -> None:
    """workload.shared_prefix is a prompt source of its own: another one set beside it would
    be silently ignored, so it is a mistake (its numbers' bounds are the schema's)."""
    others = [key for key in ("dataset", "prompt", "input_len") if getattr(workload, key) is not None]
    if others:
        raise ConfigError(f"workload.shared_prefix is a prompt source of its own, but workload.{others[0]} is set too: "
                          f"set workload.{others[0]}=null (or drop workload.shared_prefix)")


def check_record_root(root: str) -> None:
    """record.root must be a folder a record can be made in, before anything is measured:
    not under a regular file, writable, and its `latest` (if any) the link specgate keeps,
    not a folder copied there (from a CI artifact) that the run could not replace at its end."""
    path = Path(root).absolute()
    latest = path / "latest"
    if latest.exists() and not latest.is_symlink():
        raise ConfigError(f"record.root {root}: {latest} is a {'folder' if latest.is_dir() else 'file'}, not the link "
                          f"to the newest record that specgate keeps there; move it away (a copied CI artifact?)")
    for parent in [path, *path.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"record.root {root}: {parent} is a file, so no record folder can be made there")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"record.root {root}: {parent} is not writable here, so no record could be kept")
            return


def list_experiments(conf_dir: Path = DEFAULT_CONF_DIR) -> dict[str, str]:
    """Experiment name -> its one-line description (read from conf/exp/*.yaml)."""
    found = {}
    for path in sorted((Path(conf_dir) / "exp").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        found[path.stem] = str(cfg.get("description", "")).strip()
    return found


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


def open_dict(cfg: DictConfig):
    from omegaconf import open_dict as _open_dict

    return _open_dict(cfg)


# --- turning Hydra's exceptions into one sentence -------------------------------------


def explain(exc: Exception, conf_dir: Path) -> str:
    """One sentence naming the key and the valid choices, from Hydra's/OmegaConf's error."""
    text = "\n".join(str(e) for e in exception_chain(exc))
    missing_option = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing_option:
        group, option = missing_option.groups()
        return unknown_option(group, option, conf_dir, hydra_options(text))
    missing_group = re.search(r"Could not (?:load|find) '([^'/]+)'", text)
    if missing_group and not (conf_dir / missing_group.group(1)).is_dir():
        return unknown_key(missing_group.group(1), text)
    key_missing = re.search(r"Key '([^']+)' not in '([^']+)'", text) or re.search(
        r"Key '([^']+)' is not in struct", text
    )
    if key_missing:
        full_key = re.search(r"full_key: (\S+)", text)
        return unknown_key(full_key.group(1) if full_key else key_missing.group(1), text)
    bad_value = re.search(r"Value '([^']*)' (?:of type '([^']+)' )?could not be converted to (\w+)", text)
    if bad_value:
        full_key = re.search(r"full_key: (\S+)", text)
        key = full_key.group(1) if full_key else "a value"
        return f"{key}: '{bad_value.group(1)}' is not a valid {bad_value.group(3).lower()}"
    wrong_shape = re.search(r"Invalid type assigned: \w+ is not a subclass of (\w+)\. value: (.*)", text)
    if wrong_shape:
        full_key = re.search(r"full_key: (\S+)", text)
        key = full_key.group(1) if full_key else "a value"
        return f"{key} must be {struct_shape(wrong_shape.group(1))}, got {wrong_shape.group(2).strip()}"
    if "mismatched input" in text or "no viable alternative" in text or "extraneous input" in text:
        return f"cannot parse the override: {first_line(text)}"
    return first_line(text)


def inside_null_block(overrides: list[str]) -> str | None:
    """The override that sets a key inside an engine's options block the config leaves null
    (server.vllm.* on a server of another engine): the one null block of the schema."""
    for override in overrides:
        parts = override_key(override).lstrip("+~").split(".")
        if len(parts) > 2 and parts[0] == "server" and parts[1] in ENGINE_BLOCKS:
            return (f"{override_key(override)}: server.{parts[1]} is null here, as the server is not a "
                    f"{parts[1]} server (server.<engine>.* holds the options of that engine's servers only)")
    return None


def struct_shape(name: str) -> str:
    """`a mapping of over, ratio` for a schema dataclass (what a value of that type looks like)."""
    node = getattr(schema, name, None)
    if dataclasses.is_dataclass(node):
        return "a mapping of " + ", ".join(f.name for f in dataclasses.fields(node))
    return f"a {name}"


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def hydra_options(text: str) -> list[str]:
    """The options Hydra lists after a missing one (`Available options in 'hydra/launcher':`),
    which include those of its plugins (hydra/launcher=basic, submitit_slurm, ray, ...)."""
    listed = re.search(r"Available options in '[^']+':\n((?:\t.*\n?)+)", text)
    return listed.group(1).split() if listed else []


def unknown_option(group: str, option: str, conf_dir: Path, listed: list[str] = ()) -> str:
    """`group=option` names no option: every option there is, the conf tree's and Hydra's own."""
    choices = sorted({p.stem for p in (conf_dir / group).glob("*.yaml")} | set(listed))
    hint = close_match(option, choices)
    return f"{group}={option}: no such option in '{group}'; valid choices: {', '.join(choices)}{hint}"


def unknown_key(full_key: str, text: str) -> str:
    """A key that the schema does not have: list the keys its parent does have."""
    parent_path, _, leaf = full_key.rpartition(".")
    node = OmegaConf.structured(SpecgateConfig)
    for part in filter(None, parent_path.split(".")):
        node = node.get(part) if isinstance(node, DictConfig) else None
        if node is None:
            break
    if isinstance(node, DictConfig) and len(node) == 0:
        return f"{full_key}: '{parent_path}' has no entry '{leaf}' here; add one with +{full_key}=..."
    if isinstance(node, DictConfig):
        valid = sorted(str(k) for k in node.keys())
        hint = close_match(leaf, valid)
        where = f"'{parent_path}'" if parent_path else "the top level"
        return f"{full_key}: no such key in {where}; valid keys: {', '.join(valid)}{hint}"
    valid = schema_keys(list(filter(None, parent_path.split("."))))
    if valid:  # inside a block the schema leaves null (workload.shared_prefix): its dataclass's keys
        return f"{full_key}: no such key in '{parent_path}'; valid keys: {', '.join(valid)}{close_match(leaf, valid)}"
    return f"{full_key}: no such key ({first_line(text)})"


def schema_keys(path: list[str], node: type = SpecgateConfig) -> list[str] | None:
    """The keys of the schema dataclass at `path` (Optional blocks unwrapped; an entry of a
    mapping, `gate.min_speedup.eagle3`, is its value type), or None."""
    for part in path:
        if typing.get_origin(node) in (dict, typing.Dict) and len(typing.get_args(node)) == 2:
            node = unwrapped(typing.get_args(node)[1])  # any key: the mapping's value type
            continue
        kind = typing.get_type_hints(node).get(part) if dataclasses.is_dataclass(node) else None
        if kind is None:
            return None
        node = unwrapped(kind)
    return sorted(f.name for f in dataclasses.fields(node)) if dataclasses.is_dataclass(node) else None


def close_match(word: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)


def launcher_config(launcher_overrides: list[str], conf_dir: Path):
    """Hydra's own `hydra.launcher` node for these overrides (hydra/launcher=submitit_slurm ...),
    composed here so that only this package calls Hydra's compose API."""
    try:
        cfg = hydra_config(conf_dir, launcher_overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"launcher: {one_sentence(str(exc))}") from None
    return cfg.hydra.launcher


def one_sentence(message: str) -> str:
    """Hydra's first line, and the options it lists after it (`Available options in ...`)."""
    first, *rest = message.replace("In 'hydra/config': ", "").splitlines()
    listed = re.search(r"Available options in '[^']+':\n((?:\t.*\n?)+)", message)
    return first + (f"; available: {', '.join(listed.group(1).split())}" if listed else "")


# --- one Hydra composition, without the work it repeats ----------------------------------


def hydra_config(conf_dir: Path, overrides: list[str]) -> DictConfig:
    """Hydra's composition of `config` under `conf_dir` with these overrides, its `hydra` node
    included; Hydra's and OmegaConf's exceptions pass through."""
    GlobalHydra.instance().clear()
    try:
        with parsed_yaml_kept(), initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


# Each composition reads some thirty YAML files (this tree's and Hydra's own hydra/conf), most of
# them the same from one composition to the next: an experiment composes once and once per arm,
# and its arms differ in a group or two. Parsing is a third of a composition. The two sources
# below are Hydra's file and package sources (its core_plugins) with each file's parse kept,
# keyed by the file's text: a file that changed is parsed again, and every load hands Hydra a
# copy of its own (Hydra edits what it loads: it takes the `defaults` list out).
PARSED_YAML_KEPT = 1024  # texts; beyond it the store starts over (a test suite's throwaway trees)
_parsed: dict[str, bytes] = {}  # pickled: unpickling is five times faster than a deep copy


def parsed_yaml(text: str) -> DictConfig:
    """A copy of `text` parsed as OmegaConf.load parses a file (the parse kept for the next)."""
    parsed = _parsed.get(text)
    if parsed is None:
        parsed = pickle.dumps(OmegaConf.load(io.StringIO(text)), protocol=pickle.HIGHEST_PROTOCOL)
        if len(_parsed) >= PARSED_YAML_KEPT:
            _parsed.clear()
        _parsed[text] = parsed
    return pickle.loads(parsed)


class KeptFileSource(ConfigSource):
    """A config folder on disk (Hydra's `file://`, what initialize_config_dir gives), its parses kept."""

    @staticmethod
    def scheme() -> str:
        return "specgate-file"

    def _where(self, config_path: str) -> str:
        return os.path.realpath(os.path.join(self.path, config_path))

    def load_config(self, config_path: str) -> ConfigResult:
        full_path = self._where(self._normalize_file_name(config_path))
        if not os.path.exists(full_path):
            raise ConfigLoadError(f"Config not found : {full_path}")
        with open(full_path, encoding="utf-8") as f:
            text = f.read()
        return ConfigResult(config=parsed_yaml(text), path=f"{self.scheme()}://{self.path}", provider=self.provider,
                            header=ConfigSource._get_header_dict(text[:512]))

    def available(self) -> bool:
        return self.is_group("")

    def is_group(self, config_path: str) -> bool:
        return os.path.isdir(self._where(config_path))

    def is_config(self, config_path: str) -> bool:
        return os.path.isfile(self._where(self._normalize_file_name(config_path)))

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        files: list[str] = []
        for name in os.listdir(self._where(config_path)):
            self._list_add_result(files=files, file_path=os.path.join(config_path, name), file_name=name,
                                  results_filter=results_filter)
        return sorted(set(files))


class KeptPackageSource(ConfigSource):
    """A config package (Hydra's `pkg://`, its own hydra.conf), its parses kept."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path)
        self.path = self.path.replace("/", ".").rstrip(".")

    @staticmethod
    def scheme() -> str:
        return "specgate-pkg"

    def _files(self) -> Any:
        try:
            return importlib.resources.files(self.path)
        except (ValueError, ModuleNotFoundError, TypeError):
            return None

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._normalize_file_name(config_path)
        files = self._files()
        res = files.joinpath(name) if files is not None else None
        if res is None or not res.exists():
            raise ConfigLoadError(f"Config not found : {name}")
        text = res.read_text(encoding="utf-8")
        return ConfigResult(config=parsed_yaml(text), path=f"{self.scheme()}://{self.path}", provider=self.provider,
                            header=ConfigSource._get_header_dict(text[:512]))

    def available(self) -> bool:
        files = self._files()
        return files is not None and any(f.name == "__init__.py" and f.is_file() for f in files.iterdir())

    def is_group(self, config_path: str) -> bool:
        files = self._files()
        res = files.joinpath(config_path) if files is not None else None
        return bool(res is not None and res.exists() and res.is_dir())

    def is_config(self, config_path: str) -> bool:
        files = self._files()
        res = files.joinpath(self._normalize_file_name(config_path)) if files is not None else None
        return bool(res is not None and res.exists() and res.is_file())

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        files: list[str] = []
        for res in self._files().joinpath(config_path).iterdir():
            self._list_add_result(files=files, file_path=f"{config_path}/{res.name}", file_name=res.name,
                                  results_filter=results_filter)
        return sorted(set(files))


KEPT_SCHEMES = {"file": KeptFileSource.scheme(), "pkg": KeptPackageSource.scheme()}
_keeping = False


class KeepParsedYaml(SearchPathPlugin):
    """While specgate composes (only then: the sweep's Hydra app keeps Hydra's own sources), the
    search path's file and package sources are read through the two above."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not _keeping:
            return
        for element in search_path.get_path():
            scheme, sep, rest = element.path.partition("://")
            if not sep:  # a bare folder (initialize_config_dir's) is a file source to Hydra
                scheme, rest = "file", element.path
            if scheme in KEPT_SCHEMES:
                element.path = f"{KEPT_SCHEMES[scheme]}://{rest}"


def _same_store(store: ConfigStore, memo: dict) -> ConfigStore:
    return store


@contextlib.contextmanager
def parsed_yaml_kept() -> typing.Iterator[None]:
    """Hydra (1.3.8) also deep-copies its whole ConfigStore at every composition (its caching
    repository copies the repository, whose structured source holds the store: hydra PR 2928
    looks the store up instead), which is a tenth of a composition here: while specgate
    composes, a copy of the store is the store. Every load from it is still a deep copy
    (ConfigStore.load), so nothing composed can change what is stored."""
    global _keeping
    plugins = Plugins.instance()
    for plugin in (KeptFileSource, KeptPackageSource, KeepParsedYaml):
        if plugin not in plugins.discover(SearchPathPlugin if plugin is KeepParsedYaml else ConfigSource):
            plugins.register(plugin)
    had_own = "__deepcopy__" in vars(ConfigStore)
    if not had_own:
        ConfigStore.__deepcopy__ = _same_store
    _keeping = True
    try:
        yield
    finally:
        _keeping = False
        if not had_own:
            del ConfigStore.__deepcopy__
