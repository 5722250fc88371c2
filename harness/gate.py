"""Gates: thresholds turned into verdicts that are data.

Each function takes an arm's measured result and the experiment's `gate` config and
returns `Verdict`s. A gate with no threshold for the arm is a *skipped* verdict with that
reason, never a silent pass; a threshold on something that was not measured is a failure.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from harness.metrics import ArmResult, break_even_accept_length, metric_value

STATS = ("mean", "p50", "p90", "p99")


@dataclass
class Verdict:
    name: str  # the gate, e.g. "min_output_tok_s" or "max_ttft_ms.p99"
    arm: str
    passed: bool | None  # None: skipped (see detail)
    value: float | None
    threshold: float | None
    detail: str  # the verdict in words
    baseline: float | None = None  # the baseline's value, for comparisons with a past run
    unreliable: bool = False  # too noisy over the repeats to decide (then passed is None)

    @property
    def status(self) -> str:
        if self.unreliable:
            return "unreliable"
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


def min_output_tok_s(arm: str, result: ArmResult, gate) -> list[Verdict]:
    if arm not in gate.min_output_tok_s:
        return [not_configured("min_output_tok_s", arm)]
    verdicts = [at_least("min_output_tok_s", arm, result.output_tok_s, gate.min_output_tok_s[arm], "output throughput", " tok/s")]
    return guard_noise(verdicts, result, ["output_tok_s"], gate)


def max_latency(metric: str, arm: str, result: ArmResult, gate) -> list[Verdict]:
    """`metric` is "ttft_ms" or "itl_ms"; one verdict per configured statistic."""
    limits = gate[f"max_{metric}"].get(arm)
    stats = [s for s in STATS if limits is not None and limits[s] is not None]
    if not stats:
        return [not_configured(f"max_{metric}", arm)]
    distribution = getattr(result, metric)
    label = metric.removesuffix("_ms").upper()
    return [guard_noise([at_most(f"max_{metric}.{s}", arm, getattr(distribution, s), limits[s], f"{label} {s}", " ms")],
                        result, [f"{metric}.{s}"], gate)[0] for s in stats]


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
    return guard_noise([verdict], result, ["accept_length"], gate)


def max_accept_length(arm: str, result: ArmResult, gate) -> list[Verdict]:
    if arm not in gate.max_accept_length:
        return [not_configured("max_accept_length", arm)]
    verdict = at_most("max_accept_length", arm, result.accept_length, gate.max_accept_length[arm], "accept length")
    return guard_noise([verdict], result, ["accept_length"], gate)


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
    verdicts = guard_noise([Verdict("min_speedup", arm, passed, ratio, spec.ratio, detail)], result, ["output_tok_s"], gate)
    return guard_noise(verdicts, plain, ["output_tok_s"], gate)


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
    verdicts = [Verdict(name, arm, passed, result.accept_length, even, detail)]
    verdicts = guard_noise(verdicts, result, ["accept_length", "verify_cycle_ms"], gate)
    return guard_noise(verdicts, plain, ["decode_step_ms"], gate)


# --- comparison with a baseline run ------------------------------------------------------

CHANGE = re.compile(r"^\s*([+-])\s*(\d+(?:\.\d+)?)\s*%\s*$")
DEFAULT_COMPARED = {"output_tok_s": -1, "ttft_ms.p50": +1, "ttft_ms.p99": +1, "itl_ms.p50": +1, "itl_ms.p99": +1}
NOISE_SIGMAS = 3.0  # the noise band is this many robust standard deviations (1.4826 x MAD)


@dataclass(frozen=True)
class Comparison:
    """A typed baseline gate parsed from config: `output_tok_s: "-3%"` may drop by 3 %
    (higher is better); `ttft_ms.p99: "+10%"` may rise by 10 % (lower is better)."""

    metric: str
    allowed: float  # fraction
    higher_is_better: bool

    @classmethod
    def parse(cls, metric: str, text: str) -> "Comparison":
        match = CHANGE.match(str(text))
        if not match:
            raise ValueError(f"gate.compare.{metric}: '{text}' is not a change like \"-3%\" (may drop 3 %) "
                             f"or \"+10%\" (may rise 10 %)")
        return cls(metric, float(match.group(2)) / 100.0, match.group(1) == "-")

    def __str__(self) -> str:
        return f"{self.metric}: {'-' if self.higher_is_better else '+'}{self.allowed:.1%}"


def comparisons(gate) -> list[Comparison]:
    """The configured comparisons; with a baseline and none listed, tok/s and TTFT/ITL p50
    and p99 at gate.tolerance, so pointing at a baseline is enough to gate a merge."""
    if gate.compare:
        return [Comparison.parse(metric, text) for metric, text in gate.compare.items()]
    return [Comparison(metric, gate.tolerance, sign < 0) for metric, sign in DEFAULT_COMPARED.items()]


def baseline_value(arm_block: dict, path: str) -> float | None:
    head, _, stat = path.partition(".")
    value = arm_block.get(head)
    return value.get(stat) if stat and isinstance(value, dict) else value


def noise_band(*spreads: dict | None) -> float:
    """Relative noise of the difference of two measurements, from each one's MAD."""
    parts = [NOISE_SIGMAS * 1.4826 * s["mad"] / s["median"] for s in spreads
             if s and s.get("mad") is not None and s.get("median")]
    return math.sqrt(sum(p * p for p in parts))


def allowed_change(metric: str, old: float, allowed: float, band: float, gate) -> float:
    """The larger of the allowed change and the noise band; for latencies also the
    scheduling-jitter floor (a 0.4 ms move of a 4 ms TTFT is 10 % and still noise)."""
    floor = gate.latency_noise_floor_ms / abs(old) if metric.split(".")[0].endswith("_ms") and old else 0.0
    return max(allowed, band, floor)


def against_baseline(arm: str, result: ArmResult, baseline_arm: dict | None, gate, label: str) -> list[Verdict]:
    if not gate.baseline:
        return [skipped("baseline", arm, "no baseline configured (gate.baseline=<run dir | results.json>)")]
    if baseline_arm is None or not baseline_arm.get("requests"):
        return [skipped("baseline", arm, f"the baseline {label} has no measured arm '{arm}'")]
    return [compare_metric(arm, result, baseline_arm, c, label, gate) for c in comparisons(gate)]


def compare_metric(arm: str, result: ArmResult, baseline_arm: dict, c: Comparison, label: str, gate) -> Verdict:
    name = f"baseline.{c.metric}"
    new, old = metric_value(result, c.metric), baseline_value(baseline_arm, c.metric)
    if old is None or not old:
        return skipped(name, arm, f"the baseline {label} has no {c.metric} for arm '{arm}'")
    if new is None:
        return Verdict(name, arm, False, None, None, f"{arm}: {c.metric} was not measured (baseline {old:.2f})", old)
    change = (new - old) / old
    worse = -change if c.higher_is_better else change  # > 0: a regression
    band = noise_band(result.noise.get(c.metric), (baseline_arm.get("noise") or {}).get(c.metric))
    limit = allowed_change(c.metric, old, c.allowed, band, gate)
    kind = "regression" if worse > 0 else "improvement"
    detail = (f"{arm}: {c.metric} {new:.2f} vs baseline {old:.2f} ({change:+.1%}, a {kind}); allowed "
              f"{limit:.1%} = max(tolerance {c.allowed:.1%}, noise band {band:.1%})")
    if worse > limit:
        detail = f"{arm}: {c.metric} regressed by {worse:.1%} vs baseline {label} ({old:.2f} -> {new:.2f}), more than the allowed {limit:.1%} (max of tolerance {c.allowed:.1%} and noise band {band:.1%})"
    elif -worse > limit:
        detail += ": improved beyond the band"
    return Verdict(name, arm, worse <= limit, new, limit, detail, baseline=old)


# --- GPU telemetry (the `gpu` block of an arm, see harness/telemetry/summary.py) ----------


def no_load_samples(name: str, arm: str, gpu: dict, threshold: float | None) -> list[Verdict] | None:
    """A load that never reached the GPU is a failed measurement, not a pass."""
    if gpu["samples"].get("load", 0) > 0:
        return None
    return [Verdict(name, arm, False, None, threshold,
                    f"{arm}: no GPU samples under load: the window opens when tokens stream and none did "
                    f"long enough past the {gpu.get('ramp_in_s', 0):g} s ramp-in (did the requests fail?)")]


def per_gpu(name: str, arm: str, gpu: dict, threshold: Any, judge) -> list[Verdict]:
    """The shared frame of the GPU gates: skipped without a threshold, failed without load
    samples, otherwise `judge(label, gpu_block)` for every sampled GPU."""
    if threshold is None or threshold == []:
        return [not_configured(name, arm)]
    return no_load_samples(name, arm, gpu, threshold if isinstance(threshold, float) else 0.0) or [
        judge(f"GPU {g.get('index')} ({uuid})", g) for uuid, g in gpu["gpus"].items()]


def min_clock_ratio_under_load(arm: str, gpu: dict, gate) -> list[Verdict]:
    name, floor = "min_clock_ratio_under_load", gate.min_clock_ratio_under_load

    def judge(label: str, g: dict) -> Verdict:
        ratio = g.get("sm_clock_ratio_under_load")
        if ratio is None:
            return Verdict(name, arm, False, None, floor, f"{arm}: {label}: SM clock or its maximum was not measured")
        median = g["load"]["sm_clock_mhz"]["median"]
        return Verdict(name, arm, ratio >= floor, ratio, floor,
                       f"{arm}: {label}: SM clock under load {median:.0f} MHz is {ratio:.2f} of its max "
                       f"{g.get('sm_clock_max_mhz'):.0f} MHz ({'meets' if ratio >= floor else 'is below'} {floor:.2f})")

    return per_gpu(name, arm, gpu, floor, judge)


def no_throttle_reasons_under_load(arm: str, gpu: dict, gate) -> list[Verdict]:
    name, reasons = "throttle_reasons_under_load", list(gate.fail_on_throttle_reasons)

    def judge(label: str, g: dict) -> Verdict:
        seen = {r: f for r, f in g.get("throttle_fraction_under_load", {}).items() if r in reasons and f > 0}
        detail = (f"{arm}: {label}: " + ", ".join(f"{r} in {f:.0%} of load samples" for r, f in sorted(seen.items()))
                  if seen else f"{arm}: {label}: none of {', '.join(reasons)} under load")
        return Verdict(name, arm, not seen, max(seen.values(), default=0.0), 0.0, detail)

    return per_gpu(name, arm, gpu, reasons, judge)


def min_gpu_util_under_load(arm: str, gpu: dict, gate) -> list[Verdict]:
    name, floor = "min_gpu_util_under_load_pct", gate.min_gpu_util_under_load_pct

    def judge(label: str, g: dict) -> Verdict:
        util = (g["load"].get("gpu_util_pct") or {}).get("median")
        return at_least(name, arm, util, floor, f"{label} utilization under load (median)", " %")

    return per_gpu(name, arm, gpu, floor, judge)
