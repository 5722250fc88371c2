"""The gate registry: every gate is a function ``check(ctx: GateContext) -> list[Verdict]``
registered with :func:`register`: its name (the suite's test is ``test_<name>``), the suite it
belongs to, the ``gate.*`` config keys it reads and the arm names its config refers to. Config
validation and the suites are generated from :data:`GATES`, so a new gate is one registered
function in the module of its suite (throughput.py, speculative.py, reference.py, gpu.py) plus its
field in ``harness.config.schema.GateConfig``; ``harness.gates`` imports every gate module, so the
registry is whole whenever the package is imported.

A gate with no threshold for the arm is a *skipped* verdict with that reason, never a
silent pass; a threshold on something that was not measured is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from harness.measure.metrics import ArmResult
from harness.gates.verdict import Verdict


# --- the registry ---------------------------------------------------------------------------

Suite = Literal["throughput", "speculative", "gpu", "baseline"]  # suites/test_<suite>.py; "baseline" gates vs a reference run


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
    requests: list = field(default_factory=list)  # this arm's requests.jsonl lines (the samples behind verdicts)
    reference_requests: list = field(default_factory=list)  # the same arm's lines in the reference run
    history: list = field(default_factory=list)  # the arm's blocks in a history of past runs (gate.baseline folder)
    arm_requests: dict = field(default_factory=dict)  # every measured arm's request lines in this run (speedup intervals)
    server_windows: list = field(default_factory=list)  # the server's /metrics differenced, one per repeat


@dataclass(frozen=True)
class Gate:
    name: str  # the suite's test is test_<name>
    suite: Suite
    check: Callable[[GateContext], list[Verdict]]
    keys: tuple[str, ...]  # the gate.* config keys it reads
    arms: Callable[[Any], list[str]]  # the arm names its config (cfg.gate) refers to
    needs_plain_arm: bool = False  # configured for any arm, the experiment must name its plain arm

    @property
    def key_names(self) -> str:
        return ", ".join(f"gate.{k}" for k in self.keys)


GATES: dict[str, Gate] = {}


def no_arms(gate: Any) -> list[str]:
    return []


def register(name: str, suite: Suite, keys: tuple[str, ...], arms: Callable[[Any], list[str]] = no_arms,
             needs_plain_arm: bool = False) -> Callable:
    """Add a gate to the registry (a decorator); names are unique."""
    def add(check: Callable[[GateContext], list[Verdict]]) -> Callable[[GateContext], list[Verdict]]:
        if name in GATES:
            raise ValueError(f"gate '{name}' is registered twice")
        GATES[name] = Gate(name, suite, check, keys, arms, needs_plain_arm)
        return check
    return add


def gates_of(suite: Suite) -> list[Gate]:
    return [g for g in GATES.values() if g.suite == suite]


def is_configured(registered: Gate, gate: Any, arm: str) -> bool:
    """Whether an arm's config asks for this gate: a per-arm gate names the arm; any other
    has its first key set (a threshold, a reference run, a list of reasons)."""
    value = gate[registered.keys[0]]
    if registered.arms is not no_arms:  # {arm: threshold} or [arm, ...]; not `over` arms
        return arm in [str(a) for a in value]
    return value is not None and value is not False and not (hasattr(value, "__len__") and len(value) == 0)


def configured_gates(arms: list[tuple[str, Any]]) -> list[tuple[Gate, str]]:
    """(gate, arm) for every registered gate the config asks of each (name, cfg.gate) arm."""
    return [(g, name) for name, gate in arms for g in GATES.values() if is_configured(g, gate, name)]


def keyed_arms(key: str) -> Callable[[Any], list[str]]:
    """The arms of a per-arm gate key (`gate.<key>: {arm: ...}` or `[arm, ...]`)."""
    return lambda gate: [str(a) for a in gate[key]]


def unmeasured(name: str, ctx: GateContext) -> list[Verdict] | None:
    """A gate on the arm's numbers cannot decide for an arm without any."""
    if ctx.result is not None:
        return None
    return [Verdict(name, ctx.arm, False, None, None, f"{ctx.arm}: the arm was not measured")]
