"""One load: prompts x arrivals x a request function, against one server.

A load is ``num_prompts`` measured entries of the prompt source, or -- when
``duration_s`` is set -- as many as start within that many seconds (those in flight at
the end still finish and count).  An entry is a conversation: one request for a prompt or
random words, one request per turn for a dataset row with several turns.  So
``num_prompts`` counts prompts (dataset rows), and every turn is a measured request with
its own record (the entry's ``index``, its ``turn``).  A conversation's turns go one after
another in the slot the arrival process gave it, each turn's answer in the next one's
history; a turn that fails ends its conversation (the next has no answer to carry).
``warmup_requests`` go first, one at a time, flagged ``warmup=True``: each the first turn
of a row from the end of the source's order; then the arrival process sends the measured
ones.

While the measured requests run, the client watches itself
(:mod:`harness.load.client_health`): a ticker measures the event loop's lag, the CPU
clocks are read at both ends, and each request keeps the time it was scheduled for, so
the load's ``client`` block says whether the client kept up.

One ``asyncio.run`` and one ``aiohttp.ClientSession`` per load, or per load process with
``workload.client_processes`` > 1 (:mod:`harness.load.processes` splits the load and merges
the processes' results into the same LoadResult).  Ctrl-C (or SIGTERM,
which the plugin turns into KeyboardInterrupt): asyncio cancels the load task, the session
is closed on the way out, and ``LoadInterrupted`` (a KeyboardInterrupt) reaches the caller
carrying the requests that had finished, so they are not lost with the load.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from harness.load.conversation import Conversation
from harness.load.arrivals import ArrivalProcess, arrival_process
from harness.load.client_health import CpuMark, LoopLagTicker, client_block
from harness.load.crosscheck import CountTokens
from harness.load.progress import LoadCounter, ProgressSnapshot
from harness.load.prompts import PromptSource, RandomWords, prompt_source
from harness.load.records import LoadResult, RequestRecord, measured_window
from harness.load.sizing import PromptTokenizer
from harness.load.requests import RequestExtras, RequestFunc, Sampling, SpecDetails, make_session, prewarm, request_func


class LoadInterrupted(KeyboardInterrupt):
    """The load was interrupted: ``partial`` holds the requests that had finished (warm-up
    ones flagged, as usual); ``in_flight`` counts the measured ones cut off, which are left
    out, since their timings would be the harness's cancelling, not the server's answer."""

    def __init__(self, partial: LoadResult, in_flight: int):
        super().__init__(f"load interrupted with {len(partial.measured)} measured request(s) finished, "
                         f"{in_flight} in flight")
        self.partial, self.in_flight = partial, in_flight


def run_load(
    workload: Any,
    base_url: str,
    model: str,
    progress: Callable[[ProgressSnapshot], None] | None = None,
    on_tokens_flowing: Callable[[float], None] | None = None,
    on_measured_start: Callable[[], None] | None = None,
    request_extras: RequestExtras | None = None,
    spec_details: SpecDetails | None = None,
    count_tokens: CountTokens | None = None,
    prompt_tokenizer: PromptTokenizer | None = None,
) -> LoadResult:
    """Run one workload against ``base_url``; see the module docstring.

    ``on_tokens_flowing(t)`` is called once, when the client has seen the first token of a
    measured request arrive (``t`` is that arrival's perf_counter time): GPU telemetry opens
    its load window then, not on a timer, so a load that never generates is never sampled
    as one. ``on_measured_start()`` is called after the warm-up, before the first measured
    request is sent (e.g. to snapshot the server's counters).

    The engine's hooks: ``request_extras(api)`` gives extra JSON fields for every request
    body, ``spec_details(event)`` picks speculative statistics out of one parsed event of an
    OpenAI stream (see :mod:`harness.load.requests`), ``count_tokens(text)`` is the server's
    exact tokenizer where the engine knows it (see :mod:`harness.load.crosscheck`).
    ``prompt_tokenizer`` sizes random-word prompts to ``workload.input_len`` tokens
    (:mod:`harness.load.sizing`); one that asks the server sizes every prompt the load
    will send before the warm-up, so its requests are not measured."""
    request = make_request_func(workload, model, request_extras, spec_details, count_tokens)
    if int(getattr(workload, "client_processes", 1) or 1) > 1:
        from harness.load.processes import run_split_load  # the processes' own module; it builds on this one

        return run_split_load(workload, base_url, request, progress, on_tokens_flowing, on_measured_start,
                              prompt_tokenizer)
    load = _Load(workload, base_url, request, progress, on_tokens_flowing, on_measured_start, prompt_tokenizer)
    try:
        return asyncio.run(load.run())
    except KeyboardInterrupt as exc:
        raise load.interrupted() from exc


def make_request_func(workload: Any, model: str, request_extras: RequestExtras | None,
                      spec_details: SpecDetails | None, count_tokens: CountTokens | None) -> RequestFunc:
    """The workload's request function, with the engine's hooks."""
    api = str(workload.api)
    return request_func(
        api,
        model,
        Sampling(int(workload.max_tokens), float(workload.temperature), bool(workload.ignore_eos)),
        extras=request_extras(api) if request_extras is not None else None,
        spec_details=spec_details,
        count_tokens=count_tokens,
    )


@dataclass
class RequestBudget:
    """How many measured requests a load sends: a count, or all that start in a duration."""

    num_prompts: int | None
    duration_s: float | None
    next_index: int = 0

    @classmethod
    def of(cls, workload: Any) -> "RequestBudget":
        duration_s = None if workload.duration_s is None else float(workload.duration_s)
        if duration_s is not None:
            return cls(None, duration_s)  # a duration replaces the count
        if workload.num_prompts is None:
            raise ValueError("workload needs num_prompts or duration_s")
        return cls(int(workload.num_prompts), None)

    def claim(self, measure_start: float | None) -> int | None:
        """The next measured index, or None when the load is complete."""
        if self.num_prompts is not None:
            if self.next_index >= self.num_prompts:
                return None
        elif measure_start is not None and time.perf_counter() - measure_start >= self.duration_s:
            return None
        i = self.next_index
        self.next_index += 1
        return i


class _Load:
    """One event loop's load. A load split over processes (:mod:`harness.load.processes`)
    runs one per process, each with its own ``budget`` (its share of the requests) and
    ``arrivals`` (its share of the concurrency or of the arrival schedule)."""

    def __init__(self, workload: Any, base_url: str, request: RequestFunc,
                 progress: Callable[[ProgressSnapshot], None] | None,
                 on_tokens_flowing: Callable[[float], None] | None,
                 on_measured_start: Callable[[], None] | None, prompt_tokenizer: PromptTokenizer | None = None,
                 budget: RequestBudget | None = None, arrivals: ArrivalProcess | None = None):
        self.base_url = base_url
        self.request = request
        self.prompts: PromptSource = prompt_source(workload, prompt_tokenizer)
        sized = prompt_tokenizer is not None and isinstance(self.prompts, RandomWords)
        self.prompt_sizing = prompt_tokenizer.source if sized else None
        self.arrivals: ArrivalProcess = arrivals or arrival_process(workload)
        self.budget = budget or RequestBudget.of(workload)
        self.concurrency = max(1, int(workload.concurrency or 1))
        self.warmup_requests = int(workload.warmup_requests or 0)
        self.prewarm_connections = bool(getattr(workload, "prewarm_connections", False))
        self.timeout_s = float(workload.timeout_s)
        first_byte = workload.first_byte_timeout_s
        self.first_byte_timeout_s = None if first_byte is None else float(first_byte)
        self.progress = progress
        self.on_tokens_flowing = on_tokens_flowing
        self.on_measured_start = on_measured_start
        total = None if self.budget.num_prompts is None else self.prompts.requests_in(self.budget.num_prompts)
        self.counter = LoadCounter(total, self.budget.duration_s)
        self.records: list[RequestRecord] = []
        self.ended: set[int] = set()  # id() of each record whose request ran to its end
        self.run_start: float | None = None
        self.lag_ticker = LoopLagTicker()
        self.cpu_marks: list[CpuMark] = []  # at the measured requests' start and end

    def claim(self) -> int | None:
        return self.budget.claim(self.counter.measure_start)

    async def one(self, session, index: int, warmup: bool, scheduled: float | None = None) -> None:
        """Entry ``index``: its conversation's turns in order (a warm-up: the first turn only).
        ``scheduled``: when the arrival process meant it to go; a next turn's is when the
        turn before it ended."""
        conversation = await self.conversation(-1 - index if warmup else index)
        turns = 1 if warmup else len(conversation.turns)
        answers: list[str] = []
        for turn in range(turns):
            rec = RequestRecord(index=index, warmup=warmup, turn=turn, dataset_row=conversation.row,
                                category=conversation.category, run_start=self.run_start,
                                intended_prompt_tokens=conversation.intended_prompt_tokens, scheduled_time=scheduled)
            body = self.request.body(conversation.messages(turn, answers), conversation.max_tokens)
            keep_answer = turn + 1 < turns
            await self.send(session, rec, body, keep_answer)
            if not rec.ok:
                return  # the next turn would have no answer in its history
            if keep_answer:
                answers.append(rec.answer or "")
            scheduled = rec.end_time

    async def conversation(self, index: int) -> Conversation:
        """Entry ``index``'s conversation; one the server must size (a duration's prompts past
        those sized ahead) waits in a thread, so requests in flight keep streaming."""
        if self.prompts.sizes_remotely:
            return await asyncio.to_thread(self.prompts.conversation, index)
        return self.prompts.conversation(index)

    def size_ahead(self) -> None:
        """Every prompt of the warm-up and of a counted load, sized before the first is sent."""
        ahead = [-1 - k for k in range(self.warmup_requests)] + list(range(self.budget.num_prompts or 0))
        for index in ahead:
            self.prompts.conversation(index)

    async def send(self, session, rec: RequestRecord, body: dict, keep_answer: bool) -> None:
        """One request, counted while it is in flight."""
        self.records.append(rec)
        self.counter.sent(rec)
        try:
            await self.request.stream(session, self.base_url, body, rec, self.timeout_s, self.first_byte_timeout_s,
                                      keep_answer)
        finally:
            self.counter.left(rec)
        self.ended.add(id(rec))  # not reached when the load is cancelled mid-request
        self.counter.finished(rec)

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
                self.progress(self.counter.snapshot())
            except Exception:  # a broken progress callback must not kill the load
                pass

    async def run(self) -> LoadResult:
        self.run_start = run_start = time.perf_counter()
        async with make_session(self.concurrency) as session:
            background = [asyncio.create_task(self.ticker())] if self.progress else []
            if self.on_tokens_flowing:
                background.append(asyncio.create_task(self.watch_tokens()))
            try:
                if self.prompts.sizes_remotely:
                    await asyncio.to_thread(self.size_ahead)
                for k in range(self.warmup_requests):
                    await self.one(session, k, True)
                self.counter.in_warmup = False
                if self.prewarm_connections:
                    await prewarm(session, self.base_url, self.concurrency)
                if self.on_measured_start is not None:
                    await asyncio.to_thread(self.on_measured_start)
                await self.measure(session)
            finally:
                for task in background:
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        pass
        if self.progress:
            self.progress(self.counter.snapshot(final=True))
        return self.result(run_start)

    async def measure(self, session) -> None:
        """The measured requests, with the client's own health watched around them."""
        lag = asyncio.create_task(self.lag_ticker.run())
        self.cpu_marks = [CpuMark.now()]
        try:
            await self.arrivals.drive(self.claim, lambda i, scheduled: self.one(session, i, False, scheduled))
            self.cpu_marks.append(CpuMark.now())
        finally:
            lag.cancel()
            try:
                await lag
            except asyncio.CancelledError:
                pass

    def client_health(self, records: list[RequestRecord]) -> dict | None:
        """The ``client`` block of a load that ran to its end (an interrupted one has none)."""
        if len(self.cpu_marks) != 2:
            return None
        return client_block(self.lag_ticker.lags_s, *self.cpu_marks, records, self.lag_ticker.interval_s)

    def interrupted(self) -> LoadInterrupted:
        """What an interrupted load leaves: the requests that ended, and how many measured
        ones were cut off."""
        ended = [r for r in self.records if id(r) in self.ended]
        in_flight = sum(1 for r in self.records if not r.warmup and id(r) not in self.ended)
        run_start = self.run_start if self.run_start is not None else time.perf_counter()
        return LoadInterrupted(self.result(run_start, ended), in_flight)

    def result(self, run_start: float, records: list[RequestRecord] | None = None) -> LoadResult:
        records = self.records if records is None else records
        start, end = measured_window(records)
        return LoadResult(records=records, start_time=start, end_time=end, api=self.request.api,
                          model=self.request.model, run_start=run_start, prompt_sizing=self.prompt_sizing,
                          client=self.client_health(records))
