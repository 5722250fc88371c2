"""Does the drafter checkpoint fit the target model? Checked before any server starts,
from the two local config.json files (and an EAGLE-3 head's safetensors header), so no GPU
time is spent on a drafter that cannot work (e.g. an EAGLE-3 drafter trained for Kimi-K2
reused on K2.5 must still match the target's hidden size and vocabulary).

An EAGLE-3 head reads three of the target's hidden states (its aux layers: id k is the
state entering layer k, 0 the embeddings, L the last layer's output). Which ones, the head's
config says (``eagle_aux_hidden_state_layer_ids``, top level as vLLM writes it or inside
``eagle_config`` as SGLang's heads do); without it the engines pick (2, L//2, L-3), which on
a shallow target names layers that do not exist: vLLM then collapses them to two states,
reports healthy, and its first request kills the engine. So the ids, given or defaulted,
must be three distinct layers of the target, as many as the head's ``fc`` layer reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.engines import engine_of
from harness.run.safetensors_header import SafetensorsError, tensor_shapes


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """What vLLM and SGLang read when a head names no aux layers (their default for Llama-likes)."""
    return [2, num_layers // 2, num_layers - 3]


class DrafterMismatch(Exception):
    """The drafter does not fit the target, or a checkpoint path is missing (one sentence)."""


def read_config(path: str, what: str) -> dict[str, Any]:
    folder = Path(path)
    config = folder / "config.json"
    if not folder.exists():
        raise DrafterMismatch(f"the {what} path {folder} does not exist on this machine")
    if not config.is_file():
        raise DrafterMismatch(f"the {what} at {folder} has no config.json")
    try:
        return json.loads(config.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterMismatch(f"the {what}'s {config} is not readable JSON ({exc})") from None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal targets (e.g. Kimi-K2.5) keep the language model's sizes in text_config."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def target_hidden_size(drafter: dict[str, Any]) -> int | None:
    """The hidden size of the target the drafter reads features from. EAGLE-3 configs may
    name it explicitly (target_hidden_size); otherwise it equals the drafter's own."""
    return drafter.get("target_hidden_size") or drafter.get("hidden_size")


def check_drafter_fit(cfg: DictConfig) -> None:
    """Raise DrafterMismatch naming both values when the drafter cannot serve the target."""
    if not cfg.drafter.algorithm or not cfg.drafter.model_path or not engine_of(cfg).checks_drafter_fit:
        return  # plain decoding, a drafter inside the target (NEXTN), or an engine whose paths are names
    target = text_config(read_config(cfg.server.model_path, f"target model ({cfg.server.name})"))
    drafter = read_config(cfg.drafter.model_path, f"drafter ({cfg.drafter.name})")
    name = cfg.drafter.name
    algorithm = str(cfg.drafter.algorithm).upper()
    architectures = " ".join(drafter.get("architectures") or [])
    if algorithm == "EAGLE3" and "eagle3" not in architectures.lower():
        raise DrafterMismatch(f"drafter '{name}' is for EAGLE3 but its architecture is "
                              f"'{architectures or 'unspecified'}' (expected an *Eagle3* architecture)")
    pairs = [("vocab size", drafter.get("vocab_size"), target.get("vocab_size"))]
    if algorithm.startswith("EAGLE"):  # an EAGLE drafter reads the target's hidden states
        pairs.insert(0, ("hidden size", target_hidden_size(drafter), target.get("hidden_size")))
    for what, drafter_value, target_value in pairs:
        if drafter_value is None or target_value is None:
            missing = "drafter" if drafter_value is None else "target"
            raise DrafterMismatch(f"cannot check drafter '{name}': the {missing}'s config.json has no {what}")
        if drafter_value != target_value:
            raise DrafterMismatch(f"drafter '{name}' does not fit target '{cfg.server.name}': {what} "
                                  f"{drafter_value} (drafter) vs {target_value} (target)")
    if algorithm == "EAGLE3":
        check_eagle3_head(name, cfg.drafter.model_path, drafter, target)


def aux_layer_ids(drafter: dict[str, Any]) -> list[int] | None:
    """The head's own aux layer ids: top level (vLLM's heads) or in eagle_config (SGLang's)."""
    ids = drafter.get("eagle_aux_hidden_state_layer_ids")
    inner = drafter.get("eagle_config")
    if not ids and isinstance(inner, dict):
        ids = inner.get("eagle_aux_hidden_state_layer_ids")
    return list(ids) if ids else None


def check_eagle3_head(name: str, folder: str, drafter: dict[str, Any], target: dict[str, Any]) -> None:
    """The aux layers a head reads exist in the target, are three distinct ones, and are as
    many as its fc layer takes; its weights are a readable safetensors file."""
    layers = target.get("num_hidden_layers")
    given = aux_layer_ids(drafter)
    ids = given or default_aux_layer_ids(int(layers or 0))
    said = "its eagle_aux_hidden_state_layer_ids" if given else "the engines' default (its config names none)"
    if layers is None:
        raise DrafterMismatch(f"cannot check EAGLE-3 drafter '{name}': the target's config.json has no num_hidden_layers")
    wrong = [i for i in ids if not isinstance(i, int) or not 0 <= i <= int(layers)]
    if wrong or len(set(ids)) != len(ids):
        raise DrafterMismatch(
            f"EAGLE-3 drafter '{name}' reads target layers {ids} ({said}), but the target has {layers} layers "
            f"(valid ids 0..{layers}, distinct): set eagle_aux_hidden_state_layer_ids in {folder}/config.json")
    fc = head_tensor_shapes(name, folder).get("fc.weight")
    hidden = target_hidden_size(drafter)
    if fc is not None and hidden and len(fc) == 2 and fc[1] != len(ids) * hidden:
        raise DrafterMismatch(f"EAGLE-3 drafter '{name}': its fc layer reads {fc[1]} features, but {len(ids)} aux "
                              f"layers of hidden size {hidden} give {len(ids) * hidden}")


def head_tensor_shapes(name: str, folder: str) -> dict[str, list[int]]:
    """{tensor name: shape} of every *.safetensors file of the head; a head with none is no head."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise DrafterMismatch(f"EAGLE-3 drafter '{name}' at {folder} has no *.safetensors weights")
    shapes: dict[str, list[int]] = {}
    for path in files:
        try:
            shapes.update(tensor_shapes(path))
        except SafetensorsError as exc:
            raise DrafterMismatch(f"EAGLE-3 drafter '{name}': {exc}") from None
    return shapes
