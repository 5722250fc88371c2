"""A GPU experiment samples its GPUs without being asked: `telemetry: auto` (the default)
resolves to NVML when the server needs a GPU, and to nothing otherwise. Without this the
seed's own `+exp=eagle_k2` never sampled, and its clock gate was always skipped."""

from pathlib import Path

import pytest

from harness.config.compose import list_experiments
from harness.run.compose import compose

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("name", sorted(list_experiments(CONF)))
def test_every_gpu_experiment_samples_its_gpus_by_default(name):
    experiment = compose([f"+exp={name}"], CONF)
    for arm in experiment.arms:
        source = arm.cfg.telemetry.source
        assert source != "auto", f"{name}/{arm.name}: telemetry 'auto' must be resolved at compose time"
        if arm.cfg.server.requires_gpu:
            assert source in ("nvml", "smi"), f"{name}/{arm.name} runs on GPUs but samples none (telemetry {source})"


def test_eagle_k2_samples_nvml_so_its_clock_gate_is_decided():
    experiment = compose(["+exp=eagle_k2"], CONF)
    assert experiment.base.gate.min_clock_ratio_under_load == 0.9
    assert {arm.cfg.telemetry.source for arm in experiment.arms} == {"nvml"}
    assert experiment.base.telemetry.source == "nvml"


def test_an_explicit_choice_wins_over_auto():
    assert {a.cfg.telemetry.source for a in compose(["+exp=eagle_k2", "telemetry=off"], CONF).arms} == {"off"}
    assert {a.cfg.telemetry.source for a in compose(["+exp=eagle_k2", "telemetry=smi"], CONF).arms} == {"smi"}


def test_a_server_without_a_gpu_samples_nothing_by_default():
    experiment = compose(["backend=attach", "backend.url=http://127.0.0.1:1"], CONF)
    assert experiment.arms[0].cfg.telemetry.source == "off"
