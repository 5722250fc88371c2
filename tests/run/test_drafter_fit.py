"""The drafter fit check reads both config.json files before any server starts."""

import json

import pytest
from omegaconf import OmegaConf

from harness.run.drafter_fit import DrafterMismatch, check_drafter_fit
from harness.config.schema import SpecgateConfig

K25_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {"hidden_size": 7168, "vocab_size": 163840}}
K2_DRAFTER = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "vocab_size": 163840,
              "draft_vocab_size": 32000}


def write(folder, config):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def cfg(target, drafter, engine="sglang"):
    base = OmegaConf.structured(SpecgateConfig)
    return OmegaConf.merge(base, {"server": {"name": "kimi", "engine": engine, "model_path": target},
                                  "drafter": {"name": "eagle3_k2", "algorithm": "EAGLE3", "model_path": drafter,
                                              "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3}})


def test_a_fitting_drafter_passes(tmp_path):
    check_drafter_fit(cfg(write(tmp_path / "t", K25_TARGET), write(tmp_path / "d", K2_DRAFTER)))


@pytest.mark.parametrize("change, fragments", [
    ({"hidden_size": 4096}, ["hidden size 4096 (drafter) vs 7168 (target)"]),
    ({"vocab_size": 129280}, ["vocab size 129280 (drafter) vs 163840 (target)"]),
    ({"architectures": ["LlamaForCausalLM"]}, ["architecture is 'LlamaForCausalLM'", "Eagle3"]),
])
def test_a_mismatch_names_both_values(tmp_path, change, fragments):
    drafter = write(tmp_path / "d", {**K2_DRAFTER, **change})
    with pytest.raises(DrafterMismatch) as info:
        check_drafter_fit(cfg(write(tmp_path / "t", K25_TARGET), drafter))
    for fragment in fragments:
        assert fragment in str(info.value)


def test_a_draft_model_needs_only_the_vocabulary_to_match(tmp_path):
    small = write(tmp_path / "d", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 163840})
    config = cfg(write(tmp_path / "t", K25_TARGET), small)
    check_drafter_fit(OmegaConf.merge(config, {"drafter": {"algorithm": "draft_model"}}))
    other_vocab = write(tmp_path / "d2", {"hidden_size": 64, "vocab_size": 1000})
    with pytest.raises(DrafterMismatch, match="vocab size 1000"):
        check_drafter_fit(OmegaConf.merge(cfg(str(tmp_path / "t"), other_vocab), {"drafter": {"algorithm": "draft_model"}}))


def test_a_missing_path_is_named(tmp_path):
    with pytest.raises(DrafterMismatch, match=r"drafter \(eagle3_k2\) path .*/nowhere does not exist"):
        check_drafter_fit(cfg(write(tmp_path / "t", K25_TARGET), str(tmp_path / "nowhere")))


def test_the_simulator_and_plain_decoding_are_not_checked(tmp_path):
    check_drafter_fit(cfg("sim/model", "/no/such/drafter", engine="sim"))
    plain = OmegaConf.merge(cfg("/no/target", "/no/drafter"), {"drafter": {"algorithm": None}})
    check_drafter_fit(plain)
