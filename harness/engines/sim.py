"""The simulator (harness/sim) as an engine of its own: SGLang's HTTP surface and flags,
started as `python -m harness.sim`, plus `--sim-*` flags for its timing model and a
simulated GPU model that telemetry=sim reads."""

from __future__ import annotations

import dataclasses
import json

from harness.config.engine_options import SimModelConfig
from harness.config.schema import DrafterConfig, SpecgateConfig
from harness.engines.base import EngineConfigError
from harness.engines.sglang import SGLang
from harness.load.crosscheck import CountTokens
from harness.load.sizing import PromptTokenizer
from harness.sim.cli import parse_args
from harness.sim.model import SimModel
from harness.sim.tokens import count_output_tokens, count_tokens

def sim_args(sim: SimModelConfig) -> list[str]:
    """`decode_step_ms: 4.0` -> `--sim-decode-step-ms 4.0`; lists become comma lists."""
    args: list[str] = []
    for key, value in dataclasses.asdict(sim).items():
        flag = "--sim-" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        elif isinstance(value, list):  # an empty list: the flag's default
            args += [flag, ",".join(str(v) for v in value)] if value else []
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

    def args(self, cfg: SpecgateConfig, port: int, host: str) -> list[str]:
        args = super().args(cfg, port, host) + (sim_args(cfg.server.sim) if cfg.server.sim is not None else [])
        rates = cfg.drafter.forced_accept_rates
        if cfg.drafter.algorithm and rates is not None:  # its own per-position mechanism (vLLM's semantics)
            args += ["--sim-forced-accept-rates", ",".join(f"{float(r):g}" for r in rates)]
        return args

    def forced_unsupported(self, cfg: SpecgateConfig) -> str | None:
        return None  # a mean length as SGLang takes it (env), per-position rates by its own flag

    def forced_by_hand(self, cfg: SpecgateConfig) -> str | None:
        """SGLang's env, or its own --sim-forced-accept-rates in server.extra_args."""
        if "--sim-forced-accept-rates" in [str(a).split("=", 1)[0] for a in cfg.server.extra_args]:
            return "server.extra_args --sim-forced-accept-rates"
        return super().forced_by_hand(cfg)

    def schedule_form(self, drafter: DrafterConfig, ranges: list[tuple[int, int, int]]) -> None:
        return None  # nothing to deploy: a schedule measured here is written in the real engines' forms

    def token_counter(self, cfg: SpecgateConfig) -> CountTokens | None:
        """Its word pieces, exactly -- when we started it: behind backend=attach may be any server."""
        return None if cfg.backend.kind == "attach" else count_output_tokens

    def prompt_tokenizer(self, cfg: SpecgateConfig, base_url: str, model: str) -> PromptTokenizer | None:
        """Its word pieces, exactly and locally: the simulator serves no /tokenize."""
        return PromptTokenizer("the simulator's tokenizer", count_tokens)

    def check(self, cfg: SpecgateConfig) -> None:
        super().check(cfg)
        if cfg.server.sim is None and cfg.backend.kind != "attach":
            raise EngineConfigError(f"server '{cfg.server.name}' has no `sim:` timing model, which the "
                                    f"simulator needs (e.g. server=sim)")
        # its numbers' bounds (shares in [0, 1], step times, drift) are its options' own (SimModelConfig)


def truth_model(cfg: SpecgateConfig) -> SimModel:
    """The timing model a simulator started for this arm's config runs (its own launch flags,
    parsed as the simulator parses them, in the environment it is started with: SGLang's simulated
    acceptance is an env): the truth a test measures the harness against."""
    engine = Simulator()
    return SimModel.from_args(parse_args(engine.args(cfg, 0, "127.0.0.1")), env=engine.environment(cfg))
