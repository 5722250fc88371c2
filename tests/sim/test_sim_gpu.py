"""The simulator's GPU model (``GET /sim/gpu``) and the ``sim`` telemetry source, with the
simulator as a real subprocess and a real streaming load."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from harness.sim.gpu import SimGpuModel, sim_uuid
from harness.telemetry import Sampler, make_source, resolve_uuids, summarize
from tests.support import sim_process

REPO = Path(__file__).resolve().parents[2]
# 4 ms steps: 2000 tokens keep a request streaming ~8 s, longer than any test needs.
FAST = ["--sim-decode-step-ms", "4", "--sim-prefill-base-ms", "1", "--sim-startup-s", "0.2", "--sim-gpu-ramp-s", "0.5"]


class Sim(sim_process.Sim):
    """The simulator as a process (tests/support/sim_process.py), with its GPU model's route."""

    def gpus(self) -> list[dict]:
        return requests.get(self.url + "/sim/gpu", timeout=5).json()["gpus"]


class Stream:
    """One long streaming /generate request in a thread; ``first`` is set at the first
    streamed text, ``close()`` hangs up (the simulator aborts the request)."""

    def __init__(self, url: str, max_tokens: int = 2000):
        self.first = threading.Event()
        self.stop = threading.Event()
        self.status: int | None = None
        self.chunks = 0
        body = {"text": "count", "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True}, "stream": True}
        self.thread = threading.Thread(target=self._run, args=(url + "/generate", body), daemon=True)
        self.thread.start()

    def _run(self, url: str, body: dict) -> None:
        with requests.post(url, json=body, stream=True, timeout=30) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    self.chunks += 1
                    self.first.set()
                if self.stop.is_set():
                    return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with Sim(FAST + ["--tp-size", "2"]) as s:
        yield s


def _wait_idle(sim: Sim) -> None:
    """Until no request runs (a previous test's stream has been aborted)."""
    deadline = time.monotonic() + 10
    while requests.get(sim.url + "/sim/gpu", timeout=5).json()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_clock_below(sim: Sim, mhz: float) -> None:
    deadline = time.monotonic() + 10
    while max(g["sm_clock_mhz"] for g in sim.gpus()) > mhz and time.monotonic() < deadline:
        time.sleep(0.05)


# ------------------------------------------------------------------ the model
def test_model_is_pure_arithmetic():
    t = [0.0]
    m = SimGpuModel(tp_size=2, seed=3, ramp_s=1.0, clock=lambda: t[0])
    idle = m.read()
    assert [g["uuid"] for g in idle] == [sim_uuid(0), sim_uuid(1)] == ["GPU-sim-0000-0000-0000-000000000000",
                                                                       "GPU-sim-0001-0000-0000-000000000001"]
    assert all(2330 <= g["sm_clock_mhz"] <= 2360 and g["throttle_reasons"] == ["GpuIdle"] for g in idle)
    assert idle[0]["sm_clock_mhz"] != idle[1]["sm_clock_mhz"] or idle[0]["power_w"] != idle[1]["power_w"]  # seeded spread
    e0 = [g["energy_mj"] for g in idle]
    m.set_running(4)
    t[0] = 1.0  # one time constant: 63 % of the way to boost
    one = m.read()
    for g0, g1 in zip(idle, one):
        frac = (g1["sm_clock_mhz"] - g0["sm_clock_mhz"]) / (2600 - g0["sm_clock_mhz"])
        assert 0.55 < frac < 0.72
        assert g1["throttle_reasons"] == [] and g1["gpu_util_pct"] > 85
    t[0] = 11.0
    hot = m.read()
    # 4 plain streams: 85 W + 615 W x (0.3 + 0.7 x 4/68) x spread(0.97-1.03) = 288-301 W
    assert all(abs(g["sm_clock_mhz"] - 2600) <= 3 and 286 <= g["power_w"] <= 303 for g in hot)
    # The energy counter integrates the power curve exactly: load power for 11 s, less
    # the 0.3 s exponential rise from idle power.
    for g, e, state in zip(hot, e0, m.gpus):
        load_w = m.load_power_w(state, 4)
        joules = load_w * 11.0 + (state.idle_w - load_w) * 0.3 * (1 - math.exp(-11.0 / 0.3))
        assert (g["energy_mj"] - e) / 1000 == pytest.approx(joules, abs=0.01)
    m.set_running(0)
    t[0] = 30.0
    assert all(g["sm_clock_mhz"] < 2365 and g["throttle_reasons"] == ["GpuIdle"] for g in m.read())


def test_model_throttle_modes():
    t = [0.0]
    thermal = SimGpuModel(tp_size=1, ramp_s=0.5, throttle="thermal", clock=lambda: t[0])
    power = SimGpuModel(tp_size=1, ramp_s=0.5, throttle="power", clock=lambda: t[0])
    thermal.set_running(1)
    power.set_running(1)
    t[0] = 5.0
    (th,), (pw,) = thermal.read(), power.read()
    assert abs(th["sm_clock_mhz"] - 1800) <= 3 and th["throttle_reasons"] == ["SwThermalSlowdown", "HwThermalSlowdown"]
    assert abs(pw["sm_clock_mhz"] - 1800) <= 3 and pw["throttle_reasons"] == ["SwPowerCap"]
    assert pw["power_limit_w"] == 250.0 and abs(pw["power_w"] - 250.0) <= 1.5
    with pytest.raises(ValueError, match="--sim-gpu-throttle"):
        SimGpuModel(throttle="fire")


def test_model_power_rises_with_the_work_per_pass():
    """Power follows the running count and the tokens each pass processes: more streams
    draw more, a 3-token verify pass more than a plain step, never past the 700 W limit;
    a thermally capped clock draws proportionally less dynamic power."""
    plain, spec = SimGpuModel(tp_size=1), SimGpuModel(tp_size=1, tokens_per_forward=3)
    (g,), (h,) = plain.gpus, spec.gpus
    assert plain.load_power_w(g, 0) == g.idle_w
    watts = [plain.load_power_w(g, n) for n in (1, 4, 64, 1024)]
    assert watts == sorted(watts) and 265 <= watts[0] <= 285 and 640 <= watts[-1] <= 700
    assert spec.load_power_w(h, 1) == pytest.approx(plain.load_power_w(g, 3))  # work = streams x tokens per pass
    assert spec.load_power_w(h, 1) > plain.load_power_w(g, 1)
    assert SimGpuModel(tp_size=1, tokens_per_forward=3).load_power_w(h, 10**6) <= 700.0
    capped = SimGpuModel(tp_size=1, throttle="thermal")
    (c,) = capped.gpus
    dynamic = lambda model, gpu: model.load_power_w(gpu, 1) - gpu.idle_w
    assert dynamic(capped, c) == pytest.approx(dynamic(plain, g) * 1800 / 2600)
    # the count drives the power: the energy counter's rate follows it
    t = [0.0]
    m = SimGpuModel(tp_size=1, clock=lambda: t[0])
    (k,) = m.gpus
    m.set_running(1)
    t[0] = 4.0
    e1 = m.read()[0]["energy_mj"]
    t[0] = 5.0
    e2 = m.read()[0]["energy_mj"]
    m.set_running(64)
    t[0] = 10.0
    e3 = m.read()[0]["energy_mj"]
    t[0] = 11.0
    e4 = m.read()[0]["energy_mj"]
    assert (e2 - e1) / 1000 == pytest.approx(m.load_power_w(k, 1), abs=0.5)  # joules in 1 s = watts
    assert (e4 - e3) / 1000 == pytest.approx(m.load_power_w(k, 64), abs=0.5)


# ------------------------------------------------------------- the HTTP route
def test_sim_gpu_idle(sim: Sim):
    gpus = sim.gpus()
    assert [g["index"] for g in gpus] == [0, 1]  # one per TP rank
    assert [g["uuid"] for g in gpus] == [sim_uuid(0), sim_uuid(1)]
    for g in gpus:
        assert 2330 <= g["sm_clock_mhz"] <= 2360
        assert 80 <= g["power_w"] <= 90
        assert 30 <= g["temperature_c"] <= 36
        assert g["gpu_util_pct"] == 0 and g["throttle_reasons"] == ["GpuIdle"]
        assert g["sm_clock_max_mhz"] == 2617.0 and g["power_limit_w"] == 700.0
    assert [g["uuid"] for g in sim.gpus()] == [sim_uuid(0), sim_uuid(1)]  # stable


def test_sim_gpu_ramps_under_streaming_load(sim: Sim):
    _wait_idle(sim)
    idle = {g["uuid"]: g["sm_clock_mhz"] for g in sim.gpus()}
    stream = Stream(sim.url)
    try:
        assert stream.first.wait(10), "no tokens streamed"
        assert stream.status == 200
        seen: list[list[dict]] = []
        for _ in range(30):  # 1.5 s = 3 time constants
            seen.append(sim.gpus())
            time.sleep(0.05)
    finally:
        stream.close()
    for i, (uuid, idle_mhz) in enumerate(idle.items()):
        clocks = [reading[i]["sm_clock_mhz"] for reading in seen]
        assert clocks[-1] > idle_mhz + 150, clocks  # well above idle ...
        assert clocks[-1] > 2540, clocks  # ... and most of the way to the 2600 boost
        assert clocks[-1] > clocks[0]  # ramping, not jumping
        last = seen[-1][i]
        assert last["throttle_reasons"] == [] and last["gpu_util_pct"] > 85 and last["power_w"] > 200
    # The hang-up aborts the request and the GPUs go idle again.
    _wait_idle(sim)
    assert all(g["throttle_reasons"] == ["GpuIdle"] for g in sim.gpus())


@pytest.mark.parametrize("mode, reasons", [("thermal", {"HwThermalSlowdown", "SwThermalSlowdown"}), ("power", {"SwPowerCap"})])
def test_sim_gpu_throttle_switch(mode, reasons):
    s = Sim(FAST + ["--sim-gpu-throttle", mode])
    try:
        stream = Stream(s.url)
        try:
            assert stream.first.wait(10)
            time.sleep(2.0)  # 4 ramp time constants: within 10 MHz of the cap
            (g,) = s.gpus()
        finally:
            stream.close()
    finally:
        s.kill()
    assert g["sm_clock_mhz"] <= 1800 + 30, g  # capped, under load
    assert set(g["throttle_reasons"]) == reasons


# -------------------------------------------------------- source + Sampler
def test_sim_source_and_sampler_across_a_load(sim: Sim):
    _wait_idle(sim)
    _wait_clock_below(sim, 2365)
    source = make_source("sim", base_url=sim.url)
    assert source is not None
    uuids = resolve_uuids(source, ["1", "GPU-sim-0000"])
    assert uuids == [sim_uuid(1), sim_uuid(0)]
    gpus = source.open(gpu_uuids=uuids)
    assert [g.index for g in gpus] == [1, 0] and gpus[0].sm_clock_max_mhz == 2617.0
    # a ramp-in of 1 s: on a busy 2-core machine a sampler's thread went 0.5 s without a
    # sample (none in a 0.5 s ramp-in, 18 over the load after it)
    sampler = Sampler(source, interval_s=0.05, ramp_in_s=1.0)
    sampler.start()
    try:
        time.sleep(0.5)
        stream = Stream(sim.url)
        try:
            assert stream.first.wait(10)
            sampler.mark_load_start()
            time.sleep(3.0)
            sampler.mark_load_end()
        finally:
            stream.close()
        time.sleep(0.5)
    finally:
        tel = sampler.stop()
        source.close()
    got = summarize(tel)
    n = got["samples"]
    assert n["idle"] > 0 and n["ramp_in"] > 0 and n["load"] > 0 and n["after"] > 0, n
    assert got["load_measured"] is True and got["source"] == "sim"
    assert list(got["gpus"]) == [sim_uuid(1), sim_uuid(0)]
    for uuid, g in got["gpus"].items():
        assert 2330 <= g["idle"]["sm_clock_mhz"]["median"] <= 2360
        assert g["load"]["sm_clock_mhz"]["median"] > g["idle"]["sm_clock_mhz"]["median"] + 150
        assert g["load"]["sm_clock_mhz"]["min"] > 2450  # the ramp-in was excluded
        assert g["throttle_fraction_under_load"]["GpuIdle"] == 0.0
        assert 0.9 < g["sm_clock_ratio_under_load"] < 1.0
        assert 240 <= g["load"]["mean_power_w_from_energy"] <= 305
        assert g["load"]["power_w"]["median"] == pytest.approx(g["load"]["mean_power_w_from_energy"], rel=0.05)
    # The sampler's own cost, for the overhead report (printed with -s; never asserted as time).
    reads = max(1, len(tel.samples) // 2)
    print(f"\nsim source at 20 Hz: {reads} reads, {tel.sampler_cpu_s * 1e3:.1f} ms CPU "
          f"({tel.sampler_cpu_s / reads * 1e3:.2f} ms per read, {tel.sampler_cpu_s / tel.wall_s * 100:.2f} % of a core)")


def test_gpu_check_against_the_simulator(sim: Sim, tmp_path):
    """benchmarks/gpu_check.py end to end, with the simulator as both load and GPUs."""
    _wait_idle(sim)
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--source", "sim", "--server", sim.url,
         "--idle-s", "0.5", "--load-s", "2", "--after-s", "0.5", "--ramp-in-s", "0.5", "--concurrency", "4",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SM clock median (MHz)" in proc.stdout and "GPU 1 NVIDIA H200 (simulated)" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["load_measured"] and summary["error"] is None
    assert (tmp_path / "telemetry.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "telemetry.csv").read_text().startswith("t_s,phase,uuid,index,")


def test_gpu_check_says_when_the_load_is_an_error(sim: Sim, tmp_path):
    """The session's mistake: a request that fails with HTTP 400 is no load, and
    gpu_check says so instead of reporting idle clocks as load clocks."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--source", "sim", "--server", sim.url,
         "--idle-s", "0.2", "--load-s", "1", "--after-s", "0", "--max-tokens", "-1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu_check: no tokens streamed from" in proc.stderr and "HTTP 400" in proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["load_measured"] is False and summary["samples"]["load"] == 0
    assert any("load never started" in n for n in summary["notes"])
