"""Sweep gates (scope "sweep"): verdicts on a whole sweep over concurrency, judged by
`specgate sweep` once every point has run (harness/sweep/driver.py asks the registry for them).

    sweep_gate.min_speedup_through: {eagle3: {concurrency: 16, ratio: 1.1}}
        eagle3's speedup over the plain arm is >= 1.1 at every swept point with concurrency <= 16
    sweep_gate.crossover_at_least: {eagle3: 8}
        eagle3's crossover (sweep.json `crossovers`: the highest concurrency at which it still
        pays, interpolated) is >= 8

Where other keys are swept too (`drafter.num_steps=2,4`), each of their settings is a curve of
its own and gets its own verdict (its `others`, sweep.json's `with`). Each point's speedup comes with its
95 % interval (sweep.json's `speedup_interval`, the min_speedup gate's estimator), and a verdict
is decided on it: passed when even the interval's lower ends meet the threshold, failed when
even its upper ends miss it, **undecided** when the intervals hold the threshold (inconclusive,
and the sweep's exit status 6: could not decide never reads as passed), not evaluable with the
reason when the sweep did not measure what it needs (no point at or below that concurrency, an
arm not measured at a point, one concurrency only, a crossover past the last point swept). A
failed verdict makes the sweep's exit status 1.
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
            not_evaluable: bool = False, interval: Any = None) -> Verdict:
    return Verdict(name, arm, passed, value, threshold, detail, not_evaluable=not_evaluable, scope="sweep",
                   others=list(others), interval=list(interval) if interval is not None else None)


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
    speedups = [(c, float(p["arms"][arm]["speedup"]), bounds(p["arms"][arm])) for c, p in found]
    low_c, low, low_bounds = min(speedups, key=lambda x: x[1])
    below = [(c, s, b) for c, s, b in speedups if b[1] < ratio]  # even its interval's upper end
    if below:
        worst_c, worst, worst_bounds = min(below, key=lambda x: x[1])
        return verdict(name, arm, others, False, worst, ratio,
                       f"{arm}: speedup below {ratio:g}x at concurrency <= {through}: "
                       f"{', '.join(at(c, s, b) for c, s, b in below)}", interval=worst_bounds)
    if all(b[0] >= ratio for _, _, b in speedups):  # even its interval's lower end
        return verdict(name, arm, others, True, low, ratio,
                       f"{arm}: speedup >= {ratio:g}x at every swept concurrency <= {through} "
                       f"(lowest {at(low_c, low, low_bounds)})", interval=low_bounds)
    open_ = [(c, s, b) for c, s, b in speedups if b[0] < ratio <= b[1]]
    return undecided(name, arm, others, min(s for _, s, _ in open_), ratio,
                     f"{arm}: could not decide whether the speedup is >= {ratio:g}x at every swept concurrency <= "
                     f"{through}: {', '.join(at(c, s, b) for c, s, b in open_)}, "
                     f"{'its interval holds' if len(open_) == 1 else 'their intervals hold'} {ratio:g}x; "
                     f"{MORE_LOAD}", min(open_, key=lambda x: x[1])[2])


def end(crossover: float | None) -> str:
    return "none, below the lowest concurrency" if crossover is None else f"{crossover:g}"


def bounds(figures: dict[str, Any]) -> tuple[float, float]:
    """A point's speedup interval (sweep.json's `speedup_interval`); its figure at both ends
    where it has none (too few time windows, a record of an older sweep)."""
    speedup = float(figures["speedup"])
    low, high = figures.get("speedup_interval") or (speedup, speedup)
    return float(low), float(high)


def at(concurrency: int, speedup: float, interval: tuple[float, float]) -> str:
    spread = f" (95% interval {interval[0]:.2f}-{interval[1]:.2f})" if interval[0] != interval[1] else ""
    return f"{speedup:.2f}x at {concurrency}{spread}"


MORE_LOAD = ("a longer load per point (workload.num_prompts, workload.duration_s) or gate.repeats narrows the "
             "intervals")


def undecided(name: str, arm: str, others: list[str], value: Any, threshold: Any, detail: str,
              interval: Any = None) -> Verdict:
    """What the points' intervals cannot decide: neither a pass nor a failure, and the sweep's
    exit status 6 (could not decide never reads as passed)."""
    return Verdict(name, arm, None, value, threshold, f"inconclusive: {detail}", inconclusive=True, scope="sweep",
                   others=list(others), undecided=True, interval=list(interval) if interval is not None else None)


def crossover_from(arm: str, floor: float, crossovers: list[dict[str, Any]]) -> list[Verdict]:
    name = "crossover_at_least"
    curves = [x for x in crossovers if x.get("arm") == arm]
    if not curves:
        return [not_evaluable(name, arm, [], None, floor,
                              f"{arm}: no crossover, since no curve has its speedup at two or more concurrencies "
                              f"(sweep workload.concurrency)")]
    return [crossover_verdict(arm, curve, floor) for curve in curves]


def crossover_verdict(arm: str, curve: dict[str, Any], floor: float) -> Verdict:
    """Decided on the crossings of the speedups' interval ends (sweep.json's
    `pays_through_interval`; a record without one: the crossover itself at both ends): passed
    when even the lower ends pay through the floor, failed when even the upper ends stop
    before it, not evaluable when every point pays and the floor lies past the last one swept,
    else undecided."""
    name, others, at = "crossover_at_least", curve.get("with") or [], curve.get("pays_through")
    words = f"{arm} {curve.get('words', '')}".strip()
    low, high = curve.get("pays_through_interval") or (at, at)
    spread = [low, high] if (low, high) != (at, at) and None not in (low, high) else None
    ends = "" if (low, high) == (at, at) else f" (crossings of the speedups' 95% interval ends: {end(low)} to {end(high)})"
    if low is not None and low >= floor:
        return verdict(name, arm, others, True, at, floor, f"{words}: crossover >= {floor:g}{ends}", interval=spread)
    intervals = curve.get("intervals") or [[c, s, s] for c, s in curve.get("points") or []]
    if high is None or (high < floor and not all(hi >= 1.0 for _, _, hi in intervals)):
        if at is None:
            return verdict(name, arm, others, False, None, floor, f"{words}; the crossover must be >= {floor:g}{ends}")
        return verdict(name, arm, others, False, at, floor, f"{words}: crossover below {floor:g}{ends}", interval=spread)
    if all(lo >= 1.0 for _, lo, _ in intervals):
        # it pays at every point swept: the crossover lies somewhere past the last one
        return not_evaluable(name, arm, others, at, floor,
                             f"{words}: the crossover lies past {at:g}; sweep up to {floor:g} or beyond to decide")
    return undecided(name, arm, others, at, floor,
                     f"{words}: could not decide whether the crossover is >= {floor:g}{ends}; {MORE_LOAD}", spread)
