"""SGLang (`python -m sglang.launch_server`): per-request speculative statistics, the
native /generate route, an OpenAI error object at the top level of its 400s."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from harness.config.schema import DrafterConfig, SpecgateConfig
from harness.engines.base import ITL_PER_TOKEN, PER_REQUEST, CounterWindow, PrometheusNames, PythonEngine

if TYPE_CHECKING:
    from harness.http_client import ServerClient

TOKENS_PER_VERIFY = ("the server's counters: Δ generation tokens ÷ Δ verify calls over the /metrics window "
                     "(every finished request's completion tokens, its first, prefill-produced token included, "
                     "over its verify cycles)")


# SGLang's simulated acceptance (srt/environ.py; srt/speculative/eagle_utils.py
# _generate_simulated_accept_index): a mean accept length per verify step, > 0 to turn it on,
# and how each step's length is drawn ("multinomial", its default, misses the mean near the
# ends; "match-expected" draws the two lengths around it so the mean is the one asked)
SIMULATE_ACC_LEN, SIMULATE_ACC_METHOD = "SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_METHOD"
MATCH_EXPECTED = "match-expected"

# what SGLang's adaptive speculative decoding serves (adaptive_unsupported_reason, 0.5.23)
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
ADAPTIVE_CONFIG_FILE = "sglang_adaptive.json"  # written beside schedule.json


class SGLang(PythonEngine):
    name = "sglang"
    module = "sglang.launch_server"
    apis = ("chat", "completions", "generate")
    health_paths = ("/health", "/health_generate")
    spec_stats = PER_REQUEST
    # TokenizerManager.collect_metrics, per output of a request: TTFT from when the request
    # was received (before tokenizing it) to its first output; then for each output with n
    # new tokens, TokenizerMetricsCollector.observe_inter_token_latency(interval, n) adds
    # the interval to the sum and n to the count (srt/metrics/collector.py, 0.5.x).
    readable_env = ("SGLANG_*",)  # its tuning knobs may show (a secret-named one, an API key, never does)
    # srt/server_args.py: the launch flags specgate writes and the tuning flags users add
    readable_flags = ("--model-path", "--tokenizer-path", "--tokenizer-mode", "--host", "--port", "--served-model-name",
                      "--tp-size", "--dp-size", "--pp-size", "--ep-size", "--nnodes", "--node-rank", "--dist-init-addr",
                      "--nccl-port", "--speculative-*", "--mem-fraction-static", "--trust-remote-code",
                      "--context-length", "--chunked-prefill-size", "--max-running-requests", "--max-total-tokens",
                      "--max-prefill-tokens", "--cuda-graph-*", "--disable-*", "--enable-*", "--attention-backend",
                      "--sampling-backend", "--page-size", "--schedule-policy", "--schedule-conservativeness",
                      "--dtype", "--kv-cache-dtype", "--quantization", "--load-format", "--log-level", "--random-seed",
                      "--stream-interval", "--moe-*", "--decode-log-interval", "--watchdog-timeout",
                      "--torch-compile-max-bs", "--grammar-backend", "--reasoning-parser", "--tool-call-parser",
                      "--chat-template", "--revision", "--device", "--base-gpu-id", "--skip-server-warmup",
                      "--show-time-cost", "--json-model-override-args", "--radix-eviction-policy")
    readable_json_keys = ("architectures", "model_type", "rope_scaling", "type", "rope_type")
    prometheus = PrometheusNames(ttft_histogram="sglang:time_to_first_token_seconds",
                                 itl_histogram="sglang:inter_token_latency_seconds",
                                 itl_observed_per=ITL_PER_TOKEN,
                                 # TokenizerMetricsCollector.observe_one_finished_request: += the
                                 # request's completion_tokens (the prefill token included) and its
                                 # spec_verify_ct; releases before the latter existed give no window
                                 # accept length (the source gate then skips, saying so)
                                 generation_tokens="sglang:generation_tokens_total",
                                 spec_verify_calls="sglang:spec_verify_calls_total",
                                 # observe_one_finished_request, per finished request: its prompt
                                 # tokens, and its cached ones (counted only when > 0: the counter is
                                 # absent until the first hit)
                                 prefix_cache_queries="sglang:prompt_tokens_total",
                                 prefix_cache_hits="sglang:cached_tokens_total",
                                 requests_finished="sglang:num_requests_total",
                                 # SchedulerMetricsCollector.observe_per_stage_req_latency (RequestStage names)
                                 stage_histogram="sglang:per_stage_req_latency_seconds")
    # http_server.py flush_cache (GET or POST): 200 "Cache flushed..." or 400 while requests
    # run; it also resets the scheduler's speculative totals (Scheduler.reset_metrics)
    prefix_cache_reset_route = "/flush_cache"
    version_routes = ("/get_server_info",)
    served_model_fallback = "/get_model_info"
    drafter_keys = ("num_steps", "eagle_topk", "num_draft_tokens")
    # srt/entrypoints/openai/protocol.py TokenizeRequest {model, prompt, add_special_tokens}
    # -> {tokens, count, max_model_len}, vLLM's shape; in recent 0.5.x, not checked against
    # every release: an older server's 404 stops the arm in one sentence
    tokenize_route = "/tokenize"

    def args(self, cfg: SpecgateConfig, port: int, host: str) -> list[str]:
        server, drafter = cfg.server, cfg.drafter
        args = ["--model-path", server.model_path, "--tp-size", str(server.tp_size),
                "--host", host, "--port", str(port)]
        if server.served_model_name:
            args += ["--served-model-name", server.served_model_name]
        if drafter.algorithm:
            args += ["--speculative-algorithm", drafter.algorithm]
            if drafter.model_path:
                args += ["--speculative-draft-model-path", drafter.model_path]
            args += ["--speculative-num-steps", str(drafter.num_steps),
                     "--speculative-eagle-topk", str(drafter.eagle_topk),
                     "--speculative-num-draft-tokens", str(drafter.num_draft_tokens)]
        return args + [str(a) for a in server.extra_args]

    def environment(self, cfg: SpecgateConfig) -> dict[str, str]:
        """drafter.forced_accept_length as SGLang's own simulated acceptance (env, read by
        srt/speculative: each verify step accepts a length drawn for the whole batch), by the
        method whose mean is the length asked, unless server.env names another."""
        env = super().environment(cfg)
        length = cfg.drafter.forced_accept_length
        if cfg.drafter.algorithm and length is not None:
            env[SIMULATE_ACC_LEN] = f"{float(length):g}"
            env.setdefault(SIMULATE_ACC_METHOD, MATCH_EXPECTED)
        return env

    def forced_by_hand(self, cfg: SpecgateConfig) -> str | None:
        """SGLANG_SIMULATE_ACC_LEN set in server.env (or the NCCL preset's env), or inherited from
        specgate's own environment by a server it starts as a process: active above 0."""
        configured = PythonEngine.environment(self, cfg)
        if SIMULATE_ACC_LEN in configured:
            where, value = "server.env.", configured[SIMULATE_ACC_LEN]
        elif cfg.backend.kind == "process" and SIMULATE_ACC_LEN in os.environ:
            where, value = "specgate's environment (backend=process passes it on): ", os.environ[SIMULATE_ACC_LEN]
        else:
            return None
        try:
            return f"{where}{SIMULATE_ACC_LEN}={value}" if float(value) > 0 else None
        except ValueError:
            return f"{where}{SIMULATE_ACC_LEN}={value}"  # SGLang refuses it at start; never judged as quality

    def forced_unsupported(self, cfg: SpecgateConfig) -> str | None:
        if cfg.drafter.forced_accept_rates is not None:
            return (f"{self.name} forces acceptance by a mean length only ({SIMULATE_ACC_LEN}), not per draft "
                    f"position: use drafter.forced_accept_length")
        return None

    def min_processes(self, cfg: SpecgateConfig) -> int:
        return cfg.server.tp_size + 1  # the server, one scheduler per TP rank (and a detokenizer)

    def node_args(self, nnodes: int, rank: int, init_address: str) -> list[str] | None:
        """server_args.py: every node the same launch but its rank; node 0 serves HTTP, the
        others their TP ranks and a health server (launch_dummy_health_check_server)."""
        return ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", init_address]

    def disaggregation_args(self, mode: str, bootstrap_port: int, transfer_backend: str) -> list[str] | None:
        """server_args.py's disaggregation flags: the prefill worker serves its bootstrap (the
        decode side's handshake) on its own port; the router is told that port."""
        flags = ["--disaggregation-mode", mode, "--disaggregation-transfer-backend", transfer_backend]
        return flags + (["--disaggregation-bootstrap-port", str(bootstrap_port)] if mode == "prefill" else [])

    def request_extras(self, api: str) -> dict[str, Any]:
        """Per-request speculative details come on OpenAI routes only when asked for."""
        return {"return_spec_tokens_details": True} if api in ("chat", "completions") else {}

    def output_details(self, api: str, top_logprobs: int) -> dict[str, Any]:
        """/generate streams output_ids anyway; its logprobs come in meta_info when asked
        for, with each token's text when return_text_in_logprobs."""
        if api != "generate":
            return super().output_details(api, top_logprobs)
        if not top_logprobs:
            return {}
        return {"return_logprob": True, "top_logprobs_num": top_logprobs, "return_text_in_logprobs": True}

    def spec_details(self, event: dict) -> dict | None:
        """``sglext.spec_tokens_details`` (a dict, or a list with one per choice)."""
        extension = event.get("sglext")
        if not extension:
            return None
        details = extension.get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        if not isinstance(details, dict):
            return None
        return {"spec_verify_ct": details.get("spec_verify_ct"), "spec_accept_length": details.get("spec_accept_length"),
                "spec_correct_drafts_histogram": details.get("spec_correct_drafts_histogram")}

    def window_spec_stats(self, counters: CounterWindow) -> dict[str, Any]:
        """Δ generation tokens ÷ Δ verify calls. Both grow when a request finishes, by its
        completion tokens (the first, prefill-produced token included) and its verify cycles;
        each cycle's bonus token is in the tokens. This is the per-request figure's definition,
        so over the same requests the two are equal. Nothing when the counters are missing
        (releases before spec_verify_calls) or no request was verified (a plain arm)."""
        names = self.prometheus
        if not (names.generation_tokens and names.spec_verify_calls):
            return {}
        tokens, verify = counters.delta(names.generation_tokens), counters.delta(names.spec_verify_calls)
        if tokens is None or not verify:
            return {}
        return {"generation_tokens": tokens, "spec_verify_calls": verify, "accept_length": tokens / verify,
                "accept_length_definition": TOKENS_PER_VERIFY}

    def server_accept_length(self, client: "ServerClient") -> float | None:
        """/get_server_info's internal_states[0].avg_spec_accept_length: cumulative over the
        server's life (warm-up and earlier runs included), so only a labelled fallback."""
        from harness.http_client import ClientError

        try:
            info = client.get_json("/get_server_info")
        except ClientError:
            return None
        states = info.get("internal_states") if isinstance(info, dict) else None
        if not states or not isinstance(states[0], dict):
            return None
        try:
            value = states[0].get("avg_spec_accept_length")
            return float(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    def served_k(self, cfg: dict[str, Any], concurrency: int, scheduled_k: int | None) -> tuple[int, str]:
        """An adaptive server (--speculative-adaptive, what schedule_form writes) drafts the
        schedule's k there; any other its static num_steps."""
        args = [str(a) for a in (cfg.get("server") or {}).get("extra_args") or []]
        if "--speculative-adaptive" in args and scheduled_k is not None:
            return int(scheduled_k), "adaptive"
        return super().served_k(cfg, concurrency, scheduled_k)

    def schedule_form(self, drafter: DrafterConfig, ranges: list[tuple[int, int, int]]) -> dict[str, Any]:
        """SGLang 0.5.23 (read from its source, srt/speculative/adaptive_spec_params.py; not run
        here): for EAGLE and EAGLE3 with a chain (topk 1), `--speculative-adaptive` with a JSON
        `--speculative-adaptive-config` of batch-size tiers ({"<lowest batch>": {"candidate_steps":
        [k]}}; one candidate per tier pins its k, 0 drafts nothing); a batch goes to the tier
        with the largest key at or below its size. Any other algorithm has one k per server:
        one server per range."""
        top = max(k for _, _, k in ranges)
        algorithm = str(drafter.algorithm).upper()
        if top == 0:
            return {"engine": self.name, "args": [],
                    "note": "plain decoding wins at every batch size swept: serve without --speculative-algorithm"}
        if algorithm in ADAPTIVE_ALGORITHMS and int(drafter.eagle_topk or 1) == 1:
            tiers = {str(first): {"candidate_steps": [k]} for first, _, k in ranges}
            return {"engine": self.name, "files": {ADAPTIVE_CONFIG_FILE: tiers},
                    "args": [*self.speculative_args(drafter, top), "--speculative-adaptive",
                             "--speculative-adaptive-config", ADAPTIVE_CONFIG_FILE],
                    "note": (f"SGLang's adaptive speculative decoding (0.5.23) with one candidate per batch-size "
                             f"tier, {ADAPTIVE_CONFIG_FILE} written beside this schedule. A batch is first padded to "
                             f"the next CUDA-graph batch size, so a tier boundary moves up to one. SGLang turns "
                             f"adaptive off (and drafts num_steps={top} always) with attention DP, two-batch "
                             f"overlap, multi-layer EAGLE or PD multiplexing")}
        servers = [{"first": first, "last": last, "k": k,
                    "args": [*self.speculative_args(drafter, k), "--max-running-requests", str(last)] if k else
                    ["--max-running-requests", str(last)]} for first, last, k in ranges]
        return {"engine": self.name, "servers": servers, "args": [],
                "note": (f"SGLang takes one k per server for {algorithm} (its adaptive mode is EAGLE/EAGLE3 with "
                         f"topk 1 only): run one server per batch-size range and route by load")}

    def speculative_args(self, drafter: DrafterConfig, k: int) -> list[str]:
        """The drafter's flags with k draft steps, a chain verifying k + 1 tokens."""
        args = ["--speculative-algorithm", str(drafter.algorithm)]
        if drafter.model_path:
            args += ["--speculative-draft-model-path", str(drafter.model_path)]
        return args + ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", str(k + 1)]

    def bad_request_message(self, body: Any) -> str:
        """An OpenAI-style error object at the top level."""
        assert (body["object"], body["type"], body["code"]) == ("error", "Bad Request", 400), body
        return body["message"]
