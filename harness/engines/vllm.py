"""vLLM (`python -m vllm.entrypoints.openai.api_server`): speculative decoding configured
by one JSON `--speculative-config`, reported as cumulative /metrics counters and, when the
server runs with `--per-request-spec-decode-metrics summary|detailed` (vLLM 0.32), per
request on a stream's final usage chunk (`metrics.speculative_decoding`)."""

from __future__ import annotations

import json
from typing import Any

from harness.config.engine_options import VLLMOptions
from harness.config.schema import DrafterConfig, SpecgateConfig
from harness.engines.base import (ITL_PER_STEP, METRICS_WINDOW, CounterWindow, EngineConfigError, PrometheusNames,
                                  PythonEngine)

# docker's default /dev/shm is 64 MB; 1 GB is what vLLM's CPU build was seen working with
DEFAULT_SHM_SIZE = "1g"
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
PER_REQUEST_LEVELS = ("summary", "detailed", "none")  # none: vLLM's default, no per-request stats
ONE_PLUS_ACCEPTED = ("the server's counters: 1 + Δ accepted draft tokens ÷ Δ drafts over the /metrics window "
                     "(the target's own token per draft step; no prefill token)")


# A drafter config names its algorithm as SGLang spells it (--speculative-algorithm), so one
# file serves both engines; vLLM's --speculative-config "method" for each. vLLM's own
# spellings (e.g. draft_model) are taken as they are.
VLLM_METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NGRAM": "ngram", "STANDALONE": "draft_model", "MTP": "mtp"}


SYNTHETIC = "synthetic"  # rejection_sample_method: drafts accepted at set rates (benchmark only)
CPU_HAS_NO_SYNTHETIC = ("vLLM's CPU build has no synthetic (forced) acceptance: its sampler asserts 'Synthetic "
                        "acceptance not supported with CPU sampling' at the first request; sweep draft models of "
                        "graded agreement instead (docs/forced-acceptance.md)")


def vllm_method(algorithm: str) -> str:
    return VLLM_METHODS.get(str(algorithm).upper(), str(algorithm))


def speculative_config(drafter: DrafterConfig) -> dict:
    """vLLM's --speculative-config from a drafter config: method, num_speculative_tokens =
    num_steps (a chain of that many drafted tokens per step), the model when there is one,
    then the drafter's vllm_speculative_config keys (e.g. prompt_lookup_max for ngram)."""
    config = {"method": vllm_method(drafter.algorithm), "num_speculative_tokens": int(drafter.num_steps)}
    if drafter.model_path:
        config["model"] = drafter.model_path
    config.update(drafter.vllm_speculative_config)
    config.update(synthetic_acceptance(drafter))
    return config


def synthetic_acceptance(drafter: DrafterConfig) -> dict:
    """drafter.forced_accept_length/_rates as vLLM's synthetic rejection sampling (0.32,
    config/speculative.py): drafts accepted at the rates set, whatever they are."""
    if drafter.forced_accept_length is not None:
        return {"rejection_sample_method": SYNTHETIC, "synthetic_acceptance_length": float(drafter.forced_accept_length)}
    if drafter.forced_accept_rates is not None:
        return {"rejection_sample_method": SYNTHETIC,
                "synthetic_acceptance_rates": [float(r) for r in drafter.forced_accept_rates]}
    return {}


def hand_set_speculative_configs(cfg: SpecgateConfig) -> list[dict]:
    """The --speculative-config JSON objects a config sets by hand: the drafter's
    vllm_speculative_config, and any --speculative-config in server.extra_args."""
    found = [dict(cfg.drafter.vllm_speculative_config)]
    extra = [str(a) for a in cfg.server.extra_args]
    for index, arg in enumerate(extra):
        text = arg.split("=", 1)[1] if arg.startswith("--speculative-config=") else (
            extra[index + 1] if arg == "--speculative-config" and index + 1 < len(extra) else None)
        try:
            value = json.loads(text) if text is not None else None
        except ValueError:
            value = None
        if isinstance(value, dict):
            found.append(value)
    return found


class VLLM(PythonEngine):
    name = "vllm"
    # the `vllm` CLI looks its package up by name, which the CPU build's package is not
    module = "vllm.entrypoints.openai.api_server"
    options = VLLMOptions
    apis = ("chat", "completions")
    health_paths = ("/health",)
    spec_stats = METRICS_WINDOW
    # v1 IterationStats.update_from_output: TTFT from the request's arrival at the engine
    # (after the API server applied the chat template and tokenized) to its first output;
    # then one inter-token latency per engine step of a request, the whole step however
    # many tokens it yielded.
    readable_env = ("VLLM_*",)  # its tuning knobs may show (a secret-named one, an API key, never does)
    # vllm/engine/arg_utils.py: the launch flags specgate writes and the tuning flags users add
    readable_flags = ("--model", "--tokenizer", "--tokenizer-mode", "--host", "--port", "--served-model-name",
                      "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size",
                      "-dp", "--dtype", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
                      "--gpu-memory-utilization", "--speculative-config", "--enforce-eager", "--enable-*",
                      "--disable-*", "--no-enable-*", "--trust-remote-code", "--kv-cache-dtype", "--block-size",
                      "--swap-space", "--quantization", "--load-format", "--seed", "--compilation-config", "-O*",
                      "--attention-backend", "--kv-transfer-config", "--hf-overrides", "--generation-config",
                      "--revision", "--chat-template", "--max-logprobs", "--uvicorn-log-level", "--api-server-count",
                      "--per-request-spec-decode-metrics", "--distributed-executor-backend")
    # speculative, compilation and KV-transfer configs' keys, and the model shape of --hf-overrides
    readable_json_keys = ("method", "model", "rejection_sample_method", "quantization", "revision",
                          "draft_tensor_parallel_size", "level", "mode", "cudagraph_mode", "backend", "kv_connector",
                          "kv_role", "kv_buffer_device", "architectures", "model_type")
    prometheus = PrometheusNames(ttft_histogram="vllm:time_to_first_token_seconds",
                                 itl_histogram="vllm:inter_token_latency_seconds",
                                 itl_observed_per=ITL_PER_STEP,
                                 spec_prefix="vllm:spec_decode_",
                                 # v1 IterationStats.update_from_output: += each output's new token
                                 # ids, the prefill's first token included (a request's completion tokens)
                                 generation_tokens="vllm:generation_tokens_total",
                                 # v1 PrometheusStatLogger: prompt tokens looked up in the prefix
                                 # cache and those found there, as each request is scheduled
                                 prefix_cache_queries="vllm:prefix_cache_queries_total",
                                 prefix_cache_hits="vllm:prefix_cache_hits_total",
                                 # v1 PrometheusStatLogger: per finished request, by finish reason
                                 requests_finished="vllm:request_success_total")
    # entrypoints/serve/dev/cache/api_router.py: {"success": bool}; registered only when the
    # server runs with VLLM_SERVER_DEV_MODE=1 (it then serves other dev routes too)
    prefix_cache_reset_route = "/reset_prefix_cache"
    version_routes = ("/version",)
    tokenize_route = "/tokenize"  # entrypoints/serve/tokenize: {"model", "prompt", "add_special_tokens": true}

    def args(self, cfg: SpecgateConfig, port: int, host: str) -> list[str]:
        server, drafter = cfg.server, cfg.drafter
        args = ["--model", server.model_path, "--host", host, "--port", str(port),
                "--tensor-parallel-size", str(server.tp_size)]
        if server.served_model_name:
            args += ["--served-model-name", server.served_model_name]
        own = server.vllm or VLLMOptions()
        for flag, value in (("--dtype", own.dtype), ("--max-model-len", own.max_model_len),
                            ("--max-num-seqs", own.max_num_seqs)):
            if value is not None:
                args += [flag, str(value)]
        if drafter.algorithm:
            args += ["--speculative-config", json.dumps(speculative_config(drafter))]
            if own.per_request_spec_metrics is not None:
                args += [PER_REQUEST_FLAG, own.per_request_spec_metrics]
        return args + [str(a) for a in server.extra_args]

    def check(self, cfg: SpecgateConfig) -> None:
        """Besides the base checks: vLLM drafts a chain (one candidate per step), so a drafter
        written for SGLang's tree (eagle_topk > 1) or with num_draft_tokens other than
        num_steps + 1 would be served as something else than it says."""
        super().check(cfg)
        drafter = cfg.drafter
        level = (cfg.server.vllm or VLLMOptions()).per_request_spec_metrics
        if level is not None and level not in PER_REQUEST_LEVELS:
            raise EngineConfigError(f"server.vllm.per_request_spec_metrics={level} is not one of vLLM's levels: "
                                    f"{', '.join(PER_REQUEST_LEVELS)}")
        if not drafter.algorithm and any(str(a).split("=", 1)[0] == PER_REQUEST_FLAG for a in cfg.server.extra_args):
            raise EngineConfigError(f"{PER_REQUEST_FLAG} in server.extra_args reaches a plain arm, which vLLM refuses "
                                    f"without --speculative-config; set server.vllm.per_request_spec_metrics instead "
                                    f"(given to speculative arms only)")
        if not drafter.algorithm:
            return
        if drafter.eagle_topk is not None and int(drafter.eagle_topk) != 1:
            raise EngineConfigError(f"drafter '{drafter.name}' sets eagle_topk={drafter.eagle_topk}, a draft tree; "
                                    "vLLM drafts a chain (eagle_topk 1)")
        if drafter.num_draft_tokens is not None and int(drafter.num_draft_tokens) != int(drafter.num_steps) + 1:
            raise EngineConfigError(f"drafter '{drafter.name}' sets num_draft_tokens={drafter.num_draft_tokens} with "
                                    f"num_steps={drafter.num_steps}; vLLM's chain verifies num_steps + 1 = "
                                    f"{int(drafter.num_steps) + 1} tokens per step")

    def forced_by_hand(self, cfg: SpecgateConfig) -> str | None:
        """rejection_sample_method: synthetic in a --speculative-config set by hand."""
        if any(c.get("rejection_sample_method") == SYNTHETIC for c in hand_set_speculative_configs(cfg)):
            return "rejection_sample_method=synthetic in vLLM's --speculative-config"
        return None

    def forced_unsupported(self, cfg: SpecgateConfig) -> str | None:
        return CPU_HAS_NO_SYNTHETIC if cfg.build.device == "cpu" else None

    def shm_size(self, cfg: SpecgateConfig) -> str | None:
        return DEFAULT_SHM_SIZE

    def min_processes(self, cfg: SpecgateConfig) -> int:
        # the API server and its engine core (whose worker runs inside it with tp 1 and
        # VLLM_ENABLE_V1_MULTIPROCESSING=0, in a process of its own otherwise); with tp > 1 one
        # worker per rank besides
        tp = cfg.server.tp_size
        return 2 + (tp if tp > 1 else 0)

    def prefix_cache_reset_unavailable(self, cfg: SpecgateConfig) -> str | None:
        """vLLM serves /reset_prefix_cache only in dev mode; a server specgate starts has it
        when server.env sets VLLM_SERVER_DEV_MODE=1 (an attached one is asked: a 404 says)."""
        if cfg.backend.kind != "attach" and str(self.environment(cfg).get("VLLM_SERVER_DEV_MODE", "")) != "1":
            return ("vLLM serves POST /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 "
                    "(set server.env.VLLM_SERVER_DEV_MODE=1 to reset its prefix cache between loads)")
        return None

    def prefix_cache_reset_failure(self, status: int, body: str) -> str | None:
        if status == 404:
            return "HTTP 404: this vLLM serves no /reset_prefix_cache (it needs VLLM_SERVER_DEV_MODE=1)"
        if not 200 <= status < 300:
            return super().prefix_cache_reset_failure(status, body)
        try:
            success = json.loads(body).get("success")
        except (ValueError, AttributeError):
            return f"its answer is not the JSON {{\"success\": ...}} vLLM gives: {body.strip()[:120]}"
        return None if success is True else "vLLM answered success=false (blocks still held by running requests)"

    def spec_details(self, event: dict) -> dict | None:
        """vLLM 0.32's per-request speculative stats (entrypoints/.../serving.py: the final usage
        chunk's ``metrics.speculative_decoding``, RequestSpecDecodeMetrics.to_dict; sent only
        under --per-request-spec-decode-metrics, with stream_options.include_usage, for n = 1):
        its verify steps (``num_spec_steps``), the drafts they accepted
        (``num_accepted_draft_tokens``), ``acceptance_histogram`` (index j: steps that accepted
        exactly j drafts) and ``mean_acceptance_length`` (1 + accepted ÷ steps). The line's
        accept length is then vLLM's own: 1 + Σ accepted ÷ Σ steps, no prefill token, the same
        count as its /metrics counters (window_spec_stats)."""
        metrics = event.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if not isinstance(spec, dict):
            return None
        steps, accepted = spec.get("num_spec_steps"), spec.get("num_accepted_draft_tokens")
        if not (type(steps) is int and type(accepted) is int and 0 <= accepted):
            return None
        return {"spec_verify_ct": steps, "spec_accepted_drafts": accepted,
                "spec_accept_length": spec.get("mean_acceptance_length"),
                "spec_correct_drafts_histogram": spec.get("acceptance_histogram")}

    def window_spec_stats(self, counters: CounterWindow) -> dict[str, Any]:
        """1 + Δ accepted draft tokens ÷ Δ drafts: per draft step, its accepted tokens plus
        the one the target samples itself (no prefill token); with the acceptance rate and
        the acceptance per draft position. Nothing when no draft ran in the window."""
        spec = self.prometheus.spec_prefix
        drafts = counters.delta(spec + "num_drafts_total")
        if not drafts:
            return {}
        accepted = counters.delta(spec + "num_accepted_tokens_total")
        proposed = counters.delta(spec + "num_draft_tokens_total")
        return dict(
            spec_drafts=drafts, spec_draft_tokens=proposed, spec_accepted_tokens=accepted,
            accept_length=1.0 + (accepted or 0.0) / drafts,
            accept_length_definition=ONE_PLUS_ACCEPTED,
            acceptance_rate=(accepted / proposed) if proposed else None,
            acceptance_per_position=[accepted_there / drafts for accepted_there in counters.per_position()],
        )

    def schedule_form(self, drafter: DrafterConfig, ranges: list[tuple[int, int, int]]) -> dict[str, Any]:
        """vLLM 0.32's dynamic speculative decoding (config/speculative.py,
        v1/spec_decode/dynamic/utils.py): `num_speculative_tokens_per_batch_size`, a list of
        [first, last, k] inclusive batch-size ranges, the first from 1, sorted, not
        overlapping, k >= 0 (0: no drafts at that batch size); each k is capped at
        `num_speculative_tokens`, so that is the largest k. Also as specgate overrides, to
        serve it back in an experiment."""
        top = max(k for _, _, k in ranges)
        if top == 0:
            return {"engine": self.name, "args": [], "overrides": ["drafter=none"],
                    "note": "plain decoding wins at every batch size swept: serve without --speculative-config"}
        table = [[first, last, k] for first, last, k in ranges]
        config = {**speculative_config(drafter), "num_speculative_tokens": top,
                  "num_speculative_tokens_per_batch_size": table}
        overrides = [f"drafter.num_steps={top}",
                     f"++drafter.vllm_speculative_config.num_speculative_tokens_per_batch_size={json.dumps(table).replace(' ', '')}"]
        return {"engine": self.name, "speculative_config": config,
                "args": ["--speculative-config", json.dumps(config)], "overrides": overrides,
                "note": (f"vLLM's --speculative-config with num_speculative_tokens_per_batch_size (vLLM 0.32): the "
                         f"k of a step is looked up by its number of running requests; past {ranges[-1][1]} the "
                         f"last k is carried on; with data parallelism vLLM ignores the table and drafts "
                         f"num_speculative_tokens={top} always")}

    def served_k(self, cfg: dict[str, Any], concurrency: int, scheduled_k: int | None) -> tuple[int, str]:
        """A per-batch-size table's k at ``concurrency`` (past its last range vLLM carries the last k on)."""
        drafter = cfg.get("drafter") or {}
        table = (drafter.get("vllm_speculative_config") or {}).get("num_speculative_tokens_per_batch_size")
        if not table:
            return super().served_k(cfg, concurrency, scheduled_k)
        for first, last, k in table:
            if first <= concurrency <= last:
                return int(k), "per-batch-size table"
        return int(table[-1][2]), "per-batch-size table"

    def bad_request_message(self, body: Any) -> str:
        """The validation text inside {"error": {...}}."""
        error = body["error"]
        assert (error["type"], error["code"]) == ("Bad Request", 400), body
        return error["message"]
