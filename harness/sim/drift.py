"""How a real GPU box drifts, for the simulator: the noise a merge gate meets.

Identical runs on a GPU box do not give identical figures: the clock a GPU settles at
depends on its temperature and its neighbours, so one server start is a few percent faster
or slower than the next; during a run the speed wanders slowly; and every step jitters. The
simulator's timing model (model.py) is exact, so a verdict tested on it meets none of that.
A `Drift` multiplies every step's duration (prefill, decode, verify) by

    speed x exp(machine(t) + wander(t) + jitter)

- ``speed``: drawn once per server start, ``exp(N(0, speed_sd))`` (the run-to-run part);
- ``machine(t)``: the box's own slow drift (its temperature, the other jobs on the node),
  sd ``machine_sd``, changing over ``machine_s`` seconds. It is a function of the wall-clock
  time and ``machine_seed`` alone, so every server on the box shares it: two servers
  measured close together in time see the same machine, two measured minutes apart do not
  (what an interleaved A/B run cancels and a run against last night's run cannot);
- ``wander(t)``: a stationary Ornstein-Uhlenbeck process in log speed, standard deviation
  ``wander_sd``, time constant ``wander_s`` seconds (the slow within-run part of one server);
- ``jitter``: ``N(0, jitter_sd)`` per step (the fast part; it averages out over a run).

All three are 0 by default, so the simulator's figures are exact unless asked. The draws
come from ``seed``; with no seed, each start draws one from the OS (that is the
run-to-run variation) and logs it, so a start can be repeated exactly
(``server.sim.drift_seed=<the logged seed>``).
"""

from __future__ import annotations

import dataclasses
import hashlib
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
    machine_sd: float = 0.0  # sd of the box's shared slow drift in log speed
    machine_s: float = 120.0  # how many seconds the box's drift takes to change
    machine_seed: int = 0  # which box: servers with the same seed share its drift

    @property
    def on(self) -> bool:
        return any(sd > 0 for sd in (self.speed_sd, self.wander_sd, self.jitter_sd, self.machine_sd))

    def seeded(self) -> "DriftModel":
        """The same settings with the seed this start uses (drawn when none was given)."""
        if self.seed is not None or not self.on:
            return self
        return dataclasses.replace(self, seed=secrets.randbits(31))


class MachineDrift:
    """The box's slow drift in log speed at a wall-clock time: smooth noise through values
    drawn every `machine_s` seconds from (machine_seed, that time's slot), so every process
    computes the same drift for the same moment without talking to the others."""

    def __init__(self, sd: float, period_s: float, seed: int):
        self.sd, self.period_s, self.seed = sd, period_s, seed

    def knot(self, slot: int) -> float:
        digest = hashlib.blake2b(f"{self.seed}:{slot}".encode(), digest_size=8).digest()
        return random.Random(int.from_bytes(digest, "big")).gauss(0.0, 1.0)

    def __call__(self, wall_s: float) -> float:
        """Cosine interpolation between the two knots around `wall_s`; scaled so that its
        standard deviation over time is `sd` (halfway between knots, a plain interpolation
        of two independent normals has a smaller spread)."""
        if self.sd <= 0:
            return 0.0
        position = wall_s / self.period_s
        slot = math.floor(position)
        w = (1.0 - math.cos(math.pi * (position - slot))) / 2.0
        value = (1.0 - w) * self.knot(slot) + w * self.knot(slot + 1)
        return self.sd * value / math.sqrt(MEAN_SQUARE_WEIGHTS)


# E over t in [0,1) of (1-w)^2 + w^2 with w = (1 - cos(pi t)) / 2: the interpolation's variance
MEAN_SQUARE_WEIGHTS = 0.75


class Drift:
    """The factor each step's duration is multiplied by, as the run goes (one per scheduler)."""

    def __init__(self, model: DriftModel, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time):
        self.model, self.clock, self.wall_clock = model, clock, wall_clock
        self.machine = MachineDrift(model.machine_sd, model.machine_s, model.machine_seed)
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
        machine = self.machine(self.wall_clock()) if m.machine_sd > 0 else 0.0
        return self.speed * math.exp(machine + self.wander + jitter)
