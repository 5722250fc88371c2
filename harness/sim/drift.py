"""How a real GPU box drifts, for the simulator: the noise a merge gate meets.

Identical runs on a GPU box do not give identical figures: the clock a GPU settles at
depends on its temperature and its neighbours, so one server start is a few percent faster
or slower than the next; during a run the speed wanders slowly; and every step jitters. The
simulator's timing model (model.py) is exact, so a verdict tested on it meets none of that.
A `Drift` multiplies every step's duration (prefill, decode, verify) by

    speed x exp(wander(t) + jitter)

- ``speed``: drawn once per server start, ``exp(N(0, speed_sd))`` (the run-to-run part);
- ``wander(t)``: a stationary Ornstein-Uhlenbeck process in log speed, standard deviation
  ``wander_sd``, time constant ``wander_s`` seconds (the slow within-run part);
- ``jitter``: ``N(0, jitter_sd)`` per step (the fast part; it averages out over a run).

All three are 0 by default, so the simulator's figures are exact unless asked. The draws
come from ``seed``; with no seed, each start draws one from the OS (that is the
run-to-run variation) and logs it, so a start can be repeated exactly
(``server.sim.drift_seed=<the logged seed>``).
"""

from __future__ import annotations

import math
import random
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class DriftModel:
    """The drift's settings (server.sim.drift_*; all 0: no drift)."""

    speed_sd: float = 0.0  # sd of the log speed factor drawn per server start
    wander_sd: float = 0.0  # sd of the slow wander in log speed
    wander_s: float = 30.0  # the wander's time constant, seconds
    jitter_sd: float = 0.0  # sd of the per-step log jitter
    seed: Optional[int] = None  # None: a fresh seed per start, logged

    @property
    def on(self) -> bool:
        return any(sd > 0 for sd in (self.speed_sd, self.wander_sd, self.jitter_sd))

    def seeded(self) -> "DriftModel":
        """The same settings with the seed this start uses (drawn when none was given)."""
        if self.seed is not None or not self.on:
            return self
        return DriftModel(self.speed_sd, self.wander_sd, self.wander_s, self.jitter_sd, secrets.randbits(31))


class Drift:
    """The factor each step's duration is multiplied by, as the run goes (one per scheduler)."""

    def __init__(self, model: DriftModel, clock: Callable[[], float] = time.monotonic):
        self.model, self.clock = model, clock
        self.rng = random.Random(model.seed if model.seed is not None else 0)
        self.speed = math.exp(self.rng.gauss(0.0, model.speed_sd)) if model.speed_sd > 0 else 1.0
        self.wander = self.rng.gauss(0.0, model.wander_sd) if model.wander_sd > 0 else 0.0  # stationary from the start
        self.last = clock()

    def factor(self) -> float:
        """This step's factor: the start's speed, the wander now, a fresh jitter."""
        m = self.model
        if not m.on:
            return 1.0
        if m.wander_sd > 0:
            now = self.clock()
            keep = math.exp(-max(0.0, now - self.last) / m.wander_s)
            self.wander = keep * self.wander + m.wander_sd * math.sqrt(1.0 - keep * keep) * self.rng.gauss(0.0, 1.0)
            self.last = now
        jitter = self.rng.gauss(0.0, m.jitter_sd) if m.jitter_sd > 0 else 0.0
        return self.speed * math.exp(self.wander + jitter)
