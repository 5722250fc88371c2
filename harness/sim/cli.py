"""Command line of the simulator: SGLang's launch flags plus ``--sim-*`` timing flags.

Unknown flags (``--mem-fraction-static 0.9 --trust-remote-code``) are accepted and
ignored so that a launch line written for real SGLang also starts the simulator.
"""

from __future__ import annotations

import argparse
import logging
from typing import Sequence

logger = logging.getLogger("harness.sim")


def _bool_flag(parser: argparse.ArgumentParser, name: str, help_: str) -> None:
    parser.add_argument(name, action="store_true", default=False, help=help_)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.sim",
        description="SGLang-compatible HTTP simulator with a timing model.",
        allow_abbrev=False,
    )
    # --- SGLang's own flags (same names and defaults) -------------------------
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--log-level", default="info")
    # a server spanning nodes (harness/sim/nodes.py): each node the same flags but its rank
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None, help="HOST:PORT where the nodes meet")
    # prefill/decode disaggregation (harness/sim/disagg.py): SGLang's flags and defaults
    p.add_argument("--disaggregation-mode", choices=("null", "prefill", "decode"), default="null")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998,
                   help="the prefill server's bootstrap server port")
    p.add_argument("--disaggregation-transfer-backend", default="mooncake", help="accepted; the transfer is simulated")
    p.add_argument("--disaggregation-ib-device", default=None, help="accepted; the transfer is simulated")
    # SGLang's window (in decode batches) for the spec gauges and avg_spec_accept_length.
    p.add_argument("--decode-log-interval", type=int, default=40)
    _bool_flag(p, "--enable-metrics", "accepted for compatibility; /metrics is always on")
    # The prefix cache (harness/sim/prefix_cache.py), with SGLang's flags and defaults.
    p.add_argument("--page-size", type=int, default=1, help="tokens per prefix-cache page")
    _bool_flag(p, "--disable-radix-cache", "no prefix cache: every prompt is prefilled whole")
    # --- simulator timing model -----------------------------------------------
    p.add_argument("--sim-decode-step-ms", type=float, default=12.2)
    p.add_argument("--sim-draft-step-ms", type=float, default=3.0)
    p.add_argument("--sim-verify-base-ms", type=float, default=12.2)
    p.add_argument("--sim-verify-per-token-ms", type=float, default=3.9)
    p.add_argument("--sim-accept-probs", default="0.6,0.667")
    p.add_argument("--sim-accept-by-text", default="{}",
                   help='JSON {marker: [probabilities]}: a prompt containing the marker accepts with those')
    p.add_argument("--sim-prefill-base-ms", type=float, default=5.0)
    p.add_argument("--sim-prefill-ms-per-token", type=float, default=0.05)
    p.add_argument("--sim-batch-scaling", type=float, default=0.01)
    p.add_argument("--sim-compute-knee-tokens", type=_non_negative, default=None,
                   help="tokens per target-model pass past which it is compute-bound and its time grows in "
                        "proportion to them (a plain step passes batch tokens, a verify batch x num_draft_tokens); "
                        "unset or 0: no knee (see harness/sim/model.py)")
    p.add_argument("--sim-max-running-requests", type=int, default=256)
    p.add_argument("--sim-startup-s", type=float, default=1.0)
    p.add_argument("--sim-seed", type=int, default=0)
    p.add_argument("--sim-lossy-rate", type=_share, default=0.0,
                   help="fault switch: this share of accepted draft tokens comes out as the runner-up token "
                        "(speculation that is not lossless; seeded, the same positions every run)")
    p.add_argument("--sim-forced-accept-rates", default=None,
                   help="benchmark only: accept drafts at these per-position unconditional rates, one per draft "
                        "step (vLLM's synthetic_acceptance_rates), whatever the drafter proposes; every token after "
                        "the first is then a filler and a request runs to max_tokens (SGLang's own way, a mean "
                        "length, is its env SGLANG_SIMULATE_ACC_LEN; see harness/sim/model.py)")
    p.add_argument("--sim-kv-transfer-base-ms", type=_non_negative, default=1.0,
                   help="disaggregation: a KV transfer's fixed cost (prefill server to decode server)")
    p.add_argument("--sim-kv-transfer-ms-per-token", type=_non_negative, default=0.01,
                   help="disaggregation: a KV transfer's cost per prompt token (0.01: ~30 GB/s at ~320 KB of KV a token)")
    p.add_argument("--sim-bootstrap-timeout-s", type=_positive, default=30.0,
                   help="disaggregation: how long a prefill waits for its decode server, and a decode for its KV")
    _bool_flag(p, "--sim-fail-after-abort", "fault switch: once a client disconnects mid-stream, answer every later "
               "generation request with a 500 (an engine whose abort path broke its scheduler)")
    _bool_flag(p, "--sim-record-emissions", "keep each streaming request's arrival and chunk emission times "
               "for GET /sim/emissions (the truth benchmarks/clients.py checks clients against)")
    _bool_flag(p, "--sim-scrub-worker-env", "start worker processes with a minimal environment")
    p.add_argument("--sim-scrub-worker-env-nodes", type=_ranks, default=[],
                   help="node ranks (comma list) whose worker processes start with a minimal environment")
    # --- drift: the noise of a real GPU box (see harness/sim/drift.py); all off by default ---
    p.add_argument("--sim-drift-speed-sd", type=_non_negative, default=0.0,
                   help="sd of the log speed factor drawn once per server start (run-to-run drift)")
    p.add_argument("--sim-drift-wander-sd", type=_non_negative, default=0.0,
                   help="sd of the slow wander of log speed during a run")
    p.add_argument("--sim-drift-wander-s", type=_positive, default=30.0, help="the wander's time constant, seconds")
    p.add_argument("--sim-drift-jitter-sd", type=_non_negative, default=0.0, help="sd of per-step log jitter")
    p.add_argument("--sim-drift-seed", type=int, default=None,
                   help="the drift's seed (default: a fresh one per start, logged)")
    p.add_argument("--sim-drift-machine-sd", type=_non_negative, default=0.0,
                   help="sd of the box's slow drift of log speed, shared by every server on it (a function of "
                        "wall-clock time and --sim-drift-machine-seed)")
    p.add_argument("--sim-drift-machine-s", type=_positive, default=120.0,
                   help="seconds over which the box's drift changes")
    p.add_argument("--sim-drift-machine-seed", type=int, default=0,
                   help="which box: servers with the same seed share its drift")
    # --- simulated GPUs (GET /sim/gpu; see harness/sim/gpu.py) -----------------
    p.add_argument("--sim-gpu-ramp-s", type=float, default=1.5, help="time constant of the idle->boost clock ramp")
    p.add_argument("--sim-gpu-boost-mhz", type=float, default=2600.0, help="SM clock under load")
    p.add_argument("--sim-gpu-throttle", choices=("none", "thermal", "power"), default="none",
                   help="fault switch: cap the clock under load and report why")
    p.add_argument("--sim-gpu-throttle-mhz", type=float, default=1800.0, help="the capped SM clock")
    return p


def _ranks(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of node ranks") from None


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _describe_unknown(extra: Sequence[str]) -> list[str]:
    """Group leftover argv into ``--flag [value]`` items for the log."""
    items: list[str] = []
    i = 0
    while i < len(extra):
        tok = extra[i]
        if tok.startswith("-") and "=" not in tok and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            items.append(f"{tok} {extra[i + 1]}")
            i += 2
        else:
            items.append(tok)
            i += 1
    return items


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    ns.ignored_flags = _describe_unknown(extra)
    if ns.served_model_name is None:
        ns.served_model_name = ns.model_path
    if ns.speculative_algorithm is not None and str(ns.speculative_algorithm).lower() in ("none", ""):
        ns.speculative_algorithm = None
    if ns.max_running_requests is not None:
        # SGLang's own flag wins over the simulator default when given.
        ns.sim_max_running_requests = ns.max_running_requests
    if ns.context_length is None:
        ns.context_length = 32768
    if ns.speculative_algorithm is not None:
        # SGLang fills unset EAGLE knobs with defaults; mirror the common chain setup.
        if ns.speculative_num_steps is None:
            ns.speculative_num_steps = (
                ns.speculative_num_draft_tokens - 1 if ns.speculative_num_draft_tokens else 2
            )
        if ns.speculative_eagle_topk is None:
            ns.speculative_eagle_topk = 1
        if ns.speculative_num_draft_tokens is None:
            ns.speculative_num_draft_tokens = ns.speculative_num_steps + 1
    return ns


def server_args_dict(ns: argparse.Namespace) -> dict:
    """The ``server_args`` part of ``/get_server_info`` (SGLang field names)."""
    d = {
        "model_path": ns.model_path,
        "tokenizer_path": ns.tokenizer_path or ns.model_path,
        "served_model_name": ns.served_model_name,
        "host": ns.host,
        "port": ns.port,
        "tp_size": ns.tp_size,
        "nnodes": ns.nnodes,
        "node_rank": ns.node_rank,
        "dist_init_addr": ns.dist_init_addr,
        "dp_size": 1,
        "pp_size": 1,
        "context_length": ns.context_length,
        "max_running_requests": ns.sim_max_running_requests,
        "random_seed": ns.random_seed,
        "speculative_algorithm": ns.speculative_algorithm,
        "speculative_draft_model_path": ns.speculative_draft_model_path,
        "speculative_num_steps": ns.speculative_num_steps,
        "speculative_eagle_topk": ns.speculative_eagle_topk,
        "speculative_num_draft_tokens": ns.speculative_num_draft_tokens,
        "disaggregation_mode": ns.disaggregation_mode,
        "disaggregation_bootstrap_port": ns.disaggregation_bootstrap_port,
        "disaggregation_transfer_backend": ns.disaggregation_transfer_backend,
        "enable_metrics": True,
        "log_level": ns.log_level,
    }
    for key, value in vars(ns).items():
        if key.startswith("sim_"):
            d[key] = value
    return d
