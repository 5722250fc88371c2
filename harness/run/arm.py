"""One arm on its own server: start it, measure its workload, keep it up for the API
checks, stop it. What comes out is the arm's `ArmOutcome`; what a suite gets is an
`ArmRun` (the outcome, the live server and client, the plain arm's result and this arm's
block in the reference run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from harness.measure.agreement import disagreements
from harness.gates.client_bound import judge as judge_client
from harness.http_client import ClientError, ModelChoiceError, ServerClient
from harness.config.compose import Arm
from harness.engines import Engine, engine_of
from harness.engines.base import METRICS_WINDOW, CacheReset
from harness.servers.base import ImageError
from harness.load import LoadInterrupted, LoadPlan, LoadResult, run_load
from harness.gates.lossless import top_logprobs_to_ask
from harness.load.sizing import PromptTokenizer, SizingError, local_tokenizer
from harness.load.ray_clients import ClientsCannotReach
from harness.measure.metrics import ArmResult, apply_server_window, combine_repeats, summarize
from harness.measure.fleet import (fleet_summary, imbalances, prefill_imbalances, router_counters, router_window,
                                   whole_window, worker_windows)
from harness.measure.timeslices import timeslices_block
from harness.run.outcome import ArmOutcome
from harness.record.recorder import Recorder
from harness.measure.server_metrics import Snapshot, parse as parse_metrics
from harness.servers import Server, ServerError, Session, make_server
from harness.telemetry.base import TelemetryUnavailable, make_source, resolve_uuids
from harness.telemetry.energy import chunk_arrivals, energy_summary, joules_per_token
from harness.telemetry.sampler import Sampler
from harness.telemetry.summary import summarize as summarize_telemetry, write_files


class ArmFailed(Exception):
    """An arm could not be measured (server failed to start, died, or answered nothing)."""


@dataclass
class ArmRun:
    """A measured arm whose server is still up: what the suites receive."""

    arm: Arm
    server: Server
    client: ServerClient
    model: str
    outcome: ArmOutcome
    plain: ArmResult | None = None  # the plain-decoding arm's result in this run (None for that arm itself)
    reference: dict[str, Any] | None = None  # this arm's block in the reference run (gate.baseline)
    reference_label: str = ""

    @property
    def name(self) -> str:
        return self.arm.name

    @property
    def cfg(self):
        return self.arm.cfg

    @property
    def result(self) -> ArmResult:
        return self.outcome.result


class ArmSession:
    """The lifecycle of one arm's server and its measurement; failures end in ArmFailed
    with the outcome's status and error set."""

    def __init__(self, arm: Arm, outcome: ArmOutcome, recorder: Recorder, session: Session,
                 progress: Callable[[Any], None] | None = None):
        self.arm, self.outcome, self.recorder, self.progress = arm, outcome, recorder, progress
        self.engine: Engine = engine_of(arm.typed)
        self.server: Server = make_server(arm.name, arm.typed, recorder.server_log(arm.name), session, recorder.scrub)
        self.client: ServerClient | None = None  # the server's address (a fleet's: its router's)
        self.member_clients: list[ServerClient] = []  # each worker's own (one: the server itself)
        self.model = ""
        self.streamed: list[tuple[float, int]] = []  # (arrival, tokens) of every chunk: joules per token
        self.run_starts: list[float] = []  # each repeat's t0 of its request times (perf_counter s)
        self.gpu_samples: list[Any] = []  # the telemetry's samples, for the figures over time

    # --- the server --------------------------------------------------------------------
    def start(self) -> None:
        """Start the server and learn what it serves; ArmFailed when it can't."""
        self.outcome.status = "starting"
        try:
            self.server.start()
        except (ServerError, ImageError) as exc:
            self.outcome.server = self.server.describe()
            self.fail("server_failed", str(exc))
        self.outcome.status, self.outcome.server = "measuring", self.server.describe()
        self.client = ServerClient(self.server.base_url)
        self.member_clients = [ServerClient(member.base_url) for member in self.server.members()]
        try:
            self.model = self.client.served_model(self.engine.served_model_fallback, self.arm.cfg.server.served_model_name)
            self.outcome.model = self.model  # what every request of the arm is sent to, in the record
            # a worker's own info routes (a router answers its own /get_server_info)
            self.outcome.server_version = self.engine.server_version(self.member_clients[0])
        except ModelChoiceError as exc:
            self.fail("server_failed", f"arm '{self.arm.name}': {exc}")
        except ClientError as exc:
            self.fail("server_failed", f"arm '{self.arm.name}': the server is healthy but its info routes fail: {exc}")

    def stop(self) -> None:
        self.server.stop()
        self.recorder.scrub_server_log(self.arm.name)

    def fail(self, status: str, message: str) -> None:
        self.outcome.status, self.outcome.error = status, message
        raise ArmFailed(message)

    @property
    def is_fleet(self) -> bool:
        """Several servers answer on their own (a fleet's workers): counters are read from each."""
        return len(self.member_clients) > 1

    # --- the measurement ---------------------------------------------------------------
    def measure(self) -> None:
        """The workload `gate.repeats` times on one server; the GPUs are sampled throughout,
        with one load window per repeat."""
        cfg, name = self.arm.cfg, self.arm.name
        progress = (lambda snapshot: self.progress(name, snapshot)) if self.progress else None
        sampler = self.start_telemetry()
        repeats, alive = [], True
        try:
            for repeat in range(max(1, cfg.gate.repeats)):
                repeats.append(self.measure_once(repeat, sampler, progress))
                alive = self.server.is_alive()  # asked once per repeat: an attached server's may be slow
                if not alive:
                    break
        finally:
            if sampler is not None:
                self.finish_telemetry(sampler)
        self.outcome.result = result = combine_repeats(name, repeats)
        self.outcome.timeslices = timeslices_block([line for line in self.outcome.request_lines
                                                    if not line.get("interrupted_load")],
                                                   cfg.record.timeslice_s, self.gpu_samples, self.run_starts)
        energy = joules_per_token(self.outcome.gpu)
        if energy is not None:  # a registry metric (joules_per_token) measured by the arm's telemetry
            result.figures["joules_per_token"] = energy
        result.client.update(judge_client(result, result.client, cfg.gate.client_bound))
        if self.is_fleet:  # each worker's share, summed over the repeats
            windows = self.outcome.server_windows
            self.outcome.fleet = fleet_summary(cfg.router.policy, [w.get("workers", []) for w in windows],
                                               [w.get("ttft_split_ms", {}) for w in windows])
        self.outcome.server = self.server.describe()  # what the load taught (e.g. a slow health route)
        if not alive:
            self.fail("server_died", self.server.failure(
                f"arm '{name}': the server {self.server.exit_description()} during the load "
                f"({result.requests_failed} requests failed)").args[0])
        self.outcome.status = "measured"

    def measure_once(self, repeat: int, sampler: Sampler | None, progress) -> ArmResult:
        load, result = self.run_workload(self.arm.cfg.workload, repeat, sampler, progress)
        self.run_starts.append(load.run_start)
        return result

    def run_workload(self, workload: Any, repeat: int, sampler: Sampler | None, progress,
                     **flags: Any) -> tuple[LoadResult, ArmResult]:
        """One load of `workload` (the arm's, or a capacity probe's) on the running server:
        the requests kept (with `flags` on each line) and the load's figures."""
        before: list[Readings] = []  # the server's counters once the warm-up is done
        load: LoadResult | None = None
        try:  # each repeat's load is its own GPU window; its warm-up is not load
            load = run_load(self.load_plan(workload), progress=progress,
                            on_tokens_flowing=sampler.mark_load_start if sampler else None,
                            on_measured_start=lambda: before.append(self.start_window(repeat, **flags)))
        except LoadInterrupted as interrupted:
            self.keep_interrupted_load(repeat, interrupted, **flags)
            raise  # still a KeyboardInterrupt: pytest ends the run as interrupted
        # the server's /tokenize failed (no prompt of the asked length), or Ray actors run on
        # nodes the server's URL does not reach
        except (SizingError, ClientsCannotReach) as exc:
            self.fail("server_failed", f"arm '{self.arm.name}': {exc}")
        finally:
            if sampler is not None:
                # the window closes when the last measured request ended, not when run_load
                # returns: its clients wind down after that (Ray actors report back, processes
                # join), and samples of that idle GPU taken "under load" failed a short load's
                # utilization floor where it should have been too short to judge
                sampler.mark_load_end(load.end_time if load is not None and load.measured else None)
        self.keep_requests(repeat, load, **flags)
        self.streamed += chunk_arrivals(load.records)
        result = summarize(self.arm.name, load, self.server_accept_length(), self.arm.cfg.record.steady_min_fraction)
        server_side = self.server_window(before)
        self.outcome.server_windows.append(server_side)
        for figure, value in server_figures(server_side).items():  # registry metrics from the server's counters
            result.figures[figure] = value
        self.check_agreement(result, server_side, repeat)
        # speculation is in the server's counters only: the engine's way, or a fleet's (SGLang's
        # router re-serializes each request and drops return_spec_tokens_details, so no
        # per-request details come back through it; the workers' counters, summed, still count)
        if self.engine.spec_stats == METRICS_WINDOW or self.is_fleet:
            result = apply_server_window(result, load, server_side)
        return load, result

    def load_plan(self, workload: Any) -> LoadPlan:
        """`workload` against this arm's server, with its engine's hooks: the typed plan the load runs."""
        return LoadPlan.of(workload, self.server.base_url, self.model, request_extras=self.request_extras,
                           spec_details=self.engine.spec_details, count_tokens=self.engine.token_counter(self.arm.typed),
                           prompt_tokenizer=self.prompt_tokenizer())

    def prompt_tokenizer(self) -> PromptTokenizer | None:
        """What sizes random prompts to workload.input_len tokens (shared-prefix prompts and a
        trace's to theirs): the configured tokenizer folder, else the engine's (its /tokenize, or
        the simulator's exact count)."""
        workload = self.arm.cfg.workload
        sized = (workload.trace is not None or workload.shared_prefix is not None
                 or (not workload.dataset and not workload.prompt and workload.input_len))
        if not sized:
            return None
        if workload.tokenizer:  # config validation has read it once already
            return local_tokenizer(workload.tokenizer)
        # a worker's own /tokenize: a router has none
        return self.engine.prompt_tokenizer(self.arm.typed, self.server.members()[0].base_url, self.model)

    def check_agreement(self, result: ArmResult, server_side: dict[str, Any], repeat: int) -> None:
        """This repeat's client figures against the server's own over the same requests
        (before repeats are combined into medians, which no server window matches)."""
        found = disagreements(result, server_side, repeat)
        if found is not None:
            self.outcome.client_server_disagreement = (self.outcome.client_server_disagreement or []) + found

    def request_extras(self, api: str) -> dict[str, Any]:
        """The engine's fields for every request body, and those asking for output token ids
        and logprobs when the experiment wants them (a lossless gate, workload.logprobs)."""
        extras = self.engine.request_extras(api)
        top_logprobs = top_logprobs_to_ask(self.arm.cfg)
        if top_logprobs is not None:
            extras = {**extras, **self.engine.output_details(api, top_logprobs)}
        return extras

    def keep_requests(self, repeat: int, load: LoadResult, **flags: Any) -> None:
        """The load's requests into the record's per-request files (and memory, for reference-run verdicts)."""
        lines = [{**r.to_json(), "repeat": repeat, **flags} for r in load.records]
        self.outcome.request_lines += lines
        if self.arm.cfg.record.keep_requests:
            self.recorder.add_requests(self.arm.name, lines)

    def keep_interrupted_load(self, repeat: int, interrupted: LoadInterrupted, **flags: Any) -> None:
        """Ctrl-C or SIGTERM mid-load: the requests that finished are kept, flagged
        `interrupted_load`, and the arm says it was interrupted. It gets no metrics: a cut
        load measures the interruption as much as the server."""
        self.keep_requests(repeat, interrupted.partial, interrupted_load=True, **flags)
        self.outcome.status = "interrupted"
        self.outcome.interrupted_load = {"repeat": repeat, "finished": len(interrupted.partial.measured),
                                         "in_flight": interrupted.in_flight, **flags}

    # --- GPUs --------------------------------------------------------------------------
    def start_telemetry(self) -> Sampler | None:
        """Sample the server's GPUs from before the load; None when telemetry is off or
        cannot run here (the reason goes into the arm's `gpu` block, and the GPU suite
        skips with it)."""
        settings = self.arm.cfg.telemetry
        if settings.source == "off":
            return None
        try:
            source = make_source(settings.source, base_urls=self.server.gpu_urls())
            wanted = list(settings.gpus) if settings.gpus else self.server.gpu_ids()
            source.open(resolve_uuids(source, wanted) if wanted else None, None)
        except TelemetryUnavailable as exc:
            self.outcome.gpu = {"source": settings.source, "unavailable": str(exc)}
            return None
        sampler = Sampler(source, interval_s=settings.interval_s, ramp_in_s=settings.ramp_in_s)
        sampler.start()
        time.sleep(settings.idle_s)  # the idle snapshot, before the warm-up touches the GPUs
        sampler.mark_idle_end()
        return sampler

    def finish_telemetry(self, sampler: Sampler) -> None:
        """Sample a little past the last load window, then summarize, plot, record."""
        try:
            time.sleep(self.arm.cfg.telemetry.after_s)
        finally:
            telemetry = sampler.stop()
            sampler.source.close()
        self.gpu_samples = list(telemetry.samples)
        self.outcome.gpu = {**summarize_telemetry(telemetry), "ramp_in_s": telemetry.ramp_in_s,
                            "energy": energy_summary(telemetry, self.streamed)}
        self.recorder.write_arm_files(self.arm.name, "telemetry", lambda folder: write_files(folder, telemetry))

    # --- the server's own view ---------------------------------------------------------
    def start_window(self, repeat: int, **flags: Any) -> "Readings":
        """Just before a load's measured requests (its warm-up done, nothing in flight):
        empty the prefix cache, then take the /metrics baseline. In this order the window
        never holds a flush (SGLang's also resets its speculative totals), and every arm and
        repeat starts from the same, empty cache, whoever used the server before."""
        self.reset_prefix_cache(repeat, **flags)
        return self.metrics_snapshot()

    def reset_prefix_cache(self, repeat: int, **flags: Any) -> None:
        """The engine's reset, or why there was none, into the arm's record (per repeat)."""
        if not self.arm.cfg.workload.reset_prefix_cache:
            done = CacheReset(False, None, "workload.reset_prefix_cache=false: the cache was left as the load before left it")
        else:  # each worker's own cache, through its own route (a router may forward none, or another engine's)
            done = every_worker_reset([self.engine.reset_prefix_cache(client, self.arm.typed) for client in self.member_clients])
        self.outcome.prefix_cache_resets.append({"repeat": repeat, **flags, **done.to_json()})

    def metrics_snapshot(self) -> "Readings":
        """Every worker's counters (one: the server's), and a fleet's router's."""
        router_url = self.server.router_metrics_url()
        return Readings([self.member_snapshot(client) for client in self.member_clients],
                        read_router(router_url) if router_url else None)

    def member_snapshot(self, client: ServerClient) -> Snapshot | None:
        try:
            return parse_metrics(client.metrics_text(), self.engine.prometheus)
        except (ClientError, ValueError):
            return None  # a server without /metrics: the window stays empty

    def server_window(self, before: list["Readings"]) -> dict[str, Any]:
        """The server's own TTFT/ITL means and speculation counters over this load (none, with
        the reason, across a counter reset: the client's figures stand, the arm is not failed);
        a fleet's are its workers' summed, with each worker's own and the router's beside."""
        after = self.metrics_snapshot()
        if not before:
            return {}
        first = before[0]
        roles = self.server.member_roles() if self.is_fleet else ["server"]
        whole = whole_window(self.engine, roles, first.members, after.members)
        if self.is_fleet:
            members = [(m.name, m.base_url) for m in self.server.members()]
            workers = worker_windows(self.engine, members, first.members, after.members, roles)
            whole = {**whole, "workers": workers, "imbalance": imbalances(workers),
                     **({"prefill_imbalance": prefill_imbalances(workers)} if "prefill" in roles else {}),
                     "router": router_window(first.router, after.router)}
        return whole

    def server_accept_length(self) -> float | None:
        """The server-cumulative accept length: only a labelled fallback (it includes warm-up;
        a fleet has none: each worker's is its own)."""
        if not self.arm.cfg.drafter.algorithm or self.is_fleet:
            return None
        return self.engine.server_accept_length(self.member_clients[0])


def server_figures(server_side: dict[str, Any]) -> dict[str, float]:
    """The registry metrics a server window gives: the prefix-cache hit rate; a fleet's worker
    imbalance; a split fleet's KV transfer per request (those it has)."""
    figures = {"prefix_cache_hit_rate": server_side.get("prefix_cache_hit_rate"),
               "worker_imbalance": (server_side.get("imbalance") or {}).get("requests_max_over_mean"),
               "kv_transfer_ms": (server_side.get("ttft_split_ms") or {}).get("transfer_ms")}
    return {name: value for name, value in figures.items() if value is not None}


@dataclass
class Readings:
    """The /metrics counters at one moment: each worker's (None: it did not answer) and a
    fleet router's own (None: no router, or it did not answer)."""

    members: list[Snapshot | None]
    router: dict[str, float] | None = None


def read_router(url: str) -> dict[str, float] | None:
    try:
        with ServerClient(url) as client:
            return router_counters(client.metrics_text())
    except (ClientError, ValueError):
        return None


def every_worker_reset(done: list[CacheReset]) -> CacheReset:
    """Every worker's reset as one: reset only when each was (the first that was not says why)."""
    failed = [d for d in done if not d.reset]
    if not failed:
        return done[0]
    reason = failed[0].reason if len(done) == 1 else f"{len(failed)} of {len(done)} workers: {failed[0].reason}"
    return CacheReset(False, failed[0].route, reason)
