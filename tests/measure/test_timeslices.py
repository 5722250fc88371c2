"""An arm's figures over time (harness/measure/timeslices.py): slices of record.timeslice_s
seconds with tok/s, TTFT/ITL percentiles, accept length and the GPU samples on the same axis."""

from __future__ import annotations

import pytest

from harness.measure.timeslices import timeslices, timeslices_block
from harness.telemetry.base import GpuSample


def line(send: float, tokens: int, gap: float, ttft: float = 50.0, verify: int | None = None, repeat: int = 0) -> dict:
    times = [send + ttft + k * gap for k in range(tokens)]
    return {"ok": True, "warmup": False, "repeat": repeat, "send_ms": send, "end_ms": times[-1], "ttft_ms": ttft,
            "completion_tokens": tokens, "chunk_ms": times, "chunk_tokens": [1] * tokens, "spec_verify_ct": verify}


def sample(t: float, clock: float, power: float, uuid: str = "GPU-0") -> GpuSample:
    return GpuSample(t=t, uuid=uuid, index=0, sm_clock_mhz=clock, graphics_clock_mhz=None, mem_clock_mhz=None,
                     sm_clock_max_mhz=None, power_w=power, power_limit_w=None, energy_mj=None, temperature_c=None,
                     gpu_util_pct=None, mem_util_pct=None, pcie_tx_kbs=None, pcie_rx_kbs=None)


def test_a_server_that_slows_down_mid_run_shows_in_its_slices():
    # one request after another: 10 ms per token for the first second, then 40 ms per token
    fast = [line(k * 550.0, 50, 10.0) for k in range(2)]          # 0 .. ~1090 ms
    slow = [line(1100.0 + k * 2050.0, 50, 40.0) for k in range(2)]  # 1100 .. ~5160 ms
    slices = timeslices(fast + slow, 1.0)
    assert len(slices) == 6 and slices[0]["start_ms"] == 0.0
    assert slices[0]["output_tok_s"] == pytest.approx(91, abs=5)  # 100 tok/s less the TTFT gaps
    assert slices[3]["output_tok_s"] == pytest.approx(25, abs=2)
    assert slices[0]["itl_ms"]["p50"] == pytest.approx(10.0) and slices[3]["itl_ms"]["p50"] == pytest.approx(40.0)
    assert slices[0]["ttft_ms"] == {"p50": 50.0, "p99": 50.0, "n": 2}
    assert slices[4]["ttft_ms"]["n"] == 0 and slices[4]["ttft_ms"]["p50"] is None  # no first token there
    assert sum(s["requests_sent"] for s in slices) == 4


def test_accept_length_and_gpu_samples_on_the_same_axis():
    lines = [line(0.0, 100, 10.0, verify=40), line(0.0, 100, 10.0, verify=40)]  # 2.5 tokens per cycle
    run_start = 1000.0  # perf_counter s at the load's start: a sample at 1000.5 s lies at 500 ms
    gpus = [sample(1000.5, 1980.0, 300.0), sample(1000.5, 1960.0, 280.0, "GPU-1"), sample(1001.02, 1500.0, 200.0)]
    slices = timeslices(lines, 1.0, gpus, run_start)
    assert slices[0]["accept_length"] == pytest.approx(2.5)
    assert slices[0]["sm_clock_mhz"] == pytest.approx(1970.0) and slices[0]["power_w"] == pytest.approx(580.0)
    assert slices[1]["sm_clock_mhz"] == pytest.approx(1500.0) and slices[1]["gpu_samples"] == 1
    assert "power_w" not in timeslices(lines, 1.0)[0]  # no telemetry: no GPU figures


def test_each_repeat_has_its_own_time_axis_and_warm_up_is_left_out():
    lines = [line(0.0, 20, 10.0), {**line(0.0, 5, 10.0), "warmup": True}, line(0.0, 20, 10.0, repeat=1)]
    block = timeslices_block(lines, 0.1)
    assert block["slice_s"] == 0.1 and [r["repeat"] for r in block["repeats"]] == [0, 1]
    slices = block["repeats"][0]["slices"]  # 0 to 240 ms: the last slice 40 ms wide
    assert sum(s["output_tok_s"] * (s["end_ms"] - s["start_ms"]) / 1000.0 for s in slices) == pytest.approx(20, rel=0.01)
    assert timeslices([], 1.0) == []


def test_a_load_too_long_for_its_slice_width_gets_wider_slices_not_a_memory_error():
    # record.timeslice_s far below the load's length: 1e-9 s over 0.24 s was 2.4e8 slices (MemoryError)
    lines = [line(0.0, 20, 10.0)]
    from harness.limits import MAX_TIMESLICES
    block = timeslices_block(lines, 1e-9)
    slices = block["repeats"][0]["slices"]
    assert len(slices) <= MAX_TIMESLICES + 1 and block["slice_s"] > 1e-9
    assert block["note"].startswith("record.timeslice_s=1e-09 would cut the load into more than")
