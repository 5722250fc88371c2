"""Sweep gates: verdicts on a whole sweep over concurrency, judged once every point has run.

    sweep_gate.min_speedup_through: {eagle3: {concurrency: 16, ratio: 1.1}}
        eagle3's speedup over the plain arm is >= 1.1 at every swept point with concurrency <= 16
    sweep_gate.crossover_at_least: {eagle3: 8}
        eagle3's crossover (sweep.json `crossovers`: the highest concurrency at which it still
        pays, interpolated) is >= 8

Where other keys are swept too (`drafter.num_steps=2,4`), each of their settings is a curve of
its own and gets its own verdict. A verdict is `passed`, `failed` or `not_evaluable`, the last
with the reason (no point at or below that concurrency, an arm not measured at a point, one
concurrency only, a crossover past the last point swept): the sweep could not tell, so it
neither passes nor fails the sweep. A failed verdict makes the sweep's exit status 1.
"""

from __future__ import annotations

from typing import Any

PASSED, FAILED, NOT_EVALUABLE = "passed", "failed", "not_evaluable"
CONCURRENCY_KEY = "workload.concurrency"


class SweepGateError(ValueError):
    """sweep_gate names an arm that is not a speculative arm, or a threshold out of range (one sentence)."""


# --- the config, checked before any server starts -------------------------------------------

def check(sweep_gate: dict[str, Any], arms: list[str], plain_arm: str | None) -> None:
    """Every arm a sweep gate names is an arm other than the plain one, and every threshold is usable."""
    for key, per_arm in sweep_gate.items():
        for arm, threshold in (per_arm or {}).items():
            where = f"sweep_gate.{key}.{arm}"
            if arm not in arms:
                raise SweepGateError(f"{where} names arm '{arm}', which is not an arm; arms: {', '.join(sorted(arms))}")
            if plain_arm is None:
                raise SweepGateError(f"{where} needs plain_arm (the plain-decoding arm its speedup is measured against)")
            if arm == plain_arm:
                raise SweepGateError(f"{where} names the plain arm '{arm}', which has no speedup over itself; "
                                     f"name a speculative arm")
            check_threshold(where, key, threshold)


def check_threshold(where: str, key: str, threshold: Any) -> None:
    if key == "min_speedup_through":
        if threshold["concurrency"] < 1:
            raise SweepGateError(f"{where}.concurrency must be at least 1, got {threshold['concurrency']}")
        if threshold["ratio"] <= 0:
            raise SweepGateError(f"{where}.ratio is a speedup (e.g. 1.1), greater than 0, got {threshold['ratio']}")
    elif threshold < 1:
        raise SweepGateError(f"{where} is a concurrency, at least 1, got {threshold}")


# --- verdicts on the finished sweep -----------------------------------------------------------

def judge(sweep_gate: dict[str, Any], points: list[dict[str, Any]], crossovers: list[dict[str, Any]]) -> list[dict]:
    """Every sweep gate's verdicts: one per arm and setting of the other swept keys."""
    verdicts = []
    for arm, spec in (sweep_gate.get("min_speedup_through") or {}).items():
        verdicts += min_speedup_through(arm, int(spec["concurrency"]), float(spec["ratio"]), points)
    for arm, floor in (sweep_gate.get("crossover_at_least") or {}).items():
        verdicts += crossover_at_least(arm, float(floor), crossovers)
    return verdicts


def verdict(name: str, arm: str, others: list[str], status: str, value: Any, threshold: Any, detail: str) -> dict:
    return {"name": name, "arm": arm, "with": list(others), "status": status, "value": value,
            "threshold": threshold, "detail": detail}


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


def min_speedup_through(arm: str, through: int, ratio: float, points: list[dict[str, Any]]) -> list[dict]:
    name, curves = "min_speedup_through", {}
    for point in points:
        concurrency = point_concurrency(point, arm)
        if concurrency is not None and concurrency <= through:
            curves.setdefault(others_of(point), []).append((concurrency, point))
    if not curves:
        return [verdict(name, arm, [], NOT_EVALUABLE, None, ratio,
                        f"{arm}: no swept point has concurrency <= {through}, so its speedup there was not measured")]
    return [speedup_curve_verdict(arm, list(others), sorted(found, key=lambda x: x[0]), through, ratio)
            for others, found in curves.items()]


def speedup_curve_verdict(arm: str, others: list[str], found: list[tuple[int, dict]], through: int,
                          ratio: float) -> dict:
    name = "min_speedup_through"
    for concurrency, point in found:
        figures = (point.get("arms") or {}).get(arm) or {}
        if figures.get("speedup") is None:
            why = f"arm status {figures['status']}" if figures.get("status") else "no figures"
            return verdict(name, arm, others, NOT_EVALUABLE, None, ratio,
                           f"{arm}: point {point['label']} (concurrency {concurrency}) has no speedup ({why})")
    speedups = [(c, float(p["arms"][arm]["speedup"])) for c, p in found]
    low_c, low = min(speedups, key=lambda x: x[1])
    if low >= ratio:
        return verdict(name, arm, others, PASSED, low, ratio,
                       f"{arm}: speedup >= {ratio:g}x at every swept concurrency <= {through} "
                       f"(lowest {low:.2f}x at {low_c})")
    short = [f"{s:.2f}x at {c}" for c, s in speedups if s < ratio]
    return verdict(name, arm, others, FAILED, low, ratio,
                   f"{arm}: speedup below {ratio:g}x at concurrency <= {through}: {', '.join(short)}")


def crossover_at_least(arm: str, floor: float, crossovers: list[dict[str, Any]]) -> list[dict]:
    name = "crossover_at_least"
    curves = [x for x in crossovers if x.get("arm") == arm]
    if not curves:
        return [verdict(name, arm, [], NOT_EVALUABLE, None, floor,
                        f"{arm}: no crossover, since no curve has its speedup at two or more concurrencies "
                        f"(sweep workload.concurrency)")]
    return [crossover_verdict(arm, curve, floor) for curve in curves]


def crossover_verdict(arm: str, curve: dict[str, Any], floor: float) -> dict:
    name, others, at = "crossover_at_least", curve.get("with") or [], curve.get("pays_through")
    words = f"{arm} {curve.get('words', '')}".strip()
    if at is None:
        return verdict(name, arm, others, FAILED, None, floor, f"{words}; the crossover must be >= {floor:g}")
    if at >= floor:
        return verdict(name, arm, others, PASSED, at, floor, f"{words}: crossover >= {floor:g}")
    if all(speedup >= 1.0 for _, speedup in curve.get("points") or []):
        # it pays at every point swept: the crossover lies somewhere past the last one
        return verdict(name, arm, others, NOT_EVALUABLE, at, floor,
                       f"{words}: the crossover lies past {at:g}; sweep up to {floor:g} or beyond to decide")
    return verdict(name, arm, others, FAILED, at, floor, f"{words}: crossover below {floor:g}")


def failed(verdicts: list[dict]) -> bool:
    return any(v["status"] == FAILED for v in verdicts)


def describe(v: dict) -> str:
    """One line: `FAILED crossover_at_least eagle3 (with drafter.num_steps=2): ...`."""
    label = {PASSED: "PASSED", FAILED: "FAILED", NOT_EVALUABLE: "NOT EVALUABLE"}[v["status"]]
    others = f" (with {', '.join(v['with'])})" if v["with"] else ""
    return f"{label} {v['name']} {v['arm']}{others}: {v['detail']}"
