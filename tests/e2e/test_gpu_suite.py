"""The GPU suite end to end: on the simulator's GPUs (telemetry=sim) it passes, catches
throttling, and fails a load that never reached the GPU; without an NVIDIA driver,
nvml/smi telemetry is skipped with that reason, not passed."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import runs

pytestmark = pytest.mark.slow  # every test here runs the suites


def run_suites(*args: str) -> subprocess.CompletedProcess:
    return runs.run_suites("-rs", *args)


def results(root: Path) -> dict:
    return json.loads((root / "latest" / "results.json").read_text())


def test_sim_gpus_boost_under_load_and_are_recorded(sim_smoke_on_docker):
    proc, tmp_path = sim_smoke_on_docker.proc, sim_smoke_on_docker.root  # every suite, -v
    assert proc.returncode == 0, proc.stdout[-3000:]
    for test in ("test_sm_clock_under_load", "test_no_slowdown_reasons_under_load", "test_gpu_utilization_under_load"):
        assert f"{test}[eagle3] PASSED" in proc.stdout
    gpu = results(tmp_path)["arms"]["eagle3"]["gpu"]
    assert gpu["samples"]["idle"] > 0 and gpu["samples"]["load"] > 0
    [g] = gpu["gpus"].values()
    assert 2330 <= g["idle"]["sm_clock_mhz"]["median"] <= 2360  # the session's idle clocks
    assert 75 <= g["idle"]["power_w"]["median"] <= 95
    assert g["load"]["sm_clock_mhz"]["median"] > g["idle"]["sm_clock_mhz"]["median"] + 100
    arm_dir = tmp_path / "latest" / "arms" / "eagle3"
    header = (arm_dir / "telemetry.csv").read_text().splitlines()[0]
    assert "phase" in header and "sm_clock_mhz" in header
    assert (arm_dir / "telemetry.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## GPUs" in proc.stdout


def test_throttled_gpus_fail_naming_the_reason(tmp_path):
    proc = run_suites("+exp=sim_gpu_throttled", f"record.root={tmp_path}", "-k", "gpu")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "HwThermalSlowdown" in proc.stdout and "is below 0.90" in proc.stdout
    verdicts = {(g["name"], g["arm"]): g for g in results(tmp_path)["gates"]}
    assert verdicts[("min_clock_ratio_under_load", "throttled")]["passed"] is False
    assert verdicts[("throttle_reasons_under_load", "throttled")]["passed"] is False


def test_a_load_that_never_streams_is_a_failed_measurement(tmp_path):
    # Every request times out before its first token: the window never opens.
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", "workload.timeout_s=0.001", "-k", "gpu and baseline")
    assert proc.returncode == 1
    assert "no GPU samples under load" in proc.stdout


def test_without_a_driver_nvml_gpu_tests_are_skipped_not_passed(tmp_path):
    proc = run_suites("+exp=sim_smoke", "telemetry=nvml", f"record.root={tmp_path}", "-k", "gpu and baseline")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "no NVIDIA driver" in proc.stdout and "4 skipped" in proc.stdout  # the four GPU gates
    assert "no NVIDIA driver" in results(tmp_path)["arms"]["baseline"]["gpu"]["unavailable"]


def test_each_repeat_is_its_own_gpu_load_window(tmp_path):
    """With gate.repeats=2 the second repeat's warm-up (and its wait for a first token)
    happens between two load windows: it is tagged warmup, not counted as load."""
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", "gate.repeats=2", "telemetry.ramp_in_s=0.2",
                      "-k", "gpu and baseline")
    assert proc.returncode == 0, proc.stdout[-3000:]
    gpu = results(tmp_path)["arms"]["baseline"]["gpu"]
    assert gpu["load_windows"] == 2
    rows = (tmp_path / "latest" / "arms" / "baseline" / "telemetry.csv").read_text().splitlines()[1:]
    phases = [row.split(",")[1] for row in rows]
    runs = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]  # phases in time order, collapsed
    assert runs.count("ramp_in") == 2, runs
    first_load_end = runs.index("load") + 1
    assert runs[first_load_end] == "warmup", runs  # repeat 2's warm-up comes after repeat 1's load
