"""Runs that cannot be trusted for speed: the guards that make a verdict inconclusive when what
it measured was not the build's speed (docs/verdicts.md "Runs that cannot be trusted"), applied
by the gate registry to every decided verdict of a gate that declares what it judges
(:class:`Trust`, passed to :func:`harness.gates.registry.register`), in one order (:func:`guard`):

1. **the client's lag** (:mod:`harness.gates.client_bound`): a figure that was the client's,
   not the server's, on this side (a failure is inconclusive, a pass on a figure lag only
   worsens stands) or on the side it is compared with (it flatters this side: a pass is
   inconclusive; in a reference run, neither outcome stands). First: a figure that is not the
   server's at all is not the server's noise, load or GPU either.
2. **noise over the repeats** (:func:`harness.gates.verdict.guard_noise`): a figure whose CV over
   the repeats exceeds ``gate.max_cv`` is unreliable (a gate whose limit already holds the
   noise, the reference gate's band, declares ``noise=False``).
3. **a load too short**: a rate over the measured window (the registry's ``client="throughput"``
   figures: output tok/s, requests/s, and every ratio of them, a speedup) needs at least
   ``gate.min_load_requests`` completed measured requests over at least ``gate.min_load_s`` of
   measured window (both over the arm's repeats), on every side it is measured on. Its
   window's two ends are stamped by the client; a short one is as much the stamps' as the
   server's. Too short on either side is inconclusive either way.
4. **a GPU that was slowed** (throttled for a reason in ``gate.fail_on_throttle_reasons``, or
   below ``gate.min_clock_ratio_under_load`` under load; :func:`gpu_trouble`'s words), for a
   speed figure (any registry figure with a ``client`` kind: latency, decode time,
   throughput): it can only have made the side it ran slower. This side slowed: a failure is
   inconclusive, a pass stands; the side compared with slowed: a pass is inconclusive, a
   failure stands.

A verdict's sensitivity to speed is its figures' registry entries' (:func:`speed_figure`), never
a list of gate names: a new gate on a registry speed metric is guarded by declaring its figures.
A verdict without a figure against a threshold (not measured, not measurable) is a failed
measurement, nothing to distrust: the guards leave it. The GPU gates themselves stay as
configured: they are the box check the user asked for; but the GPU utilization under load is
as much the load's as the GPU's, so a client that could not send the load asked for (its output
rate client-bound) makes a failed utilization inconclusive (``Trust(lag_only=True)``): the GPU
idled waiting for requests the client sent late.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from harness.gates.client_bound import bound_figures, guard_client_bound, labels
from harness.gates.registry import GATES
from harness.gates.verdict import Verdict, guard_noise, inconclusive_passes, untrusted
from harness.measure.registry import metric_value, resolve

GPU_WORDS = "the speed measured is the GPU's, not the build's"


# --- what a gate declares ----------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """The registry metric paths one verdict judges: of this arm (`mine`) and of the side it is
    compared with (`theirs`: the plain arm of a speedup, the reference run)."""

    mine: tuple[str, ...] = ()
    theirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Side:
    """One side of a verdict as the guards see it."""

    name: str  # how the guards' words name it ("eagle3", "the reference run")
    result: Any  # its ArmResult or results.json arm block (None: not measured)
    gpu: Optional[dict] = None  # its telemetry block (harness/telemetry/summary.py)
    reference: bool = False  # a reference run: a figure of it that was the client's decides nothing either way


def alone(ctx: Any) -> Optional[Side]:
    return None


@dataclass(frozen=True)
class Trust:
    """What a gate declares so the registry guards its verdicts: from a verdict's name, the
    figures it judges (a name alone, so a verdict read back from a record is classified the
    same); the side its verdicts compare this arm with, from the context; whether the
    repeats' noise decides; and how a comparison names this arm's run."""

    figures: Callable[[str], Figures]
    against: Callable[[Any], Optional[Side]] = alone
    noise: bool = True  # False: the gate's own limit holds the repeats' noise (the reference gate's band)
    lag_only: bool = False  # True: only the client's lag (a GPU gate whose figure is no rate of the window)
    verdicts: str = ""  # the name its verdicts carry before any ".", when not the gate's ("baseline")
    this: str = ""  # how the guards name this arm's side ("this run"); "": the arm's name

    def apply(self, verdicts: list[Verdict], ctx: Any) -> list[Verdict]:
        other = self.against(ctx)
        this = Side(self.this or ctx.arm, ctx.result, ctx.gpu)
        return [guard(v, self.figures(v.name), this, other, ctx.gate, self.noise, self.lag_only) for v in verdicts]


def one(path: str) -> Callable[[str], Figures]:
    """Every verdict of the gate judges this arm's `path`."""
    return lambda name: Figures((path,))


# --- the guards, in their one order ------------------------------------------------------------

def guard(verdict: Verdict, figures: Figures, this: Side, other: Optional[Side], gate: Any,
          noise: bool = True, lag_only: bool = False) -> Verdict:
    """The trust guards on one verdict, in the module docstring's order (`lag_only`: the first)."""
    if verdict.value is None or verdict.threshold is None or this.result is None:
        return verdict  # a failed measurement, a skipped gate: nothing to distrust
    sides = [(this, figures.mine)] + ([(other, figures.theirs)] if other is not None and other.result is not None else [])
    for side, paths in sides:
        guard_lag(verdict, side, paths, gate, divisor=side is not this)
    if lag_only:
        return verdict
    if noise:
        for side, paths in sides:
            guard_noise([verdict], side.result, list(paths), gate)
    windowed = {side.name: side.result for side, paths in sides if any(map(window_figure, paths))}
    if windowed:
        guard_short_load([verdict], windowed, gate)
    slowed = [slowed_words(side.gpu, gate) if any(map(speed_figure, paths)) else "" for side, paths in sides]
    mine, theirs = slowed[0], (slowed[1] if len(slowed) > 1 else "")
    if mine or theirs:
        if verdict.status == "inconclusive" and mine and not verdict.cause:
            verdict.detail += f", while {mine}"
        guard_gpu([verdict], gate, mine, theirs, sides[-1][0].name if theirs else "")
    return verdict


def guard_lag(verdict: Verdict, side: Side, paths: tuple[str, ...], gate: Any, divisor: bool) -> None:
    """Step 1 for one side. A reference run's figure that was the client's decides nothing
    either way (its figure was not the server's); another compared side's flatters this one."""
    if not side.reference:
        guard_client_bound([verdict], side.result, list(paths), inconclusive_passes(gate), divisor=divisor)
        return
    bound = [p for p in paths if p in bound_figures(side.result)]
    if bound and verdict.status in ("passed", "failed"):
        verdict.inconclusive, verdict.passed = True, inconclusive_passes(gate)
        verdict.detail = (f"inconclusive, client-bound in {side.name}: its {labels(bound)} was the client's lag, "
                          f"not the server's (see its client block): {verdict.detail}")


# --- which figures are speed ---------------------------------------------------------------------

def speed_figure(path: str) -> bool:
    """A figure a slowed GPU (or client) moves: the registry's latency, decode-time and
    throughput figures (not an accept length, a count or an energy)."""
    try:
        return bool(resolve(path).client)
    except KeyError:
        return False


def window_figure(path: str) -> bool:
    """A rate over the measured window (the output and request rates): what a short load blurs."""
    try:
        return resolve(path).client == "throughput"
    except KeyError:
        return False


def judged(verdict: Verdict) -> Figures:
    """The figures a verdict judges, as its gate declares them (none: a gate without a Trust)."""
    prefix = verdict.name.partition(".")[0]
    for registered in GATES.values():
        trust = registered.trust
        if trust is not None and registered.scope == verdict.scope and (trust.verdicts or registered.name) == prefix:
            return trust.figures(verdict.name)
    return Figures()


def speed_verdict(verdict: Verdict) -> bool:
    """A verdict on the build's speed: one that judges a speed figure on either side (a
    throughput floor, a latency limit, a speedup, break-even, a speed figure against the
    reference run; not an accept length, a failed request, a GPU check)."""
    figures = judged(verdict)
    return any(map(speed_figure, figures.mine + figures.theirs))


# --- a load too short --------------------------------------------------------------------------

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


# --- a GPU that was slowed ---------------------------------------------------------------------

def gpu_trouble(gpu: dict, gate: Any) -> str:
    """The GPUs' trouble under load in words ("" when none was seen)."""
    troubles = []
    for uuid, block in (gpu.get("gpus") or {}).items():
        index = block.get("index", uuid)
        reasons = {r: share for r, share in (block.get("throttle_fraction_under_load") or {}).items()
                   if share and r in set(gate.fail_on_throttle_reasons)}
        if reasons:
            named = ", ".join(f"{r} in {share:.0%} of load samples" for r, share in sorted(reasons.items()))
            troubles.append(f"GPU {index} was throttled ({named})")
            continue
        ratio = block.get("sm_clock_ratio_under_load")
        if gate.min_clock_ratio_under_load is not None and ratio is not None and ratio < gate.min_clock_ratio_under_load:
            troubles.append(f"GPU {index} ran at {ratio:.0%} of its max SM clock under load")
    return "; ".join(troubles)


def slowed_words(gpu: Optional[dict], gate: Any) -> str:
    """A side's GPUs' trouble under load in words ("" when none, or no telemetry)."""
    return gpu_trouble(gpu, gate) if gpu and not gpu.get("unavailable") else ""


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
