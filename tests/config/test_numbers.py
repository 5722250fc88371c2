"""Every number of the config is checked against the schema when it is composed: NaN and
infinity never pass (NaN passes every `<=` check and used to fail late, as a traceback or a
wrong sentence), and a field with bounds refuses a value outside them, in one sentence
naming the key."""

import math

import pytest
from omegaconf import OmegaConf

from harness.config.compose import ConfigError, sweep_points
from harness.run.compose import compose
from harness.config.numbers import NumberError, check_numbers, numeric_paths
from harness.config.schema import Bounds

EXP = "+exp=sim_smoke"


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        compose([EXP, *overrides])
    return str(caught.value)


@pytest.fixture(scope="module")
def composed():
    return compose([EXP]).base


@pytest.mark.parametrize("path", [path for path, _ in numeric_paths()])
def test_nan_and_infinity_are_refused_for_every_number_of_the_schema(composed, path):
    cfg = OmegaConf.to_container(composed)
    node = cfg
    *parents, leaf = path.split(".")
    for key in parents:
        if node[key] is None:  # an engine's block is null on another engine's server: give it one
            node[key] = {}
        node = node[key]
    node[leaf] = math.nan  # past OmegaConf's int type, which refuses nan itself ('not a valid integer')
    untyped = OmegaConf.create(cfg)  # made once (the costly part); its nodes take any value
    for value in (math.nan, math.inf, -math.inf):
        OmegaConf.update(untyped, path, value, merge=False)
        assert OmegaConf.select(untyped, path) is value
        with pytest.raises(NumberError) as caught:
            check_numbers(untyped)
        message = str(caught.value)
        assert message.startswith(f"{path} must be ") and message.endswith(f"got {value}"), message


@pytest.mark.parametrize("override", ["capacity.growth=nan", "workload.request_rate=inf", "gate.tolerance=nan",
                                      "workload.concurrency=nan"])
def test_a_non_finite_number_on_the_command_line_is_one_sentence(override):
    key, value = override.split("=")
    message = refusal(override)
    assert message.startswith(key) and (f"got {value}" in message or "is not a valid integer" in message), message


@pytest.mark.parametrize("override, fragment", [
    ("gate.tolerance=-1", "gate.tolerance must be a finite number >= 0 and < 1 (e.g. 0.02: 2 %), got -1"),
    ("capacity.growth=1", "capacity.growth must be a finite number > 1"),
    ("capacity.max=0", "capacity.max must be a finite number > 0 and <= 100000, got 0"),
    ("gate.min_gpu_util_under_load_pct=150", "gate.min_gpu_util_under_load_pct must be a finite number >= 0 and <= 100"),
    ("gate.min_output_tok_s.baseline=-3", "gate.min_output_tok_s.baseline must be a finite number >= 0, got -3"),
    ("gate.max_joules_per_token.eagle3=0", "gate.max_joules_per_token.eagle3 must be a finite number > 0"),
    ("+gate.min_speedup.eagle3={over: baseline, ratio: -1}", "gate.min_speedup.eagle3.ratio must be a finite number > 0"),
    ("server.port=70000", "server.port must be a finite number >= 0 and <= 65535, got 70000"),
])
def test_a_number_outside_its_bounds_is_refused_naming_the_key(override, fragment):
    assert fragment in refusal(override)


def test_numbers_inside_mappings_and_lists_are_checked_too():
    assert "gate.min_speedup.eagle3.ratio must be" in refusal("+gate.min_speedup.eagle3={over: baseline, ratio: inf}")
    assert "gate.min_acceptance_per_position.eagle3" in refusal("+gate.min_acceptance_per_position.eagle3=[0.3,.nan]")


def test_an_arms_own_bad_number_names_the_arm():
    message = refusal("arms={baseline: ['drafter=none'], eagle3: ['drafter=eagle3_k25', 'gate.tolerance=-0.5']}")
    assert message.startswith("arm 'eagle3': gate.tolerance must be"), message


def test_the_defaults_and_every_experiment_pass():
    from harness.config.compose import list_experiments
    for name in list_experiments():
        if name != "eagle_k2":  # needs a GPU machine's paths; its numbers are the defaults' shape
            check_numbers(compose([f"+exp={name}"]).base)


def test_bounds_say_what_they_hold():
    bounds = Bounds(low=0, below=1, example="0.02: 2 %")
    assert bounds.holds(0) and bounds.holds(0.5) and not bounds.holds(1) and not bounds.holds(-0.1)
    assert bounds.describe() == "a finite number >= 0 and < 1 (e.g. 0.02: 2 %)"
    assert not Bounds(above=0).holds(0) and Bounds(high=100).holds(100)
    with pytest.raises(NumberError, match="x must be a finite number, got nan"):
        from harness.config.numbers import check_number
        check_number("x", math.nan, None)


def test_a_sweep_over_no_values_is_one_sentence():
    with pytest.raises(ConfigError, match=r"workload.concurrency=range\(1,1\) gives no values to sweep"):
        sweep_points([EXP, "workload.concurrency=range(1,1)"])


def test_an_engines_options_on_a_server_of_another_engine_is_one_sentence():
    message = refusal("server.vllm.max_num_seqs=5")
    assert message.startswith("server.vllm.max_num_seqs: server.vllm is null here, as the server is not a vllm server")


@pytest.mark.parametrize("override", ["gate.min_capacity={}", "gate.lossless={ }", "+sweep_gate.crossover_at_least={}"])
def test_a_gate_set_to_no_arm_on_the_command_line_is_one_sentence(override):
    key = override.lstrip("+").split("=")[0]
    assert refusal(override).startswith(f"{key}={{}} configures the gate for no arm, so it would judge nothing")


# --- every number at its edge: every bound in the schema, physical limits as bounds ---------------


def test_every_number_field_of_the_schema_has_bounds():
    from harness.config.numbers import number_fields
    missing = [path for path, _, field in number_fields() if "bounds" not in field.metadata
               and not field.metadata.get("free_form")]
    assert missing == [], f"number fields without bounds (give each a bounded(...)): {missing}"


def test_the_walk_finds_a_number_field_without_bounds_in_any_shape():
    # what the test above guards against: a new field, plain, in a mapping, in a list or in a nested block
    from dataclasses import field, make_dataclass
    from typing import Dict, List, Optional

    from harness.config.numbers import number_fields
    inner = make_dataclass("Inner", [("limit", Optional[float], None)])
    outer = make_dataclass("Outer", [("count", int, 0), ("per_arm", Dict[str, float], field(default_factory=dict)),
                                     ("probs", List[float], field(default_factory=list)),
                                     ("blocks", Dict[str, inner], field(default_factory=dict))])
    found = [(path, "bounds" in f.metadata) for path, _, f in number_fields(outer)]
    assert found == [("count", False), ("per_arm[*]", False), ("probs[*]", False), ("blocks[*].limit", False)]


@pytest.mark.parametrize("override, expected", [
    ("+gate.max_ttft_ms.baseline.p99=-5", "gate.max_ttft_ms.baseline.p99 must be a finite number > 0 (e.g. 50), got -5"),
    ("+gate.max_itl_ms.eagle3={p50: 0}", "gate.max_itl_ms.eagle3.p50 must be a finite number > 0"),
    ("server.sim.accept_probs=[1.5]", "server.sim.accept_probs[0] must be a finite number >= 0 and <= 1, got 1.5"),
    ("server.sim.accept_probs=[0.5,-0.1]", "server.sim.accept_probs[1] must be a finite number >= 0 and <= 1, got -0.1"),
    ("server.sim.decode_step_ms=-1", "server.sim.decode_step_ms must be a finite number > 0 and <= 60000, got -1"),
    ("server.sim.draft_step_ms=-0.5", "server.sim.draft_step_ms must be a finite number >= 0 and <= 60000, got -0.5"),
    ("server.sim.verify_per_token_ms=-3", "server.sim.verify_per_token_ms must be a finite number >= 0"),
    ("server.sim.lossy_rate=2", "server.sim.lossy_rate must be a finite number >= 0 and <= 1, got 2"),
    ("server.sim.drift_wander_s=0", "server.sim.drift_wander_s must be a finite number > 0, got 0"),
    ("workload.concurrency=0", "workload.concurrency must be a finite number >= 1 and <= 100000, got 0"),
    ("workload.concurrency=1000000000", "workload.concurrency must be a finite number >= 1 and <= 100000, got 1000000000"),
    ("workload.max_tokens=99999999999999999999", "workload.max_tokens must be a finite number >= 1 and <= 1e+07, "
                                                  "got 99999999999999999999"),
    ("workload.input_len=1000000000", "workload.input_len must be a finite number >= 1 and <= 1.04858e+06"),
    ("workload.seed=99999999999999999999", "workload.seed must be a finite number >= 0 and <= 9.22337e+18"),
    ("ab.rounds=1000000000", "ab.rounds must be a finite number >= 2 and <= 100 (e.g. 3, or auto), got 1000000000"),
    ("calibrate.runs=1000000000", "calibrate.runs must be a finite number >= 3 and <= 100 (e.g. 5), got 1000000000"),
    ("record.timeslice_s=1e-9", "record.timeslice_s must be a finite number >= 0.001 and <= 86400, got 1e-09"),
    ("gate.confidence=1.5", "gate.confidence must be a finite number > 0.5 and < 1 (e.g. 0.95), got 1.5"),
    ("gate.run_to_run_floor=-0.1", "gate.run_to_run_floor must be a finite number >= 0 and < 1"),
    ("slo.tpot_ms.p99=-1", "slo.tpot_ms.p99 must be a finite number > 0 (e.g. 50), got -1"),
    ("+gate.min_acceptance_per_position.eagle3=[0.5,1.2]", "gate.min_acceptance_per_position.eagle3[1] must be a "
                                                          "finite number >= 0 and <= 1, got 1.2"),
    ("workload.duration_s=1e12", "workload.duration_s must be a finite number > 0 and <= 86400, got 1e+12"),
    ("telemetry.interval_s=1e-9", "telemetry.interval_s must be a finite number >= 0.001"),
    ("+backend.ulimits.memlock=-2", "backend.ulimits.memlock must be a finite number >= -1"),
])
def test_a_number_past_its_edge_is_refused_at_compose_time_naming_the_key_and_range(override, expected):
    message = refusal(override)
    assert expected in message and "\n" not in message, message


def test_an_integer_past_int64_is_refused_even_where_the_bounds_allow_it():
    with pytest.raises(NumberError, match=r"x must be an integer that fits in 64 bits .*got 99999999999999999999$"):
        from harness.config.numbers import check_number
        check_number("x", 99999999999999999999, Bounds(low=0))


def test_a_load_of_known_length_cut_into_too_many_slices_is_refused_before_it_starts():
    message = refusal("workload.num_prompts=null", "workload.duration_s=600", "record.timeslice_s=0.001")
    assert message == ("record.timeslice_s=0.001 cuts a load of workload.duration_s=600 s into 6e+05 slices, more "
                       "than 100000; set record.timeslice_s to at least 0.006"), message
