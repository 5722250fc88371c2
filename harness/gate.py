"""Gates: thresholds turned into verdicts that are data.

Each function takes an arm's measured result and the experiment's `gate` config and
returns `Verdict`s. A gate with no threshold for the arm is a *skipped* verdict with that
reason, never a silent pass; a threshold on something that was not measured is a failure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.metrics import ArmResult, break_even_accept_length

STATS = ("mean", "p50", "p90", "p99")


@dataclass
class Verdict:
    name: str  # the gate, e.g. "min_output_tok_s" or "max_ttft_ms.p99"
    arm: str
    passed: bool | None  # None: skipped (see detail)
    value: float | None
    threshold: float | None
    detail: str  # the verdict in words

    @property
    def status(self) -> str:
        return {True: "passed", False: "failed", None: "skipped"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def min_output_tok_s(arm: str, result: ArmResult, gate) -> list[Verdict]:
    if arm not in gate.min_output_tok_s:
        return [not_configured("min_output_tok_s", arm)]
    return [at_least("min_output_tok_s", arm, result.output_tok_s, gate.min_output_tok_s[arm], "output throughput", " tok/s")]


def max_latency(metric: str, arm: str, result: ArmResult, gate) -> list[Verdict]:
    """`metric` is "ttft_ms" or "itl_ms"; one verdict per configured statistic."""
    limits = gate[f"max_{metric}"].get(arm)
    stats = [s for s in STATS if limits is not None and limits[s] is not None]
    if not stats:
        return [not_configured(f"max_{metric}", arm)]
    distribution = getattr(result, metric)
    label = metric.removesuffix("_ms").upper()
    return [
        at_most(f"max_{metric}.{s}", arm, getattr(distribution, s), limits[s], f"{label} {s}", " ms") for s in stats
    ]


def max_failed_requests(arm: str, result: ArmResult, gate) -> list[Verdict]:
    allowed = gate.max_failed_requests
    failed = result.requests_failed
    if result.requests_ok + failed == 0:
        return [Verdict("max_failed_requests", arm, False, 0, allowed, f"{arm}: no measured request completed or failed: nothing was measured")]
    if failed <= allowed:
        return [Verdict("max_failed_requests", arm, True, failed, allowed, f"{arm}: {failed} of {result.requests_ok + failed} requests failed (allowed {allowed})")]
    worst = max(result.errors.items(), key=lambda kv: kv[1], default=("unknown error", failed))
    return [
        Verdict(
            "max_failed_requests", arm, False, failed, allowed,
            f"{arm}: {failed} of {result.requests_ok + failed} requests failed (allowed {allowed}); most common error ({worst[1]}x): {worst[0]}",
        )
    ]


def min_accept_length(arm: str, result: ArmResult, gate) -> list[Verdict]:
    if arm not in gate.min_accept_length:
        return [not_configured("min_accept_length", arm)]
    verdict = at_least("min_accept_length", arm, result.accept_length, gate.min_accept_length[arm], "accept length")
    if result.accept_length_source == "server_cumulative":
        verdict.detail += " (server-cumulative fallback: includes warm-up and other traffic)"
    return [verdict]


def min_speedup(arm: str, result: ArmResult, gate, results: dict[str, ArmResult]) -> list[Verdict]:
    spec = gate.min_speedup.get(arm)
    if spec is None:
        return [not_configured("min_speedup", arm)]
    plain = results.get(spec.over)
    if plain is None:
        return [skipped("min_speedup", arm, f"arm '{spec.over}' was not measured in this run, so there is nothing to compare with")]
    if result.output_tok_s is None or not plain.output_tok_s:
        return [Verdict("min_speedup", arm, False, None, spec.ratio, f"{arm}: speedup over {spec.over} not measurable (output tok/s {fmt(result.output_tok_s)} vs {fmt(plain.output_tok_s)})")]
    ratio = result.output_tok_s / plain.output_tok_s
    passed = ratio >= spec.ratio
    words = "faster than" if ratio > 1 else "slower than" if ratio < 1 else "as fast as"
    detail = (
        f"{arm} is {words} {spec.over}: {result.output_tok_s:.1f} tok/s is {ratio:.2f}x of "
        f"{spec.over}'s {plain.output_tok_s:.1f} tok/s (gate: ≥ {spec.ratio:.2f}x)"
    )
    return [Verdict("min_speedup", arm, passed, ratio, spec.ratio, detail)]


def accept_length_at_least_break_even(arm: str, result: ArmResult, gate, plain_arm: str | None, results: dict[str, ArmResult]) -> list[Verdict]:
    name = "accept_length_at_least_break_even"
    if arm not in gate.accept_length_at_least_break_even:
        return [not_configured(name, arm)]
    plain = results.get(plain_arm) if plain_arm else None
    if plain is None:
        return [skipped(name, arm, f"plain arm '{plain_arm}' was not measured in this run, so break-even is unknown")]
    if result.verify_cycle_ms is None or plain.decode_step_ms is None or result.accept_length is None:
        return [Verdict(name, arm, False, result.accept_length, None,
                        f"{arm}: break-even not measurable (verify cycle {fmt(result.verify_cycle_ms, ' ms')}, "
                        f"plain step {fmt(plain.decode_step_ms, ' ms')}, accept length {fmt(result.accept_length)})")]
    even = break_even_accept_length(result.verify_cycle_ms, plain.decode_step_ms)
    passed = result.accept_length >= even
    why = (f"verify cycle {result.verify_cycle_ms:.1f} ms ÷ {plain_arm}'s decode step {plain.decode_step_ms:.1f} ms")
    if passed:
        detail = f"{arm}: accept length {result.accept_length:.2f} is at or above break-even {even:.2f} ({why})"
    else:
        detail = (f"{arm}: accept length {result.accept_length:.2f} is below break-even {even:.2f} ({why}): "
                  f"speculation costs more per cycle than it gains")
    return [Verdict(name, arm, passed, result.accept_length, even, detail)]
