"""GPU energy and joules per output token (harness/telemetry/energy.py) without a GPU: the
NVML path replays counter and power readings through a fake ``pynvml`` (the real
``NvmlSource`` reads them), including a counter NVML does not support (power integration)
and a counter that goes backwards (a driver reload); then the gate's verdicts.

The readings are a recording in scripts/check_nvml_energy.py's ``--record`` format: the
synthetic one below, built from a known power curve so the true joules are known, and any
real one dropped into tests/data/ as ``nvml_energy_<name>.json``."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.gates import gpu as gpu_gates
from harness.gates import registry
from harness.config.schema import GateConfig
from harness.telemetry import GpuInfo, Telemetry
from harness.telemetry.energy import energy_summary, joules_per_token_ratio, trapezoid_j
from harness.telemetry.nvml import NvmlSource
from harness.telemetry.sampler import phase_of

from tests.support.fake_nvml import FakeNvml, gpu_readings as _gpu

DATA = Path(__file__).resolve().parents[1] / "data"  # tests/data/
IDLE_W, LOAD_W, RIPPLE_W = 85.0, 480.0, 20.0
LOAD = (2.0, 9.0)  # the load window (s); telemetry's ramp-in leaves out its first second
RAMP_IN_S = 1.0
COUNTER_UPDATE_S = 0.1  # the driver moves the energy counter in steps (NVML: every ~20-100 ms)


def true_power_w(t: float, gpu: int) -> float:
    """The synthetic GPU's instantaneous draw: idle, then a rippling load (GPU 1 draws 5 % more)."""
    if not LOAD[0] <= t < LOAD[1]:
        return IDLE_W
    return (LOAD_W + RIPPLE_W * math.sin(2 * math.pi * t / 0.7)) * (1.0 + 0.05 * gpu)


DT = 0.0005  # the integration grid (s)


@functools.lru_cache(maxsize=None)
def cumulative_j(gpu: int) -> np.ndarray:
    """∫ power from 0 to each grid point over 12 s (midpoint rule)."""
    mids = (np.arange(int(12 / DT)) + 0.5) * DT
    return np.concatenate([[0.0], np.cumsum([true_power_w(t, gpu) for t in mids]) * DT])


def true_energy_j(t: float, gpu: int) -> float:
    """∫ power from 0 to t (to the grid point below t; fine enough for the tolerances below)."""
    return float(cumulative_j(gpu)[int(t / DT)])


def synthetic_recording(reset_at: float | None = None) -> dict:
    """Reads every 0.1 s (a little jitter) for 10 s, two GPUs. The counter holds the true
    energy as of its last 0.1 s update (plus a large since-driver-load offset; after
    ``reset_at`` it restarts near zero, as after a driver reload); the power reading is
    the last second's average, as NVML reports it on Ampere and newer."""
    reads = []
    for k in range(101):
        for gpu in (0, 1):
            t = round(k * 0.1 + 0.003 * math.sin(k) + 0.0005 * gpu, 6)
            counted = math.floor(t / COUNTER_UPDATE_S) * COUNTER_UPDATE_S
            offset = 7.5e8 if reset_at is None or t < reset_at else -true_energy_j(reset_at, gpu) * 1000 + 1234
            average_w = (true_energy_j(t, gpu) - true_energy_j(max(0.0, t - 1.0), gpu)) / min(1.0, max(t, 1e-9))
            reads.append({"t": t, "uuid": f"GPU-{gpu}", "energy_mj": round(true_energy_j(counted, gpu) * 1000 + offset),
                          "power_mw": round(average_w * 1000)})
    return {"description": "synthetic: a known power curve, counter and 1 s-averaged power derived from it",
            "synthetic": True, "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": "H200-like", "driver": "fake"}
                                        for i in (0, 1)],
            "interval_s": 0.1, "ramp_in_s": RAMP_IN_S, "idle_end": 1.0, "windows": [list(LOAD)], "reads": reads}


def recordings() -> list[tuple[str, dict]]:
    found = [("synthetic", synthetic_recording())]
    return found + [(p.stem, json.loads(p.read_text())) for p in sorted(DATA.glob("nvml_energy_*.json"))]


def replay(recording: dict, monkeypatch, counter_supported: bool = True) -> tuple[Telemetry, NvmlSource]:
    """Feed the recording through a fake pynvml into the real NvmlSource, one read per cycle,
    at the recorded times; phases as the Sampler assigns them."""
    uuids = [g["uuid"] for g in recording["gpus"]]
    fake = FakeNvml([_gpu(i, uuid=u) for i, u in enumerate(uuids)])
    if not counter_supported:
        for g in fake.gpus:
            g["fail"] = {"nvmlDeviceGetTotalEnergyConsumption": FakeNvml.NVML_ERROR_NOT_SUPPORTED}
    source = NvmlSource(fake.module(), pcie_interval_s=None)
    source.open()
    reads = sorted(recording["reads"], key=lambda r: (r["t"], uuids.index(r["uuid"])))
    times = iter(r["t"] for r in reads)
    monkeypatch.setattr("harness.telemetry.nvml.now", lambda: next(times))
    samples = []
    for i in range(0, len(reads), len(uuids)):
        cycle = reads[i:i + len(uuids)]
        for r in cycle:
            g = fake.gpus[uuids.index(r["uuid"])]
            g["energy_mj"], g["power_mw"] = r["energy_mj"], r["power_mw"]
        samples += source.read()
    windows = [(a, b) for a, b in recording["windows"]]
    load_end = windows[-1][1]
    for s in samples:
        s.phase = phase_of(s.t, windows, load_end, recording["ramp_in_s"], recording.get("idle_end"))
    gpus = [GpuInfo(g["index"], g["uuid"], g["name"], g["driver"], None, None) for g in recording["gpus"]]
    tel = Telemetry("nvml", gpus, samples, recording["interval_s"], recording["ramp_in_s"], windows[0][0], load_end,
                    windows=windows, disabled_fields=list(source.disabled_fields))
    return tel, source


def chunks_every(ms: float, start: float, end: float) -> list[tuple[float, int]]:
    """One token every ``ms`` between ``start`` and ``end`` (a steady stream)."""
    return [(start + i * ms / 1000, 1) for i in range(int((end - start) * 1000 / ms))]


def load_samples(tel: Telemetry, uuid: str) -> list:
    return sorted((s for s in tel.samples if s.uuid == uuid and s.phase == "load"), key=lambda s: s.t)


# ------------------------------------------------------------------- the NVML path
@pytest.mark.parametrize("name, recording", recordings(), ids=lambda x: x if isinstance(x, str) else "")
def test_counter_differenced_over_the_load_samples(name, recording, monkeypatch):
    tel, _ = replay(recording, monkeypatch)
    chunks = chunks_every(5.0, *recording["windows"][0])
    got = energy_summary(tel, chunks)
    assert got["method"] == "energy_counter" and got["notes"] == []
    total_per_token = 0.0
    for g in recording["gpus"]:
        load = load_samples(tel, g["uuid"])
        first, last = load[0], load[-1]
        mine = got["gpus"][g["uuid"]]
        assert mine["joules"] == pytest.approx((last.energy_mj - first.energy_mj) / 1000, abs=0.001)
        assert mine["seconds"] == pytest.approx(last.t - first.t, abs=1e-4)
        # the tokens of exactly that span: one every 5 ms
        assert mine["output_tokens"] == sum(1 for t, _ in chunks if first.t < t <= last.t)
        total_per_token += mine["joules"] / mine["output_tokens"]
    assert got["joules_per_token"] == pytest.approx(total_per_token, rel=1e-4)
    if recording.get("synthetic"):
        # the truth: ∫ power over the span, both GPUs; off by at most one counter step per end
        for g in recording["gpus"]:
            load = load_samples(tel, g["uuid"])
            truth = true_energy_j(load[-1].t, g["index"]) - true_energy_j(load[0].t, g["index"])
            assert got["gpus"][g["uuid"]]["joules"] == pytest.approx(truth, abs=2 * COUNTER_UPDATE_S * 520)
        # 480 W and 504 W for 6 s, 200 tokens/s: ~4.9 J per token
        assert 4.6 < got["joules_per_token"] < 5.2


@pytest.mark.parametrize("name, recording", recordings(), ids=lambda x: x if isinstance(x, str) else "")
def test_counter_not_supported_integrates_power(name, recording, monkeypatch):
    tel, source = replay(recording, monkeypatch, counter_supported=False)
    assert "energy_mj" in source.disabled_fields
    assert any("energy_mj switched off" in n and "Not Supported" in n for n in source.notes)
    got = energy_summary(tel, chunks_every(5.0, *recording["windows"][0]))
    assert got["method"] == "power_integration"
    for g in recording["gpus"]:
        load = load_samples(tel, g["uuid"])
        by_hand = sum((b.t - a.t) * (a.power_w + b.power_w) / 2 for a, b in zip(load, load[1:]))
        assert got["gpus"][g["uuid"]]["joules"] == pytest.approx(by_hand, abs=0.001)
    # side by side with the counter over the same samples: a 1 s-averaged power reading
    # lags the load, but past the ramp-in the load is steady, so they agree within 3 %
    tel_counter, _ = replay(recording, monkeypatch)
    counted = energy_summary(tel_counter, chunks_every(5.0, *recording["windows"][0]))
    assert got["joules"] == pytest.approx(counted["joules"], rel=0.03)


def test_a_counter_reset_is_bridged_by_power(monkeypatch):
    """NVML's counter is 64-bit mJ (it does not wrap in practice); it restarts when the
    driver reloads. That interval is integrated from power and a note says so."""
    tel, _ = replay(synthetic_recording(reset_at=5.05), monkeypatch)
    assert any(s.energy_mj < 1e6 for s in tel.samples if s.phase == "load")  # the reset is in the window
    got = energy_summary(tel, chunks_every(5.0, *LOAD))
    assert got["method"] == "energy_counter"
    assert sum("went backwards (a reset); 0.10 s bridged by power" in n for n in got["notes"]) == 2  # both GPUs
    tel_clean, _ = replay(synthetic_recording(), monkeypatch)
    clean = energy_summary(tel_clean, chunks_every(5.0, *LOAD))
    # the counter's last reading before the reset and first after it are each up to one
    # update step stale, so the bridged total may miss up to two steps' energy per GPU
    assert got["joules"] == pytest.approx(clean["joules"], abs=2 * 2 * COUNTER_UPDATE_S * 520)
    assert got["joules"] != clean["joules"]  # the bridge was really used


def test_each_repeat_is_its_own_window_and_the_gap_is_not_counted(monkeypatch):
    """Two load windows (two repeats): the energy between them (idle, warm-up) is left out."""
    rec = synthetic_recording()
    rec["windows"] = [[2.0, 5.0], [6.0, 9.0]]
    tel, _ = replay(rec, monkeypatch)
    got = energy_summary(tel, chunks_every(5.0, 2.0, 9.0))
    g0 = got["gpus"]["GPU-0"]
    # two spans of ~1.9 s (each window's first second is ramp-in), not the 6 s from first to last
    assert 3.6 < g0["seconds"] < 4.0
    assert g0["mean_power_w"] == pytest.approx(LOAD_W, rel=0.03)


def test_why_there_is_no_joules_per_token(monkeypatch):
    rec = synthetic_recording()
    rec["windows"] = [[2.0, 3.05]]  # past the 1 s ramp-in by one sample only
    tel, _ = replay(rec, monkeypatch)
    short = energy_summary(tel, chunks_every(5.0, 2.0, 3.05))
    assert short["joules_per_token"] is None and short["why_kind"] == "too_short"
    tel, _ = replay(synthetic_recording(), monkeypatch)
    for s in tel.samples:
        s.energy_mj = s.power_w = None
    blind = energy_summary(tel, chunks_every(5.0, *LOAD))
    assert blind["why_kind"] == "not_read" and "neither the energy counter nor the power" in blind["why"]
    tel, _ = replay(synthetic_recording(), monkeypatch)
    quiet = energy_summary(tel, [])
    assert quiet["why_kind"] == "no_tokens" and quiet["gpus"]["GPU-0"]["joules"] > 0


def test_trapezoid_and_ratio():
    tel_samples = [type("S", (), {"t": t, "power_w": p})() for t, p in ((0.0, 100.0), (1.0, 300.0), (3.0, 300.0))]
    assert trapezoid_j(tel_samples) == pytest.approx(200.0 + 600.0)
    assert trapezoid_j(tel_samples[:1]) is None
    spec, plain = {"energy": {"joules_per_token": 0.9}}, {"energy": {"joules_per_token": 1.2}}
    assert joules_per_token_ratio(spec, plain) == pytest.approx(0.75)
    assert joules_per_token_ratio(spec, {"energy": {"joules_per_token": None}}) is None
    assert joules_per_token_ratio(None, plain) is None


# ------------------------------------------------------------------------- the gate
def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def ctx(gpu, telemetry="sim", cfg=None):
    return registry.GateContext(arm="eagle3", gate=cfg or gate_cfg(max_joules_per_token={"eagle3": 2.5}), result=None,
                            gpu=gpu, plain_arm="baseline", results={}, reference=None, reference_label="",
                            telemetry_source=telemetry)


def gpu_with(energy: dict, **extra) -> dict:
    return {"source": "sim", "samples": {"idle": 5, "ramp_in": 10, "load": 40}, "ramp_in_s": 1.0, "interval_s": 0.1,
            "load_windows": 1, "longest_load_window_s": 5.0, "gpus": {}, "energy": energy, **extra}


MEASURED = {"method": "energy_counter", "joules": 1100.0, "seconds": 4.0, "output_tokens": 1000,
            "joules_per_token": 1.1}


def test_max_joules_per_token_verdicts():
    [ok] = gpu_gates.max_joules_per_token(ctx(gpu_with(MEASURED)))
    assert ok.status == "passed" and ok.value == 1.1 and ok.threshold == 2.5
    assert ok.detail == ("eagle3: 1.100 J per output token (1100.0 J over 4.00 s of load, 1000 tokens, from the "
                         "GPUs' energy counters) is within the limit 2.5 J/token")
    [over] = gpu_gates.max_joules_per_token(ctx(gpu_with({**MEASURED, "joules_per_token": 3.0})))
    assert over.status == "failed" and "exceeds the limit 2.5 J/token" in over.detail
    [none] = gpu_gates.max_joules_per_token(ctx(gpu_with(MEASURED), cfg=gate_cfg(max_joules_per_token={"baseline": 2.0})))
    assert none.status == "skipped" and "no threshold configured for arm 'eagle3'" in none.detail


def test_max_joules_per_token_when_telemetry_cannot_tell():
    [off] = gpu_gates.max_joules_per_token(ctx(None, telemetry="off"))
    assert off.status == "skipped" and "telemetry is off" in off.detail
    [unavailable] = gpu_gates.max_joules_per_token(ctx({"source": "nvml", "unavailable": "no NVIDIA driver (NVML: x)"}, "nvml"))
    assert unavailable.status == "skipped" and "no NVIDIA driver" in unavailable.detail
    [nothing] = gpu_gates.max_joules_per_token(ctx(None, telemetry="nvml"))
    assert nothing.status == "failed" and "recorded nothing" in nothing.detail
    # a load inside the ramp-in: no load sample at all, too short to judge
    ramp_only = gpu_with({}, samples={"idle": 5, "ramp_in": 6, "load": 0}, longest_load_window_s=0.6)
    [short] = gpu_gates.max_joules_per_token(ctx(ramp_only))
    assert short.status == "inconclusive" and "too short" in short.detail
    # one load sample per window: nothing to difference, also too short
    one = {"joules_per_token": None, "why_kind": "too_short", "why": "no load window held two samples of every GPU"}
    [short] = gpu_gates.max_joules_per_token(ctx(gpu_with(one)))
    assert short.status == "inconclusive" and short.passed is True  # gate.inconclusive=warn, the default
    [strict] = gpu_gates.max_joules_per_token(ctx(gpu_with(one), cfg=gate_cfg(max_joules_per_token={"eagle3": 2.5},
                                                                          inconclusive="fail")))
    assert strict.passed is False and strict.inconclusive
    blind = {"joules_per_token": None, "why_kind": "not_read", "why": "neither the energy counter nor the power draw was read under load"}
    [failed] = gpu_gates.max_joules_per_token(ctx(gpu_with(blind)))
    assert failed.status == "failed" and "energy per token was not measured: neither" in failed.detail
    [old] = gpu_gates.max_joules_per_token(ctx(gpu_with(None)))  # a record from before energy was measured
    assert old.status == "failed" and "no energy figures" in old.detail


# ---------------------------------------------------------------- the simulator, end to end
@pytest.mark.slow
def test_sim_smoke_reports_joules_per_token_that_match_the_power_model(sim_smoke_on_processes):
    """`pytest suites/ +exp=sim_smoke` (telemetry=sim): every arm's joules per token from the
    simulated GPUs' energy counters, against what the simulator's power model says one
    stream draws (harness/sim/gpu.py) times the span, over the tokens streamed in it.
    Within 5 %: between two requests of the closed loop nothing runs for a moment and the
    draw relaxes toward idle, which the model's steady figure leaves out."""
    from harness.report.html import write_report
    from harness.sim.gpu import SimGpuModel

    proc = sim_smoke_on_processes.proc
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    record = sim_smoke_on_processes.record
    results = json.loads((record / "results.json").read_text())
    per_token = {}
    for arm, tokens_per_pass in (("baseline", 1), ("eagle3", 3)):  # drafter eagle3_k25: 3 draft tokens a verify
        energy = results["arms"][arm]["gpu"]["energy"]
        assert energy["method"] == "energy_counter" and energy["output_tokens"] > 100
        model = SimGpuModel(tp_size=1, seed=0, tokens_per_forward=tokens_per_pass)  # server.sim.seed: 0
        expected = model.load_power_w(model.gpus[0], 1) * energy["seconds"] / energy["output_tokens"]
        assert energy["joules_per_token"] == pytest.approx(expected, rel=0.05), (arm, energy)
        per_token[arm] = energy["joules_per_token"]
    ratio = results["arms"]["eagle3"]["joules_per_token_vs_baseline"]
    assert ratio == pytest.approx(per_token["eagle3"] / per_token["baseline"])
    verdict = next(g for g in results["gates"] if g["name"] == "max_joules_per_token" and g["arm"] == "eagle3")
    assert verdict["status"] == "passed" and verdict["value"] == pytest.approx(per_token["eagle3"])
    summary = (record / "summary.md").read_text()
    assert "## Energy" in summary and f"{ratio:.2f}x" in summary
    html = write_report(record).read_text()
    assert f"{per_token['eagle3']:.3f} J/token ({ratio:.2f}x of baseline)" in html


def test_check_nvml_energy_script_prints_both_methods(monkeypatch, tmp_path, capsys):
    """scripts/check_nvml_energy.py (for a real GPU) through a fake NVML whose counter runs
    at 300 W: both methods print ~300 W, and --record writes what the replay above reads."""
    import importlib.util
    import time

    class Steady(FakeNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
            return int(time.perf_counter() * 300_000) + 10**9  # mJ: 300 J each second

    fake = Steady([_gpu(0, power_mw=300_000)])
    path = Path(__file__).resolve().parents[2] / "scripts" / "check_nvml_energy.py"
    spec = importlib.util.spec_from_file_location("check_nvml_energy", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "NvmlSource", lambda pcie_interval_s=None: NvmlSource(fake.module(), pcie_interval_s=None))
    record = tmp_path / "nvml_energy_fake.json"
    monkeypatch.setattr("sys.argv", ["check_nvml_energy.py", "--seconds", "1.0", "--idle-s", "0.1", "--ramp-in-s", "0.2",
                                     "--interval-s", "0.05", "--record", str(record)])
    assert script.main() == 0
    out = capsys.readouterr().out
    watts = [float(line.split("mean")[1].split("W")[0]) for line in out.splitlines() if "mean" in line]
    assert len(watts) == 2 and all(abs(w - 300) < 15 for w in watts), out
    assert "power integration is" in out
    saved = json.loads(record.read_text())
    assert saved["windows"] and saved["reads"][0]["power_mw"] == 300_000 and saved["synthetic"] is False
