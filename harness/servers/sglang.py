"""SGLang launch arguments from the `server`, `drafter` and `build` config groups.

The simulator takes the same flags as `python -m sglang.launch_server`, plus `--sim-*`
flags for its timing model, so one function serves both.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def launch_args(cfg: DictConfig, port: int, host: str | None = None) -> list[str]:
    """`host` overrides server.host (a container listens on 0.0.0.0 behind its published port)."""
    server, drafter = cfg.server, cfg.drafter
    args = ["--model-path", server.model_path, "--tp-size", str(server.tp_size),
            "--host", host or server.host, "--port", str(port)]
    if server.served_model_name:
        args += ["--served-model-name", server.served_model_name]
    if drafter.algorithm:
        args += ["--speculative-algorithm", drafter.algorithm]
        if drafter.model_path:
            args += ["--speculative-draft-model-path", drafter.model_path]
        args += [
            "--speculative-num-steps", str(drafter.num_steps),
            "--speculative-eagle-topk", str(drafter.eagle_topk),
            "--speculative-num-draft-tokens", str(drafter.num_draft_tokens),
        ]
    args += [str(a) for a in server.extra_args]
    if cfg.build.kind == "sim" and server.sim is not None:
        args += sim_args(server.sim)
    return args


def sim_args(sim: DictConfig) -> list[str]:
    """`decode_step_ms: 4.0` -> `--sim-decode-step-ms 4.0`; lists become comma lists."""
    args: list[str] = []
    for key, value in OmegaConf.to_container(sim).items():
        flag = "--sim-" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        elif isinstance(value, list):
            args += [flag, ",".join(str(v) for v in value)]
        elif value is not None:
            args += [flag, str(value)]
    return args
