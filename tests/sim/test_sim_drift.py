"""The simulator's drift (harness/sim/drift.py): off by default, seeded, with the spread it
is configured to have, and applied by the running server to every step."""

from __future__ import annotations

import dataclasses
import math
import re
import time

import numpy as np
import pytest
import requests

from harness.sim.cli import parse_args
from harness.sim.drift import Drift, DriftModel
from harness.sim.model import SimModel
from tests.support.sim_process import FAST, Sim


class Clock:
    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def log_factors(model: DriftModel, steps: int, step_s: float = 0.01) -> np.ndarray:
    drift = Drift(model, Clock(step_s))
    return np.log([drift.factor() for _ in range(steps)])


def test_no_drift_is_the_default_and_exact():
    model = SimModel.from_args(parse_args(["--model-path", "m"]))
    assert not model.drift.on and model.drift.seed is None
    assert set(log_factors(model.drift, 100)) == {0.0}


def test_a_seed_repeats_a_start_and_each_start_draws_its_own_speed():
    model = DriftModel(speed_sd=0.05, jitter_sd=0.02, seed=7)
    assert np.array_equal(log_factors(model, 50), log_factors(model, 50))
    speeds = np.log([Drift(DriftModel(speed_sd=0.05, seed=s)).speed for s in range(2000)])
    assert abs(speeds.std() - 0.05) < 0.005 and abs(speeds.mean()) < 0.005
    unseeded = [DriftModel(speed_sd=0.05).seeded().seed for _ in range(5)]
    assert None not in unseeded and len(set(unseeded)) == 5  # a fresh seed per start, to be logged


def test_the_wander_is_slow_and_the_jitter_fast():
    wander = log_factors(DriftModel(wander_sd=0.04, wander_s=1.0, seed=3), 200_000, step_s=0.01)  # 2000 s
    assert abs(wander.std() - 0.04) < 0.008
    assert np.corrcoef(wander[:-1], wander[1:])[0, 1] > 0.98  # 10 ms apart: nearly the same
    lag = 100  # one time constant apart: correlation e^-1
    assert abs(np.corrcoef(wander[:-lag], wander[lag:])[0, 1] - math.exp(-1)) < 0.1
    jitter = log_factors(DriftModel(jitter_sd=0.03, seed=3), 20_000)
    assert abs(jitter.std() - 0.03) < 0.002 and abs(np.corrcoef(jitter[:-1], jitter[1:])[0, 1]) < 0.05


def test_the_server_runs_every_step_at_its_starts_speed():
    seed = next(s for s in range(100) if Drift(DriftModel(speed_sd=0.3, seed=s)).speed > 1.4)
    expected = Drift(DriftModel(speed_sd=0.3, seed=seed)).speed

    def seconds_for(extra: list[str]) -> tuple[float, str]:
        sim = Sim(FAST + extra)
        try:
            body = {"text": "count", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
            requests.post(sim.url + "/generate", json=body, timeout=30).raise_for_status()  # warm
            took = []
            for _ in range(3):  # a busy box only ever adds time (12 % once on one request): the fastest of three
                t = time.perf_counter()
                requests.post(sim.url + "/generate", json=body, timeout=30).raise_for_status()
                took.append(time.perf_counter() - t)
            return min(took), sim.output()
        finally:
            sim.kill()

    plain, _ = seconds_for([])
    drifted, log = seconds_for(["--sim-drift-speed-sd", "0.3", "--sim-drift-seed", str(seed)])
    assert abs(drifted / plain / expected - 1) < 0.1, (drifted, plain, expected)
    assert re.search(rf"drift=DriftModel\(speed_sd=0\.3, .*seed={seed},", log), log[-2000:]


def test_server_sim_drift_keys_reach_the_simulators_flags():
    from harness.config.engine_options import SimModelConfig
    from harness.engines.sim import sim_args

    cfg = SimModelConfig(drift_speed_sd=0.1, drift_wander_sd=0.02, drift_wander_s=5.0, drift_jitter_sd=0.01,
                         drift_seed=5, drift_machine_sd=0.03, drift_machine_s=60.0, drift_machine_seed=9)
    model = SimModel.from_args(parse_args(["--model-path", "m", *sim_args(cfg)]))
    assert model.drift == DriftModel(speed_sd=0.1, wander_sd=0.02, wander_s=5.0, jitter_sd=0.01, seed=5,
                                     machine_sd=0.03, machine_s=60.0, machine_seed=9)


def test_the_machines_drift_is_shared_by_every_server_on_it_and_slow():
    """Two servers (two Drifts, different seeds) at the same wall-clock moment see the same
    machine; its spread over time is machine_sd; a minute apart it has barely moved, ten
    periods apart it is another machine state."""
    model = DriftModel(machine_sd=0.03, machine_s=120.0, machine_seed=4)
    at = lambda seed, wall: Drift(dataclasses.replace(model, seed=seed), wall_clock=lambda: wall).factor()
    assert at(1, 5000.0) == at(2, 5000.0) != at(1, 5000.0 + 1200.0)
    assert at(1, 5000.0) != Drift(dataclasses.replace(model, machine_seed=5), wall_clock=lambda: 5000.0).factor()
    series = np.log([at(1, t) for t in np.arange(0.0, 120.0 * 4000, 37.0)])
    assert abs(series.std() - 0.03) < 0.003 and abs(series.mean()) < 0.003
    near = np.log([at(1, t) for t in (7000.0, 7010.0)])
    assert abs(near[1] - near[0]) < 0.01  # ten seconds: the same machine, nearly


@pytest.mark.parametrize("override, sentence", [
    ("server.sim.drift_speed_sd=-0.1", "server.sim.drift_speed_sd must be a finite number >= 0 (e.g. 0: no drift), "
                                       "got -0.1"),
    ("server.sim.drift_wander_s=0", "server.sim.drift_wander_s must be a finite number > 0, got 0"),
    ("server.sim.drift_machine_sd=-1", "server.sim.drift_machine_sd must be a finite number >= 0"),
    ("server.sim.drift_machine_s=-5", "server.sim.drift_machine_s must be a finite number > 0, got -5"),
])
def test_a_drift_that_cannot_be_is_one_sentence_before_any_server(override, sentence):
    from harness.config.compose import ConfigError
    from harness.run.compose import compose

    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", override])
    assert sentence in str(caught.value)


def test_the_gpu_box_preset_drifts_every_arm_as_documented():
    """`+drift=gpu_box` (conf/drift/gpu_box.yaml) is the drift model the verdict benchmarks
    and the A/B tests use; docs/simulator.md states its values."""
    from pathlib import Path

    from harness.run.compose import compose
    from harness.engines.sim import truth_model

    experiment = compose(["+exp=sim_smoke", "+drift=gpu_box"])
    for arm in experiment.arms:
        drift = truth_model(arm.typed).drift
        assert (drift.speed_sd, drift.machine_sd, drift.machine_s, drift.wander_sd, drift.jitter_sd) == \
            (0.01, 0.03, 120.0, 0.0, 0.03)
        assert drift.seed is not None  # each start draws its own, logged
    docs = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    assert "`+drift=gpu_box`" in docs and "| 1 % | 3 % over 120 s | none | 3 % |" in docs
