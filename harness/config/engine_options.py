"""Each engine's own options block, `server.<name>` of the schema (harness/config/schema.py
ServerConfig): the types and bounds of what only that engine reads. Here, in the config's
floor, so the schema holds every bound and imports nothing above it; the engine classes
(harness/engines) name their block's type as `options`, and a test keeps the two in step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from harness.bounds import INT64_MAX, bounded

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
    # a fault of one node: on a server spanning nodes (server.nnodes), the workers of these node
    # ranks start with a minimal environment (the classic multi-node failure: set on node 0, lost on node 1)
    scrub_worker_env_nodes: List[int] = bounded(factory=list, low=0, high=63)
    gpu_boost_mhz: float = bounded(2600.0, above=0, high=100_000)  # the simulated GPUs' boost clock under load (idle ~2330-2360 MHz)
    gpu_ramp_s: float = bounded(1.5, above=0, high=3600)  # time constant of the ramp from idle to boost
    gpu_throttle: str = "none"  # none | thermal | power: a fault that caps clocks under load
    lossy_rate: float = bounded(0.0, low=0, high=1)  # a fault: this share of accepted draft tokens comes out wrong (speculative arms only)
    fail_after_abort: bool = False  # a fault: once a client disconnects mid-stream, every later request fails (500)
    # prefill/decode disaggregation (router.prefill/decode, harness/sim/disagg.py): a KV transfer's
    # fixed cost and its cost per prompt token; how long each side waits for the other
    kv_transfer_base_ms: float = bounded(1.0, low=0, high=STEP_MS_MAX)
    kv_transfer_ms_per_token: float = bounded(0.01, low=0, high=STEP_MS_MAX)
    bootstrap_timeout_s: float = bounded(30.0, above=0, high=3600)
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


@dataclass
class VLLMOptions:
    """vLLM's own options, `server.vllm` (null: vLLM's default)."""

    dtype: Optional[str] = None  # --dtype (e.g. float32 on CPU)
    max_model_len: Optional[int] = bounded(None, low=1, high=INT64_MAX)  # --max-model-len
    max_num_seqs: Optional[int] = bounded(None, low=1, high=INT64_MAX)  # --max-num-seqs
    # --per-request-spec-decode-metrics (vLLM 0.32): summary | detailed | none; given to a
    # speculative arm only (vLLM refuses it without --speculative-config): each streamed
    # request then carries its own verify steps and accepted drafts (harness/engines/vllm.py)
    per_request_spec_metrics: Optional[str] = None
