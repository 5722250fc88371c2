"""Inference engines, one class each (see base.py for what a class provides).

Only this package names an engine (tests/engines/test_engines.py)."""

from __future__ import annotations

from harness.config.schema import DrafterConfig, SpecgateConfig
from harness.engines.base import Engine, EngineConfigError, Launch
from harness.engines.sglang import SGLang
from harness.engines.sim import Simulator
from harness.engines.vllm import VLLM

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (SGLang(), VLLM(), Simulator())}
# server.<name>: each engine's own options block (harness/config/schema.py adds one per entry)
ENGINE_OPTIONS: dict[str, type] = {name: engine.options for name, engine in ENGINES.items() if engine.options}


def engine_of(cfg: SpecgateConfig) -> Engine:
    """The engine named by server.engine (config validation has rejected unknown names)."""
    return ENGINES[cfg.server.engine]


def schedule_forms(drafter: DrafterConfig, ranges: list[tuple[int, int, int]]) -> dict[str, dict]:
    """A schedule (first, last, k per batch-size range) in the form each real engine takes it."""
    forms = {name: engine.schedule_form(drafter, ranges) for name, engine in ENGINES.items()}
    return {name: form for name, form in forms.items() if form is not None}


__all__ = ["ENGINES", "ENGINE_OPTIONS", "Engine", "EngineConfigError", "Launch", "engine_of", "schedule_forms"]
