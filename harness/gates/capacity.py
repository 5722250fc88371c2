"""The capacity gate (scope "capacity"): `gate.min_capacity: {eagle3: {over: baseline, ratio: 1.0,
at_least: 8}}`: an arm's capacity under the SLOs against another arm's (at least ratio x it)
and/or an absolute floor. Judged by `specgate capacity` once every arm's search has ended
(harness/capacity/driver.py asks the registry for it): a run of the suites measures one load,
not a capacity.

A capacity that reached `capacity.max` without a miss is a lower bound: a comparison it
cannot decide fails and says to raise `capacity.max`; an arm that missed even the first load
has a capacity below `capacity.start`.
"""

from __future__ import annotations

from typing import Any

from harness.gates.registry import CapacityContext, GateConfigError, keyed_arms, register
from harness.gates.verdict import Verdict

NAME = "min_capacity"


def check_capacity_gate(gate: Any, arm_names: list[str], plain_arm: str | None) -> None:
    """Every arm named exists, and each entry asks for something."""
    arms = ", ".join(arm_names)
    for arm, spec in gate.min_capacity.items():
        where = f"gate.min_capacity.{arm}"
        if arm not in arm_names:
            raise GateConfigError(f"gate.min_capacity names arm '{arm}', which is not an arm; arms: {arms}")
        if spec.over is None and spec.at_least is None:
            raise GateConfigError(f"{where} needs `over` (another arm, with `ratio`) or `at_least` (a floor)")
        if spec.over is not None and (spec.over not in arm_names or spec.over == arm):
            raise GateConfigError(f"{where}.over must name another arm, got '{spec.over}'; arms: {arms}")


@register(NAME, None, ("min_capacity",), keyed_arms("min_capacity"), scope="capacity", validate=check_capacity_gate)
def min_capacity(ctx: CapacityContext) -> list[Verdict]:
    """One verdict per floor and per comparison configured."""
    verdicts = []
    for arm, spec in ctx.gate["min_capacity"].items():
        found = ctx.capacities[arm]
        if spec.at_least is not None:
            verdicts.append(floor_verdict(arm, found, float(spec.at_least), ctx))
        if spec.over is not None:
            verdicts.append(ratio_verdict(arm, found, ctx.capacities[spec.over], float(spec.ratio), ctx))
    return verdicts


def shown(searched: Any, start: float) -> str:
    if searched.capacity is None:
        return f"below {start:g} (even the first load missed)"
    return f"≥ {searched.capacity:g} (capacity.max reached)" if searched.reached_max else f"{searched.capacity:g}"


def verdict(arm: str, passed: bool, value: float | None, threshold: float | None, detail: str) -> Verdict:
    return Verdict(NAME, arm, passed, value, threshold, detail, scope="capacity")


def unmeasured(arm: str, searched: Any, threshold: float | None) -> Verdict | None:
    if searched.status == "finished":
        return None
    return verdict(arm, False, None, threshold, f"{arm}: arm '{searched.name}' has no capacity: its search ended {searched.status}")


def floor_verdict(arm: str, mine: Any, floor: float, ctx: CapacityContext) -> Verdict:
    missing = unmeasured(arm, mine, floor)
    if missing:
        return missing
    passed = mine.capacity is not None and mine.capacity >= floor
    relation = "meets" if passed else "is below"
    return verdict(arm, passed, mine.capacity, floor,
                   f"{arm}: capacity {shown(mine, ctx.start)} {ctx.unit} {relation} the floor {floor:g}")


def ratio_verdict(arm: str, mine: Any, other: Any, ratio: float, ctx: CapacityContext) -> Verdict:
    missing = unmeasured(arm, mine, None) or unmeasured(arm, other, None)
    if missing:
        return missing
    m, o = mine.capacity, other.capacity
    needed = None if o is None else ratio * o
    words = (f"{arm}: capacity {shown(mine, ctx.start)} {ctx.unit} against {ratio:g} x {other.name}'s "
             f"{shown(other, ctx.start)}")
    if o is None:
        passed, why = m is not None, "the other arm met no load" if m is not None else "neither met any load"
    elif m is None:
        passed, why = False, "it met no load"
    elif (other.reached_max and m >= needed) or (mine.reached_max and m < needed):
        bound = other.name if m >= needed else arm  # a lower bound on the side that could still move
        passed, why = False, f"cannot tell: {bound} reached capacity.max; raise capacity.max"
    else:
        passed, why = m >= needed, f"needs ≥ {needed:g}"
    return verdict(arm, passed, m, needed, f"{words}: {'passed' if passed else 'failed'} ({why})")
