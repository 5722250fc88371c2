"""The simulator (harness/sim) as an engine of its own: SGLang's HTTP surface and flags,
started as `python -m harness.sim`, plus `--sim-*` flags for its timing model and a
simulated GPU model that telemetry=sim reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from harness.bounds import INT64_MAX, bounded
from harness.engines.base import EngineConfigError
from harness.engines.sglang import SGLang
from harness.load.crosscheck import CountTokens
from harness.load.sizing import PromptTokenizer
from harness.sim.cli import parse_args
from harness.sim.model import SimModel
from harness.sim.tokens import count_output_tokens, count_tokens

STEP_MS_MAX = 60_000.0  # a step, a cycle or a prefill of a minute: far past any GPU's, and a load still ends


@dataclass
class SimModelConfig:
    """The simulator's own options, `server.sim`: its timing model (see harness/sim/model.py)."""

    decode_step_ms: float = bounded(12.2, above=0, high=STEP_MS_MAX)
    draft_step_ms: float = bounded(3.0, low=0, high=STEP_MS_MAX)
    verify_base_ms: float = bounded(12.2, above=0, high=STEP_MS_MAX)
    verify_per_token_ms: float = bounded(3.9, low=0, high=STEP_MS_MAX)
    # the probability that the draft token at position 1, 2, ... is accepted
    accept_probs: List[float] = bounded(factory=lambda: [0.6, 0.667], low=0, high=1)
    accept_by_text: Dict[str, List[float]] = bounded(factory=dict, low=0, high=1)  # marker in the prompt -> its accept_probs
    prefill_base_ms: float = bounded(5.0, low=0, high=STEP_MS_MAX)
    prefill_ms_per_token: float = bounded(0.05, low=0, high=STEP_MS_MAX)
    batch_scaling: float = bounded(0.01, low=0)
    # tokens per target-model pass past which it is compute-bound (its time then grows in
    # proportion to them): a plain step passes batch tokens, a verify batch x num_draft_tokens; null: no knee
    compute_knee_tokens: Optional[float] = bounded(None, low=0, example="0 or null: no knee")
    max_running_requests: int = bounded(256, low=1, high=1_000_000)
    startup_s: float = bounded(1.0, low=0, high=3600)
    seed: int = bounded(0, low=0, high=INT64_MAX)
    scrub_worker_env: bool = False
    gpu_boost_mhz: float = bounded(2600.0, above=0, high=100_000)  # the simulated GPUs' boost clock under load (idle ~2330-2360 MHz)
    gpu_ramp_s: float = bounded(1.5, above=0, high=3600)  # time constant of the ramp from idle to boost
    gpu_throttle: str = "none"  # none | thermal | power: a fault that caps clocks under load
    lossy_rate: float = bounded(0.0, low=0, high=1)  # a fault: this share of accepted draft tokens comes out wrong (speculative arms only)
    fail_after_abort: bool = False  # a fault: once a client disconnects mid-stream, every later request fails (500)
    # drift, the noise of a real GPU box (harness/sim/drift.py), all off by default: a speed factor
    # per server start, a slow wander during the run, per-step jitter (sds of log speed)
    drift_speed_sd: float = bounded(0.0, low=0, example="0: no drift")  # standard deviations of log speed
    drift_wander_sd: float = bounded(0.0, low=0, example="0: no drift")
    drift_wander_s: float = bounded(30.0, above=0)  # a time constant in s
    drift_jitter_sd: float = bounded(0.0, low=0, example="0: no drift")
    drift_seed: Optional[int] = bounded(None, low=0, high=INT64_MAX)  # null: a fresh seed per server start, in its log
    drift_machine_sd: float = bounded(0.0, low=0, example="0: no drift")  # the box's own slow drift, shared by every server on it (wall-clock time)
    drift_machine_s: float = bounded(120.0, above=0)
    drift_machine_seed: int = bounded(0, low=0, high=INT64_MAX)  # which box



def sim_args(sim: DictConfig) -> list[str]:
    """`decode_step_ms: 4.0` -> `--sim-decode-step-ms 4.0`; lists become comma lists."""
    args: list[str] = []
    for key, value in OmegaConf.to_container(sim).items():
        flag = "--sim-" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        elif isinstance(value, list):
            args += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, dict):  # e.g. accept_by_text: one JSON argument
            args += [flag, json.dumps(value)] if value else []
        elif value is not None:
            args += [flag, str(value)]
    return args


class Simulator(SGLang):
    name = "sim"
    module = "harness.sim"
    options = SimModelConfig
    checks_drafter_fit = False  # its model and drafter paths are only names
    simulates_gpus = True
    readable_flags = SGLang.readable_flags + ("--sim-*",)  # SGLang's flags, and its timing model's

    def args(self, cfg: DictConfig, port: int, host: str) -> list[str]:
        return super().args(cfg, port, host) + (sim_args(cfg.server.sim) if cfg.server.sim is not None else [])

    def schedule_form(self, drafter: DictConfig, ranges: list[tuple[int, int, int]]) -> None:
        return None  # nothing to deploy: a schedule measured here is written in the real engines' forms

    def token_counter(self, cfg: DictConfig) -> CountTokens | None:
        """Its word pieces, exactly -- when we started it: behind backend=attach may be any server."""
        return None if cfg.backend.kind == "attach" else count_output_tokens

    def prompt_tokenizer(self, cfg: DictConfig, base_url: str, model: str) -> PromptTokenizer | None:
        """Its word pieces, exactly and locally: the simulator serves no /tokenize."""
        return PromptTokenizer("the simulator's tokenizer", count_tokens)

    def check(self, cfg: DictConfig) -> None:
        super().check(cfg)
        if cfg.server.sim is None and cfg.backend.kind != "attach":
            raise EngineConfigError(f"server '{cfg.server.name}' has no `sim:` timing model, which the "
                                    f"simulator needs (e.g. server=sim)")
        # its numbers' bounds (shares in [0, 1], step times, drift) are its options' own (SimModelConfig)


def truth_model(cfg: DictConfig) -> SimModel:
    """The timing model a simulator started for this arm's config runs (its own launch flags,
    parsed as the simulator parses them): the truth a test measures the harness against."""
    return SimModel.from_args(parse_args(Simulator().args(cfg, 0, "127.0.0.1")))
