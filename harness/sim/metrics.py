"""Prometheus metrics with SGLang's names, labels and buckets, on a private registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
# SGLang's per-stage and KV-transfer histograms (prefill/decode disaggregation, harness/sim/disagg.py)
STAGE_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100]
KV_TRANSFER_MS_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]
ITL_BUCKETS = [
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
]


class SimMetrics:
    """Scheduler gauges (labelled per TP rank 0 like SGLang) and tokenizer-side counters."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Scheduler labels: SGLang's SchedulerMetricsCollector labels.
        sched = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        sl = list(sched)
        self.num_running_reqs = Gauge("sglang:num_running_reqs", "The number of running requests.", sl, registry=r).labels(**sched)
        self.num_queue_reqs = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sl, registry=r).labels(**sched)
        self.gen_throughput = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", sl, registry=r).labels(**sched)
        self.spec_accept_length = Gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            sl, registry=r,
        ).labels(**sched)
        self.spec_accept_rate = Gauge(
            "sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).", sl, registry=r
        ).labels(**sched)
        self.cache_hit_rate = Gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", sl, registry=r).labels(**sched)
        self.token_usage = Gauge("sglang:token_usage", "The token usage.", sl, registry=r).labels(**sched)
        # Prefill/decode disaggregation: each stage of a split request, SGLang's RequestStage names
        self.per_stage = Histogram("sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.",
                                   sl + ["stage"], buckets=STAGE_BUCKETS, registry=r)
        self.sched_labels = sched
        self.kv_transfer_latency = Histogram("sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.",
                                             sl, buckets=KV_TRANSFER_MS_BUCKETS, registry=r).labels(**sched)
        self.bootstrap_failed_total = Counter("sglang:num_bootstrap_failed_reqs", "The number of bootstrap failed requests.",
                                              sl, registry=r).labels(**sched)
        self.transfer_failed_total = Counter("sglang:num_transfer_failed_reqs", "The number of transfer failed requests.",
                                             sl, registry=r).labels(**sched)
        # Tokenizer labels: SGLang's TokenizerMetricsCollector labels (+ is_streaming).
        self.tok_labels = {"model_name": model_name, "engine_type": "unified"}
        tl = list(self.tok_labels)
        self.prompt_tokens_total = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", tl + ["is_streaming"], registry=r)
        self.generation_tokens_total = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", tl + ["is_streaming"], registry=r
        )
        # Incremented only by a request that hit, as SGLang's observe_one_finished_request: absent until the first hit.
        self.cached_tokens_total = Counter("sglang:cached_tokens", "Number of cached prompt tokens.", tl + ["is_streaming"],
                                           registry=r)
        self.num_requests_total = Counter("sglang:num_requests", "Number of requests processed.", tl + ["is_streaming"], registry=r)
        self.spec_verify_calls_total = Counter(
            "sglang:spec_verify_calls", "Number of speculative decoding verification calls.", tl, registry=r
        ).labels(**self.tok_labels)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            tl + ["is_streaming"], buckets=TTFT_BUCKETS, registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            tl, buckets=ITL_BUCKETS, registry=r,
        ).labels(**self.tok_labels)
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
            tl + ["is_streaming"], buckets=E2E_BUCKETS, registry=r,
        )

    def _stream_labels(self, is_streaming: bool) -> dict:
        return {**self.tok_labels, "is_streaming": "true" if is_streaming else "false"}

    def observe_first_token(self, ttft_s: float, is_streaming: bool) -> None:
        self.ttft.labels(**self._stream_labels(is_streaming)).observe(ttft_s)

    def observe_inter_token_latency(self, interval_s: float, num_new_tokens: int) -> None:
        """One output of a request that brought `num_new_tokens` tokens `interval_s` after its
        previous one, as SGLang's TokenizerMetricsCollector.observe_inter_token_latency records
        it: the histogram's sum grows by the whole interval, its count by the number of
        tokens, each counted in the bucket of interval / tokens. Over a window, sum ÷ count is
        then the decode time per token (under speculation one output holds several tokens),
        not the mean gap between outputs. SGLang adds to the buckets directly (a private
        fast path); observing interval / n, n times, gives the same sum, count and buckets."""
        if num_new_tokens <= 0:
            return
        per_token = interval_s / num_new_tokens
        for _ in range(num_new_tokens):
            self.itl.observe(per_token)

    def observe_finished(self, prompt_tokens: int, completion_tokens: int, e2e_s: float, verify_ct: int, is_streaming: bool,
                         cached_tokens: int = 0) -> None:
        labels = self._stream_labels(is_streaming)
        self.prompt_tokens_total.labels(**labels).inc(prompt_tokens)
        if cached_tokens > 0:
            self.cached_tokens_total.labels(**labels).inc(cached_tokens)
        self.generation_tokens_total.labels(**labels).inc(completion_tokens)
        self.num_requests_total.labels(**labels).inc()
        self.e2e.labels(**labels).observe(e2e_s)
        if verify_ct > 0:
            self.spec_verify_calls_total.inc(verify_ct)

    def stage(self, stage: str, seconds: float) -> None:
        """One request's time in one stage of a split request (SGLang's observe_per_stage_req_latency)."""
        self.per_stage.labels(**self.sched_labels, stage=stage).observe(max(0.0, seconds))

    def kv_transfer(self, seconds: float) -> None:
        self.kv_transfer_latency.observe(seconds * 1000.0)

    def bootstrap_failed(self) -> None:
        self.bootstrap_failed_total.inc()

    def transfer_failed(self) -> None:
        self.transfer_failed_total.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
