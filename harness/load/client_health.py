"""The client's own health while a load runs: is the load generator keeping up?

Three figures per load, each the client's and never the server's, over the measured
window (after the warm-up, until the last measured request ended):

* **event-loop lag**: a ticker task sleeps ``TICK_S`` (10 ms) again and again and records
  how late it woke (the wake-up it got minus the one it asked for). Every timestamp of
  the load (a request's send, each chunk's arrival) is taken by a coroutine on this one
  loop, so a loop that wakes this late can stamp any of them this late.
* **CPU**: the load process's CPU seconds (``time.process_time()``: user + system, all its
  threads; ``os.times()`` counts the same in 10 ms ticks, too coarse for a short load)
  over the window's wall seconds, i.e. its share of one core; the same over every core it
  may run on; and the event loop's own thread (``time.thread_time()``), the one that runs
  out first: one loop can use one core, however many the machine has.
* **send gap**: each measured request's send time minus the time the arrival process
  meant it to go (``RequestRecord.scheduled_time``): its arrival on an open loop's
  schedule, or when a slot freed if the concurrency cap held it; in a closed loop, when
  its slot freed (its worker's previous request ended, or the load began); a
  conversation's next turn, when the previous turn ended.

The ticker is the only thing added to the load's loop: one wake-up per 10 ms, a clock
read and a list append (measured in README "Client health": well under 1 % of a core).
Whether these figures make the arm's latencies the client's is judged elsewhere
(:mod:`harness.gates.client_bound`), against the gate's thresholds.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from harness.load.records import RequestRecord

TICK_S = 0.010  # short enough to see a stall of a few ms, long enough to cost nothing


@dataclass
class LoopLagTicker:
    """Sleeps ``interval_s`` in a loop on the running event loop and keeps how late each
    wake-up was (seconds, never negative); run it as a task, cancel it to stop."""

    interval_s: float = TICK_S
    lags_s: list[float] = field(default_factory=list)

    async def run(self) -> None:
        clock, interval, lags = time.perf_counter, self.interval_s, self.lags_s
        while True:
            asked = clock() + interval
            await asyncio.sleep(interval)
            # asyncio may fire a timer up to its clock resolution early: that is no lag
            lags.append(max(0.0, clock() - asked))


@dataclass(frozen=True)
class CpuMark:
    """The clocks at one instant: wall, the process's CPU, the calling thread's CPU."""

    wall_s: float
    process_cpu_s: float
    thread_cpu_s: float

    @classmethod
    def now(cls) -> "CpuMark":
        return cls(time.perf_counter(), time.process_time(), time.thread_time())


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_block(start: CpuMark, end: CpuMark, cores: int | None = None) -> dict:
    """CPU seconds and shares between two marks taken on the loop's thread."""
    wall = end.wall_s - start.wall_s
    process = end.process_cpu_s - start.process_cpu_s
    thread = end.thread_cpu_s - start.thread_cpu_s
    cores = cores or usable_cores()

    def share(cpu: float, of_cores: int = 1) -> float | None:
        return round(cpu / (wall * of_cores), 4) if wall > 0 else None

    return {"wall_s": round(wall, 4), "process_cpu_s": round(process, 4), "loop_thread_cpu_s": round(thread, 4),
            "cores": cores, "process_share_of_one_core": share(process),
            "process_share_of_all_cores": share(process, cores), "loop_thread_share_of_one_core": share(thread)}


def spread_ms(seconds: Iterable[float]) -> dict:
    """mean, p50, p99, max and count of durations given in seconds, in ms (None without any)."""
    a = np.asarray(list(seconds), dtype=float) * 1000.0
    if a.size == 0:
        return {"mean": None, "p50": None, "p99": None, "max": None, "n": 0}
    p50, p99 = np.percentile(a, [50, 99])
    return {"mean": round(float(a.mean()), 3), "p50": round(float(p50), 3), "p99": round(float(p99), 3),
            "max": round(float(a.max()), 3), "n": int(a.size)}


def send_gaps_s(records: Iterable[RequestRecord]) -> list[float]:
    """Actual minus scheduled send time of each measured request that has both."""
    return [gap for r in records if not r.warmup and (gap := r.send_gap_s) is not None]


def client_block(lags_s: list[float], start: CpuMark, end: CpuMark, records: Iterable[RequestRecord],
                 interval_s: float = TICK_S) -> dict:
    """The load's ``client`` block: loop lag, send gap and CPU, as results.json keeps it."""
    return {"tick_ms": round(interval_s * 1000.0, 3), "loop_lag_ms": spread_ms(lags_s),
            "send_gap_ms": spread_ms(send_gaps_s(records)), "cpu": cpu_block(start, end)}


WORST_OF = ("mean", "p50", "p99", "max")


def combine_client_blocks(blocks: list[dict]) -> dict:
    """Repeats: each figure the worst (largest) over the repeats' blocks, since one
    repeat whose client fell behind is enough to distort the arm's medians."""
    blocks = [b for b in blocks if b]
    if len(blocks) <= 1:
        return dict(blocks[0]) if blocks else {}
    combined = {"tick_ms": blocks[0]["tick_ms"], "repeats": len(blocks)}
    for name in ("loop_lag_ms", "send_gap_ms"):
        parts = [b[name] for b in blocks]
        combined[name] = {**{s: worst([p.get(s) for p in parts]) for s in WORST_OF}, "n": sum(p["n"] for p in parts)}
    cpus = [b["cpu"] for b in blocks]
    combined["cpu"] = {key: (worst([c[key] for c in cpus]) if "share" in key else
                             c0 if key == "cores" else round(sum(c[key] for c in cpus), 4))
                       for key, c0 in cpus[0].items()}
    return combined


def worst(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def merge_process_blocks(blocks: list[dict | None], records: Iterable[RequestRecord]) -> dict | None:
    """The ``client`` block of a load split over processes (workload.client_processes): the
    loop lag the worst process's (each stamps its own requests, so the worst loop is what
    can distort a figure); the send gap over every request; the CPU seconds summed (the
    client's whole cost), its shares over the longest window, and the busiest event loop's
    thread share of its core (each loop has one core to run out of). None when a process
    left none (an interrupted load)."""
    if not blocks or any(b is None for b in blocks):
        return None
    lags = [b["loop_lag_ms"] for b in blocks]
    loop_lag = {**{s: worst([p.get(s) for p in lags]) for s in WORST_OF}, "n": sum(p["n"] for p in lags)}
    cpus = [b["cpu"] for b in blocks]
    wall = max(c["wall_s"] for c in cpus)
    process, thread = sum(c["process_cpu_s"] for c in cpus), sum(c["loop_thread_cpu_s"] for c in cpus)
    cores = cpus[0]["cores"]

    def share(cpu: float, of_cores: int = 1) -> float | None:
        return round(cpu / (wall * of_cores), 4) if wall > 0 else None

    cpu = {"wall_s": round(wall, 4), "process_cpu_s": round(process, 4), "loop_thread_cpu_s": round(thread, 4),
           "cores": cores, "process_share_of_one_core": share(process), "process_share_of_all_cores": share(process, cores),
           "loop_thread_share_of_one_core": worst([c["loop_thread_share_of_one_core"] for c in cpus])}
    return {"tick_ms": blocks[0]["tick_ms"], "processes": len(blocks), "loop_lag_ms": loop_lag,
            "send_gap_ms": spread_ms(send_gaps_s(records)), "cpu": cpu}
