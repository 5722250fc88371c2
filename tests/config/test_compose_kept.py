"""What composing keeps from one composition to the next (harness/config/compose.py): each YAML
file's parse, by its text, and each whole composition, by everything it reads; and an arm that
only picks what the base already has, which is not composed again. None of it may ever hand out
a stale, shared or other config, nor leave Hydra changed outside specgate's compositions."""

from __future__ import annotations

import shutil

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from harness.config.compose import (DEFAULT_CONF_DIR, compose_config, masked, merge_overrides,
                                    picks_what_the_base_has, resolve_auto_telemetry)
from harness.run.compose import REGISTRIES, compose

EXP = "+exp=sim_smoke"


def max_tokens(conf_dir) -> int:
    return compose([EXP], conf_dir).arm("baseline").cfg.workload.max_tokens


def test_a_file_edited_between_two_compositions_is_read_again(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(DEFAULT_CONF_DIR, conf)
    workload = conf / "workload" / "count_to_100.yaml"
    assert max_tokens(conf) == 500
    # the same size, most likely the same mtime: only the text tells the two apart
    workload.write_text(workload.read_text().replace("max_tokens: 500", "max_tokens: 400"))
    assert max_tokens(conf) == 400
    workload.write_text(workload.read_text().replace("max_tokens: 400", "max_tokens: 500"))
    assert max_tokens(conf) == 500
    experiment = conf / "exp" / "sim_smoke.yaml"
    assert "  num_prompts: 4 " in experiment.read_text()
    experiment.write_text(experiment.read_text().replace("  num_prompts: 4 ", "  num_prompts: 3 "))
    assert compose([EXP], conf).arm("eagle3").cfg.workload.num_prompts == 3


def test_an_environment_variable_a_defaults_list_reads_is_read_at_each_composition(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(DEFAULT_CONF_DIR, conf)
    config = conf / "config.yaml"
    text = config.read_text()
    assert "  - workload: count_to_100" in text
    config.write_text(text.replace("  - workload: count_to_100", "  - workload: ${oc.env:SPECGATE_TEST_WORKLOAD}"))
    names = []
    for workload in ("count_to_100", "chat_short", "count_to_100"):
        monkeypatch.setenv("SPECGATE_TEST_WORKLOAD", workload)
        names.append(compose_config([], conf, REGISTRIES)[0].workload.name)
    assert names == ["count_to_100", "chat_short", "count_to_100"]


def test_a_kept_composition_is_handed_out_as_a_copy_of_its_own():
    cfg, choices = compose_config([EXP], DEFAULT_CONF_DIR, REGISTRIES)
    OmegaConf.set_readonly(cfg, False)
    cfg.workload.max_tokens = 3
    choices["workload"] = "changed"
    again, choices_again = compose_config([EXP], DEFAULT_CONF_DIR, REGISTRIES)
    assert again.workload.max_tokens == 500 and choices_again["workload"] == "count_to_100"
    assert OmegaConf.is_readonly(again)


def test_hydra_is_left_as_it_was_outside_specgates_compositions():
    """The sweep's Hydra app (@hydra.main) reads Hydra's own sources and copies its own store."""
    compose([EXP])
    assert "__deepcopy__" not in vars(ConfigStore)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(DEFAULT_CONF_DIR), version_base=None):
            cfg = hydra_compose(config_name="config", return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    assert [source.schema for source in cfg.hydra.runtime.config_sources] == ["pkg", "file", "structured"]


@pytest.mark.parametrize("name", ["sim_smoke", "vllm_cpu_smoke", "sim_env_scrubbed"])
def test_an_arm_that_picks_what_the_base_has_is_the_config_hydra_composes_for_it(name):
    """`baseline: [drafter=none]` where the experiment's drafter is none is not composed again
    (compose_typed hands the arm the base's config): it must be what Hydra composes for it."""
    overrides = [f"+exp={name}", "workload.max_tokens=77"]
    experiment = compose(overrides)
    for arm in experiment.arms:
        cfg, choices = compose_config(merge_overrides(arm.overrides, overrides), DEFAULT_CONF_DIR, REGISTRIES)
        assert OmegaConf.to_yaml(arm.cfg) == OmegaConf.to_yaml(masked(resolve_auto_telemetry(cfg), arm.policy)), arm.name
        assert arm.choices == choices, arm.name


def test_only_picks_of_the_options_the_base_has_stand_for_the_base():
    base = {"drafter": "none", "workload": "count_to_100"}
    assert picks_what_the_base_has(["drafter=none"], [], base)
    assert picks_what_the_base_has([], [], base)
    assert picks_what_the_base_has(["drafter=eagle3_k25"], ["drafter=none"], base)  # the command line's wins
    for own in (["drafter=eagle3_k25"], ["drafter=none", "workload.max_tokens=9"], ["~drafter"], ["+drafter=none"],
                ["drafter=null"], ["nccl=default"], ["hydra/launcher=basic"], ["drafter@x=none"]):
        assert not picks_what_the_base_has(own, [], base), own
