"""GPU telemetry without a GPU: NVML through a fake ``pynvml``, ``nvidia-smi`` through a
fake binary on PATH, the Sampler through a source with scripted timestamps, and the
summary / CSV / PNG from a hand-made Telemetry."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harness.telemetry import (
    THROTTLE_REASONS,
    GpuInfo,
    GpuSample,
    Sampler,
    Source,
    Telemetry,
    TelemetryUnavailable,
    make_source,
    plot_png,
    resolve_uuids,
    summarize,
    write_csv,
)
from harness.telemetry.base import decode_reasons
from harness.telemetry.driver import nvidia_driver_status
from harness.telemetry.nvml import NvmlSource
from harness.telemetry.sampler import phase_of
from harness.telemetry.smi import SmiSource, parse_csv
from tests.support.fake_nvml import FakeNvml, gpu_readings as _gpu
from harness.telemetry.summary import CSV_COLUMNS

REPO = Path(__file__).resolve().parents[2]


def _nvml(n: int = 2, **kw) -> tuple[FakeNvml, NvmlSource]:
    fake = FakeNvml([_gpu(i) for i in range(n)], **kw)
    return fake, NvmlSource(fake.module(), pcie_interval_s=0.0)


# ========================================================================= NVML
def test_reason_names_are_nvml_bits():
    assert set(THROTTLE_REASONS.values()) == {
        "GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
        "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting",
    }
    assert THROTTLE_REASONS[0x1] == "GpuIdle" and THROTTLE_REASONS[0x40] == "HwThermalSlowdown"
    assert decode_reasons(0) == ()
    assert decode_reasons(0x4 | 0x20 | 0x1000) == ("SwPowerCap", "SwThermalSlowdown", "0x1000")


def test_nvml_readings_and_units():
    fake, src = _nvml(2)
    gpus = src.open(None, None)
    assert [g.index for g in gpus] == [0, 1]
    g0 = gpus[0]
    assert g0.uuid == "GPU-00aaaaaa-0000-1111-2222-333333333330"  # bytes decoded
    assert (g0.name, g0.driver, g0.sm_clock_max_mhz, g0.power_limit_w) == ("NVIDIA H200", "550.54.15", 1980.0, 700.0)
    samples = src.read()
    assert len(samples) == 2
    s = samples[0]
    assert (s.uuid, s.index) == (g0.uuid, 0)
    assert (s.sm_clock_mhz, s.graphics_clock_mhz, s.mem_clock_mhz, s.sm_clock_max_mhz) == (1980.0, 1980.0, 2619.0, 1980.0)
    assert s.power_w == pytest.approx(350.123) and s.power_limit_w == 700.0  # mW -> W
    assert s.energy_mj == 123_456_789.0 and s.temperature_c == 45.0
    assert (s.gpu_util_pct, s.mem_util_pct, s.pcie_tx_kbs, s.pcie_rx_kbs) == (97.0, 61.0, 1234.0, 567.0)
    assert s.throttle_reasons == ("SwPowerCap", "SwThermalSlowdown")
    assert src.disabled_fields == [] and src.notes == []
    src.close()
    assert fake.shutdowns == 1


def test_nvml_unsupported_field_is_switched_off_and_sampling_goes_on():
    fake, src = _nvml(2)
    fake.gpus[0]["fail"] = {"nvmlDeviceGetTotalEnergyConsumption": FakeNvml.NVML_ERROR_NOT_SUPPORTED}
    src.open()
    for _ in range(3):
        a, b = src.read()
        assert a.energy_mj is None and a.sm_clock_mhz == 1980.0 and a.power_w is not None
        assert b.energy_mj == 123_456_789.0  # the other GPU still has it
    assert src.disabled_fields == ["energy_mj"]
    assert any("energy_mj switched off" in n and "Not Supported" in n for n in src.notes)
    # Switched off for good: asked once on GPU 0, three times on GPU 1.
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1 + 3


def test_nvml_transient_error_is_noted_not_disabled():
    fake, src = _nvml(1)
    src.open()
    fake.gpus[0]["fail"] = {"nvmlDeviceGetPowerUsage": FakeNvml.NVML_ERROR_UNKNOWN}
    assert src.read()[0].power_w is None
    del fake.gpus[0]["fail"]
    assert src.read()[0].power_w == pytest.approx(350.123)
    assert src.disabled_fields == [] and any("power_w unreadable" in n for n in src.notes)


def test_nvml_gpu_that_vanishes_is_dropped_with_a_note():
    fake, src = _nvml(3)
    src.open()
    assert len(src.read()) == 3
    fake.gpus[1]["fail"] = {"nvmlDeviceGetClockInfo": FakeNvml.NVML_ERROR_GPU_IS_LOST}
    assert [s.index for s in src.read()] == [0, 2]
    assert [s.index for s in src.read()] == [0, 2]
    lost = [n for n in src.notes if "dropped" in n]
    assert len(lost) == 1 and "GPU 1" in lost[0] and "GPU is lost" in lost[0]
    fake.gpus[2]["fail"] = {"nvmlDeviceGetPowerUsage": FakeNvml.NVML_ERROR_NOT_FOUND}
    assert [s.index for s in src.read()] == [0]


@pytest.mark.parametrize(
    "code, text",
    [
        (FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver (NVML: NVML Shared Library Not Found)"),
        (FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver (NVML: Driver Not Loaded)"),
    ],
)
def test_nvml_no_driver_is_one_sentence(code, text):
    _fake, src = _nvml(1, init_error=code)
    with pytest.raises(TelemetryUnavailable) as err:
        src.open()
    assert str(err.value) == text


def test_real_pynvml_on_this_machine_says_no_driver_or_works():
    present, _why = nvidia_driver_status()
    src = NvmlSource()
    try:
        if present:
            assert src.open()
        else:
            with pytest.raises(TelemetryUnavailable, match=r"^no NVIDIA driver \(NVML: "):
                src.open()
    finally:
        src.close()


def test_nvml_older_binding_uses_throttle_reasons():
    fake = FakeNvml([_gpu(0, reasons=0x1)])
    src = NvmlSource(fake.module(without=("nvmlDeviceGetCurrentClocksEventReasons",)))
    src.open()
    assert src.read()[0].throttle_reasons == ("GpuIdle",)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    assert "throttle_reasons" not in src.disabled_fields


def test_nvml_older_driver_falls_back_to_throttle_reasons():
    fake, src = _nvml(1)
    fake.gpus[0]["fail"] = {"nvmlDeviceGetCurrentClocksEventReasons": FakeNvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    src.open()
    for _ in range(3):
        assert src.read()[0].throttle_reasons == ("SwPowerCap", "SwThermalSlowdown")
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # tried once
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    assert src.disabled_fields == []
    assert any("nvmlDeviceGetCurrentClocksThrottleReasons" in n for n in src.notes)


def test_nvml_pcie_is_read_at_its_own_slower_rate():
    fake = FakeNvml([_gpu(0)])
    src = NvmlSource(fake.module(), pcie_interval_s=3600.0)
    src.open()
    first, second = src.read()[0], src.read()[0]
    assert first.pcie_tx_kbs == 1234.0 and second.pcie_tx_kbs is None
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2  # TX + RX, once


def test_nvml_selects_gpus_by_uuid_then_index():
    fake, src = _nvml(4)
    u = [g["uuid"] for g in fake.gpus]
    assert [g.uuid for g in src.open(gpu_uuids=[u[3], u[1]], gpu_indices=[0])] == [u[3], u[1]]  # UUIDs win
    assert [s.uuid for s in src.read()] == [u[3], u[1]]
    assert [g.index for g in src.open(gpu_indices=[2])] == [2]
    assert [s.index for s in src.read()] == [2]
    with pytest.raises(TelemetryUnavailable, match="no GPU with UUID GPU-nope"):
        src.open(gpu_uuids=["GPU-nope"])
    with pytest.raises(TelemetryUnavailable, match="no GPU with index 7"):
        src.open(gpu_indices=[7])


def test_resolve_uuids_from_indices_and_ids():
    fake, src = _nvml(4)
    u = [g["uuid"] for g in fake.gpus]
    assert resolve_uuids(src, ["1", u[0]]) == [u[1], u[0]]
    assert resolve_uuids(src, ["2,3"]) == [u[2], u[3]]  # a CUDA_VISIBLE_DEVICES string
    assert resolve_uuids(src, ["GPU-33"]) == [u[3]]  # a unique prefix, as CUDA accepts
    assert resolve_uuids(src, ["all"]) == u
    assert resolve_uuids(src, ["0", "0"]) == [u[0]]
    with pytest.raises(TelemetryUnavailable, match="no GPU with index 9"):
        resolve_uuids(src, ["9"])
    with pytest.raises(TelemetryUnavailable, match="4 GPUs with UUID GPU-"):
        resolve_uuids(src, ["GPU-"])


def test_make_source():
    assert make_source("off") is None
    assert isinstance(make_source("nvml"), NvmlSource)
    assert isinstance(make_source("smi"), SmiSource)
    assert make_source("sim", base_url="http://127.0.0.1:1").name == "sim"
    with pytest.raises(ValueError, match="base_url"):
        make_source("sim")
    with pytest.raises(ValueError, match="unknown telemetry source 'dcgm'"):
        make_source("dcgm")


# ========================================================================== smi
SMI_TEXT = textwrap.dedent(
    """\
    0, GPU-aaaa0000-1111-2222-3333-444444444444, NVIDIA H200, 550.54.15, 1980, 1980, 3201, 1980, 452.31, 700.00, 51, 98, 63, 0x0000000000000000
    1, GPU-bbbb0000-1111-2222-3333-444444444444, NVIDIA H200, 550.54.15, 2355, 2355, 3201, 1980, [N/A], 700.00, 33, 0, 0, 0x0000000000000001
    2, GPU-cccc0000-1111-2222-3333-444444444444, NVIDIA H200, 550.54.15, 1800, 1800, 3201, 1980, 690.10, [Not Supported], 88, 100, 70, 0x0000000000000064
    """
)


def test_smi_csv_parsing_with_na():
    rows = parse_csv(SMI_TEXT)
    assert [r.index for r in rows] == [0, 1, 2]
    a, b, c = rows
    assert a.values["sm_clock_mhz"] == 1980.0 and a.values["power_w"] == pytest.approx(452.31) and a.reasons == ()
    assert b.values["power_w"] is None and b.reasons == ("GpuIdle",)
    assert c.values["power_limit_w"] is None
    assert c.reasons == ("SwPowerCap", "SwThermalSlowdown", "HwThermalSlowdown")
    assert parse_csv("No devices were found\n") == []


def _fake_smi(tmp_path: Path, monkeypatch, text: str, old_driver: bool = False) -> Path:
    """An executable ``nvidia-smi`` on PATH that prints ``rows.csv`` (editable between reads)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rows = tmp_path / "rows.csv"
    rows.write_text(text)
    script = bindir / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "args = ' '.join(sys.argv[1:])\n"
        f"if {old_driver!r} and 'clocks_event_reasons' in args:\n"
        "    print('Field \"clocks_event_reasons.active\" is not a valid field to query.'); sys.exit(2)\n"
        "assert '--format=csv,noheader,nounits' in args, args\n"
        f"sys.stdout.write(open({str(rows)!r}).read())\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return rows


def test_smi_source_through_a_fake_binary(tmp_path, monkeypatch):
    rows = _fake_smi(tmp_path, monkeypatch, SMI_TEXT)
    src = SmiSource()
    uuids = resolve_uuids(src, ["2", "GPU-aaaa"])
    assert uuids == ["GPU-cccc0000-1111-2222-3333-444444444444", "GPU-aaaa0000-1111-2222-3333-444444444444"]
    gpus = src.open(gpu_uuids=uuids)
    assert [g.index for g in gpus] == [2, 0] and gpus[1].driver == "550.54.15" and gpus[1].sm_clock_max_mhz == 1980.0
    s2, s0 = src.read()
    assert (s2.index, s2.sm_clock_mhz, s2.power_limit_w, s2.temperature_c) == (2, 1800.0, None, 88.0)
    assert s0.power_w == pytest.approx(452.31) and s0.energy_mj is None and s0.pcie_tx_kbs is None
    assert "power_limit_w" in src.disabled_fields and "energy_mj" in src.disabled_fields
    # GPU 2 disappears from nvidia-smi's list: dropped with a note, GPU 0 goes on.
    rows.write_text("\n".join(ln for ln in SMI_TEXT.splitlines() if not ln.startswith("2,")) + "\n")
    assert [s.index for s in src.read()] == [0]
    assert any("GPU 2" in n and "dropped" in n for n in src.notes)


def test_smi_older_driver_field_name(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, SMI_TEXT, old_driver=True)
    src = SmiSource()
    src.open(gpu_indices=[1])
    assert src.read()[0].throttle_reasons == ("GpuIdle",)
    assert src.fields[-1] == "clocks_throttle_reasons.active"


def test_smi_without_binary_is_no_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TelemetryUnavailable) as err:
        SmiSource().open()
    assert str(err.value) == "no NVIDIA driver (nvidia-smi not found)"


# ====================================================================== Sampler
def _sample(t: float, uuid: str = "GPU-a", index: int = 0, **kw) -> GpuSample:
    values = dict(
        sm_clock_mhz=None, graphics_clock_mhz=None, mem_clock_mhz=None, sm_clock_max_mhz=None, power_w=None,
        power_limit_w=None, energy_mj=None, temperature_c=None, gpu_util_pct=None, mem_util_pct=None,
        pcie_tx_kbs=None, pcie_rx_kbs=None,
    )
    values.update(kw)
    return GpuSample(t=t, uuid=uuid, index=index, **values)


class ScriptedSource(Source):
    """Read k returns a sample stamped k / 10 s, whatever the real time; ``done`` is set
    after ``n`` reads.  ``hook(k)`` runs inside read k (before it returns)."""

    name = "scripted"

    def __init__(self, n: int, hook=None, fail_at: set[int] | None = None):
        super().__init__()
        self.n, self.k, self.hook, self.fail_at = n, 0, hook, fail_at or set()
        self.done = threading.Event()

    def enumerate(self):
        return [GpuInfo(0, "GPU-a", "fake", None, 2000.0, 700.0)]

    def open(self, gpu_uuids=None, gpu_indices=None):
        self.opened = self.enumerate()
        return self.opened

    def read(self):
        k = self.k
        if k >= self.n:
            self.done.set()
            return []
        self.k += 1
        if self.hook:
            self.hook(k)
        if k in self.fail_at:
            raise RuntimeError("flaky source")
        return [_sample(k / 10, sm_clock_mhz=1000.0 + k)]


def _run_scripted(src: ScriptedSource, marks) -> Telemetry:
    src.open()
    sampler = Sampler(src, interval_s=0.001, ramp_in_s=1.0)
    sampler.start()
    marks(sampler)
    assert src.done.wait(10)
    return sampler.stop()


def test_phase_of():
    assert phase_of(0.5, [], None, 2.0) == "idle"
    assert phase_of(0.5, [(1.0, 5.0)], 5.0, 2.0) == "idle"
    assert phase_of(0.5, [(1.0, 5.0)], 5.0, 2.0, idle_end=0.2) == "warmup"
    assert phase_of(1.0, [(1.0, 5.0)], 5.0, 2.0) == "ramp_in"
    assert phase_of(3.0, [(1.0, 5.0)], 5.0, 2.0) == "load"
    assert phase_of(5.0, [(1.0, 5.0)], 5.0, 2.0) == "after"
    assert phase_of(9.0, [], 5.0, 2.0) == "after"


def test_each_repeat_is_its_own_load_window():
    """Two repeats on one server: the second repeat's warm-up and its wait for the first
    token (between the windows) are not load, and each window has its own ramp-in."""
    windows = [(1.0, 5.0), (6.0, 10.0)]
    assert [phase_of(t, windows, 10.0, 2.0, idle_end=0.5) for t in (0.2, 0.7, 1.5, 4.0, 5.5, 6.5, 8.5, 10.5)] == \
        ["idle", "warmup", "ramp_in", "load", "warmup", "ramp_in", "load", "after"]


def test_sampler_marks_open_one_window_per_repeat():
    src = ScriptedSource(120)

    def two_repeats(s: Sampler) -> None:
        s.mark_idle_end(0.5)
        s.mark_load_start(1.0)
        s.mark_load_start(1.2)  # the first call of a window wins
        s.mark_load_end(4.0)
        s.mark_load_start(6.0)  # repeat 2: its warm-up ran 4.0-6.0
        s.mark_load_end(9.0)

    tel = _run_scripted(src, two_repeats)
    assert tel.windows == [(1.0, 4.0), (6.0, 9.0)]
    got = summarize(tel)
    assert got["load_windows"] == 2 and got["load_window_s"] == 6.0
    # 0.1 s reads: ramp-in 1.0 s per window -> 10 + 10; load 2.0 s per window -> 20 + 20
    assert got["samples"] == {"idle": 5, "warmup": 25, "ramp_in": 20, "load": 40, "after": 30}


def test_sampler_tags_phases_by_read_time():
    src = ScriptedSource(60)
    tel = _run_scripted(src, lambda s: (s.mark_load_start(1.0), s.mark_load_end(4.0)))
    phases = [s.phase for s in tel.samples]
    assert phases == ["idle"] * 10 + ["ramp_in"] * 10 + ["load"] * 20 + ["after"] * 20
    assert (tel.load_start, tel.load_end, tel.ramp_in_s) == (1.0, 4.0, 1.0)
    assert tel.source == "scripted" and [g.uuid for g in tel.gpus] == ["GPU-a"]
    assert tel.sampler_cpu_s >= 0.0
    got = summarize(tel)
    assert got["samples"] == {"idle": 10, "warmup": 0, "ramp_in": 10, "load": 20, "after": 20}
    assert got["load_measured"] is True
    # The ramp-in is excluded: load min is read 20 (t = 2.0 s), not read 10.
    assert got["gpus"]["GPU-a"]["load"]["sm_clock_mhz"] == {"median": 1029.5, "min": 1020.0}


def test_sample_read_before_the_mark_is_idle_even_if_tagged_late():
    """Read 5 (stamped 0.5 s) is still inside read() when the load is marked at 0.55 s."""
    marked = threading.Event()
    holder: dict = {}

    def hook(k: int) -> None:
        if k == 5:
            holder["sampler"].mark_load_start(0.55)
            holder["sampler"].mark_load_end(3.0)
            marked.set()

    src = ScriptedSource(40, hook=hook)

    def marks(s: Sampler) -> None:
        holder["sampler"] = s

    src.open()
    sampler = Sampler(src, interval_s=0.001, ramp_in_s=0.5)
    marks(sampler)
    sampler.start()
    assert src.done.wait(10) and marked.is_set()
    tel = sampler.stop()
    by_t = {round(s.t, 2): s.phase for s in tel.samples}
    assert by_t[0.5] == "idle" and by_t[0.6] == "ramp_in" and by_t[1.1] == "load" and by_t[3.0] == "after"


def test_no_load_means_no_load_samples_and_the_summary_says_so():
    tel = _run_scripted(ScriptedSource(20), lambda s: None)
    assert {s.phase for s in tel.samples} == {"idle"}
    got = summarize(tel)
    assert got["load_measured"] is False and got["samples"]["load"] == 0
    assert any("load never started" in n for n in got["notes"])
    g = got["gpus"]["GPU-a"]
    assert g["load"]["sm_clock_mhz"] == {"median": None, "min": None}
    assert g["sm_clock_ratio_under_load"] is None and g["throttle_fraction_under_load"] == {}


def test_load_shorter_than_ramp_in_has_no_load_samples():
    tel = _run_scripted(ScriptedSource(40), lambda s: (s.mark_load_start(1.0), s.mark_load_end(1.5)))
    got = summarize(tel)
    assert got["load_measured"] is False and got["samples"]["ramp_in"] == 5
    assert any("not longer than the 1 s ramp-in" in n for n in got["notes"])


def test_a_raising_source_does_not_stop_sampling():
    tel = _run_scripted(ScriptedSource(30, fail_at={3, 4, 5}), lambda s: None)
    assert len(tel.samples) == 27
    assert any("flaky source" in n and "(x3)" in n for n in tel.notes)


# ====================================================================== summary
def _hand_made() -> Telemetry:
    a, b = "GPU-aaaa", "GPU-bbbb"
    gpus = [GpuInfo(0, a, "NVIDIA H200", "550.54.15", 2617.0, 700.0), GpuInfo(1, b, "NVIDIA H200", "550.54.15", None, 700.0)]

    def s(t, uuid, phase, sm, power, energy=None, reasons=(), temp=40.0):
        x = _sample(t, uuid, 0 if uuid == a else 1, sm_clock_mhz=sm, graphics_clock_mhz=sm, mem_clock_mhz=3201.0,
                    sm_clock_max_mhz=2617.0 if uuid == a else None, power_w=power, power_limit_w=700.0,
                    energy_mj=energy, temperature_c=temp, gpu_util_pct=0.0 if phase == "idle" else 95.0,
                    mem_util_pct=10.0)
        x.throttle_reasons, x.phase = tuple(reasons), phase
        return x

    samples = [
        s(1.0, a, "idle", 2340, 85.0, reasons=("GpuIdle",)),
        s(2.0, a, "idle", 2350, 86.0, reasons=("GpuIdle",)),
        s(3.0, a, "idle", 2330, 84.0, reasons=("GpuIdle",)),
        s(9.0, a, "ramp_in", 100, 500.0, energy=0.0),  # excluded from everything
        s(10.0, a, "load", 2600, 290.0, energy=1_000_000.0),
        s(11.0, a, "load", 2590, 310.0, energy=1_300_000.0),
        s(12.0, a, "load", 2610, 300.0, energy=1_600_000.0),
        s(13.0, a, "load", 1800, 305.0, energy=1_900_000.0, reasons=("SwThermalSlowdown", "HwThermalSlowdown")),
        s(20.0, a, "after", 2400, 100.0, energy=9_000_000.0),
        s(10.0, b, "load", 2500, None),
        s(11.0, b, "load", 2520, None),
    ]
    return Telemetry("sim", gpus, samples, 0.1, 2.0, 8.0, 14.0, ["a note"], ["power_w"], 0.01, windows=[(8.0, 14.0)])


def test_summary_numbers():
    got = summarize(_hand_made())
    assert got["source"] == "sim" and got["interval_s"] == 0.1 and got["load_window_s"] == 6.0
    assert got["samples"] == {"idle": 3, "warmup": 0, "ramp_in": 1, "load": 6, "after": 1}
    assert got["notes"] == ["a note"] and got["disabled_fields"] == ["power_w"]
    a = got["gpus"]["GPU-aaaa"]
    assert (a["index"], a["name"], a["driver"], a["sm_clock_max_mhz"], a["power_limit_w"]) == (0, "NVIDIA H200", "550.54.15", 2617.0, 700.0)
    assert a["idle"]["sm_clock_mhz"] == {"median": 2340.0, "min": 2330.0}
    assert a["idle"]["power_w"] == {"median": 85.0, "min": 84.0}
    assert a["load"]["sm_clock_mhz"] == {"median": 2595.0, "min": 1800.0}
    assert a["load"]["power_w"] == {"median": 302.5, "min": 290.0}
    assert a["load"]["gpu_util_pct"]["median"] == 95.0 and a["idle"]["gpu_util_pct"]["median"] == 0.0
    # 900 J over 3 s of load samples; the ramp-in and after samples' energy is not used.
    assert a["load"]["mean_power_w_from_energy"] == pytest.approx(300.0)
    fr = a["throttle_fraction_under_load"]
    assert fr["SwThermalSlowdown"] == 0.25 and fr["HwThermalSlowdown"] == 0.25 and fr["GpuIdle"] == 0.0
    assert set(THROTTLE_REASONS.values()) <= set(fr)
    assert a["sm_clock_ratio_under_load"] == pytest.approx(2595.0 / 2617.0)
    b = got["gpus"]["GPU-bbbb"]
    assert b["sm_clock_ratio_under_load"] is None  # max clock unknown
    assert b["load"]["power_w"] == {"median": None, "min": None} and b["load"]["mean_power_w_from_energy"] is None
    assert b["idle"]["sm_clock_mhz"] == {"median": None, "min": None}


def test_csv_columns_and_rows(tmp_path):
    tel = _hand_made()
    path = tmp_path / "out" / "telemetry.csv"
    write_csv(path, tel)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert CSV_COLUMNS[:4] == ("t_s", "phase", "uuid", "index") and CSV_COLUMNS[-1] == "throttle_reasons"
    body = [dict(zip(rows[0], r)) for r in rows[1:]]
    assert len(body) == len(tel.samples)
    assert body[0]["t_s"] == "0.0000" and body[0]["phase"] == "idle" and body[0]["throttle_reasons"] == "GpuIdle"
    thermal = [r for r in body if r["t_s"] == "12.0000" and r["uuid"] == "GPU-aaaa"][0]
    assert thermal["throttle_reasons"] == "SwThermalSlowdown|HwThermalSlowdown" and thermal["sm_clock_mhz"] == "1800"
    assert [r for r in body if r["uuid"] == "GPU-bbbb"][0]["power_w"] == ""  # None -> empty cell
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_png_is_written(tmp_path):
    path = tmp_path / "telemetry.png"
    plot_png(path, _hand_made())
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    # A run whose load never started still gets a (labelled) plot.
    tel = _hand_made()
    tel.load_start = tel.load_end = None
    plot_png(tmp_path / "no_load.png", tel)
    assert (tmp_path / "no_load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ============================================================ benchmarks/gpu_check
@pytest.mark.skipif(nvidia_driver_status()[0], reason="this machine has an NVIDIA driver")
def test_gpu_check_without_a_driver_fails_in_one_sentence(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "no NVIDIA driver" in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_warm_up_samples_are_neither_idle_nor_load():
    from harness.telemetry.sampler import phase_of

    # idle snapshot until 1.0, warm-up until the first measured token at 3.0, ramp-in 1 s, load ends at 9.0
    phases = [phase_of(t, [(3.0, 9.0)], 9.0, 1.0, idle_end=1.0) for t in (0.5, 1.5, 2.9, 3.5, 5.0, 9.5)]
    assert phases == ["idle", "warmup", "warmup", "ramp_in", "load", "after"]
    assert phase_of(2.0, [], None, 1.0, idle_end=1.0) == "warmup"  # the load never started
