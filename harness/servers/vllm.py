"""vLLM launch arguments (`python -m vllm.entrypoints.openai.api_server ...`) from the
`server` and `drafter` groups. Speculative decoding goes in one JSON `--speculative-config`;
the drafter's num_steps is vLLM's num_speculative_tokens (draft tokens proposed per step)."""

from __future__ import annotations

import json

from omegaconf import DictConfig


def speculative_config(drafter: DictConfig) -> dict:
    config = {"method": drafter.algorithm, "num_speculative_tokens": int(drafter.num_steps)}
    if drafter.model_path:
        config["model"] = drafter.model_path
    return config


def launch_args(cfg: DictConfig, port: int, host: str | None = None) -> list[str]:
    server, drafter = cfg.server, cfg.drafter
    args = ["--model", server.model_path, "--host", host or server.host, "--port", str(port),
            "--tensor-parallel-size", str(server.tp_size)]
    if server.served_model_name:
        args += ["--served-model-name", server.served_model_name]
    for flag, value in (("--dtype", server.dtype), ("--max-model-len", server.max_model_len),
                        ("--max-num-seqs", server.max_num_seqs)):
        if value is not None:
            args += [flag, str(value)]
    if drafter.algorithm:
        args += ["--speculative-config", json.dumps(speculative_config(drafter))]
    return args + [str(a) for a in server.extra_args]
