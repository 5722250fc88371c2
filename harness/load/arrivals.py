"""Arrival processes: when the next measured request is sent.

An arrival process drives ``send(index, scheduled[, intended])`` for each index that
``claim()`` hands out (``claim()`` returns None once the load is complete) and returns when
every request it sent has ended.  ``concurrency`` always caps how many are in flight.
``scheduled`` is the perf_counter time the process meant the request to go: how late it
really went is the client's send gap (:mod:`harness.load.client_health`).  A trace replay
also passes ``intended``, the trace's own time for it, which a cap does not move.

* :class:`ClosedLoop` (``request_rate`` null): ``concurrency`` workers, each sends its
  next request as soon as its previous one ends (scheduled then: its slot freed).
* :class:`PoissonArrivals` (``request_rate`` set): exponential gaps at that rate from
  ``random.Random(seed)``; an arrival waits for a free slot.
* :class:`GammaArrivals`: gamma-distributed gaps with the same mean; ``burstiness`` < 1
  makes arrivals burstier than Poisson, > 1 more regular (1 is Poisson's distribution).
* :class:`TraceArrivals` (``workload.trace``): the trace's own offsets (already divided by
  its speed-up); an arrival held back by the cap goes when a slot frees, its send gap
  counted from then and its lateness against the trace from its intended time.
"""

from __future__ import annotations

import asyncio
import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

Claim = Callable[[], "int | None"]
Send = Callable[..., Awaitable[Any]]  # (index, scheduled perf_counter time[, intended perf_counter time])


class ArrivalProcess(ABC):
    @abstractmethod
    async def drive(self, claim: Claim, send: Send) -> None:
        """Send every claimed index; return when all sent requests have ended."""


@dataclass(frozen=True)
class ClosedLoop(ArrivalProcess):
    concurrency: int

    async def drive(self, claim: Claim, send: Send) -> None:
        async def worker(freed: float) -> None:
            while (i := claim()) is not None:
                await send(i, freed)
                freed = time.perf_counter()  # its request ended: the slot is free again

        began = time.perf_counter()  # every slot is free when the load begins
        await asyncio.gather(*(worker(began) for _ in range(self.concurrency)))


@dataclass(frozen=True)
class OpenLoop(ArrivalProcess):
    """Arrivals on a seeded schedule of gaps, independent of when requests end."""

    rate: float  # requests per second, on average
    concurrency: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"workload.request_rate must be > 0 (got {self.rate})")

    @abstractmethod
    def gap(self, rng: random.Random, k: int = 0) -> float:
        """Seconds from arrival ``k`` (its place in the schedule) to the next."""

    def intended(self, t: float) -> tuple[float, ...]:
        """What ``send`` gets beside the schedule's time: nothing, but for a trace its own time."""
        return ()

    async def drive(self, claim: Claim, send: Send, deal: tuple[int, int] = (0, 1)) -> None:
        """``deal=(slot, of)``: this load process sends only arrivals ``k`` with ``k % of ==
        slot`` of the one seeded schedule (:class:`DealtArrivals`); the others' arrivals
        are passed over, so the processes together send the whole schedule."""
        slot, of = deal
        rng = random.Random(self.seed)
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()
        freed = 0.0  # when a slot was last released

        async def send_in_slot(i: int, scheduled: float, *intended: float) -> None:
            nonlocal freed
            try:
                await send(i, scheduled, *intended)
            finally:
                freed = time.perf_counter()
                slots.release()

        t_next = time.perf_counter()
        k = 0  # the arrival's place in the whole schedule
        try:
            while True:
                if k % of != slot:  # another process's arrival
                    t_next += self.gap(rng, k)
                    k += 1
                    continue
                await sleep_until(t_next)
                capped = slots.locked()
                await slots.acquire()
                i = claim()
                if i is None:
                    slots.release()
                    break
                # held back by the cap: due when a slot freed (the latest release, so a gap is never overstated)
                scheduled = max(t_next, freed) if capped else t_next
                task = asyncio.create_task(send_in_slot(i, scheduled, *self.intended(t_next)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                t_next += self.gap(rng, k)
                k += 1
            if tasks:
                await asyncio.gather(*tasks)
        finally:  # Ctrl-C or an error: no request task outlives the load
            pending = [t for t in tasks if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)


async def sleep_until(deadline: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``deadline``. An event loop's timer may
    fire up to its clock's resolution early (uvloop's libuv timers count whole milliseconds),
    and a request sent before its time is a load that was not asked for (a negative send
    gap, a trace replayed ahead of itself): what is left is slept again."""
    while (delay := deadline - time.perf_counter()) > 0:
        await asyncio.sleep(delay)


@dataclass(frozen=True)
class PoissonArrivals(OpenLoop):
    def gap(self, rng: random.Random, k: int = 0) -> float:
        return rng.expovariate(self.rate)


@dataclass(frozen=True)
class GammaArrivals(OpenLoop):
    burstiness: float = 1.0  # the gamma shape; the scale keeps the mean gap at 1/rate

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.burstiness <= 0:
            raise ValueError(f"workload.burstiness must be > 0 (got {self.burstiness})")

    def gap(self, rng: random.Random, k: int = 0) -> float:
        return rng.gammavariate(self.burstiness, 1.0 / (self.rate * self.burstiness))


@dataclass(frozen=True)
class TraceArrivals(OpenLoop):
    """A trace's requests at ``offsets_s`` after the first (seconds, the speed-up applied)."""

    offsets_s: tuple[float, ...] = ()

    def gap(self, rng: random.Random, k: int = 0) -> float:
        at = self.offsets_s
        return at[k + 1] - at[k] if k + 1 < len(at) else 0.0

    def intended(self, t: float) -> tuple[float, ...]:
        return (t,)


def trace_arrivals(offsets_s: tuple[float, ...], concurrency: int) -> TraceArrivals:
    """The replay of ``offsets_s``; its rate (the open loop's, > 0) is the trace's mean."""
    span = offsets_s[-1] if offsets_s else 0.0
    return TraceArrivals(len(offsets_s) / span if span > 0 else 1.0, concurrency, 0, tuple(offsets_s))


@dataclass(frozen=True)
class DealtArrivals(ArrivalProcess):
    """One load process's share of an open loop's schedule: arrivals ``slot``, ``slot +
    of``, ... of the same seeded schedule every process draws (so together they send it
    all, at its times), capped by the open loop's ``concurrency`` (this process's share)."""

    schedule: OpenLoop
    slot: int
    of: int

    async def drive(self, claim: Claim, send: Send) -> None:
        await self.schedule.drive(claim, send, deal=(self.slot, self.of))


def arrival_process(workload: Any) -> ArrivalProcess:
    """The process ``workload`` asks for: a trace's times (a plan's ``trace_offsets_s``),
    closed loop without a ``request_rate``, else Poisson, or gamma when a ``burstiness``
    other than 1 is set."""
    concurrency = max(1, int(workload.concurrency or 1))
    if getattr(workload, "trace_offsets_s", None):
        return trace_arrivals(workload.trace_offsets_s, concurrency)
    if workload.request_rate is None:
        return ClosedLoop(concurrency)
    rate = float(workload.request_rate)
    seed = int(getattr(workload, "seed", 0) or 0)
    burstiness = getattr(workload, "burstiness", None)
    if burstiness is not None and float(burstiness) != 1.0:
        return GammaArrivals(rate, concurrency, seed, float(burstiness))
    return PoissonArrivals(rate, concurrency, seed)
