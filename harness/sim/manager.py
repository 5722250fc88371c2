"""The main process's side of the engine (SGLang's TokenizerManager role).

It launches the scheduler, detokenizer and TP worker processes, sends requests to
the scheduler, and dispatches each step's batched output message to per-request
states from a reader thread via ``loop.call_soon_threadsafe`` (one hop per step,
not per token).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

from harness.sim.detokenizer import detokenizer_main
from harness.sim.gpu import SimGpuModel
from harness.sim.metrics import SimMetrics
from harness.sim.model import SimModel
from harness.sim.prefix_cache import page_hashes
from harness.sim.nodes import Rendezvous, local_ranks, scrubs_workers
from harness.sim.procs import scrubbed_environ, spawn, stop_all
from harness.sim.scheduler import scheduler_main, tp_worker_main
from harness.sim.tokens import OutputPlan

logger = logging.getLogger("harness.sim")


@dataclass
class ReqState:
    rid: str
    key: int
    prompt_tokens: int
    stream: bool
    log_metrics: bool
    t_start: float = field(default_factory=time.perf_counter)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    pending: list = field(default_factory=list)  # [(text, ids, finish)]
    completion_tokens: int = 0
    finish: dict | None = None
    spec: tuple | None = None
    e2e_latency: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    cached_tokens: int = 0  # its prompt's tokens the prefix cache held (set when its prefill runs)
    first_stage: str | None = None  # a split request's stage that ends with its first token (disagg.py)
    prefill_started: float | None = None  # when the prefill step that took it in began (perf_counter)
    t_submitted: float = field(default_factory=time.perf_counter)


@dataclass
class Update:
    """What one await of ``ReqState`` yields: all text since the previous await."""

    text: str
    ids: list[int]
    finish: dict | None


class EngineClient:
    def __init__(self, ns: argparse.Namespace, model: SimModel, metrics: SimMetrics):
        self.ns = ns
        self.model = model
        self.metrics = metrics
        self.procs: list[mp.process.BaseProcess] = []
        self.states: dict[int, ReqState] = {}
        self._keys = itertools.count(1)
        self.ready = False
        self.scheduler_pid: int | None = None
        self.num_running = 0
        self.num_queue = 0
        self.verify_ct_total = 0
        self.verify_tokens_total = 0
        # SGLang's MetricsReporter: spec counters accumulate over a window of
        # decode_log_interval decode batches; the gauges and the cumulative totals
        # behind avg_spec_accept_length are only updated when a window completes.
        self.decode_log_interval = max(1, int(getattr(ns, "decode_log_interval", 40) or 40))
        self.decode_batches = 0
        self.window_ct = 0
        self.window_tokens = 0
        self.window_correct = 0
        self.spec_total_ct = 0
        self.spec_total_tokens = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._send_lock = threading.Lock()
        self._last_tp_check = (time.time(), 0)
        self.last_gen_throughput = 0.0
        self.gpu = SimGpuModel.from_args(ns)  # GET /sim/gpu; follows num_running
        self.nodes: Rendezvous | None = None  # the other nodes of a multi-node server (harness/sim/nodes.py)

    # ------------------------------------------------------------- processes
    def start_processes(self) -> None:
        """Spawn the children.  Called before any thread starts (see scrubbed_environ)."""
        ctx = mp.get_context("spawn")
        me = os.getpid()
        self.req_send_conn_r, self.req_send = ctx.Pipe(duplex=False)  # main -> scheduler
        detok_in_r, detok_in_w = ctx.Pipe(duplex=False)  # scheduler -> detokenizer
        self.out_recv, out_w = ctx.Pipe(duplex=False)  # detokenizer -> main
        # this node's TP ranks besides the scheduler's (all of them on a server of one node)
        tp_pairs = [ctx.Pipe(duplex=False) for _ in range(max(0, len(local_ranks(self.ns)) - 1))]
        with scrubbed_environ(scrubs_workers(self.ns)):
            self.procs.append(spawn(detokenizer_main, "sglang-detokenizer", (detok_in_r, out_w, me)))
            for rank, (r, _w) in enumerate(tp_pairs, start=1):
                self.procs.append(spawn(tp_worker_main, f"sglang-tp{rank}", (rank, r, me)))
            self.procs.append(
                spawn(
                    scheduler_main,
                    "sglang-scheduler",
                    (self.model, self.req_send_conn_r, detok_in_w, [w for _r, w in tp_pairs], me),
                )
            )
        # The parent's copies of the children's pipe ends are not needed any more.
        for c in (self.req_send_conn_r, detok_in_r, detok_in_w, out_w, *[c for pair in tp_pairs for c in pair]):
            c.close()

    def child_pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def start_reader(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        threading.Thread(target=self._reader, name="detok-reader", daemon=True).start()

    def _reader(self) -> None:
        assert self.loop is not None
        while True:
            try:
                msg = self.out_recv.recv()
            except (EOFError, OSError):
                logger.warning("detokenizer pipe closed")
                return
            try:
                self.loop.call_soon_threadsafe(self._dispatch, msg)
            except RuntimeError:  # loop closed during shutdown
                return

    def shutdown(self) -> None:
        try:
            self._send(("shutdown",))
        except Exception:
            pass
        stop_all(self.procs, timeout=1.0)

    # ------------------------------------------------------------- dispatch
    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "ready":
            self.ready = True
            self.scheduler_pid = msg[1]
            return
        if kind == "prefill":
            self._prefilled(msg[1], msg[2])
            return
        _, t_end, self.num_running, self.num_queue, vct, vtok, items = msg
        self.gpu.set_running(self.num_running)
        if self.nodes is not None:  # the other nodes' GPUs follow the load too
            self.nodes.broadcast_running(self.num_running)
        now = time.perf_counter()
        m = self.metrics
        new_tokens = 0
        for key, text, ids, finish, spec in items:
            new_tokens += len(ids)
            st = self.states.get(key)
            if st is None:
                continue
            n = len(ids)
            if st.first_token_at is None:
                st.first_token_at = now
                if st.first_stage is not None:
                    m.stage(st.first_stage, now - st.t_submitted)
                if st.log_metrics:
                    m.observe_first_token(now - st.t_start, st.stream)
            elif st.log_metrics and n:
                m.observe_inter_token_latency(now - st.last_token_at, n)
            st.last_token_at = now
            st.completion_tokens += n
            if finish is not None:
                st.finish = finish
                st.spec = spec
                st.e2e_latency = now - st.t_start
                self.states.pop(key, None)
                if st.log_metrics:
                    m.observe_finished(st.prompt_tokens, st.completion_tokens, st.e2e_latency, spec[0] if spec else 0,
                                       st.stream, st.cached_tokens)
            st.pending.append(Update(text, ids, finish))
            st.event.set()
        # Scheduler-side gauges, updated once per step like SGLang's log_decode_stats.
        m.num_running_reqs.set(self.num_running)
        m.num_queue_reqs.set(self.num_queue)
        if vct > self.verify_ct_total:  # a decode (verify) batch
            d_ct, d_tok = vct - self.verify_ct_total, vtok - self.verify_tokens_total
            self.window_ct += d_ct
            self.window_tokens += d_tok
            self.window_correct += d_tok - d_ct
            self.decode_batches += 1
            if self.decode_batches % self.decode_log_interval == 0:  # log_decode_stats
                m.spec_accept_length.set(self.window_tokens / self.window_ct)
                if self.model.num_draft_tokens > 1:
                    m.spec_accept_rate.set(self.window_correct / (self.window_ct * (self.model.num_draft_tokens - 1)))
                self.spec_total_ct += self.window_ct
                self.spec_total_tokens += self.window_tokens
                self.window_ct = self.window_tokens = self.window_correct = 0
        self.verify_ct_total, self.verify_tokens_total = vct, vtok
        t0, tok0 = self._last_tp_check
        tok = tok0 + new_tokens
        if t_end - t0 >= 1.0:
            self.last_gen_throughput = tok / (t_end - t0)
            m.gen_throughput.set(self.last_gen_throughput)
            self._last_tp_check = (t_end, 0)
        else:
            self._last_tp_check = (t0, tok)

    def _prefilled(self, batch: list[tuple[int, int, int]], started: float) -> None:
        """One prefill step's (key, prompt tokens, cached tokens) and when it started (the
        scheduler's perf_counter, CLOCK_MONOTONIC: the same clock in every process): each
        request's cached tokens and prefill start, and SGLang's cache_hit_rate gauge, which is
        the last prefill batch's (log_prefill_stats: hit tokens / (new + hit tokens))."""
        total = sum(prompt for _key, prompt, _cached in batch)
        for key, _prompt, cached in batch:
            st = self.states.get(key)
            if st is not None:
                st.cached_tokens, st.prefill_started = cached, started
        if total and any(self.states.get(key) is not None and self.states[key].log_metrics for key, _p, _c in batch):
            self.metrics.cache_hit_rate.set(sum(cached for _k, _p, cached in batch) / total)

    def flush_cache(self) -> bool:
        """SGLang's Scheduler.flush_cache: only when nothing is queued or running; it empties
        the prefix cache and (reset_metrics) the speculative totals behind
        /get_server_info's avg_spec_accept_length and the spec gauges' current window.
        The Prometheus counters are the tokenizer's and keep counting, as in SGLang."""
        if self.states or self.num_running or self.num_queue:
            return False
        self._send(("flush",))
        self.decode_batches = 0
        self.window_ct = self.window_tokens = self.window_correct = 0
        self.spec_total_ct = self.spec_total_tokens = 0
        logger.info("Cache flushed successfully!")
        return True

    def avg_spec_accept_length(self) -> float | None:
        """InternalStateManager._average_accept_length: completed windows only (the
        current partial window of < decode_log_interval batches is not in it yet)."""
        if not self.model.speculative or self.spec_total_ct <= 0:
            return None
        return self.spec_total_tokens / self.spec_total_ct

    # ------------------------------------------------------------- requests
    def _send(self, msg: tuple) -> None:
        with self._send_lock:
            self.req_send.send(msg)

    async def generate(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        plan: OutputPlan,
        stream: bool,
        rid: str | None = None,
        log_metrics: bool = True,
        accept_probs: list[float] | None = None,
        cache_tokens: Sequence = (),
        arrived: float | None = None,
        prefilled: bool = False,
    ) -> AsyncIterator[tuple[ReqState, list[Update]]]:
        """Submit one request; yield ``(state, updates)`` whenever output arrives.
        ``accept_probs``: its content's acceptance (SimModel.accept_probs_for);
        ``cache_tokens``: its prompt as tokens, which the prefix cache matches (() = never cached);
        ``arrived``: when it reached the server, if before now (its TTFT counts from there);
        ``prefilled``: its KV came from a prefill server (disagg.py): no prefill compute here."""
        key = next(self._keys)
        st = ReqState(rid or uuid.uuid4().hex, key, prompt_tokens, stream, log_metrics,
                      first_stage="decode_waiting" if prefilled else None)
        if arrived is not None:
            st.t_start = arrived
        self.states[key] = st
        self._send(("add", key, prompt_tokens, max_new_tokens, plan.natural_length(), tuple(plan),
                    tuple(accept_probs or ()), () if prefilled else page_hashes(cache_tokens, self.model.page_size),
                    prefilled))
        try:
            while True:
                await st.event.wait()
                st.event.clear()
                updates, st.pending = st.pending, []
                yield st, updates
                if updates and updates[-1].finish is not None:
                    return
        finally:
            if st.finish is None:
                # Client went away (or the handler failed): free the slot like SGLang's abort.
                self.states.pop(key, None)
                try:
                    self._send(("abort", key))
                except OSError:  # scheduler already gone (shutdown)
                    pass

    def spec_meta(self, st: ReqState) -> dict[str, Any]:
        """SGLang's ``_calculate_spec_decoding_metrics`` for a finished request."""
        if not self.model.speculative or st.spec is None:
            return {}
        verify_ct, correct, hist = st.spec
        if verify_ct <= 0:
            return {}
        proposed = verify_ct * (self.model.num_draft_tokens - 1)
        if proposed <= 0:
            return {}
        return {
            "spec_accept_rate": correct / proposed,
            "spec_accept_length": st.completion_tokens / verify_ct,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify_ct,
            "spec_correct_drafts_histogram": list(hist),
        }
