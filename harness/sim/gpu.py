"""The simulator's GPUs: one per TP rank, with clocks that ramp from idle to boost under load
and power that rises with the work each forward pass does.

Not part of SGLang's surface: the simulator serves these readings at ``GET /sim/gpu`` so
that the telemetry source ``sim`` (``harness.telemetry.sim``) has something to sample.

The model is driven by one number, the scheduler's running-request count as the main
process sees it (``EngineClient._dispatch`` reports every change).  Each quantity
relaxes exponentially toward its target for the current state (busy = at least one
running request):

=================  ==========================  =====================================  ==========
quantity           idle                        busy                                   time const.
=================  ==========================  =====================================  ==========
SM/graphics clock  2330-2360 MHz (per GPU)     ``--sim-gpu-boost-mhz`` (2600)         ``--sim-gpu-ramp-s`` (1.5 s)
power              ~85 W                       the power model below (~275-700 W)     0.3 s
utilization        0 %                         ~95 % GPU, ~55 % memory                0.15 s
temperature        ~33 C                       ~62 C                                  30 s
=================  ==========================  =====================================  ==========

What an H200 does: its idle SM clock reads ~2.3 GHz (the session's idle readings were
2325-2362 MHz at 84-86 W), the reported max is 2617 MHz, its power limit is 700 W.

**Power model.** A forward pass processes ``work = running x tokens_per_forward`` tokens
(1 per request for plain decoding; ``--speculative-num-draft-tokens`` per request for a
verify pass, the drafter's own small passes left out). Decode at a small batch is
memory-bound and already draws a good share of the dynamic power (streaming the weights);
more tokens per pass add compute until the GPU is near its limit::

    activity = 0.3 + 0.7 * work / (work + 64)
    power    = idle + (700 W - idle) * activity * (clock / boost) * spread

so one plain stream draws ~275 W, a 3-token verify of one stream ~290 W, 64 plain
streams ~485 W and 1024 ~675 W; ``spread`` (0.97-1.03, seeded per GPU) keeps GPUs
apart as real ones are; a capped clock (throttling) draws proportionally less. The
energy counter (mJ since "driver load") integrates the power curve exactly, so energy
per token is whatever the work per token costs: speculation does more work per pass and
pays for it with fewer passes per token. Reasons: ``GpuIdle`` while idle, none while busy.

``--sim-gpu-throttle thermal|power`` is a fault switch: under load the clock is held at
``--sim-gpu-throttle-mhz`` (1800) and the reasons say why (``SwThermalSlowdown`` +
``HwThermalSlowdown`` with the temperature heading for ~88 C, or ``SwPowerCap`` with the
enforced limit at 250 W and the draw pinned to it), so the GPU gates can be seen failing.
"""

from __future__ import annotations

import argparse
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

IDLE_MHZ = (2333.0, 2357.0)  # read noise of ±3 MHz keeps readings within 2330-2360
MAX_MHZ = 2617.0
MEM_MHZ = 3201.0
IDLE_W = 85.0
POWER_LIMIT_W = 700.0  # an H200's board power limit: the model's peak draw
BASE_ACTIVITY = 0.3  # share of the dynamic power a forward of one token already draws (memory-bound)
HALF_WORK_TOKENS = 64.0  # tokens per forward at which the compute-bound rest is half used
SPREAD = (0.97, 1.03)  # per-GPU scale of the dynamic power
POWER_CAP_W = 250.0  # the enforced limit under --sim-gpu-throttle power
IDLE_C = 33.0
LOAD_C = 62.0
THERMAL_C = 88.0
BUSY_UTIL, BUSY_MEM_UTIL = 95.0, 55.0
TAU_POWER_S, TAU_UTIL_S, TAU_TEMP_S = 0.3, 0.15, 30.0
THROTTLE_MODES = ("none", "thermal", "power")
REASONS = {
    "none": (),
    "thermal": ("SwThermalSlowdown", "HwThermalSlowdown"),
    "power": ("SwPowerCap",),
}
GPU_NAME = "NVIDIA H200 (simulated)"


def sim_uuid(rank: int) -> str:
    """A UUID per TP rank, stable across runs and seeds."""
    return f"GPU-sim-{rank:04d}-0000-0000-{rank:012d}"


def _relax(x: float, target: float, dt: float, tau: float) -> float:
    if tau <= 0:
        return target
    return target + (x - target) * math.exp(-dt / tau)


def _integral(x: float, target: float, dt: float, tau: float) -> float:
    """Integral over ``dt`` of the curve that ``_relax`` follows."""
    if tau <= 0:
        return target * dt
    return target * dt + (x - target) * tau * (1.0 - math.exp(-dt / tau))


@dataclass
class _Gpu:
    rank: int
    idle_mhz: float
    idle_w: float
    spread: float  # this GPU's scale of the dynamic power
    idle_c: float
    clock: float
    power: float
    temp: float
    util: float = 0.0
    mem_util: float = 0.0
    energy_mj: float = 0.0
    rng: random.Random | None = None


class SimGpuModel:
    def __init__(
        self,
        tp_size: int = 1,
        seed: int = 0,
        ramp_s: float = 1.5,
        boost_mhz: float = 2600.0,
        throttle: str = "none",
        throttle_mhz: float = 1800.0,
        clock: Callable[[], float] = time.perf_counter,
        tokens_per_forward: int = 1,
        first_rank: int = 0,
    ):
        if throttle not in THROTTLE_MODES:
            raise ValueError(f"--sim-gpu-throttle must be one of {', '.join(THROTTLE_MODES)}, not {throttle!r}")
        self.ramp_s = ramp_s
        self.boost_mhz = boost_mhz
        self.max_mhz = max(MAX_MHZ, boost_mhz)
        self.throttle = throttle
        self.throttle_mhz = throttle_mhz
        self.tokens_per_forward = max(1, int(tokens_per_forward))
        self._clock = clock
        self._lock = threading.Lock()
        self.running = 0
        self.t = clock()
        self.gpus: list[_Gpu] = []
        self.first_rank = first_rank
        for rank in range(first_rank, first_rank + max(1, tp_size)):  # this node's ranks
            rng = random.Random(f"sim-gpu:{seed}:{rank}")
            idle_mhz = rng.uniform(*IDLE_MHZ)
            idle_w = IDLE_W + rng.uniform(-1.5, 1.5)
            idle_c = IDLE_C + rng.uniform(-1.0, 1.0)
            self.gpus.append(
                _Gpu(
                    rank=rank,
                    idle_mhz=idle_mhz,
                    idle_w=idle_w,
                    spread=rng.uniform(*SPREAD),
                    idle_c=idle_c,
                    clock=idle_mhz,
                    power=idle_w,
                    temp=idle_c,
                    # The counter counts since "driver load": start somewhere plausible.
                    energy_mj=rng.uniform(1e8, 1e9),
                    rng=rng,
                )
            )

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "SimGpuModel":
        per_node = ns.tp_size // max(1, getattr(ns, "nnodes", 1))
        return cls(
            tp_size=per_node,
            first_rank=getattr(ns, "node_rank", 0) * per_node,  # a node holds its share of the ranks
            seed=ns.sim_seed,
            ramp_s=ns.sim_gpu_ramp_s,
            boost_mhz=ns.sim_gpu_boost_mhz,
            throttle=ns.sim_gpu_throttle,
            throttle_mhz=ns.sim_gpu_throttle_mhz,
            # a verify pass processes the draft tokens of every request at once
            tokens_per_forward=(ns.speculative_num_draft_tokens or 1) if ns.speculative_algorithm else 1,
        )

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        return self.running > 0

    def power_limit_w(self) -> float:
        return POWER_CAP_W if self.throttle == "power" else POWER_LIMIT_W

    def load_clock_mhz(self) -> float:
        return self.throttle_mhz if self.throttle != "none" else self.boost_mhz

    def load_power_w(self, g: _Gpu, running: int) -> float:
        """The power model: what GPU ``g`` draws with ``running`` requests (see the module doc)."""
        if running <= 0:
            return g.idle_w
        if self.throttle == "power":  # the clock is lowered *because* the draw hit the cap
            return self.power_limit_w()
        work = running * self.tokens_per_forward
        activity = BASE_ACTIVITY + (1.0 - BASE_ACTIVITY) * work / (work + HALF_WORK_TOKENS)
        power = g.idle_w + (POWER_LIMIT_W - g.idle_w) * activity * (self.load_clock_mhz() / self.boost_mhz) * g.spread
        return min(power, self.power_limit_w())

    def _targets(self, g: _Gpu) -> tuple[float, float, float, float, float]:
        """(clock, power, temperature, util, mem util) the GPU heads for right now."""
        if not self.busy:
            return g.idle_mhz, g.idle_w, g.idle_c, 0.0, 0.0
        clock = self.load_clock_mhz()
        power = self.load_power_w(g, self.running)
        temp = THERMAL_C if self.throttle == "thermal" else LOAD_C
        return clock, power, temp, BUSY_UTIL, BUSY_MEM_UTIL

    def _advance(self, t: float) -> None:
        dt = t - self.t
        if dt <= 0:
            return
        for g in self.gpus:
            clock, power, temp, util, mem_util = self._targets(g)
            g.energy_mj += 1000.0 * _integral(g.power, power, dt, TAU_POWER_S)
            g.clock = _relax(g.clock, clock, dt, self.ramp_s)
            g.power = _relax(g.power, power, dt, TAU_POWER_S)
            g.temp = _relax(g.temp, temp, dt, TAU_TEMP_S)
            g.util = _relax(g.util, util, dt, TAU_UTIL_S)
            g.mem_util = _relax(g.mem_util, mem_util, dt, TAU_UTIL_S)
        self.t = t

    def set_running(self, n: int, t: float | None = None) -> None:
        """The scheduler's running-request count changed (power follows the count)."""
        with self._lock:
            if n == self.running:
                return
            self._advance(self._clock() if t is None else t)
            self.running = n

    def read(self, t: float | None = None) -> list[dict]:
        """One reading per GPU, NVML's units and reason names; small read noise as a real
        GPU shows (clocks to whole MHz, temperature to whole degrees)."""
        with self._lock:
            self._advance(self._clock() if t is None else t)
            reasons = REASONS[self.throttle] if self.busy else ("GpuIdle",)
            out = []
            for g in self.gpus:
                rng = g.rng
                assert rng is not None
                clock = round(g.clock + rng.uniform(-3.0, 3.0))
                util = min(100.0, max(0.0, round(g.util + (rng.uniform(-2.0, 2.0) if self.busy else 0.0))))
                out.append(
                    {
                        "index": g.rank - self.first_rank,  # the node's own numbering, as NVML's
                        "uuid": sim_uuid(g.rank),
                        "name": GPU_NAME,
                        "driver": "sim",
                        "sm_clock_mhz": clock,
                        "graphics_clock_mhz": clock,
                        "mem_clock_mhz": MEM_MHZ,
                        "sm_clock_max_mhz": self.max_mhz,
                        "power_w": round(g.power + rng.uniform(-1.0, 1.0), 3),
                        "power_limit_w": self.power_limit_w(),
                        "energy_mj": round(g.energy_mj),
                        "temperature_c": round(g.temp),
                        "gpu_util_pct": util,
                        "mem_util_pct": round(g.mem_util),
                        "pcie_tx_kbs": round(2000.0 * g.util / 100.0 + (rng.uniform(0, 50) if self.busy else 0.0)),
                        "pcie_rx_kbs": round(1000.0 * g.util / 100.0 + (rng.uniform(0, 50) if self.busy else 0.0)),
                        "throttle_reasons": list(reasons),
                    }
                )
            return out

    def describe(self) -> dict:
        return {
            "tp_size": len(self.gpus),
            "running": self.running,
            "ramp_s": self.ramp_s,
            "boost_mhz": self.boost_mhz,
            "max_mhz": self.max_mhz,
            "throttle": self.throttle,
            "throttle_mhz": self.throttle_mhz,
            "tokens_per_forward": self.tokens_per_forward,
        }
