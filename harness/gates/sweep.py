"""Sweep gates (scope "sweep"): verdicts on a whole sweep over concurrency, judged by
`specgate sweep` once every point has run (harness/sweep/driver.py asks the registry for them).

    sweep_gate.min_speedup_through: {eagle3: {concurrency: 16, ratio: 1.1}}
        eagle3's speedup over the plain arm is >= 1.1 at every swept point with concurrency <= 16
    sweep_gate.crossover_at_least: {eagle3: 8}
        eagle3's crossover (sweep.json `crossovers`: the highest concurrency at which it still
        pays, interpolated) is >= 8

Where other keys are swept too (`drafter.num_steps=2,4`), each of their settings is a curve of
its own and gets its own verdict (its `others`, sweep.json's `with`). A verdict is passed,
failed or not evaluable, the last with the reason (no point at or below that concurrency, an
arm not measured at a point, one concurrency only, a crossover past the last point swept): the
sweep could not tell, so it neither passes nor fails the sweep. A failed verdict makes the
sweep's exit status 1.
"""

from __future__ import annotations

from typing import Any

from harness.gates.registry import GateConfigError, SweepContext, keyed_arms, register
from harness.gates.verdict import Verdict

CONCURRENCY_KEY = "workload.concurrency"


# --- the config, checked at compose time, before any server starts ---------------------------

def checked(key: str) -> Any:
    """The validation of one sweep gate: every arm it names is an arm other than the plain
    one (its thresholds' bounds are the schema's, SweepGateConfig)."""
    def validate(sweep_gate: Any, arms: list[str], plain_arm: str | None) -> None:
        for arm, threshold in (sweep_gate[key] or {}).items():
            where = f"sweep_gate.{key}.{arm}"
            if arm not in arms:
                raise GateConfigError(f"{where} names arm '{arm}', which is not an arm; arms: {', '.join(sorted(arms))}")
            if plain_arm is None:
                raise GateConfigError(f"{where} needs plain_arm (the plain-decoding arm its speedup is measured against)")
            if arm == plain_arm:
                raise GateConfigError(f"{where} names the plain arm '{arm}', which has no speedup over itself; "
                                      f"name a speculative arm")
    return validate


# --- verdicts on the finished sweep -----------------------------------------------------------

def verdict(name: str, arm: str, others: list[str], passed: bool | None, value: Any, threshold: Any, detail: str,
            not_evaluable: bool = False) -> Verdict:
    return Verdict(name, arm, passed, value, threshold, detail, not_evaluable=not_evaluable, scope="sweep",
                   others=list(others))


def not_evaluable(name: str, arm: str, others: list[str], value: Any, threshold: Any, detail: str) -> Verdict:
    return verdict(name, arm, others, None, value, threshold, detail, not_evaluable=True)


def others_of(point: dict[str, Any]) -> tuple[str, ...]:
    """The point's swept `key=value`s other than its concurrency: which curve it is on."""
    return tuple(o for o in point.get("swept") or [] if not o.startswith(CONCURRENCY_KEY + "="))


def point_concurrency(point: dict[str, Any], arm: str) -> int | None:
    """The arm's recorded concurrency at this point, else the point's override (an arm that did
    not run has no figures); None for an open loop or when nothing says."""
    figures = (point.get("arms") or {}).get(arm) or {}
    if figures.get("concurrency"):
        return int(figures["concurrency"])
    given = [o.split("=", 1)[1] for o in point.get("overrides") or [] if o.startswith(CONCURRENCY_KEY + "=")]
    try:
        return int(given[-1]) if given else None
    except ValueError:
        return None


# --- the gates --------------------------------------------------------------------------------

@register("min_speedup_through", None, ("min_speedup_through",), keyed_arms("min_speedup_through"),
          needs_plain_arm=True, scope="sweep", validate=checked("min_speedup_through"))
def min_speedup_through(ctx: SweepContext) -> list[Verdict]:
    """Each arm's speedup over the plain arm at least `ratio` at every swept point with
    concurrency <= `concurrency`, one verdict per curve."""
    return [verdict for arm, spec in (ctx.gate.get("min_speedup_through") or {}).items()
            for verdict in speedup_through(str(arm), int(spec["concurrency"]), float(spec["ratio"]), ctx.points)]


@register("crossover_at_least", None, ("crossover_at_least",), keyed_arms("crossover_at_least"),
          needs_plain_arm=True, scope="sweep", validate=checked("crossover_at_least"))
def crossover_at_least(ctx: SweepContext) -> list[Verdict]:
    """Each arm's crossover (where its speedup falls below 1, interpolated) at least the
    floor, one verdict per curve."""
    return [verdict for arm, floor in (ctx.gate.get("crossover_at_least") or {}).items()
            for verdict in crossover_from(str(arm), float(floor), ctx.crossovers)]


def speedup_through(arm: str, through: int, ratio: float, points: list[dict[str, Any]]) -> list[Verdict]:
    name, curves = "min_speedup_through", {}
    for point in points:
        concurrency = point_concurrency(point, arm)
        if concurrency is not None and concurrency <= through:
            curves.setdefault(others_of(point), []).append((concurrency, point))
    if not curves:
        return [not_evaluable(name, arm, [], None, ratio,
                              f"{arm}: no swept point has concurrency <= {through}, so its speedup there was not measured")]
    return [speedup_curve_verdict(arm, list(others), sorted(found, key=lambda x: x[0]), through, ratio)
            for others, found in curves.items()]


def speedup_curve_verdict(arm: str, others: list[str], found: list[tuple[int, dict]], through: int,
                          ratio: float) -> Verdict:
    name = "min_speedup_through"
    for concurrency, point in found:
        figures = (point.get("arms") or {}).get(arm) or {}
        if figures.get("speedup") is None:
            why = f"arm status {figures['status']}" if figures.get("status") else "no figures"
            return not_evaluable(name, arm, others, None, ratio,
                                 f"{arm}: point {point['label']} (concurrency {concurrency}) has no speedup ({why})")
    speedups = [(c, float(p["arms"][arm]["speedup"])) for c, p in found]
    low_c, low = min(speedups, key=lambda x: x[1])
    if low >= ratio:
        return verdict(name, arm, others, True, low, ratio,
                       f"{arm}: speedup >= {ratio:g}x at every swept concurrency <= {through} "
                       f"(lowest {low:.2f}x at {low_c})")
    short = [f"{s:.2f}x at {c}" for c, s in speedups if s < ratio]
    return verdict(name, arm, others, False, low, ratio,
                   f"{arm}: speedup below {ratio:g}x at concurrency <= {through}: {', '.join(short)}")


def crossover_from(arm: str, floor: float, crossovers: list[dict[str, Any]]) -> list[Verdict]:
    name = "crossover_at_least"
    curves = [x for x in crossovers if x.get("arm") == arm]
    if not curves:
        return [not_evaluable(name, arm, [], None, floor,
                              f"{arm}: no crossover, since no curve has its speedup at two or more concurrencies "
                              f"(sweep workload.concurrency)")]
    return [crossover_verdict(arm, curve, floor) for curve in curves]


def crossover_verdict(arm: str, curve: dict[str, Any], floor: float) -> Verdict:
    name, others, at = "crossover_at_least", curve.get("with") or [], curve.get("pays_through")
    words = f"{arm} {curve.get('words', '')}".strip()
    if at is None:
        return verdict(name, arm, others, False, None, floor, f"{words}; the crossover must be >= {floor:g}")
    if at >= floor:
        return verdict(name, arm, others, True, at, floor, f"{words}: crossover >= {floor:g}")
    if all(speedup >= 1.0 for _, speedup in curve.get("points") or []):
        # it pays at every point swept: the crossover lies somewhere past the last one
        return not_evaluable(name, arm, others, at, floor,
                             f"{words}: the crossover lies past {at:g}; sweep up to {floor:g} or beyond to decide")
    return verdict(name, arm, others, False, at, floor, f"{words}: crossover below {floor:g}")
