"""``workload.client_placement=ray``: the load's ``workload.client_processes`` as Ray actors,
spread over a Ray cluster's nodes (``workload.ray_address``), for a load one machine cannot
drive. The plan stays the boundary: each actor gets the LoadPlan (cloudpickled), runs
harness.load's event loop on its share and returns its LoadResult, merged here as
:mod:`harness.load.processes` merges its processes'.

What differs from forked processes on one machine, and how each is kept honest:

* **no shared counter across nodes**: every loop, closed or open, deals the indices out,
  index k to actor k % N (the open loop's arrivals as for processes), each actor at its
  share of the concurrency; an actor that finishes sooner does not take another's indices;
* **the start barrier** is a small coordinator actor: each load actor, after its warm-up (actor
  0 sends it) and prewarm, arrives and waits; once all have arrived the driver calls
  ``on_measured_start`` and releases them;
* **clocks**: ``perf_counter`` is per machine. Each actor's offset against the driver's clock
  is measured NTP-style before and after the load (``CLOCK_PROBES`` round trips each, the one
  with the shortest round trip kept: offset = actor time - midpoint of the driver's send and
  receive, uncertainty = half that round trip); every time the actor recorded is moved onto
  the driver's clock by the mean of the two, and the uncertainty stated is the larger half
  round trip plus half the drift between the two. The merged ``client`` block lists each
  actor's node, offset and uncertainty (``ray_actors``), which the summary states;
* **progress and the first token** reach the driver through the coordinator (polled every
  ``POLL_S``), the first token's time moved onto the driver's clock;
* **Ctrl-C**: the coordinator tells every actor to stop; each stops its load as a Ctrl-C
  would and sends back the requests that had ended (within ``STOP_TIMEOUT_S``), merged into
  ``LoadInterrupted``; then the actors are killed and the Ray instance this load started is
  shut down. Otherwise it stays for the next load and ends with the process.
"""

from __future__ import annotations

import _thread
import asyncio
import atexit
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

from harness.secrets import BOOK
from harness.interrupts import sigint_raises
from harness.load.loop import EventLoopLoad, LoadInterrupted, RequestBudget, run_loop
from harness.load.plan import LoadPlan
from harness.load.processes import DealtBudget, merge_results, process_plan, split_concurrency
from harness.load.progress import ProgressSnapshot
from harness.load.records import LoadResult

# how long a Ray instance's processes may keep writing to its folder once it is shut down
RAY_FOLDER_GRACE_S = 10.0

PLACEMENTS = ("local", "ray")
CLOCK_PROBES = 16  # round trips per clock measurement; the shortest one is kept
POLL_S = 0.25
ANSWER_S = 5.0  # a GCS that answers at all accepts a connection at once
STOP_TIMEOUT_S = 10.0  # for a stopped actor to send back its finished requests
OBJECT_STORE_BYTES = 100_000_000  # a load's own Ray instance: plans and results only


class RayAddressError(ValueError):
    """A Ray cluster address that is malformed or does not answer (one sentence)."""


class ClientsCannotReach(Exception):
    """A load actor's node cannot open a connection to the server (one sentence): a server
    URL on the loopback (a local container's published port) is this machine's only."""


REACH_TIMEOUT_S = 5.0


def reach_error(base_url: str) -> str | None:
    """Why a connection to the server at ``base_url`` cannot be opened from here, or None."""
    parts = urllib.parse.urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def unreachable_sentence(base_url: str, nodes: list[dict], errors: list[str | None]) -> str | None:
    """One sentence naming each actor whose node cannot reach the server, or None."""
    cut = [f"actor {slot} on {node.get('ip') or node.get('host')} ({error})"
           for slot, (node, error) in enumerate(zip(nodes, errors)) if error]
    if not cut:
        return None
    host = urllib.parse.urlsplit(base_url).hostname or ""
    hint = (f"; {host} is a loopback address, each node's own: serve on an address the nodes reach "
            f"(backend=attach backend.url=http://HOST:PORT)" if host in ("localhost", "::1") or host.startswith("127.")
            else "")
    return (f"workload.client_placement=ray: the server at {base_url} cannot be reached from "
            f"{', '.join(cut)}{hint}")


def check_address(address: Any, key: str) -> None:
    """A cluster to join must answer now (one sentence, before any server starts).
    None, "" or "local": a local Ray instance is started instead."""
    if address in (None, "", "local"):
        return
    text = str(address)
    if text == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            text = canonicalize_bootstrap_address("auto")
        except ConnectionError:
            raise RayAddressError(f"{key}=auto: no running Ray cluster was found on this machine (start one with "
                                  f"`ray start --head`, or leave it null for a local instance)") from None
    host, _, port = text.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayAddressError(f"{key}={text}: a Ray cluster's address is HOST:PORT (its GCS, `ray start --head "
                              f"--port`) or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=ANSWER_S).close()
    except OSError as exc:
        raise RayAddressError(f"{key}={text}: no Ray cluster answers there "
                              f"({exc.strerror or exc} within {ANSWER_S:.0f} s)") from None


@dataclass(frozen=True)
class ClockOffset:
    """An actor's perf_counter minus the driver's, and how sure that is (seconds)."""

    offset_s: float
    uncertainty_s: float


def measure_offset(clock: Callable[[], Any], probes: int = CLOCK_PROBES) -> ClockOffset:
    """NTP-style: `clock()` returns a Ray reference to the actor's perf_counter; the round trip
    with the shortest time bounds the offset best (the actor read its clock within it)."""
    import ray

    best = None
    for _ in range(probes):
        sent = time.perf_counter()
        theirs = ray.get(clock())
        back = time.perf_counter()
        if best is None or back - sent < best[1] - best[0]:
            best = (sent, back, theirs)
    sent, back, theirs = best
    return ClockOffset(theirs - (sent + back) / 2, (back - sent) / 2)


def combined(before: ClockOffset, after: ClockOffset) -> ClockOffset:
    """One offset for the whole load: the mean; uncertain by the worse probe and half the drift."""
    drift = abs(after.offset_s - before.offset_s)
    return ClockOffset((before.offset_s + after.offset_s) / 2,
                       max(before.uncertainty_s, after.uncertainty_s) + drift / 2)


def shifted(result: LoadResult, by: float) -> LoadResult:
    """`result` with every time moved by -`by` (the actor's clock onto the driver's)."""
    for rec in result.records:
        rec.send_time -= by
        rec.scheduled_time = None if rec.scheduled_time is None else rec.scheduled_time - by
        rec.end_time = None if rec.end_time is None else rec.end_time - by
        rec.chunk_times = [t - by for t in rec.chunk_times]
    result.start_time -= by
    result.end_time -= by
    result.run_start -= by
    return result


def actor_share(plan: LoadPlan, slot: int, of: int) -> tuple[LoadPlan, RequestBudget, Any]:
    """Actor `slot`'s share: as a process's, but its indices dealt (no counter across nodes)."""
    share, _, arrivals = process_plan(plan, slot, of, counter=None)
    whole = RequestBudget.of(plan)
    return share, DealtBudget(whole.num_prompts, whole.duration_s, slot=slot, of=of), arrivals


# ------------------------------------------------------------------ the actors (defined once Ray is imported)
def actor_classes():
    import ray

    @ray.remote(num_cpus=0)
    class Coordinator:
        """The start barrier and the relay of progress and first tokens (an async actor: a
        load actor waits in `arrive` while the driver asks `state`)."""

        def __init__(self, n: int):
            self.n, self.arrived = n, set()
            self.all_arrived, self.go = asyncio.Event(), asyncio.Event()
            self.first_token: tuple[int, float] | None = None
            self.snapshots: dict[int, ProgressSnapshot] = {}

        async def arrive(self, slot: int) -> None:
            self.arrived.add(slot)
            if len(self.arrived) == self.n:
                self.all_arrived.set()
            await self.go.wait()

        async def wait_all(self) -> None:
            await self.all_arrived.wait()

        async def release(self) -> None:
            self.go.set()

        async def tokens(self, slot: int, t: float) -> None:
            if self.first_token is None:
                self.first_token = (slot, t)

        async def progress(self, slot: int, snapshot: ProgressSnapshot) -> None:
            self.snapshots[slot] = snapshot

        async def state(self) -> tuple[tuple[int, float] | None, dict[int, ProgressSnapshot]]:
            return self.first_token, dict(self.snapshots)

        async def stop(self) -> None:
            self.stopping = True
            self.go.set()  # an actor still at the barrier goes on, to be stopped at once

        async def stopped(self) -> bool:
            return getattr(self, "stopping", False)

    @ray.remote(num_cpus=1)
    class LoadActor:
        """One client process on whichever node Ray placed it."""

        def clock(self) -> float:
            return time.perf_counter()

        def node(self) -> dict:
            context = ray.get_runtime_context()
            return {"node_id": context.get_node_id(), "host": socket.gethostname(),
                    "ip": ray.util.get_node_ip_address()}

        def reach(self, base_url: str) -> str | None:
            return reach_error(base_url)

        def run(self, slot: int, of: int, plan: LoadPlan, coordinator) -> tuple[str, Any]:
            """("result", LoadResult), or ("interrupted", (the requests that ended, in flight))
            once the driver's Ctrl-C reached the coordinator."""
            share, budget, arrivals = actor_share(plan, slot, of)

            def at_barrier() -> None:  # in a thread of the load, after its warm-up and prewarm
                ray.get(coordinator.arrive.remote(slot))

            load = EventLoopLoad(share, lambda snap: coordinator.progress.remote(slot, snap),
                                 lambda t: coordinator.tokens.remote(slot, t), at_barrier, budget, arrivals)
            # the driver's stop arrives as the KeyboardInterrupt a Ctrl-C would raise here (a Ray
            # worker ignores SIGINT: handled while the load runs, in the actor's main thread)
            with sigint_raises():
                done = threading.Event()
                threading.Thread(target=interrupt_when_stopped, args=(coordinator, done), daemon=True).start()
                try:
                    return "result", run_loop(load.run())
                except KeyboardInterrupt:
                    partial = load.interrupted()
                    return "interrupted", (partial.partial, partial.in_flight)
                finally:
                    done.set()

    return Coordinator, LoadActor


def interrupt_when_stopped(coordinator, done: threading.Event) -> None:
    """In a load actor: raise KeyboardInterrupt in its main thread (the load) once the driver
    has asked the coordinator to stop."""
    import ray

    while not done.wait(POLL_S):
        if ray.get(coordinator.stopped.remote()):
            if not done.is_set():
                _thread.interrupt_main()
            return


# ------------------------------------------------------------------ the driver
class RayLoad:
    """Places the actors, measures their clocks, runs the barrier, merges their results."""

    def __init__(self, plan: LoadPlan, progress, on_tokens_flowing, on_measured_start):
        self.plan, self.n = plan, plan.client_processes
        self.progress, self.on_tokens_flowing, self.on_measured_start = progress, on_tokens_flowing, on_measured_start
        split_concurrency(plan.concurrency, self.n)  # a bad split fails before any actor starts
        self.tokens_seen, self.started_ray = False, False
        self.actors: list = []
        self.coordinator, self.runs, self.before = None, [], []

    def run(self) -> LoadResult:
        import ray

        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            self.init_ray()
        try:
            Coordinator, LoadActor = actor_classes()
            self.coordinator = coordinator = Coordinator.remote(self.n)
            # SPREAD: one actor per node while there are nodes (each its own machine's core)
            self.actors = [LoadActor.options(scheduling_strategy="SPREAD", name=None).remote() for _ in range(self.n)]
            nodes = ray.get([a.node.remote() for a in self.actors])
            said = unreachable_sentence(self.plan.base_url, nodes,
                                        ray.get([a.reach.remote(self.plan.base_url) for a in self.actors]))
            if said is not None:
                raise ClientsCannotReach(said)
            self.before = before = [measure_offset(a.clock.remote) for a in self.actors]
            self.runs = runs = [a.run.remote(slot, self.n, self.plan, coordinator) for slot, a in enumerate(self.actors)]
            self.wait_for(coordinator, [coordinator.wait_all.remote()], runs, before)
            if self.on_measured_start is not None:
                self.on_measured_start()
            ray.get(coordinator.release.remote())
            self.wait_for(coordinator, runs, runs, before)
            results = [result for _, result in ray.get(runs)]  # an actor's error raises here, with its traceback
            after = [measure_offset(a.clock.remote) for a in self.actors]
            clocks = [combined(b, a) for b, a in zip(before, after)]
            merged = merge_results([shifted(r, c.offset_s) for r, c in zip(results, clocks)],
                                   self.plan.request.api, self.plan.request.model)
            if merged.client is not None:
                merged.client["ray_actors"] = [
                    {"slot": slot, **node, "clock_offset_ms": round(c.offset_s * 1000, 3),
                     "clock_uncertainty_ms": round(c.uncertainty_s * 1000, 3)}
                    for slot, (node, c) in enumerate(zip(nodes, clocks))]
            if self.progress is not None:
                self.relay(coordinator, before, final=True)
            return merged
        except KeyboardInterrupt as exc:
            stopped = self.stop()
            self.end(shutdown=True)
            raise stopped from exc
        finally:
            self.end(shutdown=False)

    def stop(self) -> LoadInterrupted:
        """Ctrl-C: every actor is told to stop (the coordinator), and what each had finished
        comes back within STOP_TIMEOUT_S, moved onto the driver's clock by its offset as
        measured before the load (the one there is); an actor that does not answer is lost."""
        import ray

        parts, in_flight = [], 0
        if self.coordinator is None or len(self.runs) != self.n:
            return LoadInterrupted(merge_results([], self.plan.request.api, self.plan.request.model, interrupted=True), 0)
        ray.get(self.coordinator.stop.remote())
        ready, _ = ray.wait(self.runs, num_returns=self.n, timeout=STOP_TIMEOUT_S)
        for slot, run in enumerate(self.runs):
            if run not in ready:
                continue
            try:
                kind, payload = ray.get(run)
            except ray.exceptions.RayError:
                continue
            part, cut = payload if kind == "interrupted" else (payload, 0)
            parts.append(shifted(part, self.before[slot].offset_s))
            in_flight += cut
        return LoadInterrupted(merge_results(parts, self.plan.request.api, self.plan.request.model,
                                             interrupted=True), in_flight)

    def init_ray(self) -> None:
        import ray

        address = self.plan.ray_address
        if address in (None, "", "local"):
            # "local": a new instance, never one that happens to run on this machine; its files
            # in a folder of its own (Ray's default, /tmp/ray, is every instance's), removed at exit
            temp_dir = tempfile.mkdtemp(prefix="specgate-ray-")
            ray.init(address="local", include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
                     log_to_driver=False, _temp_dir=temp_dir)
            atexit.register(end_local_ray, temp_dir)  # after ray.init's own hook: runs before it
        else:
            ray.init(address=BOOK.reveal(address), log_to_driver=False)  # a URL's user: the cluster needs it

    def wait_for(self, coordinator, refs: list, runs: list, clocks: list[ClockOffset]) -> None:
        """Until every one of `refs` is ready, relaying progress; an actor that ended before
        the barrier (it failed) raises its error at once, rather than hold the others."""
        import ray

        while True:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=POLL_S)
            self.relay(coordinator, clocks)
            if len(ready) == len(refs):
                return
            done, _ = ray.wait(runs, num_returns=len(runs), timeout=0)
            if done and refs is not runs:
                ray.get(done)  # raises what the actor raised
                raise RuntimeError("a load actor ended before the start barrier")

    def relay(self, coordinator, clocks: list[ClockOffset], final: bool = False) -> None:
        import ray

        first, snapshots = ray.get(coordinator.state.remote())
        if first is not None and not self.tokens_seen and self.on_tokens_flowing is not None:
            slot, t = first
            self.on_tokens_flowing(t - clocks[slot].offset_s)
            self.tokens_seen = True
        if self.progress is not None and snapshots:
            snaps = list(snapshots.values())
            head = snapshots.get(0, snaps[0])
            self.progress(ProgressSnapshot(
                done=sum(s.done for s in snaps), total=head.total, in_flight=sum(s.in_flight for s in snaps),
                errors=sum(s.errors for s in snaps), tokens=sum(s.tokens for s in snaps),
                elapsed_s=max(s.elapsed_s for s in snaps), warmup=any(s.warmup for s in snaps), final=final,
                duration_s=head.duration_s))

    def end(self, shutdown: bool) -> None:
        """No actor outlives the load. The Ray instance a load started stays for the next load
        (the other arm, a repeat) and ends with this process (ray.init's own exit hook), or
        at once on Ctrl-C: shutting it down here would sit inside the load's GPU window, which
        ends when the load returns."""
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # already gone with its node
                pass
        self.actors = []
        if shutdown and self.started_ray:
            ray.shutdown()


def end_local_ray(temp_dir: str) -> None:
    """At exit: the load's own Ray instance, then its folder."""
    import ray

    ray.shutdown()
    remove_ray_folder(temp_dir)


def remove_ray_folder(temp_dir: str, within_s: float = RAY_FOLDER_GRACE_S) -> None:
    """Remove a Ray instance's own folder. ray.shutdown signals its processes and returns
    before they have all ended, and a log monitor or raylet still writing there while the
    folder is removed would keep it (one rmtree with its errors ignored said nothing of it).
    So remove until it is gone, and say so if it outlives the grace."""
    deadline = time.monotonic() + within_s
    while True:
        shutil.rmtree(temp_dir, ignore_errors=True)
        if not os.path.exists(temp_dir):
            return
        if time.monotonic() > deadline:
            print(f"specgate: Ray's folder {temp_dir} is still written to {within_s:.0f} s after its instance "
                  "ended; remove it by hand", file=sys.stderr)
            return
        time.sleep(0.2)


def run_ray_load(plan: LoadPlan, progress: Callable[[ProgressSnapshot], None] | None,
                 on_tokens_flowing: Callable[[float], None] | None,
                 on_measured_start: Callable[[], None] | None) -> LoadResult:
    """:func:`harness.load.runner.run_load` over ``plan.client_processes`` Ray actors."""
    return RayLoad(plan, progress, on_tokens_flowing, on_measured_start).run()
