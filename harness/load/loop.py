"""One event loop's load: the warm-up, then the measured requests as the arrival process
sends them, each entry's conversation turn by turn, the client's own health watched around
them (harness/load/runner.py says what a load is). `run_load` runs one of these, or one per
load process (harness/load/processes.py), each with its share of the budget and arrivals."""

from __future__ import annotations

import asyncio
import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Iterator, TypeVar

try:  # the load's event loop in C: fewer CPU seconds per streamed token (docs/measurement.md)
    import uvloop
except ImportError:  # pragma: no cover - a dependency, but the stdlib loop measures the same way
    uvloop = None

from harness.interrupts import signals_between_callbacks
from harness.load.arrivals import ArrivalProcess, arrival_process
from harness.load.client_health import CpuMark, LoopLagTicker, client_block
from harness.load.conversation import Conversation
from harness.load.plan import LoadPlan
from harness.load.progress import LoadCounter, ProgressSnapshot
from harness.load.prompts import PromptSource
from harness.load.records import LoadResult, RequestRecord, measured_window
from harness.load.requests import RequestFunc, make_session, prewarm


T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a load's coroutine on a fresh event loop, as ``asyncio.run`` does (Ctrl-C cancels
    it): uvloop's where it is installed, since the client's own CPU per streamed chunk is
    mostly the loop's (a wake-up, a socket read, a task step), else the stdlib's. Signal
    handlers run between the loop's callbacks (harness.interrupts' :func:`signals_between_callbacks`), and the
    cyclic collector leaves the heap the load started with alone (:func:`old_heap_frozen`)."""
    with old_heap_frozen(), asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop is not None else None) as runner:
        with signals_between_callbacks(runner.get_loop()):
            return runner.run(main)


@contextmanager
def old_heap_frozen() -> Iterator[None]:
    """While the load runs, the objects that existed before it (pytest's, Hydra's, the
    record's: hundreds of thousands in a suite's process) are out of the cyclic collector's
    reach (``gc.freeze``), and back in it after. A full collection walks every tracked
    object with the interpreter lock held: in a suite's process one took 40-140 ms, and one
    that fell inside a short load stalled the client's loop by ~90 ms, enough to make the
    first arm client-bound in each of three runs of ``specgate calibrate``. The load's own
    objects are still collected."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class LoadInterrupted(KeyboardInterrupt):
    """The load was interrupted: ``partial`` holds the requests that had finished (warm-up
    ones flagged, as usual); ``in_flight`` counts the measured ones cut off, which are left
    out, since their timings would be the harness's cancelling, not the server's answer."""

    def __init__(self, partial: LoadResult, in_flight: int):
        super().__init__(f"load interrupted with {len(partial.measured)} measured request(s) finished, "
                         f"{in_flight} in flight")
        self.partial, self.in_flight = partial, in_flight


@dataclass
class RequestBudget:
    """How many measured requests a load sends: a count, or all that start in a duration."""

    num_prompts: int | None
    duration_s: float | None
    next_index: int = 0

    @classmethod
    def of(cls, workload: Any) -> "RequestBudget":
        """The budget of a plan (or of a workload config: what it says, checked)."""
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


class EventLoopLoad:
    """One event loop's load. A load split over processes (:mod:`harness.load.processes`)
    runs one per process, each with its own ``budget`` (its share of the requests) and
    ``arrivals`` (its share of the concurrency or of the arrival schedule)."""

    def __init__(self, plan: LoadPlan, progress: Callable[[ProgressSnapshot], None] | None = None,
                 on_tokens_flowing: Callable[[float], None] | None = None,
                 on_measured_start: Callable[[], None] | None = None,
                 budget: RequestBudget | None = None, arrivals: ArrivalProcess | None = None):
        self.base_url = plan.base_url
        self.request: RequestFunc = plan.request
        self.prompts: PromptSource = plan.prompts
        self.prompt_sizing = plan.prompt_sizing
        self.trace_content = plan.trace_content
        self.arrivals: ArrivalProcess = arrivals or arrival_process(plan)
        self.budget = budget or RequestBudget.of(plan)
        self.concurrency = plan.concurrency
        self.request_rate = plan.request_rate
        self.warmup_requests = plan.warmup_requests
        self.prewarm_connections = plan.prewarm_connections
        self.timeout_s = plan.timeout_s
        self.first_byte_timeout_s = plan.first_byte_timeout_s
        self.cancel = plan.cancel
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

    async def one(self, session, index: int, warmup: bool, scheduled: float | None = None,
                  intended: float | None = None) -> None:
        """Entry ``index``: its conversation's turns in order (a warm-up: the first turn only).
        ``scheduled``: when the arrival process meant it to go; a next turn's is when the
        turn before it ended. ``intended``: a trace's own time for its first turn."""
        conversation = await self.conversation(-1 - index if warmup else index)
        turns = 1 if warmup else len(conversation.turns)
        answers: list[str] = []
        for turn in range(turns):
            rec = RequestRecord(index=index, warmup=warmup, turn=turn, dataset_row=conversation.row,
                                category=conversation.category, run_start=self.run_start,
                                intended_prompt_tokens=conversation.intended_prompt_tokens, scheduled_time=scheduled,
                                intended_time=intended if turn == 0 else None,
                                max_tokens=conversation.max_tokens or self.request.sampling.max_tokens,
                                ignore_eos=self.request.sampling.ignore_eos)
            if self.cancel is not None:
                self.cancel.mark(rec)
            body = self.request.body(conversation.messages(turn, answers), conversation.max_tokens)
            keep_answer = turn + 1 < turns
            await self.send(session, rec, body, keep_answer)
            if not rec.ok:
                return  # the next turn would have no answer in its history (failed or cancelled)
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
                if self.prompts.sizes_ahead:
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
            await self.arrivals.drive(self.claim, lambda i, scheduled, intended=None:
                                      self.one(session, i, False, scheduled, intended))
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
                          client=self.client_health(records), concurrency=self.concurrency,
                          request_rate=self.request_rate, trace_content=self.trace_content)
