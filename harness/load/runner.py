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

One event loop (:func:`~harness.load.loop.run_loop`, uvloop's) and one ``aiohttp.ClientSession``
per load, or per load process with ``workload.client_processes`` > 1 (:mod:`harness.load.processes` splits the load and merges
the processes' results into the same LoadResult; with ``workload.client_placement=ray`` they
are Ray actors on a cluster's nodes, :mod:`harness.load.ray_clients`).  Ctrl-C (or SIGTERM,
which the plugin turns into KeyboardInterrupt): asyncio cancels the load task, the session
is closed on the way out, and ``LoadInterrupted`` (a KeyboardInterrupt) reaches the caller
carrying the requests that had finished, so they are not lost with the load.
"""

from __future__ import annotations

from typing import Callable

from harness.load.loop import EventLoopLoad, LoadInterrupted, run_loop
from harness.load.plan import LoadPlan
from harness.load.processes import run_split_load
from harness.load.progress import ProgressSnapshot
from harness.load.records import LoadResult

__all__ = ["LoadInterrupted", "LoadPlan", "run_load"]


def run_load(
    plan: LoadPlan,
    progress: Callable[[ProgressSnapshot], None] | None = None,
    on_tokens_flowing: Callable[[float], None] | None = None,
    on_measured_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Run one load (see the module docstring and :class:`~harness.load.plan.LoadPlan`).

    ``progress(snapshot)`` is called about every 0.25 s with the live counts.
    ``on_tokens_flowing(t)`` is called once, when the client has seen the first token of a
    measured request arrive (``t`` is that arrival's perf_counter time): GPU telemetry opens
    its load window then, not on a timer, so a load that never generates is never sampled
    as one. ``on_measured_start()`` is called after the warm-up, before the first measured
    request is sent (e.g. to snapshot the server's counters). A plan whose prompts the
    server sizes has every prompt the load will send sized before the warm-up, so its
    requests are not measured."""
    if plan.client_placement == "ray":
        from harness.load.ray_clients import run_ray_load  # Ray is imported only for such a load

        return run_ray_load(plan, progress, on_tokens_flowing, on_measured_start)
    if plan.client_processes > 1:
        result = run_split_load(plan, progress, on_tokens_flowing, on_measured_start)
    else:
        load = EventLoopLoad(plan, progress, on_tokens_flowing, on_measured_start)
        try:
            result = run_loop(load.run())
        except KeyboardInterrupt as exc:
            raise load.interrupted() from exc
    result.cancel = plan.cancel.describe() if plan.cancel is not None else None
    return result
