"""Runs that cannot be trusted for speed: the guards that make a speed verdict inconclusive
when what it measured was not the build's speed (docs/verdicts.md "Runs that cannot be trusted").

* **a load too short**: a throughput-type figure (the registry's rates over the measured
  window: output tok/s, requests/s, and every ratio of them, a speedup) needs at least
  ``gate.min_load_requests`` completed measured requests over at least ``gate.min_load_s``
  of measured window (both over the arm's repeats). Its window's two ends are stamped by the
  client; a short one is as much the stamps' as the server's, and one request is a stream's
  speed, not a load's. Too short on either side of a comparison is inconclusive either way.
* **a GPU that was slowed** (throttled for a reason in ``gate.fail_on_throttle_reasons``, or
  below ``gate.min_clock_ratio_under_load`` under load; the words are
  :func:`harness.gates.reference.gpu_trouble`'s): it can only have made the side it ran
  slower. A verdict that this side is fast enough: its failure is inconclusive (the speed
  measured is the GPU's, not the build's), its pass stands. The side it is compared with
  (the plain arm of a speedup, the reference run): its slowness flatters this side, so a
  pass is inconclusive and a failure stands.

The client's own lag is the third such cause (:mod:`harness.gates.client_bound`). The GPU
gates themselves stay as configured: they are the box check the user asked for.
"""

from __future__ import annotations

from typing import Any

from harness.gates.verdict import Verdict, inconclusive_passes, untrusted
from harness.measure.registry import metric_value, resolve

GPU_WORDS = "the speed measured is the GPU's, not the build's"


def speed_figure(path: str) -> bool:
    """A figure a slowed GPU (or client) moves: the registry's latency, decode-time and
    throughput figures (not an accept length, a count or an energy)."""
    try:
        return bool(resolve(path).client)
    except KeyError:
        return False


SPEED_GATES = ("min_output_tok_s", "max_ttft_ms", "max_itl_ms", "min_speedup", "accept_length_at_least_break_even")


def speed_verdict(verdict: Verdict) -> bool:
    """A verdict on the build's speed: a throughput floor, a latency limit, a speedup, break-even,
    or a speed figure against the reference run (not an accept length, a failed request, a GPU check)."""
    gate, _, figure = verdict.name.partition(".")
    return gate in SPEED_GATES or (gate == "baseline" and speed_figure(figure))


def window_figure(path: str) -> bool:
    """A rate over the measured window (the output and request rates): what a short load blurs."""
    try:
        return resolve(path).client == "throughput"
    except KeyError:
        return False


def load_size(result: Any) -> tuple[int | None, float | None]:
    """(completed measured requests, measured window s) of an ArmResult or a results.json arm
    block; None where not known. A measured rate always has both above 0 (metrics.summarize
    sets none without), so 0 is a result that does not say (an older record, a bare one)."""
    ok, window = metric_value(result, "requests.ok"), metric_value(result, "duration_s")
    return (int(ok) if ok else None), (float(window) if window else None)


def too_short(result: Any, gate: Any) -> str:
    """Why the load behind `result` is too short to be steady, in words ("" when it is not,
    or when its size is not known, e.g. an older record)."""
    ok, window = load_size(result)
    short = []
    if ok is not None and ok < gate.min_load_requests:
        short.append(f"{ok} completed measured request(s) < gate.min_load_requests={gate.min_load_requests}")
    if window is not None and window < gate.min_load_s:
        short.append(f"a measured window of {window:.2f} s < gate.min_load_s={gate.min_load_s:g}")
    return " and ".join(short)


def guard_short_load(verdicts: list[Verdict], sides: dict[str, Any], gate: Any) -> list[Verdict]:
    """A decided throughput-type verdict whose load (on any side: `sides` names each, e.g.
    {"eagle3": result, "baseline": plain}) was too short: inconclusive either way (a short
    window's error has no direction), naming what would decide it. A verdict on a figure that
    was not measured stays as it is: nothing to distrust, a failed measurement."""
    shorts = {name: why for name, result in sides.items() if result is not None and (why := too_short(result, gate))}
    if not shorts:
        return verdicts
    what = "; ".join(f"{name}: {why}" for name, why in shorts.items())
    sizes = ", ".join((f"{name} " if len(sides) > 1 else "") + size_words(sides[name]) for name in shorts)
    for verdict in verdicts:
        if verdict.status in ("passed", "failed") and verdict.value is not None:
            untrusted(verdict, f"load too short: {sizes}",
                      f"the load was too short to be steady ({what}); a longer load (workload.num_prompts or "
                      f"workload.duration_s, or gate.repeats) would decide it", inconclusive_passes(gate))
    return verdicts


def size_words(result: Any) -> str:
    """`2 request(s) in 0.26 s` (a size not known reads `?`)."""
    ok, window = load_size(result)
    return f"{'?' if ok is None else ok} request(s) in {'?' if window is None else f'{window:.2f}'} s"


def cause_of(trouble: str) -> str:
    """`GPU 0 was throttled (HwSlowdown in 40% of load samples); GPU 1 ran at ...` -> `GPU 0 throttled, GPU 1 slow`."""
    parts = [part.strip() for part in trouble.split(";") if part.strip()]
    return ", ".join(part.split(" (")[0].replace(" was throttled", " throttled").split(" ran at")[0] +
                     (" slow" if " ran at" in part else "") for part in parts)


def guard_gpu(verdicts: list[Verdict], gate: Any, mine: str, theirs: str = "", their_name: str = "") -> list[Verdict]:
    """Speed verdicts that this side is fast enough, where this side's GPUs were slowed (`mine`,
    gpu_trouble's words) or the side it is compared with (`theirs`, named `their_name`):
    a failure on a slowed side, or a pass beside a slowed other side, is inconclusive; the
    other outcome stands and says what it stood through."""
    passes = inconclusive_passes(gate)
    for verdict in verdicts:
        if verdict.status == "failed" and mine:
            untrusted(verdict, cause_of(mine), f"{mine}: {GPU_WORDS}", passes)
        elif verdict.status == "passed" and theirs:
            untrusted(verdict, f"{their_name}: {cause_of(theirs)}",
                      f"under {their_name}, {theirs}: a pass beside a slowed GPU is the GPU's, not the build's",
                      passes)
        elif verdict.status == "passed" and mine:
            verdict.detail += f" (although {mine}: the build is at least this fast)"
        elif verdict.status == "failed" and theirs:
            verdict.detail += f" (although under {their_name}, {theirs}: that only flattered this side)"
    return verdicts
