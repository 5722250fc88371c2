"""The gate registry: every gate is a registered function ``check(ctx) -> list[Verdict]``
with its name, its scope, the config keys it reads and the arm names its config refers to.

Scopes (what a gate judges, and the context it is given):
    arm       one arm of a run (GateContext); its suite's test is ``test_<name>``, keys in ``gate.*``
    sweep     a whole sweep once every point has run (SweepContext); keys in ``sweep_gate.*``
    capacity  the arms' capacities once every search ended (CapacityContext); keys in ``gate.*``
    ab        an A/B's two sides over its rounds, once the rounds ended (ABContext); keys in ``gate.*``

Config validation and the suites are generated from :data:`GATES`, and each driver asks the
registry for the gates of its scope (:func:`judge`), so a new gate is one registered function in
the module of its suite or scope (throughput.py, speculative.py, reference.py, gpu.py, sweep.py,
capacity.py) plus its field in ``harness.config.schema``; ``harness.gates`` imports every gate
module, so the registry is whole whenever the package is imported.

An arm gate with no threshold for the arm is a *skipped* verdict with that reason, never a
silent pass; a threshold on something that was not measured is a failure. A gate that judges
the server's figures declares them (``trust=``, harness/gates/trust.py Trust), and the registry
applies the trust guards to its verdicts, in one order: the gate itself never calls them. A sweep or capacity
gate that is not configured judges nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from harness.measure.metrics import ArmResult
from harness.gates.verdict import Scope, Verdict, mark_undecided


# --- the registry ---------------------------------------------------------------------------

Suite = Literal["throughput", "speculative", "gpu", "baseline", "fleet"]  # suites/test_<suite>.py; "baseline" gates vs a reference run
SECTIONS: dict[str, str] = {"arm": "gate", "capacity": "gate", "sweep": "sweep_gate", "ab": "gate"}  # where a scope's keys live


class GateConfigError(ValueError):
    """A gate's config names an arm that is not one, or a threshold it cannot use (one sentence)."""


@dataclass
class GateContext:
    """What a gate may look at for one arm of this run."""

    arm: str
    gate: Any  # the arm's cfg.gate (a GateConfig DictConfig)
    result: ArmResult | None  # the arm's measured result; None when it was not measured
    gpu: dict | None  # the arm's telemetry block (harness/telemetry/summary.py); None when none was recorded
    plain_arm: str | None  # the experiment's plain-decoding arm
    results: dict[str, ArmResult]  # every arm measured so far in this run
    reference: dict | None  # this arm's block in the reference run (gate.baseline), if any
    reference_label: str  # how verdicts name the reference run
    telemetry_source: str  # the arm's telemetry.source: "off" means no GPU gate can decide
    requests: list = field(default_factory=list)  # this arm's request lines in memory (the samples behind verdicts)
    reference_requests: Any = field(default_factory=list)  # the same arm's requests in the reference run (RequestColumns)
    history: list = field(default_factory=list)  # the arm's blocks in a history of past runs (gate.baseline folder)
    profile: Any = None  # a noise profile (gates/profile.py NoiseProfile) gate.baseline names instead of a run
    arm_requests: dict = field(default_factory=dict)  # every measured arm's request lines in this run (speedup intervals)
    server_windows: list = field(default_factory=list)  # the server's /metrics differenced, one per repeat
    fleet: dict | None = None  # a fleet's per-worker figures and imbalance (harness/measure/fleet.py); None: one server
    arm_gpus: dict = field(default_factory=dict)  # every arm's telemetry block in this run (a speedup's other arm)
    # arm -> what forces its acceptance (a benchmark-only arm, harness/engines Engine.forced_acceptance)
    benchmark_only: dict = field(default_factory=dict)


@dataclass
class SweepContext:
    """What a sweep gate may look at: the whole sweep, once every point has run."""

    gate: Any  # the sweep's sweep_gate block: {key: {arm: threshold}}
    points: list[dict[str, Any]]  # sweep.json's points: swept overrides, exit status, per arm its headline figures
    crossovers: list[dict[str, Any]]  # sweep.json's crossovers: per speculative arm and curve, where it stops paying
    plain_arm: str | None = None  # the arm every speedup is measured against


@dataclass
class CapacityContext:
    """What a capacity gate may look at: every arm's search, once each has ended."""

    gate: Any  # the experiment's cfg.gate (min_capacity)
    capacities: dict[str, Any]  # arm -> its search (status, capacity, reached_max; harness/capacity/driver.py)
    unit: str  # the capacity's unit in words: "concurrent requests" or "req/s"
    start: float  # capacity.start: an arm that missed even that load has a capacity below it


@dataclass
class ABContext:
    """What an A/B gate may look at: per arm, each round's loads on side A and side B."""

    gate: Any  # the experiment's cfg.gate (side A's; the sides share what they measure)
    rounds: dict[str, list[Any]]  # arm -> its rounds (harness/ab/driver.py RoundPair: lines and results of A and B)
    sides: dict[str, str]  # "A"/"B" -> what the side is, in words (its own overrides)
    sequential: Any = None  # ab.rounds=auto: harness/gates/change.py Sequential (each look's share of the error)


@dataclass(frozen=True)
class Gate:
    name: str  # an arm gate's suite test is test_<name>
    suite: Suite | None  # an arm gate's suite; None for sweep and capacity gates, which no suite runs
    check: Callable[[Any], list[Verdict]]  # given the context of its scope
    keys: tuple[str, ...]  # the config keys it reads, in its scope's section (gate.*, sweep_gate.*)
    arms: Callable[[Any], list[str]]  # the arm names its config (that section) refers to
    needs_plain_arm: bool = False  # configured for any arm, the experiment must name its plain arm
    scope: Scope = "arm"
    validate: Callable[[Any, list[str], str | None], None] | None = None  # (section, arms, plain arm): its own checks
    trust: Any = None  # what its verdicts judge, for the trust guards (harness/gates/trust.py Trust); None: no guard
    # a quality gate: (ctx) -> the arms whose own acceptance and outputs its verdicts rest on, for
    # the arm under test (none where it is not configured for it); None: it judges speed or health
    quality: Callable[[Any], list[str]] | None = None

    @property
    def section(self) -> str:
        return SECTIONS[self.scope]

    @property
    def key_names(self) -> str:
        return ", ".join(f"{self.section}.{k}" for k in self.keys)


GATES: dict[str, Gate] = {}


def no_arms(gate: Any) -> list[str]:
    return []


def register(name: str, suite: Suite | None, keys: tuple[str, ...], arms: Callable[[Any], list[str]] = no_arms,
             needs_plain_arm: bool = False, scope: Scope = "arm",
             validate: Callable[[Any, list[str], str | None], None] | None = None, trust: Any = None,
             quality: Callable[[Any], list[str]] | None = None) -> Callable:
    """Add a gate to the registry (a decorator); names are unique. An arm gate belongs to a
    suite; a sweep or capacity gate to none (its driver judges it). `trust` (a
    harness.gates.trust.Trust: the figures its verdicts judge, the side they compare with):
    the registry applies the trust guards to every verdict the gate gives, so the gate only
    computes its verdicts; `quality` (the arms whose acceptance it judges, :func:`own_acceptance`):
    a benchmark-only arm among them fails it, said why, before it judges anything. The decorator
    returns the guarded check, the one every caller gets."""
    if (suite is None) != (scope != "arm"):
        raise ValueError(f"gate '{name}': an arm gate names its suite, a {scope} gate none")

    def add(check: Callable[[Any], list[Verdict]]) -> Callable[[Any], list[Verdict]]:
        if name in GATES:
            raise ValueError(f"gate '{name}' is registered twice")
        checked = check if trust is None else guarded(check, trust)
        checked = checked if quality is None else quality_guarded(name, checked, quality)
        checked = undecided_marked(checked)
        GATES[name] = Gate(name, suite, checked, keys, arms, needs_plain_arm, scope, validate, trust, quality)
        return checked
    return add


def own_acceptance(key: str) -> Callable[[Any], list[str]]:
    """A quality gate configured per arm (`gate.<key>: {arm: ...}`) judges the acceptance of
    the arm it is configured for."""
    def arms(ctx: Any) -> list[str]:
        return [ctx.arm] if ctx.arm in (getattr(ctx.gate, key) or {}) else []
    return arms


def quality_guarded(name: str, check: Callable[[Any], list[Verdict]], quality: Callable[[Any], list[str]]) -> Callable:
    """`check`, unless an arm whose acceptance it would judge had it forced for a benchmark:
    then one failed verdict that says which arm and what forced it. Asked for on that arm, a
    quality verdict cannot pass: the outputs are not the model's, the accept length the one set."""
    @functools.wraps(check)
    def judged(ctx: Any) -> list[Verdict]:
        forced = [(arm, ctx.benchmark_only[arm]) for arm in quality(ctx) if arm in (ctx.benchmark_only or {})]
        if not forced:
            return check(ctx)
        said = "; ".join(f"arm '{arm}' forces its acceptance ({why})" for arm, why in dict(forced).items())
        return [Verdict(name, ctx.arm, False, None, None,
                        f"{ctx.arm}: {name} judges the drafter's real acceptance, and {said}: a benchmark-only arm, "
                        f"whose outputs are not the model's and whose accept length is the one set; drop "
                        f"gate.{name} for it, or the forcing")]
    return judged


def undecided_marked(check: Callable[[Any], list[Verdict]]) -> Callable[[Any], list[Verdict]]:
    """`check` with its inconclusive comparisons of a regression's size marked undecided
    (harness/gates/verdict.py mark_undecided), after every guard: whatever made one
    inconclusive (the floor, too few rounds, an untrusted run), the size of its change decides."""
    @functools.wraps(check)
    def judged(ctx: Any) -> list[Verdict]:
        return mark_undecided(check(ctx), ctx.gate)
    return judged


def guarded(check: Callable[[Any], list[Verdict]], trust: Any) -> Callable[[Any], list[Verdict]]:
    """`check` with the trust guards applied to its verdicts, in their one order (trust.guard)."""
    @functools.wraps(check)
    def judged(ctx: Any) -> list[Verdict]:
        return trust.apply(check(ctx), ctx)
    return judged


def gates_of(suite: Suite) -> list[Gate]:
    return [g for g in GATES.values() if g.suite == suite]


def gates_in(scope: Scope) -> list[Gate]:
    return [g for g in GATES.values() if g.scope == scope]


def judge(scope: Scope, ctx: SweepContext | CapacityContext | ABContext) -> list[Verdict]:
    """Every verdict of a sweep's or a capacity search's gates (a driver's one call), in
    registration order; a gate with nothing configured gives none."""
    if scope == "arm":
        raise ValueError("arm gates are judged one test at a time, by their suite (harness/plugin.py)")
    return [verdict for registered in gates_in(scope) for verdict in registered.check(ctx)]


def check_gate_config(base: Any, arm_names: list[str], plain_arm: str | None) -> None:
    """Every registered gate's config (`base` is the experiment's composed config): a gate's
    own checks first (their words name the entry), then that every arm it names exists and
    that a gate which compares with the plain arm has one. Raises GateConfigError."""
    names = set(arm_names)
    for registered in GATES.values():
        section = base[registered.section]
        if registered.validate is not None:
            registered.validate(section, arm_names, plain_arm)
        for arm_name in registered.arms(section):
            if arm_name not in names:
                raise GateConfigError(f"{registered.key_names} names arm '{arm_name}', which is not an arm; "
                                      f"arms: {', '.join(sorted(names))}")
        if registered.needs_plain_arm and registered.arms(section) and plain_arm is None:
            raise GateConfigError(f"{registered.key_names} needs plain_arm (the plain-decoding arm to compare with)")


def is_configured(registered: Gate, gate: Any, arm: str) -> bool:
    """Whether an arm's config asks for this arm gate: a per-arm gate names the arm; any other
    has its first key set (a threshold, a reference run, a list of reasons)."""
    value = gate[registered.keys[0]]
    if registered.arms is not no_arms:  # {arm: threshold} or [arm, ...]; not `over` arms
        return arm in [str(a) for a in value]
    return value is not None and value is not False and not (hasattr(value, "__len__") and len(value) == 0)


def configured_gates(arms: list[tuple[str, Any]]) -> list[tuple[Gate, str]]:
    """(gate, arm) for every registered arm gate the config asks of each (name, cfg.gate) arm."""
    return [(g, name) for name, gate in arms for g in gates_in("arm") if is_configured(g, gate, name)]


def keyed_arms(key: str) -> Callable[[Any], list[str]]:
    """The arms of a per-arm gate key (`gate.<key>: {arm: ...}` or `[arm, ...]`)."""
    return lambda gate: [str(a) for a in gate[key]]


def unmeasured(name: str, ctx: GateContext) -> list[Verdict] | None:
    """A gate on the arm's numbers cannot decide for an arm without any."""
    if ctx.result is not None:
        return None
    return [Verdict(name, ctx.arm, False, None, None, f"{ctx.arm}: the arm was not measured")]
