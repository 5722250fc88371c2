"""The fleet gates (harness/gates/fleet.py): a hit-rate floor, a hit-rate gain over another arm,
the imbalance between a fleet's workers; unmeasured is failed and said so, never passed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from harness.config.compose import ConfigError
from harness.config.schema import GateConfig
from harness.gates import fleet, registry
from harness.plugin import ordered_arms
from harness.run.compose import compose
from tests.support.arm_results import result


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def ctx(arm, measured, cfg, results=None, fleet_block=None):
    return registry.GateContext(arm=arm, gate=cfg, result=measured, gpu=None, plain_arm=None, results=results or {},
                                reference=None, reference_label="", telemetry_source="off", fleet=fleet_block)


def hit(arm, rate):
    measured = result(arm)
    if rate is not None:
        measured.figures["prefix_cache_hit_rate"] = rate
    return measured


def test_a_hit_rate_floor_passes_fails_and_an_unmeasured_rate_fails():
    cfg = gate_cfg(min_prefix_cache_hit_rate={"a": 0.75})
    [ok] = fleet.min_prefix_cache_hit_rate(ctx("a", hit("a", 0.82), cfg))
    [low] = fleet.min_prefix_cache_hit_rate(ctx("a", hit("a", 0.70), cfg))
    [none] = fleet.min_prefix_cache_hit_rate(ctx("a", hit("a", None), cfg))
    assert (ok.passed, low.passed, none.passed) == (True, False, False)
    assert "not measured" in none.detail


def test_a_hit_rate_gain_over_another_arm():
    cfg = gate_cfg(min_prefix_cache_hit_rate_gain={"cache_aware": {"over": "round_robin", "by": 0.05}})
    others = {"round_robin": hit("round_robin", 0.706)}
    [ok] = fleet.min_prefix_cache_hit_rate_gain(ctx("cache_aware", hit("cache_aware", 0.824), cfg, others))
    assert ok.passed and "+11.8 points meets the +5.0 asked" in ok.detail
    [short] = fleet.min_prefix_cache_hit_rate_gain(ctx("cache_aware", hit("cache_aware", 0.72), cfg, others))
    assert short.passed is False
    [unmeasured] = fleet.min_prefix_cache_hit_rate_gain(ctx("cache_aware", hit("cache_aware", 0.9), cfg, {}))
    assert unmeasured.passed is False and "round_robin was not measured" in unmeasured.detail


def test_the_gain_names_another_arm_of_the_experiment():
    with pytest.raises(ConfigError, match="min_prefix_cache_hit_rate_gain.cache_aware.over is 'nobody'"):
        compose(["+exp=sim_fleet", "gate.min_prefix_cache_hit_rate_gain.cache_aware.over=nobody"])


def test_the_imbalance_of_a_fleet_and_of_one_server():
    cfg = gate_cfg(max_worker_imbalance={"a": 1.1})
    block = {"workers": [{"worker": "a.w0", "requests_finished": 24.0}, {"worker": "a.w1", "requests_finished": 8.0}],
             "imbalance": {"requests_max_over_mean": 1.5}}
    [uneven] = fleet.max_worker_imbalance(ctx("a", result("a"), cfg, fleet_block=block))
    assert uneven.passed is False and "a.w0 24, a.w1 8" in uneven.detail
    block["imbalance"]["requests_max_over_mean"] = 1.0
    [even] = fleet.max_worker_imbalance(ctx("a", result("a"), cfg, fleet_block=block))
    assert even.passed
    [single] = fleet.max_worker_imbalance(ctx("a", result("a"), cfg))
    assert single.passed is False and "no fleet to balance" in single.detail


def test_the_arms_others_are_compared_with_are_measured_first():
    def experiment(**gate):
        return SimpleNamespace(arm_names=["a", "b", "c"], plain_arm=None, base=SimpleNamespace(gate=gate_cfg(**gate)))

    assert ordered_arms(experiment(min_prefix_cache_hit_rate_gain={"a": {"over": "c", "by": 0.1}})) == ["c", "a", "b"]
    assert ordered_arms(experiment(min_speedup={"c": {"over": "b", "ratio": 1.0}})) == ["b", "a", "c"]
    assert ordered_arms(compose(["+exp=sim_fleet"])) == ["round_robin", "cache_aware"]
