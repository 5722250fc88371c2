"""Inference engines, one class each (see base.py for what a class provides).

Only this package names an engine (tests/test_engines.py). May import: load (request shapes), servers (the control-plane client), sim (the simulator's own flags)."""

from __future__ import annotations

from omegaconf import DictConfig

from harness.engines.base import Engine, EngineConfigError, Launch
from harness.engines.sglang import SGLang
from harness.engines.sim import Simulator
from harness.engines.vllm import VLLM

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (SGLang(), VLLM(), Simulator())}


def engine_of(cfg: DictConfig) -> Engine:
    """The engine named by server.engine (config validation has rejected unknown names)."""
    return ENGINES[cfg.server.engine]


__all__ = ["ENGINES", "Engine", "EngineConfigError", "Launch", "engine_of"]
