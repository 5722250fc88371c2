"""The capacity search: the largest load at which a probe still meets every SLO.

Pure arithmetic over a `probe(load) -> bool` (True: the SLOs were met at that load), so it
is tested on synthetic functions; harness/capacity/driver.py gives it real probes. Loads grow
geometrically from `start` (x `growth`) until a probe misses or `max` is reached; between
the last load that met the SLOs and the first that missed, bisection: on integers for
concurrency (until they are adjacent), to a relative tolerance for a request rate (until
the gap is within `tolerance` of the passing load). The latency of a server only grows
with its load, so the search assumes that meeting the SLOs is monotone in the load; a
noisy probe that breaks this only moves the answer within its bracket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.config.schema import CAPACITY_DIMENSIONS


class CapacityConfigError(ValueError):
    """capacity.* settings that cannot make a search (one sentence)."""


@dataclass(frozen=True)
class SearchSettings:
    start: float
    maximum: float
    growth: float
    integer: bool  # concurrency: whole requests in flight
    tolerance: float  # request rate: relative width of the final bracket

    @classmethod
    def of(cls, capacity: Any) -> "SearchSettings":
        """From `cfg.capacity`, checked: a bad value is a CapacityConfigError."""
        if capacity.dimension not in CAPACITY_DIMENSIONS:
            raise CapacityConfigError(f"capacity.dimension '{capacity.dimension}' is unknown; valid: "
                                      f"{', '.join(CAPACITY_DIMENSIONS)}")
        integer = capacity.dimension == "concurrency"
        start, maximum = float(capacity.start), float(capacity.max)
        if start <= 0 or (integer and start != int(start)):
            raise CapacityConfigError(f"capacity.start must be {'a whole number ≥ 1' if integer else '> 0'} "
                                      f"for {capacity.dimension}, got {capacity.start}")
        if maximum < start or (integer and maximum != int(maximum)):
            raise CapacityConfigError(f"capacity.max must be {'a whole number ' if integer else ''}at least "
                                      f"capacity.start ({capacity.start}), got {capacity.max}")
        if capacity.growth <= 1:
            raise CapacityConfigError(f"capacity.growth must be > 1 (each probe a multiple of the last), "
                                      f"got {capacity.growth}")
        if not 0 < capacity.tolerance < 1:
            raise CapacityConfigError(f"capacity.tolerance is a fraction of the load in (0, 1) (0.05: 5 %), "
                                      f"got {capacity.tolerance}")
        # a probe must be the load it names: at least one request per slot in flight, some
        # seconds of arrivals, a client that lets the queue form at the server
        for key, least in (("rounds", 1), ("probe_s", 1e-9), ("max_in_flight", 1)):
            if getattr(capacity, key) < least:
                raise CapacityConfigError(f"capacity.{key} must be {'> 0' if key == 'probe_s' else '≥ 1'}, "
                                          f"got {getattr(capacity, key)} (a probe must be the load it names)")
        if integer:  # whole requests in flight: every load the search makes is an int
            start, maximum = int(start), int(maximum)
        return cls(start, maximum, float(capacity.growth), integer, float(capacity.tolerance))

    def grown(self, load: float) -> float:
        """The next load up: x growth (at least one more for integers), never above max."""
        up = max(load + 1, math.floor(load * self.growth)) if self.integer else load * self.growth
        return min(up, self.maximum)

    def midpoint(self, low: float, high: float) -> float | None:
        """The load between a passing `low` and a missing `high` to probe next; None: done."""
        if self.integer:
            return None if high - low <= 1 else (low + high) // 2
        return None if high - low <= self.tolerance * low else (low + high) / 2


@dataclass
class SearchResult:
    capacity: float | None  # the largest load that met the SLOs; None: even `start` missed
    first_miss: float | None  # the smallest load that missed; None: none did up to max
    probed: list[tuple[float, bool]] = field(default_factory=list)  # (load, met) in probe order

    @property
    def reached_max(self) -> bool:
        """No probe missed: the capacity is at least `max`, a lower bound."""
        return self.capacity is not None and self.first_miss is None


def search(probe: Callable[[float], bool], settings: SearchSettings) -> SearchResult:
    """Grow, then bisect (see the module docstring)."""
    result = SearchResult(None, None)

    def met(load: float) -> bool:
        ok = probe(load)
        result.probed.append((load, ok))
        return ok

    load = settings.start
    while met(load):
        result.capacity = load
        if load >= settings.maximum:
            return result
        load = settings.grown(load)
    result.first_miss = load
    if result.capacity is None:
        return result
    while (middle := settings.midpoint(result.capacity, result.first_miss)) is not None:
        if met(middle):
            result.capacity = middle
        else:
            result.first_miss = middle
    return result
