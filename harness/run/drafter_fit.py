"""Does the drafter checkpoint fit the target model? Checked before any server starts,
from the two local config.json files, so no GPU time is spent on a drafter that cannot
work (e.g. an EAGLE-3 drafter trained for Kimi-K2 reused on K2.5 must still match the
target's hidden size and vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.engines import engine_of


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
