"""The drafter fit check reads both config.json files before any server starts."""

import json

import pytest
from omegaconf import OmegaConf

from harness.run.drafter_fit import DrafterMismatch, check_drafter_fit
from harness.config.schema import SpecgateConfig
from tests.support.checkpoints import write_checkpoint as write, write_safetensors

K25_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61}}
K2_DRAFTER = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "vocab_size": 163840,
              "draft_vocab_size": 32000}


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


TINY_TARGET = {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "vocab_size": 4096, "num_hidden_layers": 2}
TINY_HEAD = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 128, "vocab_size": 4096,
             "draft_vocab_size": 4096, "target_hidden_size": 128, "eagle_aux_hidden_state_layer_ids": [0, 1, 2]}


def tiny_cfg(tmp_path, head=TINY_HEAD, weights=None):
    weights = weights or {"fc.weight": [128, 384]}
    return cfg(write(tmp_path / "t", TINY_TARGET), write(tmp_path / "d", head, weights), engine="vllm")


def test_an_eagle3_head_with_aux_layers_the_target_has_passes(tmp_path):
    check_drafter_fit(tiny_cfg(tmp_path))
    # SGLang's heads keep the ids inside eagle_config
    inner = {k: v for k, v in TINY_HEAD.items() if k != "eagle_aux_hidden_state_layer_ids"}
    check_drafter_fit(tiny_cfg(tmp_path / "sg", {**inner, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}}))


def test_a_head_without_aux_layer_ids_on_a_shallow_target_is_caught_before_the_first_request(tmp_path):
    """vLLM's default ids (2, L//2, L-3) name layer -1 of a 2-layer target: healthy server, dead engine."""
    head = {k: v for k, v in TINY_HEAD.items() if k != "eagle_aux_hidden_state_layer_ids"}
    with pytest.raises(DrafterMismatch) as info:
        check_drafter_fit(tiny_cfg(tmp_path, head))
    message = str(info.value)
    assert "reads target layers [2, 1, -1] (the engines' default (its config names none))" in message
    assert "the target has 2 layers (valid ids 0..2, distinct)" in message
    assert "set eagle_aux_hidden_state_layer_ids in" in message and "\n" not in message


@pytest.mark.parametrize("ids", [[0, 1, 3], [1, 1, 2]])
def test_aux_layer_ids_outside_the_target_or_repeated_are_refused(tmp_path, ids):
    with pytest.raises(DrafterMismatch, match=rf"reads target layers \[{ids[0]}, {ids[1]}, {ids[2]}\]"):
        check_drafter_fit(tiny_cfg(tmp_path, {**TINY_HEAD, "eagle_aux_hidden_state_layer_ids": ids}))


def test_a_head_whose_fc_reads_another_number_of_layers_is_refused(tmp_path):
    with pytest.raises(DrafterMismatch, match="its fc layer reads 256 features, but 3 aux layers of hidden size 128 give 384"):
        check_drafter_fit(tiny_cfg(tmp_path, weights={"fc.weight": [128, 256]}))


def test_a_folder_that_is_not_an_eagle3_head_is_named(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_HEAD))
    config = cfg(write(tmp_path / "t", TINY_TARGET), str(folder), engine="vllm")
    with pytest.raises(DrafterMismatch, match=r"has no \*\.safetensors weights"):
        check_drafter_fit(config)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(DrafterMismatch, match="is not a safetensors file"):
        check_drafter_fit(config)
