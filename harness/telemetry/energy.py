"""Energy over the measured load, per GPU and in total, and joules per output token.

**Which joules.** Only ``load`` samples count (tokens streaming, after the ramp-in), one
load window at a time (a repeat's warm-up and the gaps between repeats are not load).
In each window a GPU's energy is taken between its first and last load sample:

* ``energy_counter``: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  mJ since the driver loaded, Volta and newer; the simulator's GPUs have one too),
  differenced between consecutive readings and summed. It counts every joule, however
  the power moved between two samples; the driver updates it every ~20-100 ms, so each
  window's ends are uncertain by about one update.
* ``power_integration``: where the counter is not read (``NVMLError_NotSupported``, or
  ``nvidia-smi``, whose ``--query-gpu`` has no energy field), the power samples integrated
  over time by the trapezoid rule. Coarser: what happens between two samples is a straight
  line, and on Ampere and newer NVML's power reading is itself a 1-second average, so it
  lags the load by about half a second at each end of a window.

A counter that goes *backwards* between two readings was reset (a driver reload); that
one interval is bridged by integrating power, and a note says so.

**Which tokens.** Every output token whose chunk reached the client within the same span
(after a GPU's first and up to its last load sample of a window) is counted against that
GPU's joules, so numerator and denominator cover the same seconds. The client sees a
token a network hop after the GPU made it, so each edge of a span may be off by at most
one chunk per stream. An arm's joules per token is the sum over its GPUs of each GPU's
joules ÷ its tokens: all GPUs of a tensor-parallel server work on every token.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from harness.telemetry.base import GpuSample
from harness.telemetry.sampler import Telemetry, window_of

COUNTER, POWER = "energy_counter", "power_integration"


def trapezoid_j(samples: Sequence[GpuSample]) -> float | None:
    """Joules from power samples (W) over their times (s); None with fewer than 2 readings."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def counter_j(samples: Sequence[GpuSample], notes: list[str], label: str) -> float | None:
    """Joules from the energy counter's readings, consecutive differences summed; an
    interval where it went backwards (a reset) is bridged with that interval's power."""
    read = [s for s in samples if s.energy_mj is not None]
    joules = 0.0
    for a, b in zip(read, read[1:]):
        delta_mj = b.energy_mj - a.energy_mj  # type: ignore[operator]
        if delta_mj >= 0:
            joules += delta_mj / 1000.0
            continue
        bridge = trapezoid_j([a, b])
        if bridge is None:
            notes.append(f"{label}: the energy counter went backwards (a reset) and no power reading bridges it")
            return None
        notes.append(f"{label}: the energy counter went backwards (a reset); {b.t - a.t:.2f} s bridged by power")
        joules += bridge
    return joules


def window_energy(samples: Sequence[GpuSample], notes: list[str], label: str) -> tuple[float, str, float, float] | None:
    """(joules, method, first t, last t) of one GPU's load samples in one window, or None
    when fewer than two readings of either kind were taken."""
    counted = [s for s in samples if s.energy_mj is not None]
    if len(counted) >= 2:
        joules = counter_j(counted, notes, label)
        if joules is not None:
            return joules, COUNTER, counted[0].t, counted[-1].t
    powered = [s for s in samples if s.power_w is not None]
    joules = trapezoid_j(powered)
    if joules is None:
        return None
    return joules, POWER, powered[0].t, powered[-1].t


def tokens_between(chunks: Iterable[tuple[float, int]], start: float, end: float) -> int:
    """Output tokens in chunks that arrived after ``start`` and up to ``end``."""
    return sum(n for t, n in chunks if start < t <= end)


def gpu_energy(samples: list[GpuSample], windows: list[tuple[float, float | None]],
               chunks: list[tuple[float, int]], label: str, notes: list[str]) -> dict[str, Any] | None:
    """One GPU's joules, seconds, tokens and method over every load window (None: no window
    had two readings to difference)."""
    by_window: dict[int | None, list[GpuSample]] = {}
    for s in sorted(samples, key=lambda s: s.t):
        by_window.setdefault(window_of(s.t, windows), []).append(s)
    joules = seconds = 0.0
    tokens, methods = 0, set()
    for group in by_window.values():
        got = window_energy(group, notes, label)
        if got is None:
            continue
        j, method, start, end = got
        joules, seconds = joules + j, seconds + (end - start)
        tokens += tokens_between(chunks, start, end)
        methods.add(method)
    if not methods:
        return None
    return {
        "joules": round(joules, 3),
        "seconds": round(seconds, 4),
        "mean_power_w": round(joules / seconds, 2) if seconds > 0 else None,
        "output_tokens": tokens,
        "joules_per_token": joules / tokens if tokens else None,
        "method": methods.pop() if len(methods) == 1 else "mixed",
    }


def energy_summary(tel: Telemetry, chunks: list[tuple[float, int]]) -> dict[str, Any]:
    """The ``energy`` block of an arm's ``gpu`` block: per GPU and in total.

    ``chunks`` are (perf_counter arrival time, tokens) of every streamed chunk of the arm's
    loads, on the same clock as the samples. ``joules_per_token`` is None with ``why``
    saying so when it cannot be measured; ``why_kind`` is ``too_short`` when the windows
    held fewer than two load samples to difference, ``not_read`` when no energy or power
    was read, ``no_tokens`` when no token streamed within the measured spans."""
    notes: list[str] = []
    per_gpu: dict[str, Any] = {}
    for info in tel.gpus:
        mine = [s for s in tel.samples if s.uuid == info.uuid and s.phase == "load"]
        per_gpu[info.uuid] = gpu_energy(mine, tel.windows, chunks, f"GPU {info.index}", notes)
    measured = {u: g for u, g in per_gpu.items() if g is not None}
    block: dict[str, Any] = {"method": None, "joules": None, "seconds": None, "mean_power_w": None,
                             "output_tokens": None, "joules_per_token": None, "gpus": per_gpu, "notes": notes}
    why = unmeasured_why(tel, per_gpu)
    if why is not None:
        return {**block, "why_kind": why[0], "why": why[1]}
    methods = {g["method"] for g in measured.values()}
    block.update(
        method=methods.pop() if len(methods) == 1 else "mixed",
        joules=round(sum(g["joules"] for g in measured.values()), 3),
        seconds=max(g["seconds"] for g in measured.values()),
        mean_power_w=round(sum(g["mean_power_w"] or 0.0 for g in measured.values()), 2),
        output_tokens=max(g["output_tokens"] for g in measured.values()),
        joules_per_token=sum(g["joules_per_token"] for g in measured.values()),
    )
    return block


def unmeasured_why(tel: Telemetry, per_gpu: dict[str, Any]) -> tuple[str, str] | None:
    """Why an arm has no joules per token, as (kind, sentence); None when it has one."""
    measured = [g for g in per_gpu.values() if g is not None]
    if len(measured) < len(per_gpu):
        load = [s for s in tel.samples if s.phase == "load"]
        missing = [u for u, g in per_gpu.items() if g is None]
        if any(s.energy_mj is not None or s.power_w is not None for s in load if s.uuid in missing):
            return "too_short", ("no load window held two samples of every GPU to difference "
                                 "(the load was too short past the ramp-in)")
        if not any(s.uuid in missing for s in load):
            return "too_short", "no GPU sample was read under load (after the ramp-in)"
        return "not_read", "neither the energy counter nor the power draw was read under load"
    if not per_gpu:
        return "not_read", "no GPU was sampled"
    if any(g["joules_per_token"] is None for g in measured):
        return "no_tokens", "no output token streamed within the measured spans"
    return None


def joules_per_token(gpu: dict | None) -> float | None:
    """An arm's joules per output token from its ``gpu`` block (None when not measured)."""
    return ((gpu or {}).get("energy") or {}).get("joules_per_token")


def joules_per_token_ratio(gpu: dict | None, plain_gpu: dict | None) -> float | None:
    """An arm's joules per token over the plain arm's: > 1 means each token cost more energy."""
    mine, plain = joules_per_token(gpu), joules_per_token(plain_gpu)
    return mine / plain if mine is not None and plain else None


def chunk_arrivals(records: Iterable[Any]) -> list[tuple[float, int]]:
    """(arrival time, tokens) of every token-carrying chunk of a load's request records."""
    return [(t, n) for r in records for t, n in zip(r.chunk_times, r.chunk_tokens)]
