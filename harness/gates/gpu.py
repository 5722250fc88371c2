"""GPU telemetry gates (suites/test_gpu.py) on the `gpu` block of an arm (harness/telemetry/summary.py): SM clock under load, throttle reasons, utilization, joules per token."""

from __future__ import annotations

from typing import Any

from harness.gates.verdict import inconclusive_passes, Verdict, skipped, not_configured, at_least
from harness.gates.registry import GateContext, register, keyed_arms
from harness.gates.trust import Trust, one
from harness.measure.registry import OUTPUT_RATE


# --- GPU telemetry (the `gpu` block of an arm, see harness/telemetry/summary.py) ----------------


def telemetry_missing(name: str, ctx: GateContext, threshold: Any) -> list[Verdict] | None:
    """Telemetry off or unavailable here (no NVIDIA driver) decides nothing: skipped. Telemetry
    that was configured but recorded nothing is a failed measurement."""
    source = ctx.telemetry_source
    if source == "off":
        return [skipped(name, ctx.arm, "telemetry is off for this arm (telemetry=nvml, smi or sim samples the GPUs)")]
    if ctx.gpu is None:
        return [Verdict(name, ctx.arm, False, None, threshold,
                        f"telemetry={source} was configured but recorded nothing for arm '{ctx.arm}'")]
    if ctx.gpu.get("unavailable"):
        return [skipped(name, ctx.arm, str(ctx.gpu["unavailable"]))]
    return None


def no_load_samples(name: str, arm: str, gpu: dict, threshold: float | None, gate: Any) -> list[Verdict] | None:
    """No sample under load. A load that never reached the GPU is a failed measurement; a
    load that streamed, but only within the ramp-in left out while clocks boost, is too
    short to judge: inconclusive (gate.inconclusive decides), said in those words."""
    if gpu["samples"].get("load", 0) > 0:
        return None
    ramp_in, longest = gpu.get("ramp_in_s", 0) or 0, gpu.get("longest_load_window_s")
    if longest is not None and longest < ramp_in + 2 * (gpu.get("interval_s") or 0):
        return [Verdict(name, arm, inconclusive_passes(gate), None, threshold,
                        f"{arm}: the load was too short to sample the GPUs under load: tokens streamed for "
                        f"{longest:.2f} s (the longest of {gpu.get('load_windows', 1)} load window(s)), all within "
                        f"the first {ramp_in:g} s that telemetry.ramp_in_s leaves out while clocks boost; a longer "
                        f"load (workload.num_prompts, max_tokens or duration_s) can be judged", inconclusive=True,
                        cause="load too short to sample the GPUs under load")]
    if not gpu.get("load_windows"):
        return [Verdict(name, arm, False, None, threshold,
                        f"{arm}: no GPU samples under load: no token of a measured request streamed, so the "
                        f"load window never opened (did the requests fail?)")]
    return [Verdict(name, arm, False, None, threshold,
                    f"{arm}: no GPU samples under load: tokens streamed for {longest or 0:.2f} s past the "
                    f"{ramp_in:g} s ramp-in but no sample was read then (telemetry.interval_s "
                    f"{gpu.get('interval_s')} s; was the sampler starved?)")]


def per_gpu(name: str, ctx: GateContext, threshold: Any, judge) -> list[Verdict]:
    """The shared frame of the GPU gates: skipped without telemetry or a threshold, failed
    without load samples, otherwise `judge(label, gpu_block)` for every sampled GPU."""
    number = threshold if isinstance(threshold, float) else None
    if (missing := telemetry_missing(name, ctx, number)) is not None:
        return missing
    if threshold is None or threshold == []:
        return [not_configured(name, ctx.arm)]
    gpu = ctx.gpu
    return no_load_samples(name, ctx.arm, gpu, number if number is not None else 0.0, ctx.gate) or [
        judge(f"GPU {g.get('index')} ({uuid})", g) for uuid, g in gpu["gpus"].items()]


@register("sm_clock_under_load", "gpu", ("min_clock_ratio_under_load",))
def min_clock_ratio_under_load(ctx: GateContext) -> list[Verdict]:
    """Every GPU's SM clock under load at least gate.min_clock_ratio_under_load of its maximum."""
    name, arm, floor = "min_clock_ratio_under_load", ctx.arm, ctx.gate.min_clock_ratio_under_load

    def judge(label: str, g: dict) -> Verdict:
        ratio = g.get("sm_clock_ratio_under_load")
        if ratio is None:
            return Verdict(name, arm, False, None, floor, f"{arm}: {label}: SM clock or its maximum was not measured")
        median = g["load"]["sm_clock_mhz"]["median"]
        return Verdict(name, arm, ratio >= floor, ratio, floor,
                       f"{arm}: {label}: SM clock under load {median:.0f} MHz is {ratio:.2f} of its max "
                       f"{g.get('sm_clock_max_mhz'):.0f} MHz ({'meets' if ratio >= floor else 'is below'} {floor:.2f})")

    return per_gpu(name, ctx, floor, judge)


@register("no_slowdown_reasons_under_load", "gpu", ("fail_on_throttle_reasons",))
def no_throttle_reasons_under_load(ctx: GateContext) -> list[Verdict]:
    """No GPU reports any of gate.fail_on_throttle_reasons while under load."""
    name, arm, reasons = "throttle_reasons_under_load", ctx.arm, list(ctx.gate.fail_on_throttle_reasons)

    def judge(label: str, g: dict) -> Verdict:
        seen = {r: f for r, f in g.get("throttle_fraction_under_load", {}).items() if r in reasons and f > 0}
        detail = (f"{arm}: {label}: " + ", ".join(f"{r} in {f:.0%} of load samples" for r, f in sorted(seen.items()))
                  if seen else f"{arm}: {label}: none of {', '.join(reasons)} under load")
        return Verdict(name, arm, not seen, max(seen.values(), default=0.0), 0.0, detail)

    return per_gpu(name, ctx, reasons, judge)


# a client that sent late left the GPU idle: its utilization under load is the client's too
@register("gpu_utilization_under_load", "gpu", ("min_gpu_util_under_load_pct",),
          trust=Trust(one(OUTPUT_RATE), lag_only=True))
def min_gpu_util_under_load(ctx: GateContext) -> list[Verdict]:
    """Every GPU's median utilization under load at least gate.min_gpu_util_under_load_pct."""
    name, arm, floor = "min_gpu_util_under_load_pct", ctx.arm, ctx.gate.min_gpu_util_under_load_pct

    def judge(label: str, g: dict) -> Verdict:
        util = (g["load"].get("gpu_util_pct") or {}).get("median")
        return at_least(name, arm, util, floor, f"{label} utilization under load (median)", " %")

    return per_gpu(name, ctx, floor, judge)


@register("joules_per_token", "gpu", ("max_joules_per_token",), keyed_arms("max_joules_per_token"))
def max_joules_per_token(ctx: GateContext) -> list[Verdict]:
    """GPU energy per output token over the load window at most gate.max_joules_per_token[arm]
    (all the arm's GPUs together; harness/telemetry/energy.py says how it is measured)."""
    name, arm, gate = "max_joules_per_token", ctx.arm, ctx.gate
    if arm not in gate.max_joules_per_token:
        return [not_configured(name, arm)]
    ceiling = float(gate.max_joules_per_token[arm])
    if (missing := telemetry_missing(name, ctx, ceiling)) is not None:
        return missing
    if (short := no_load_samples(name, arm, ctx.gpu, ceiling, gate)) is not None:
        return short
    energy = ctx.gpu.get("energy") or {}
    value = energy.get("joules_per_token")
    if value is None:
        return [energy_unmeasured(name, arm, energy, ceiling, gate)]
    return [Verdict(name, arm, value <= ceiling, value, ceiling,
                    f"{arm}: {value:.3f} J per output token ({energy['joules']:.1f} J over {energy['seconds']:.2f} s "
                    f"of load, {energy['output_tokens']} tokens, {energy_method_words(energy['method'])}) "
                    f"{'is within' if value <= ceiling else 'exceeds'} the limit {ceiling:g} J/token")]


def energy_method_words(method: str | None) -> str:
    return {"energy_counter": "from the GPUs' energy counters",
            "power_integration": "from power samples integrated over time (no energy counter)",
            "mixed": "from energy counters and, where they were missing, integrated power"}.get(str(method), str(method))


def energy_unmeasured(name: str, arm: str, energy: dict, ceiling: float, gate: Any) -> Verdict:
    """No joules per token: a load too short to difference two samples is inconclusive;
    anything else (nothing read, no energy block, no token in the window) failed to measure."""
    why = energy.get("why") or "the gpu block has no energy figures"
    if energy.get("why_kind") == "too_short":
        return Verdict(name, arm, inconclusive_passes(gate), None, ceiling,
                       f"{arm}: energy per token cannot be judged: {why}; a longer load can be judged "
                       f"(gate.inconclusive={gate.inconclusive})", inconclusive=True,
                       cause="load too short to sample the GPUs under load")
    return Verdict(name, arm, False, None, ceiling, f"{arm}: energy per token was not measured: {why}")
