"""A load split over ``workload.client_processes`` load processes, merged into one LoadResult.

One event loop can use one core: at high concurrency on a many-core client it is the loop,
not the machine, that falls behind (README "Client health"). So with N > 1 the load runs in
N processes, each with its own event loop, ``aiohttp`` session and connections:

* **closed loop**: the concurrency split (c // N each, the first c % N one more), the
  requests claimed from one shared counter, so every index is sent once and a process
  that finishes its requests sooner takes the next ones (the load keeps c in flight to the
  end, as one process would);
* **open loop**: one arrival schedule (the same seed, so the same gaps) dealt out, arrival
  k to process k % N, each capped at its share of the concurrency
  (:class:`~harness.load.arrivals.DealtArrivals`);
* **the start barrier**: process 0 sends the warm-up; every process opens its connections
  (``workload.prewarm_connections``) and says it is ready; the parent then calls
  ``on_measured_start`` and releases them all at once;
* **merged**: the records of all (each with its global index, times on the one monotonic
  clock every process shares), the span around the measured ones, and one ``client``
  block (:func:`~harness.load.client_health.merge_process_blocks`: the worst loop lag,
  CPU summed). Progress and the first-token hook reach the caller from the parent.

The processes are forked (Linux), so the plan (its request function with the engine's
hooks, its prompt source with its tokenizer) need not be picklable; the parent has no event loop
running when it forks. Ctrl-C or SIGTERM in the parent: each process is sent SIGTERM,
which a process turns into KeyboardInterrupt just as the plugin does for a single load; it
sends back the requests that had finished and exits; the parent merges them into
``LoadInterrupted`` and kills (then reaps) any process that has not exited within
``STOP_TIMEOUT_S``, so none is left behind.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable

from harness.interrupts import leave_ctrl_c_to_parent
from harness.load.arrivals import ArrivalProcess, ClosedLoop, DealtArrivals, OpenLoop, arrival_process
from harness.load.client_health import merge_process_blocks
from harness.load.loop import EventLoopLoad, LoadInterrupted, RequestBudget, run_loop
from harness.load.plan import LoadPlan
from harness.load.progress import ProgressSnapshot
from harness.load.records import LoadResult, RequestRecord, measured_window

STOP_TIMEOUT_S = 10.0  # for a stopped process to send its finished requests and exit
POLL_S = 0.05


def split_concurrency(concurrency: int, processes: int) -> list[int]:
    """Each process's share of ``concurrency``: as even as integers allow, every one >= 1."""
    if processes < 1 or concurrency < processes:
        raise ValueError(f"workload.client_processes={processes} needs 1 to workload.concurrency={concurrency} processes")
    base, extra = divmod(concurrency, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


@dataclass
class SharedBudget(RequestBudget):
    """The closed loop's budget, shared by every process: one counter (a
    ``multiprocessing.Value``) hands out the next index to whichever process asks first."""

    counter: Any = None

    def claim(self, measure_start: float | None) -> int | None:
        if self.duration_s is not None and measure_start is not None \
                and time.perf_counter() - measure_start >= self.duration_s:
            return None
        with self.counter.get_lock():
            i = self.counter.value
            if self.num_prompts is not None and i >= self.num_prompts:
                return None
            self.counter.value = i + 1
        return i


@dataclass
class DealtBudget(RequestBudget):
    """An open loop's budget in process ``slot`` of ``of``: indices slot, slot + of, ...,
    the arrivals :class:`DealtArrivals` gives this process."""

    slot: int = 0
    of: int = 1

    def claim(self, measure_start: float | None) -> int | None:
        i = self.slot + self.of * self.next_index
        if self.num_prompts is not None and i >= self.num_prompts:
            return None
        if self.duration_s is not None and measure_start is not None \
                and time.perf_counter() - measure_start >= self.duration_s:
            return None
        self.next_index += 1
        return i


def process_plan(plan: LoadPlan, slot: int, of: int, counter: Any) -> tuple[LoadPlan, RequestBudget, ArrivalProcess]:
    """Process ``slot``'s share: the plan with its concurrency and warm-up (process 0 sends
    the warm-up), its budget and its arrival process."""
    shares = split_concurrency(plan.concurrency, of)
    share = replace(plan, concurrency=shares[slot], warmup_requests=plan.warmup_requests if slot == 0 else 0)
    whole = RequestBudget.of(plan)
    arrivals = arrival_process(share)
    if isinstance(arrivals, OpenLoop):
        return share, DealtBudget(whole.num_prompts, whole.duration_s, slot=slot, of=of), \
            DealtArrivals(arrivals, slot, of)
    assert isinstance(arrivals, ClosedLoop)
    return share, SharedBudget(whole.num_prompts, whole.duration_s, counter=counter), arrivals


# ------------------------------------------------------------------ one load process
def _process_main(slot: int, of: int, plan: LoadPlan, counter: Any, messages: Any, ready: Any, go: Any) -> None:
    """One load process: its share of the load, its result (or its finished requests) to the parent."""
    leave_ctrl_c_to_parent()  # a terminal's Ctrl-C reaches the parent; it stops us (SIGTERM: KeyboardInterrupt)
    load = None
    try:
        share, budget, arrivals = process_plan(plan, slot, of, counter)

        def at_barrier() -> None:  # run in a thread by the load, after its warm-up and prewarm
            ready.set()
            go.wait()

        load = EventLoopLoad(share, lambda snap: messages.put(("progress", slot, snap)),
                             lambda t: messages.put(("tokens", slot, t)), at_barrier, budget, arrivals)
        messages.put(("result", slot, run_loop(load.run())))
    except KeyboardInterrupt:
        partial = load.interrupted() if load is not None else None
        messages.put(("interrupted", slot, (partial.partial, partial.in_flight) if partial else None))
    except BaseException:
        messages.put(("error", slot, traceback.format_exc()))
    finally:
        ready.set()  # a process that failed early never holds the others at the barrier


# ------------------------------------------------------------------ the parent
class _Parent:
    """Starts the processes, relays their progress, merges what they send back."""

    def __init__(self, plan: LoadPlan, progress: Callable[[ProgressSnapshot], None] | None,
                 on_tokens_flowing: Callable[[float], None] | None, on_measured_start: Callable[[], None] | None):
        self.n = plan.client_processes
        self.progress, self.on_tokens_flowing, self.on_measured_start = progress, on_tokens_flowing, on_measured_start
        self.ctx = mp.get_context("fork")
        self.messages = self.ctx.Queue()
        self.readies = [self.ctx.Event() for _ in range(self.n)]
        self.go = self.ctx.Event()
        counter = self.ctx.Value("q", 0)
        split_concurrency(plan.concurrency, self.n)  # a bad split fails before any fork
        self.procs = [self.ctx.Process(target=_process_main, name=f"specgate-load-{i}", daemon=True,
                                       args=(i, self.n, plan, counter, self.messages, self.readies[i], self.go))
                      for i in range(self.n)]
        self.snapshots: dict[int, ProgressSnapshot] = {}
        self.finals: dict[int, tuple[str, Any]] = {}
        self.tokens_seen = False
        self.api, self.model = plan.request.api, plan.request.model

    def run(self) -> LoadResult:
        try:
            for p in self.procs:
                p.start()
            self.until(lambda: all(e.is_set() for e in self.readies) or bool(self.finals))
            self.raise_errors()
            if self.on_measured_start is not None:
                self.on_measured_start()
            self.go.set()
            self.until(lambda: len(self.finals) == self.n)
            self.raise_errors()
            results = [payload for kind, payload in self.finals.values()]
            merged = merge_results(results, self.api, self.model)
            if self.progress is not None:
                self.progress(self.combined(final=True))
            return merged
        except KeyboardInterrupt as exc:
            raise self.stop() from exc
        finally:
            self.reap()

    def until(self, done: Callable[[], bool]) -> None:
        """Relay messages until ``done()``; a process that died without a word is an error."""
        while not done():
            try:
                self.handle(*self.messages.get(timeout=POLL_S))
            except queue.Empty:
                dead = [p for i, p in enumerate(self.procs) if i not in self.finals and p.exitcode is not None]
                if dead and self.messages.empty():
                    raise RuntimeError(f"load process {dead[0].name} exited with {dead[0].exitcode} without a result")

    def handle(self, kind: str, slot: int, payload: Any) -> None:
        if kind == "progress":
            self.snapshots[slot] = payload
            if self.progress is not None:
                self.progress(self.combined())
        elif kind == "tokens":
            if not self.tokens_seen and self.on_tokens_flowing is not None:
                self.on_tokens_flowing(payload)  # the first process to see a token: within a poll of the earliest
            self.tokens_seen = True
        else:
            self.finals[slot] = (kind, payload)

    def raise_errors(self) -> None:
        for slot, (kind, payload) in sorted(self.finals.items()):
            if kind == "error":
                raise RuntimeError(f"load process {slot} failed:\n{payload}")

    def combined(self, final: bool = False) -> ProgressSnapshot:
        snaps = list(self.snapshots.values())
        if not snaps:
            return ProgressSnapshot(0, None, 0, 0, 0, 0.0, warmup=True, final=final)
        first = self.snapshots.get(0, snaps[0])
        return ProgressSnapshot(done=sum(s.done for s in snaps), total=first.total,
                                in_flight=sum(s.in_flight for s in snaps), errors=sum(s.errors for s in snaps),
                                tokens=sum(s.tokens for s in snaps), elapsed_s=max(s.elapsed_s for s in snaps),
                                warmup=any(s.warmup for s in snaps), final=final, duration_s=first.duration_s)

    def stop(self) -> LoadInterrupted:
        """Ctrl-C: stop every process, keep what each had finished."""
        for i, p in enumerate(self.procs):
            if i not in self.finals and p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while len(self.finals) < self.n and time.monotonic() < deadline:
            try:
                self.handle(*self.messages.get(timeout=POLL_S))
            except queue.Empty:
                if all(p.exitcode is not None for p in self.procs) and self.messages.empty():
                    break
        parts, in_flight = [], 0
        for kind, payload in self.finals.values():
            if kind == "result":
                parts.append(payload)
            elif kind == "interrupted" and payload is not None:
                parts.append(payload[0])
                in_flight += payload[1]
        partial = merge_results(parts, self.api, self.model, interrupted=True)
        return LoadInterrupted(partial, in_flight)

    def reap(self) -> None:
        """No process outlives the load: those still running are killed, all are joined."""
        self.go.set()
        for p in self.procs:
            if p.is_alive():
                p.join(0.5)
            if p.is_alive():
                p.kill()
            if p.pid is not None:
                p.join()
        self.messages.close()
        self.messages.join_thread()


def merge_results(results: list[LoadResult], api: str, model: str, interrupted: bool = False) -> LoadResult:
    """One LoadResult from the processes' results: their records in send order (warm-ups
    first, as they went first), every record's ``run_start`` the earliest process's, so
    the record's request times have one t0."""
    records: list[RequestRecord] = sorted((r for res in results for r in res.records), key=lambda r: r.send_time)
    run_start = min((res.run_start for res in results), default=time.perf_counter())
    for rec in records:
        rec.run_start = run_start
    start, end = measured_window(records)
    client = None if interrupted else merge_process_blocks([res.client for res in results], records)
    sizing = next((res.prompt_sizing for res in results if res.prompt_sizing), None)
    rate = next((res.request_rate for res in results if res.request_rate), None)  # open loop or not, as each process
    content = next((res.trace_content for res in results if res.trace_content), None)
    return LoadResult(records=records, start_time=start, end_time=end, api=api, model=model, run_start=run_start,
                      prompt_sizing=sizing, client=client, concurrency=sum(res.concurrency for res in results) or 1,
                      request_rate=rate, trace_content=content)


def run_split_load(plan: LoadPlan, progress: Callable[[ProgressSnapshot], None] | None,
                   on_tokens_flowing: Callable[[float], None] | None,
                   on_measured_start: Callable[[], None] | None) -> LoadResult:
    """:func:`harness.load.runner.run_load` over ``plan.client_processes`` processes."""
    return _Parent(plan, progress, on_tokens_flowing, on_measured_start).run()
