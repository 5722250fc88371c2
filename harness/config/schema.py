"""Typed schema of the config tree (registered in Hydra's ConfigStore by compose.py).

Every group in conf/ is checked against one of these dataclasses at compose time, so a
mistyped key or a value of the wrong type stops the run before anything starts. They are
also the code's type of a config: each arm's is made once as these dataclasses (`Arm.typed`),
which engines and servers read. The floor of the package graph: it imports only leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from harness.bounds import INT64_MAX, Bounds, bounded, free_form  # noqa: F401  (Bounds: the schema's type of a bound)
from harness.config.engine_options import SimModelConfig, VLLMOptions
from harness.limits import (MAX_CLIENT_PROCESSES, MAX_IN_FLIGHT, MAX_LOAD_S, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS,
                                 MAX_REPEATS, MAX_REQUESTS, MAX_ROUNDS, MAX_TOP_LOGPROBS, MIN_TIMESLICE_S)


@dataclass
class BackendConfig:
    kind: str = "docker"  # docker | process | srun | attach (harness/servers BACKENDS)
    url: Optional[str] = None  # attach: the server's base URL, e.g. http://127.0.0.1:30000
    startup_timeout_s: float = bounded(120.0, above=0, high=MAX_LOAD_S)  # health deadline; a server not healthy by then fails the arm
    shutdown_timeout_s: float = bounded(10.0, low=0, high=MAX_LOAD_S)  # SIGTERM grace before SIGKILL
    health_timeout_s: float = bounded(30.0, above=0, high=MAX_LOAD_S)  # attach: how long a health check after a load may take before the server counts as gone
    # docker only
    docker_host: Optional[str] = None  # null: the local engine; or ssh://user@host, tcp://host:2376
    publish_host: str = "127.0.0.1"  # the host address the server port is published on
    srun_args: List[str] = field(default_factory=list)  # srun: its own options, e.g. [--partition=gpu, --gres=gpu:8]
    network: str = "bridge"  # bridge: the port published on publish_host | host: the host's network (a multi-node server's nodes meet on loopback)
    shm_size: Optional[str] = None  # e.g. "32g"; null: the engine's default
    ipc_host: bool = False  # ipc_mode=host (NCCL/CUDA IPC between TP workers)
    ulimits: Dict[str, int] = bounded(factory=dict, low=-1, high=INT64_MAX, example="-1: unlimited")  # e.g. {memlock: -1, stack: 67108864}


BUILD_KINDS = ("simulator", "release", "patched", "host_venv", "git")  # the recipes of harness/servers/images.py


@dataclass
class BuildConfig:
    """What is started, and from which image. `kind` is the recipe (harness/servers/images.py),
    `engine` the engine the build carries, which must be the server's."""

    kind: str = "simulator"  # simulator | release | patched | host_venv | git
    engine: Optional[str] = None  # the engine this build carries (checked against server.engine)
    image: Optional[str] = None  # release: the image tag; patched: the release it builds FROM
    python: Optional[str] = None  # process backend: the interpreter (null = the harness's own); host_venv: the venv's
    image_python: Optional[str] = None  # the interpreter inside the image (null = python3)
    module: Optional[str] = None  # python -m <module> (null = the engine's own)
    version: Optional[str] = None  # the release this build stands for (recorded)
    device: Optional[str] = None  # what the build computes on: cpu | cuda | rocm (null: not said); what a mode needs is checked against it
    context: Optional[str] = None  # patched, host_venv: the recipe's folder (repo-relative), e.g. containers/vllm-cpu; git: the folder in build.repo
    repo: Optional[str] = None  # git: the repository whose tree at git_ref is the build context
    suite: Optional[str] = None  # host_venv: the Debian suite of the base image (its python3 must be the venv's)
    patches: List[str] = field(default_factory=list)  # patched: patch files (repo-relative)
    git_ref: Optional[str] = None  # patched: or check out this git ref of the engine; git: the commit built
    build_args: Dict[str, str] = field(default_factory=dict)  # extra docker build args


@dataclass
class SharedServerConfig:
    """What every engine's server has. Each engine's own options are a block of their own,
    `server.<engine>` (ServerConfig below; the engine class says which, harness/engines)."""

    name: str = "sim"
    engine: str = "sim"  # a class in harness/engines (launch command, health routes, spec stats, ...)
    model_path: str = "sim/model"
    served_model_name: Optional[str] = None
    tp_size: int = bounded(1, low=1, high=1024)
    host: str = "127.0.0.1"
    port: int = bounded(0, low=0, high=65535)  # 0: pick a free loopback port per arm (a fleet's: its router's)
    # data-parallel replicas of this server behind SGLang's router (`router` block,
    # harness/servers/fleet.py); 1: one server, no router
    workers: int = bounded(1, low=1, high=64)
    # nodes one server spans (SGLang's --nnodes/--node-rank/--dist-init-addr, harness/servers/nodes.py):
    # each node a server process group (process) or container (docker, on the host's network)
    nnodes: int = bounded(1, low=1, high=64)
    requires_gpu: bool = False  # fail fast with one sentence when no NVIDIA driver is present
    # Old spellings of an engine's own options (today in its block, e.g. server.vllm.dtype),
    # still accepted in conf trees and on the command line and moved into that block when
    # the config is composed (harness/engines/legacy.py); always null once composed.
    dtype: Optional[str] = None
    max_model_len: Optional[int] = bounded(None, low=1, high=INT64_MAX)
    max_num_seqs: Optional[int] = bounded(None, low=1, high=INT64_MAX)
    gpus: Optional[List[int]] = bounded(None, low=0, high=INT64_MAX)  # docker: GPU indices to pass; null = all when requires_gpu
    extra_args: List[str] = field(default_factory=list)  # passed to the launcher verbatim
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class ServerConfig(SharedServerConfig):
    """server.<engine>: each engine's options block, of the type its class names as `options`
    (harness/engines; tests/test_registries.py keeps the two in step); null: not set."""

    vllm: Optional[VLLMOptions] = None
    sim: Optional[SimModelConfig] = None


# the names of those blocks (server.vllm, ...): a key inside one is refused on another engine's server
ENGINE_BLOCKS = tuple(f.name for f in fields(ServerConfig) if f.name not in {g.name for g in fields(SharedServerConfig)})


ROUTER_POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")  # sglang_router's --policy choices we drive
# the router flags specgate sets itself (from server.workers, its ports and router.policy)
ROUTER_OWN_FLAGS = ("--worker-urls", "--host", "--port", "--policy", "--prometheus-host", "--prometheus-port",
                    "--pd-disaggregation", "--prefill", "--decode", "--service-discovery")


# the engine flags specgate sets on each worker of a split fleet (harness/servers/fleet.py)
DISAGGREGATION_FLAGS = ("--disaggregation-mode", "--disaggregation-bootstrap-port", "--disaggregation-transfer-backend")


@dataclass
class RouterConfig:
    """The router in front of a fleet (`server.workers` > 1): SGLang's own
    (`python -m sglang_router.launch_router`), started on this machine's loopback."""

    policy: str = "cache_aware"  # cache_aware | round_robin | power_of_two | random
    args: List[str] = field(default_factory=list)  # the router's own options, verbatim (e.g. [--cache-threshold, "0.5"])
    python: Optional[str] = None  # the interpreter that has sglang_router (null: the harness's own)
    # prefill/decode disaggregation (`--pd-disaggregation`): this many prefill and decode workers
    # (SGLang's --disaggregation-mode prefill|decode) make the fleet instead of server.workers; 0, 0: no split
    prefill: int = bounded(0, low=0, high=64)
    decode: int = bounded(0, low=0, high=64)
    transfer_backend: str = "mooncake"  # each split worker's --disaggregation-transfer-backend (mooncake | nixl | ...)

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill or self.decode)


@dataclass
class NcclConfig:
    name: str = "default"
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class DrafterConfig:
    name: str = "none"
    algorithm: Optional[str] = None  # EAGLE3 | EAGLE | NEXTN | null (plain decoding)
    model_path: Optional[str] = None
    num_steps: Optional[int] = bounded(None, low=1, high=1024)
    eagle_topk: Optional[int] = bounded(None, low=1, high=1024)
    num_draft_tokens: Optional[int] = bounded(None, low=1, high=1024)
    # extra keys of vLLM's --speculative-config (e.g. prompt_lookup_max for ngram); SGLang ignores them
    vllm_speculative_config: Dict[str, Any] = free_form()
    # Benchmark only (docs/forced-acceptance.md): the engine accepts drafts at this mean length
    # per verify cycle (tokens, the bonus one included), whatever the drafter proposes, by its
    # own mechanism: SGLang's (and the simulator's) SGLANG_SIMULATE_ACC_LEN, vLLM's synthetic
    # rejection sampling (GPU builds only). Its outputs are not the model's, so the arm is
    # benchmark-only: no quality gate can pass it. null: the drafter's real acceptance.
    forced_accept_length: Optional[float] = bounded(None, low=1, high=1025)
    # or per draft position, vLLM's synthetic_acceptance_rates: the unconditional share of cycles
    # that accept that position and every one before it (non-increasing, one per draft step)
    forced_accept_rates: Optional[List[float]] = bounded(None, low=0, high=1)


@dataclass
class CancelConfig:
    """workload.cancel: a share of the measured requests the client abandons mid-stream (harness/load/cancel.py)."""

    fraction: float = bounded(0.0, low=0, high=1)  # each measured request is cancelled with this probability (0: none)
    after_tokens: Optional[int] = bounded(None, low=1, high=MAX_OUTPUT_TOKENS)  # close the stream once this many tokens arrived ...
    after_ms: Optional[float] = bounded(None, above=0, high=MAX_LOAD_S * 1000)  # ... or this many ms after the request was sent (exactly one)


@dataclass
class SharedPrefixConfig:
    """`workload.shared_prefix`: prompts in groups that share a prefix (harness/load/shared_prefix.py),
    as SGLang's generated-shared-prefix dataset (gsp_num_groups, gsp_prompts_per_group,
    gsp_system_prompt_len, gsp_question_len)."""

    groups: int = bounded(8, low=1, high=MAX_REQUESTS)  # prefix groups
    prompts_per_group: int = bounded(16, low=1, high=MAX_REQUESTS)  # slots per group, shuffled together (cycled past groups x this)
    prefix_len: int = bounded(512, low=1, high=MAX_PROMPT_TOKENS)  # the shared prefix, in tokens (BOS included)
    suffix_len: int = bounded(64, low=1, high=MAX_PROMPT_TOKENS)  # each prompt's own suffix, in tokens
    ordered: bool = False  # true: slots group by group, no shuffle (--gsp-ordered)


@dataclass
class WorkloadConfig:
    name: str = "count_to_100"
    api: str = "chat"  # chat | completions | generate
    prompt: Optional[str] = None  # fixed prompt; null = random prompts of input_len tokens
    input_len: Optional[int] = bounded(None, low=1, high=MAX_PROMPT_TOKENS)  # random prompts: input length in tokens, as the served model's tokenizer counts them
    tokenizer: Optional[str] = None  # a local folder with the model's tokenizer.json to size input_len with; null = the server's /tokenize
    dataset: Optional[str] = None  # a local JSONL/JSON file of prompts (repo-relative or absolute); wins over prompt and input_len
    max_turns: Optional[int] = bounded(None, low=1, high=MAX_REQUESTS)  # dataset rows: send at most this many turns of each (1: single-turn); null = all
    max_tokens: int = bounded(500, low=1, high=MAX_OUTPUT_TOKENS)  # output length asked for
    ignore_eos: bool = False  # true: every request generates exactly max_tokens
    temperature: float = bounded(0.0, low=0)
    concurrency: int = bounded(1, low=1, high=MAX_IN_FLIGHT)  # closed loop: this many requests in flight
    request_rate: Optional[float] = bounded(None, above=0)  # open loop: Poisson arrivals per second (null = closed loop)
    burstiness: Optional[float] = bounded(None, above=0, example="1: Poisson")  # open loop: gamma arrivals with this shape (1 or null = Poisson; < 1 burstier)
    num_prompts: Optional[int] = bounded(10, low=1, high=MAX_REQUESTS)  # measured prompts (after warm-up): requests, or dataset rows (one request per turn)
    duration_s: Optional[float] = bounded(None, above=0, high=MAX_LOAD_S)  # or: send for this long instead of num_prompts
    warmup_requests: int = bounded(1, low=0, high=MAX_REQUESTS)  # sent first, excluded from every metric
    timeout_s: float = bounded(300.0, above=0, high=MAX_LOAD_S)  # per request, the whole of it
    first_byte_timeout_s: Optional[float] = bounded(60.0, above=0, high=MAX_LOAD_S)  # until the response's first byte (headers); null = only timeout_s
    seed: int = bounded(0, low=0, high=INT64_MAX)
    # open the load's connections (one per request in flight) before its measured requests, so
    # none of them is a new connection; TTFT never holds a connect either way (README "Client health")
    prewarm_connections: bool = False
    # load processes, each its own event loop and connections, the measured requests split among
    # them (harness/load/processes.py): one event loop drives about one core at most
    client_processes: int = bounded(1, low=1, high=MAX_CLIENT_PROCESSES)
    # where those processes run: local (forked here) | ray (Ray actors spread over the nodes of
    # the cluster at ray_address, or of a local Ray instance when it is null; harness/load/ray_clients.py)
    client_placement: str = "local"
    ray_address: Optional[str] = None
    # top logprobs asked for and kept per output token, with the token ids (0: ids only);
    # null: 2 when gate.lossless is configured (its near-tie margin needs two), else neither
    logprobs: Optional[int] = bounded(None, low=0, high=MAX_TOP_LOGPROBS, example="0: token ids only")
    # a share of the measured requests cancelled as a browser does, the same ones in every arm
    # (seeded by `seed`): {fraction, after_tokens | after_ms}; excluded from figures, never failures
    cancel: CancelConfig = field(default_factory=CancelConfig)
    # prompts in groups sharing a prefix (a source of its own; null: none)
    shared_prefix: Optional[SharedPrefixConfig] = None
    # empty the server's prefix cache before each load's measured requests (after its warm-up),
    # through the engine's route (SGLang/sim POST /flush_cache, vLLM POST /reset_prefix_cache),
    # so every arm and repeat starts from the same, empty cache; the record says whether it was
    reset_prefix_cache: bool = True
    # trace replay (docs/workloads.md "Trace replay", harness/load/trace.py): a Mooncake JSONL or
    # BurstGPT CSV file sent at its own timestamps; wins over dataset, prompt and input_len
    trace: Optional[str] = None
    trace_block_size: int = bounded(512, low=1, high=MAX_PROMPT_TOKENS)  # tokens per hash_ids block (Mooncake's traces: 512)
    trace_speedup: float = bounded(1.0, above=0, example="2: twice as fast")  # the trace's times divided by this
    trace_start_s: Optional[float] = bounded(None, low=0)  # replay requests from this second of the trace on
    trace_end_s: Optional[float] = bounded(None, above=0)  # ... and before this one (null: to the end)
    # what a replay's prompts say (harness/load/trace_prompts.py): null = filler words (a trace has no
    # text; accept lengths on filler are marked not representative); a dataset file (workload.dataset's
    # format, e.g. datasets/specmix.jsonl) = each request's words drawn from its rows, one category a
    # request (the trace line's `category` when it has one), sized to the trace's lengths, prefixes kept
    trace_content: Optional[str] = None


@dataclass
class TelemetryConfig:
    source: str = "auto"  # auto (nvml when server.requires_gpu, else off) | off | nvml | smi | sim (the simulator's GPUs)
    interval_s: float = bounded(0.1, low=0.001, high=MAX_LOAD_S)  # sampling period (10 Hz); 1 kHz at most
    idle_s: float = bounded(1.0, low=0, high=MAX_LOAD_S)  # the idle snapshot: sampled before any request is sent
    ramp_in_s: float = bounded(2.0, low=0, high=MAX_LOAD_S)  # excluded after the first token arrives: clocks need time to boost
    after_s: float = bounded(1.0, low=0, high=MAX_LOAD_S)  # keep sampling this long after the load, to see clocks fall back
    gpus: Optional[List[str]] = None  # indices or UUIDs to sample; null = the GPUs the server uses


@dataclass
class PercentileLimits:
    """Upper limits in ms on a latency distribution; unset statistics are not gated."""

    mean: Optional[float] = bounded(None, above=0, example="50")  # a ceiling in ms: above 0
    p50: Optional[float] = bounded(None, above=0, example="50")
    p90: Optional[float] = bounded(None, above=0, example="50")
    p99: Optional[float] = bounded(None, above=0, example="50")


@dataclass
class SpeedupGate:
    over: str = "baseline"  # the plain-decoding arm to compare with
    ratio: float = bounded(1.0, above=0)  # this arm's output tok/s >= ratio x the other arm's


@dataclass
class HitRateGain:
    """`gate.min_prefix_cache_hit_rate_gain`: this arm's prefix-cache hit rate >= arm `over`'s + `by`."""

    over: str = ""  # the arm to compare with (e.g. the same fleet routed round robin)
    by: float = bounded(0.0, low=-1, high=1)  # in hit rate (0.05: five points more)


@dataclass
class CapacityGate:
    """`specgate capacity`: this arm's capacity under the SLOs >= ratio x arm `over`'s, and/or >= `at_least`."""

    over: Optional[str] = None  # another arm to compare with (null: no comparison)
    ratio: float = bounded(1.0, above=0)
    at_least: Optional[float] = bounded(None, above=0)  # an absolute floor, in the capacity dimension's unit (null: none)


@dataclass
class LosslessGate:
    against: str = "baseline"  # the arm whose outputs this arm's must equal, request by request
    min_exact_match: float = bounded(1.0, low=0, high=1)  # share of the compared requests whose generated text must be identical


@dataclass
class ClientBoundConfig:
    """When the client's own lag makes an arm's figures the client's (harness/gates/client_bound.py)."""

    loop_lag_ms_p99: float = bounded(20.0, low=0)  # event-loop lag p99 above this may distort latencies (busy 2-core box, ordinary runs: 2-10 ms) ...
    send_gap_ms_p99: float = bounded(10.0, low=0)  # requests sent this much later than scheduled (p99) may distort throughput ...
    min_share: float = bounded(0.1, low=0, high=1)  # ... when the lag is also at least this share of the figure (the mean send gap: of the mean E2E)
    # ... and when the loop was stalled beyond its median lag for at least this share of the load,
    # every statistic (the medians too) is the client's: about that share of the chunks were read in a stall
    # (modelled: ITL p50 off by <= 0.6 % below 5 %, by 2-4 % at 15-25 %; docs/measurement.md)
    max_stalled_share: float = bounded(0.05, low=0, high=1)


@dataclass
class GateConfig:
    """Thresholds. Each field is read by a gate of harness/gates/registry.py's registry (its `keys`),
    except repeats and max_cv, which shape every measurement and its noise guard. These are the
    only defaults: conf/gate/default.yaml repeats none of them (tests/config/test_gate_defaults.py)."""

    min_output_tok_s: Dict[str, float] = bounded(factory=dict, low=0)  # arm -> floor
    max_ttft_ms: Dict[str, PercentileLimits] = field(default_factory=dict)  # arm -> {p50: ms, p99: ms}
    max_itl_ms: Dict[str, PercentileLimits] = field(default_factory=dict)  # arm -> {p50: ms, ...}
    # arm -> floor, or {all: floor, <category>: floor, ...} for prompts that carry categories
    min_accept_length: Dict[str, Any] = bounded(factory=dict, low=0)
    max_accept_length: Dict[str, float] = bounded(factory=dict, low=1)  # arm -> ceiling (e.g. a draft that must not be accepted)
    # arm -> [floor at draft position 1, position 2, ...]: the share of drafts accepted there
    min_acceptance_per_position: Dict[str, List[float]] = bounded(factory=dict, low=0, high=1)
    min_speedup: Dict[str, SpeedupGate] = field(default_factory=dict)  # arm -> {over, ratio}
    accept_length_at_least_break_even: List[str] = field(default_factory=list)  # arms
    lossless: Dict[str, LosslessGate] = field(default_factory=dict)  # arm -> {against, min_exact_match}; needs temperature 0
    min_capacity: Dict[str, CapacityGate] = field(default_factory=dict)  # arm -> {over, ratio, at_least}; specgate capacity only
    max_failed_requests: int = bounded(0, low=0, high=INT64_MAX)  # per arm: any failed request fails the run
    # per arm: the run measured the workload configured: no request generated more than its
    # max_tokens (exactly max_tokens with ignore_eos), prompts sized by a tokenizer had that length
    check_workload: bool = True
    # per arm, with workload.cancel: the server kept serving after the client cancelled requests
    # (a request sent after the first cancellation completed, none sent after one failed)
    check_serving_after_cancel: bool = True
    # the accept lengths of one window by up to three sources (the requests' own counts, the
    # server's counters, the stream) may differ by this fraction of the largest (null: not
    # compared); only where two sources or more exist
    max_accept_length_source_gap: Optional[float] = bounded(0.02, low=0, below=1, example="0.02: 2 %")
    repeats: int = bounded(1, low=1, high=MAX_REPEATS)  # run each arm's workload this many times on the same server; metrics become medians
    max_cv: float = bounded(0.05, above=0)  # a gated metric whose coefficient of variation over the repeats exceeds this is unreliable
    baseline: Optional[str] = None  # the reference run: a run dir or results.json to compare with (regression gating)
    baseline_mismatch: str = "fail"  # a reference that measured another engine/model/workload: fail | warn
    tolerance: float = bounded(0.02, low=0, below=1, example="0.02: 2 %")  # allowed regression vs the reference run when a comparison gives none
    latency_noise_floor_ms: float = bounded(0.5, low=0)  # without samples to draw an interval from: smaller latency moves are jitter
    compare: Dict[str, str] = field(default_factory=dict)  # metric -> allowed regression, e.g. output_tok_s: "3%"
    confidence: float = bounded(0.95, above=0.5, below=1, example="0.95")  # a regression fails only when it exceeds the allowed change with this confidence
    # one run against one reference run, with no between-run noise known (no noise profile, no
    # history band): a regression whose interval's better end is within this fraction is
    # inconclusive, not failed, as two runs on one machine differ by that much (docs/verdicts.md
    # "One run against one run": on the default drift model, +drift=gpu_box, 40 comparisons of
    # identical runs failed 2 times at 6 %, once at 10 %, none at 12 %)
    run_to_run_floor: float = bounded(0.12, low=0, below=1, example="0.05: 5 %")
    inconclusive: str = "warn"  # what an inconclusive comparison does: fail | warn | pass
    # an inconclusive comparison whose change is the size of a regression (worse than its allowed
    # change and than undecided_above: a machine drifts by a few % between two runs, and a short
    # A/B's rounds scatter as much, docs/verdicts.md): exit (the run ends with exit status 6, not
    # 0) | warn | fail
    undecided: str = "exit"
    undecided_above: float = bounded(0.06, low=0, below=1, example="0.06: 6 %")
    min_clock_ratio_under_load: Optional[float] = bounded(None, above=0, high=1)  # SM clock under load >= ratio x max SM clock, every GPU
    fail_on_throttle_reasons: List[str] = field(default_factory=lambda: [
        "HwSlowdown", "HwThermalSlowdown", "SwThermalSlowdown", "HwPowerBrakeSlowdown"])  # any under load fails
    min_gpu_util_under_load_pct: Optional[float] = bounded(50.0, low=0, high=100)  # below: the load did not really reach the GPU
    max_joules_per_token: Dict[str, float] = bounded(factory=dict, above=0)  # arm -> ceiling (GPU J per output token)
    # fleets and prefix caches (suites/test_fleet.py): arm -> floor on the server's prefix-cache hit rate
    min_prefix_cache_hit_rate: Dict[str, float] = bounded(factory=dict, low=0, high=1)
    min_prefix_cache_hit_rate_gain: Dict[str, HitRateGain] = field(default_factory=dict)  # arm -> {over, by}
    max_worker_imbalance: Dict[str, float] = bounded(factory=dict, low=1)  # arm -> ceiling on a fleet's requests max ÷ mean over workers
    client_bound: ClientBoundConfig = field(default_factory=ClientBoundConfig)  # is the client the bottleneck?
    allow_client_bound: bool = False  # true: a client-bound arm is a passing warning in words, not inconclusive
    fail_client_bound: bool = False  # true: a client-bound arm fails the run (the client's health as a hard gate)
    # A throughput-type verdict (tok/s floors, speedups, rates against a reference run) needs a
    # load this long to be steady; a shorter one is inconclusive (docs/verdicts.md "Runs that cannot be trusted"):
    min_load_requests: int = bounded(2, low=1, high=MAX_REQUESTS)  # completed measured requests (over the repeats); one is a stream's speed, not a load's
    min_load_s: float = bounded(1.0, low=0, high=MAX_LOAD_S)  # measured window in s (over the repeats): the client's stamps at its two ends weigh ≤ 2 %


@dataclass
class SloConfig:
    """Service-level objectives for `specgate capacity`: upper limits in ms on the latency
    metrics as harness/measure/metrics.py computes them; a metric or statistic left unset is no SLO."""

    ttft_ms: PercentileLimits = field(default_factory=PercentileLimits)
    tpot_ms: PercentileLimits = field(default_factory=PercentileLimits)
    itl_ms: PercentileLimits = field(default_factory=PercentileLimits)
    e2e_ms: PercentileLimits = field(default_factory=PercentileLimits)


CAPACITY_DIMENSIONS = ("concurrency", "request_rate")


@dataclass
class CapacityConfig:
    """How `specgate capacity` probes loads (harness/capacity/search.py): from `start`, times `growth`
    until an SLO is missed or `max` is reached, then bisection."""

    dimension: str = "concurrency"  # concurrency (closed loop) | request_rate (open loop, requests/s)
    start: float = bounded(1, above=0, high=MAX_IN_FLIGHT)  # the first probe's load
    max: float = bounded(256, above=0, high=MAX_IN_FLIGHT)  # no probe above this; a capacity that reaches it is a lower bound
    growth: float = bounded(2.0, above=1, example="2: double each probe")  # each probe up to the first miss is this many times the last
    tolerance: float = bounded(0.05, above=0, below=1)  # request_rate: bisect until the bracket is within this fraction of the load
    rounds: int = bounded(2, low=1, high=MAX_REPEATS)  # concurrency: a probe sends rounds x concurrency requests (at least workload.num_prompts)
    probe_s: float = bounded(20.0, above=0, high=MAX_LOAD_S)  # request_rate: a probe sends rate x probe_s requests (at least workload.num_prompts)
    max_in_flight: int = bounded(1024, low=1, high=MAX_IN_FLIGHT)  # request_rate: the client's cap on requests in flight (queueing belongs to the server)


@dataclass
class ABConfig:
    """How `specgate ab` measures its two sides (harness/ab/): `rounds` rounds, each one load
    per arm and side, in ABBA order (the first side turns every round) or `alternate` (A
    first); a fresh server per side and round, or both kept up for every round."""

    # a number of rounds, at least 2 (the paired change's spread comes from the rounds), or auto:
    # judge after every round from the third and stop once every verdict is decided (a
    # group-sequential test, harness/gates/change.py Sequential), at max_rounds at the latest
    rounds: Any = bounded(3, low=2, high=MAX_ROUNDS, example="3, or auto")
    max_rounds: int = bounded(10, low=3, high=MAX_ROUNDS, example="10")  # ab.rounds=auto: the last round
    order: str = "abba"  # abba | alternate
    keep_up: bool = False  # true: both sides' servers stay up for every round (they must fit on the GPUs together)


@dataclass
class CalibrateConfig:
    """`specgate calibrate` (harness/calibrate/): identical whole runs of the experiment, one after
    another, whose spread becomes a noise profile that gate.baseline can read."""

    # identical runs; at least 3. Five: the profile's interval is t(K-1, 0.95) * sqrt(1 + pi/2K) times
    # the spread: 3.60x at K=3, 2.44x at 5, 1.97x at 10, so five runs get most of ten's narrowing in half the time
    runs: int = bounded(5, low=3, high=MAX_ROUNDS, example="5")  # low: harness/gates/profile.py MIN_RUNS


@dataclass
class SpeedupThrough:
    concurrency: int = bounded(1, low=1, high=MAX_IN_FLIGHT)  # every swept point at or below this concurrency ...
    ratio: float = bounded(1.0, above=0)  # ... must reach this output tok/s ratio over the plain arm


@dataclass
class SweepGateConfig:
    """Gates on a whole sweep over concurrency, judged when it finishes (harness/gates/sweep.py, through the gate registry)."""

    min_speedup_through: Dict[str, SpeedupThrough] = field(default_factory=dict)  # arm -> {concurrency, ratio}
    crossover_at_least: Dict[str, float] = bounded(factory=dict, low=1)  # arm -> the lowest crossover concurrency


@dataclass
class RecordConfig:
    root: str = "runs"  # records go to <root>/<UTC timestamp>_<exp>/
    keep_requests: bool = True  # write the per-request files (arms/<arm>/requests.parquet, docs/record.md)
    # a steady window (harness/measure/steady.py) shorter than this share of the load is inconclusive
    steady_min_fraction: float = bounded(0.25, above=0, high=1, example="0.25: a quarter of the load")
    timeslice_s: float = bounded(1.0, low=MIN_TIMESLICE_S, high=MAX_LOAD_S)  # the width of each time slice of an arm's figures over time (harness/measure/timeslices.py)
    # environment variables (glob patterns) whose values the record and the terminal may show, beside
    # the built-in NCCL_*, CUDA_*, engine tuning ones (harness/record/secrets.py READABLE_ENV); every
    # other variable of server.env / nccl.env is a secret
    readable_env: List[str] = field(default_factory=list)


@dataclass
class SpecgateConfig:
    backend: BackendConfig = field(default_factory=BackendConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    router: RouterConfig = field(default_factory=RouterConfig)  # used when server.workers > 1
    nccl: NcclConfig = field(default_factory=NcclConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    sweep_gate: SweepGateConfig = field(default_factory=SweepGateConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    slo: SloConfig = field(default_factory=SloConfig)  # specgate capacity's objectives
    capacity: CapacityConfig = field(default_factory=CapacityConfig)  # specgate capacity's search
    ab: ABConfig = field(default_factory=ABConfig)  # specgate ab's rounds
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)  # specgate calibrate's runs
    name: str = "default"  # experiment name (set by exp/*.yaml)
    description: str = ""  # one line, shown by `specgate list`
    plain_arm: Optional[str] = None  # the plain-decoding arm for speedup / break-even
    # the speculative arms whose speedups against their accept lengths make the measured break-even
    # curve (harness/sweep/break_even.py): arms that differ only in how much they accept, sharing
    # one drafter's cost (forced lengths, or draft models of graded agreement of one shape); the
    # other speculative arms are shown against it. Empty: the arms whose acceptance is forced
    break_even_arms: List[str] = field(default_factory=list)
    arms: Dict[str, List[str]] = field(default_factory=dict)  # arm -> overrides; empty = one arm "default"
