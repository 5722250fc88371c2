"""Workload runner: drive one server with a workload and keep a record per request.

Closed loop (``request_rate`` null): ``concurrency`` workers, each sends its next
request as soon as its previous one ends.  Open loop (``request_rate`` set): Poisson
arrivals at that rate (exponential gaps from ``random.Random(seed)``), with
``concurrency`` capping how many are in flight (an arrival waits for a free slot).
A load is ``num_prompts`` measured requests, or -- when ``duration_s`` is set --
as many as start within that many seconds (those in flight at the end still finish
and count).  ``warmup_requests`` go first, one at a time, flagged ``warmup=True``.

One ``asyncio.run`` and one ``aiohttp.ClientSession`` per load.  Ctrl-C: asyncio
cancels the load task; the session is closed on the way out and KeyboardInterrupt
reaches the caller.  ``stop_event`` (anything with ``is_set()``) stops *sending*;
requests in flight finish and are kept.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from harness import client

# A fixed vocabulary of short, common English words (~1 token each with most
# tokenizers, leading space included), so "input_len words" ~ input_len tokens.
VOCAB = (
    "the of and to in is was for on that with as by at from his her are this be it an "
    "have had not they which one you were all we their but there been has when more will "
    "would who so no out up into do only time can about other new some could these two may "
    "first then any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three small city house water "
    "light green river stone cloud music table window paper garden morning night road field"
).split()


@dataclass
class RequestRecord:
    index: int
    warmup: bool
    send_time: float = 0.0  # perf_counter seconds
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk that carried tokens
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in that chunk
    status: int | None = None  # HTTP status
    error: str | None = None  # server's message or what went wrong; None = ok
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    finish_reason: str | None = None
    end_time: float | None = None
    run_start: float | None = field(default=None, repr=False)  # t0 of to_json(); set by the runner

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and self.end_time is not None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times[0] - self.send_time if self.chunk_times else None

    @property
    def e2e_s(self) -> float | None:
        return self.end_time - self.send_time if self.end_time is not None else None

    @property
    def decode_s(self) -> float | None:
        """Last token chunk minus first token chunk (0.0 for a single chunk)."""
        return self.chunk_times[-1] - self.chunk_times[0] if self.chunk_times else None

    def to_json(self, t0: float | None = None) -> dict:
        """One line of requests.jsonl.  Times in ms; absolute ones (send, end, chunks)
        relative to ``t0``, by default the run start that the runner stamped on the
        record (else this request's own send time)."""
        if t0 is None:
            t0 = self.run_start if self.run_start is not None else self.send_time

        def ms(x: float | None) -> float | None:
            return None if x is None else round(x * 1000.0, 3)

        return {
            "index": self.index,
            "warmup": self.warmup,
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "send_ms": ms(self.send_time - t0),
            "end_ms": ms(None if self.end_time is None else self.end_time - t0),
            "ttft_ms": ms(self.ttft_s),
            "e2e_ms": ms(self.e2e_s),
            "decode_ms": ms(self.decode_s),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accept_length": self.spec_accept_length,
            "finish_reason": self.finish_reason,
            "chunk_ms": [round((t - t0) * 1000.0, 3) for t in self.chunk_times],
            "chunk_tokens": list(self.chunk_tokens),
        }


@dataclass
class LoadResult:
    records: list[RequestRecord]  # warm-up ones included, flagged
    start_time: float  # first measured send (perf_counter s)
    end_time: float  # last measured end
    api: str
    model: str
    run_start: float = 0.0  # before the first warm-up request: t0 of requests.jsonl
    interrupted: bool = False  # stop_event ended the load early

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_time - self.start_time)

    def request_lines(self) -> list[dict]:
        """requests.jsonl rows, times relative to the run start."""
        return [r.to_json(self.run_start) for r in self.records]


@dataclass
class ProgressSnapshot:
    done: int  # measured requests finished
    total: int | None  # num_prompts, or None in duration mode
    in_flight: int
    errors: int
    tokens: int  # completion tokens received so far (measured requests)
    elapsed_s: float  # since the first measured send
    warmup: bool = False  # still in the warm-up phase
    final: bool = False
    duration_s: float | None = None  # duration mode: planned seconds

    @property
    def tok_s(self) -> float:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


_last_print = [0.0]


def print_progress(snap: ProgressSnapshot, stream: Any = None, min_interval_s: float = 0.25, label: str = "") -> None:
    """One live line on stderr (``\\r``-rewritten), at most ~4 times a second; the final
    snapshot ends the line."""
    now = time.monotonic()
    out = stream if stream is not None else sys.stderr
    interactive = getattr(out, "isatty", lambda: False)()
    if not interactive:  # a log file or CI: a plain line every 10 s, not a stream of \r
        min_interval_s = max(min_interval_s, 10.0)
    if not snap.final and now - _last_print[0] < min_interval_s:
        return
    _last_print[0] = now
    if snap.warmup:
        line = f"warm-up ... {snap.done} done"
    else:
        total = f"/{snap.total}" if snap.total is not None else f" ({snap.elapsed_s:.0f}/{snap.duration_s:g}s)"
        line = (
            f"{snap.done}{total} done  {snap.in_flight} in flight  {snap.tok_s:8.1f} tok/s  "
            f"{snap.errors} errors  {snap.elapsed_s:6.1f}s"
        )
    if interactive:
        out.write("\r" + label + line + "   " + ("\n" if snap.final else ""))
    else:
        out.write(label + line + "\n")
    out.flush()


def make_prompt(workload: Any, index: int) -> str:
    """The prompt of request ``index`` (warm-ups use negative indices)."""
    if getattr(workload, "prompt", None):
        return str(workload.prompt)
    n = getattr(workload, "input_len", None)
    if not n:
        raise ValueError("workload has neither a prompt nor an input_len: set workload.prompt or workload.input_len")
    rng = random.Random((int(getattr(workload, "seed", 0) or 0) * 1_000_003) ^ (index & 0xFFFFFFFF))
    return " ".join(rng.choices(VOCAB, k=int(n)))


def run_load(
    workload: Any,
    base_url: str,
    model: str,
    progress: Callable[[ProgressSnapshot], None] | None = None,
    stop_event: Any = None,
    on_tokens_flowing: Callable[[float], None] | None = None,
    on_measured_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Run one workload against ``base_url``; see the module docstring.

    ``on_tokens_flowing(t)`` is called once, when the client has seen the first token of a
    measured request arrive (``t`` is that arrival's perf_counter time): GPU telemetry opens
    its load window then, not on a timer, so a load that never generates is never sampled
    as one. ``on_measured_start()`` is called after the warm-up, before the first measured
    request is sent (e.g. to snapshot the server's counters)."""
    return asyncio.run(_run_load(workload, base_url, model, progress, stop_event, on_tokens_flowing,
                                 on_measured_start))


class _Runner:
    def __init__(self, workload: Any, base_url: str, model: str, progress, stop_event, on_tokens_flowing=None,
                 on_measured_start=None):
        self.w = workload
        self.on_tokens_flowing = on_tokens_flowing
        self.on_measured_start = on_measured_start
        self.base_url = base_url
        self.model = model
        self.api = str(workload.api)
        self.progress = progress
        self.stop_event = stop_event
        self.concurrency = max(1, int(workload.concurrency or 1))
        self.num_prompts = None if workload.num_prompts is None else int(workload.num_prompts)
        self.duration_s = None if workload.duration_s is None else float(workload.duration_s)
        if self.duration_s is not None:
            self.num_prompts = None  # a duration replaces the count
        elif self.num_prompts is None:
            raise ValueError("workload needs num_prompts or duration_s")
        self.rate = None if workload.request_rate is None else float(workload.request_rate)
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"workload.request_rate must be > 0 (got {self.rate})")
        self.timeout_s = float(workload.timeout_s)
        self.records: list[RequestRecord] = []
        self.in_flight: list[RequestRecord] = []
        self.next_index = 0
        self.done = 0
        self.errors = 0
        self.tokens_done = 0
        self.measure_start: float | None = None
        self.in_warmup = True
        self.run_start: float | None = None

    def stopped(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    def claim(self) -> Optional[int]:
        """Next measured index, or None when the load is complete."""
        if self.stopped():
            return None
        if self.num_prompts is not None:
            if self.next_index >= self.num_prompts:
                return None
        elif self.measure_start is not None and time.perf_counter() - self.measure_start >= self.duration_s:
            return None
        i = self.next_index
        self.next_index += 1
        return i

    async def one(self, session, index: int, warmup: bool) -> RequestRecord:
        rec = RequestRecord(index=index, warmup=warmup, run_start=self.run_start)
        path_body = client.build_request(
            self.api,
            self.model,
            make_prompt(self.w, index if not warmup else -1 - index),
            self.w.max_tokens,
            self.w.temperature,
            bool(self.w.ignore_eos),
        )
        self.records.append(rec)
        self.in_flight.append(rec)
        if not warmup and self.measure_start is None:
            self.measure_start = time.perf_counter()
        try:
            await client.stream_request(session, self.base_url, self.api, path_body[1], rec, self.timeout_s)
        finally:
            self.in_flight.remove(rec)
        if not warmup:
            self.done += 1
            if rec.ok:
                self.tokens_done += rec.completion_tokens or 0
            else:
                self.errors += 1
        return rec

    def snapshot(self, final: bool = False) -> ProgressSnapshot:
        live = sum(sum(r.chunk_tokens) for r in self.in_flight if not r.warmup)
        return ProgressSnapshot(
            done=self.done,
            total=self.num_prompts,
            in_flight=len(self.in_flight),
            errors=self.errors,
            tokens=self.tokens_done + live,
            elapsed_s=0.0 if self.measure_start is None else time.perf_counter() - self.measure_start,
            warmup=self.in_warmup,
            final=final,
            duration_s=self.duration_s,
        )

    async def watch_tokens(self) -> None:
        """Poll (off the hot path) for the first token of a measured request."""
        while True:
            first = [r.chunk_times[0] for r in self.records if not r.warmup and r.chunk_times]
            if first:
                self.on_tokens_flowing(min(first))
                return
            await asyncio.sleep(0.02)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            try:
                self.progress(self.snapshot())
            except Exception:  # a broken progress callback must not kill the load
                pass

    async def closed_loop(self, session) -> None:
        async def worker() -> None:
            while (i := self.claim()) is not None:
                await self.one(session, i, False)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))

    async def open_loop(self, session) -> None:
        rng = random.Random(int(getattr(self.w, "seed", 0) or 0))
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()

        async def send(i: int) -> None:
            try:
                await self.one(session, i, False)
            finally:
                slots.release()

        t_next = time.perf_counter()
        try:
            while True:
                delay = t_next - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await slots.acquire()
                i = self.claim()
                if i is None:
                    slots.release()
                    break
                task = asyncio.create_task(send(i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                t_next += rng.expovariate(self.rate)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            pending = [t for t in tasks if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def run(self) -> LoadResult:
        self.run_start = run_start = time.perf_counter()
        async with client.make_session(self.concurrency) as session:
            tick = asyncio.create_task(self.ticker()) if self.progress else None
            watch = asyncio.create_task(self.watch_tokens()) if self.on_tokens_flowing else None
            try:
                for k in range(int(self.w.warmup_requests or 0)):
                    if self.stopped():
                        break
                    await self.one(session, k, True)
                self.in_warmup = False
                if self.on_measured_start is not None:
                    await asyncio.to_thread(self.on_measured_start)
                if self.rate is None:
                    await self.closed_loop(session)
                else:
                    await self.open_loop(session)
            finally:
                for task in (tick, watch):
                    if task is not None:
                        task.cancel()
                        try:
                            await task
                        except asyncio.CancelledError:
                            pass
        if self.progress:
            self.progress(self.snapshot(final=True))
        measured = [r for r in self.records if not r.warmup]
        if measured:
            start = min(r.send_time for r in measured)
            end = max(r.end_time if r.end_time is not None else r.send_time for r in measured)
        else:
            start = end = time.perf_counter()
        return LoadResult(
            records=self.records,
            start_time=start,
            end_time=end,
            api=self.api,
            model=self.model,
            run_start=run_start,
            interrupted=self.stopped(),
        )


async def _run_load(workload, base_url, model, progress, stop_event, on_tokens_flowing=None,
                    on_measured_start=None) -> LoadResult:
    return await _Runner(workload, base_url, model, progress, stop_event, on_tokens_flowing,
                         on_measured_start).run()
