"""What differs between inference engines, in one table: how a server is launched, which
routes say it is healthy, which APIs the load may use, and where speculative-decoding
statistics come from. Suites and the runner ask the engine; nothing else branches on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from omegaconf import DictConfig

from harness.servers import sglang, vllm


@dataclass(frozen=True)
class Engine:
    name: str
    launch_args: Callable[..., list[str]]  # (cfg, port, host=None) -> argv after the module
    health_paths: tuple[str, ...]  # all must answer 200
    apis: tuple[str, ...]  # workload.api values this engine serves
    spec_stats: str  # "per_request": usage/meta_info carry verify counts (SGLang);
    #                  "metrics_window": /metrics counters differenced over the measured window (vLLM)
    native_generate: bool  # SGLang's /generate with meta_info


ENGINES = {
    "sglang": Engine("sglang", sglang.launch_args, ("/health", "/health_generate"),
                     ("chat", "completions", "generate"), "per_request", True),
    "vllm": Engine("vllm", vllm.launch_args, ("/health",), ("chat", "completions"), "metrics_window", False),
}


def engine_of(cfg: DictConfig) -> Engine:
    return ENGINES[cfg.server.engine]
