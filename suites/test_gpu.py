"""Are the GPUs boosting under load, and nothing slowing them down? Sampled only in the
window where the client sees tokens stream, after a ramp-in — never from a sleep after a
request that may have failed (the session's HTTP 400 read idle clocks and learned nothing).
Without an NVIDIA driver, nvml/smi telemetry is skipped ("no NVIDIA driver"), not passed."""

import pytest

from harness import gate


@pytest.fixture
def gpu(arm_run) -> dict:
    source = arm_run.cfg.telemetry.source
    if source == "off":
        pytest.skip("telemetry is off for this arm (telemetry=nvml, smi or sim samples the GPUs)")
    block = arm_run.outcome.gpu
    if block is None:
        pytest.fail(f"telemetry={source} was configured but recorded nothing for arm '{arm_run.name}'")
    if block.get("unavailable"):
        pytest.skip(block["unavailable"])
    return block


def test_sm_clock_under_load(arm_run, gpu, gates):
    gates.check(gate.min_clock_ratio_under_load(arm_run.name, gpu, arm_run.cfg.gate))


def test_no_slowdown_reasons_under_load(arm_run, gpu, gates):
    gates.check(gate.no_throttle_reasons_under_load(arm_run.name, gpu, arm_run.cfg.gate))


def test_gpu_utilization_under_load(arm_run, gpu, gates):
    gates.check(gate.min_gpu_util_under_load(arm_run.name, gpu, arm_run.cfg.gate))
