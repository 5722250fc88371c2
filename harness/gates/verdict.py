"""A verdict: one gate's judgement of one arm (or a sweep, or a capacity search), as data; and the small builders every gate uses (at least, at most, skipped)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.measure.metrics import ArmResult


@dataclass
class Verdict:
    name: str  # the gate, e.g. "min_output_tok_s" or "max_ttft_ms.p99"
    arm: str
    passed: bool | None  # None: skipped (see detail)
    value: float | None
    threshold: float | None
    detail: str  # the verdict in words
    baseline: float | None = None  # the reference run's value (gate.baseline); the key records keep
    unreliable: bool = False  # too noisy over the repeats to decide (then passed is None)
    inconclusive: bool = False  # the data cannot tell (passed follows gate.inconclusive: fail, warn, pass)
    interval: list[float] | None = None  # the relative change's interval, where one was computed

    @property
    def status(self) -> str:
        if self.unreliable:
            return "unreliable"
        if self.inconclusive:
            return "inconclusive"
        return {True: "passed", False: "failed", None: "skipped"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


def skipped(name: str, arm: str, why: str) -> Verdict:
    return Verdict(name, arm, None, None, None, why)


def not_configured(name: str, arm: str) -> Verdict:
    return skipped(name, arm, f"no threshold configured for arm '{arm}' (gate.{name.split('.')[0]})")


def fmt(value: float | None, unit: str = "") -> str:
    return "not measured" if value is None else f"{value:.2f}{unit}"


def at_least(name: str, arm: str, value: float | None, floor: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, floor, f"{arm}: {what} was not measured (threshold ≥ {floor:g}{unit})")
    passed = value >= floor
    relation = "meets" if passed else "is below"
    return Verdict(name, arm, passed, value, floor, f"{arm}: {what} {value:.2f}{unit} {relation} the floor {floor:g}{unit}")


def at_most(name: str, arm: str, value: float | None, ceiling: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, ceiling, f"{arm}: {what} was not measured (threshold ≤ {ceiling:g}{unit})")
    passed = value <= ceiling
    relation = "is within" if passed else "exceeds"
    return Verdict(name, arm, passed, value, ceiling, f"{arm}: {what} {value:.2f}{unit} {relation} the limit {ceiling:g}{unit}")


def guard_noise(verdicts: list[Verdict], result: ArmResult, paths: list[str], gate) -> list[Verdict]:
    """A decision on a metric whose coefficient of variation over the repeats exceeds
    gate.max_cv is noise: the verdict says so instead of passing or failing."""
    noisy = [(p, result.noise[p]["cv"]) for p in paths
             if (result.noise.get(p) or {}).get("cv") is not None and result.noise[p]["cv"] > gate.max_cv]
    if not noisy:
        return verdicts
    why = ", ".join(f"{p} CV {cv:.1%}" for p, cv in noisy)
    for verdict in verdicts:
        if verdict.passed is not None:
            verdict.passed, verdict.unreliable = None, True
            verdict.detail = f"unreliable ({why} over {result.repeats} repeats > max_cv {gate.max_cv:.1%}): {verdict.detail}"
    return verdicts


def inconclusive_passes(gate) -> bool | None:
    """gate.inconclusive: fail -> a failed test; warn -> a passing test with a warning; pass -> passing."""
    return {"fail": False, "warn": True, "pass": True}[gate.inconclusive]
