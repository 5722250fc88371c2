"""Prefill/decode disaggregation, SGLang's way as far as its router and a measurement need.

SGLang splits a request over two servers (``--disaggregation-mode prefill|decode``); its
router (``--pd-disaggregation``) sends every request to one of each at once, the body
extended with ``bootstrap_host``, ``bootstrap_port`` and ``bootstrap_room`` (a u64 naming
the request on the prefill side), and answers the client with the decode server's reply.

- The **prefill** server runs a bootstrap server on ``--disaggregation-bootstrap-port``
  (SGLang's ``/route`` and ``/health``). A request waits there until its decode server has
  bootstrapped the room (SGLang's prefill bootstrap queue: no forward before the decode
  side has reserved room for the KV), then is prefilled (its first token comes out of the
  prefill step), then its KV is sent, then the prefill server answers (one token, finish
  ``length``). A room no decode server bootstraps within ``--sim-bootstrap-timeout-s`` fails
  the request (``sglang:num_bootstrap_failed_reqs_total``).
- The **decode** server bootstraps the room at the prefill's bootstrap server, waits for
  the KV, then schedules the request already prefilled: its first token goes out in the
  next (prebuilt) step without a prefill's compute, the rest are decode steps. Its TTFT runs
  from the request's arrival, the wait for the prefill and the transfer included.

What is simulated and not SGLang's wire: the KV transfer (RDMA through Mooncake or NIXL in
SGLang, between the two servers' GPUs) is a wait of ``--sim-kv-transfer-base-ms`` plus
``--sim-kv-transfer-ms-per-token`` per prompt token, and the handshake runs over two
simulator-only routes of the bootstrap server (``PUT /sim/kv/<room>``: the decode side
bootstraps the room; ``GET /sim/kv/<room>``: it waits for the KV). Each server reports the
stages of SGLang's ``sglang:per_stage_req_latency_seconds`` histogram that it measures
(prefill: ``prefill_bootstrap``, ``prefill_waiting`` (its queue), ``prefill_forward``,
``prefill_transfer_kv_cache``; decode: ``decode_bootstrap``, ``decode_transferred``,
``decode_waiting`` (KV in to first token out)) and ``sglang:kv_transfer_latency_ms``.

A request with SGLang's fake bootstrap host (``2.2.2.2``, its warm-up's) runs on the server
alone, as SGLang's fake transfer backend does; one with no bootstrap fields is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import aiohttp
from aiohttp import web

from harness.sim.errors import bad_request, json_response

logger = logging.getLogger("harness.sim")

MODES = ("null", "prefill", "decode")
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # sglang.srt.disaggregation.utils: no transfer (warm-up, health checks)
DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default
KEY = "sim_disaggregation"  # the request's Prepared, for serving._open
U64 = 2**64


@dataclass(frozen=True)
class Bootstrap:
    """Where a request's prefill side is: the router's three fields."""

    host: str
    port: int
    room: int

    @property
    def fake(self) -> bool:
        return self.host == FAKE_BOOTSTRAP_HOST


def bootstrap_of(body: dict, mode: str) -> Bootstrap | web.Response:
    """The request's bootstrap fields, or SGLang's 400 for missing or malformed ones."""
    host, port, room = body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room")
    if host is None and room is None:
        return bad_request(f"This server runs with --disaggregation-mode {mode}: a request needs bootstrap_host, "
                           f"bootstrap_port and bootstrap_room (send it through the router's --pd-disaggregation)")
    if not isinstance(host, str) or not host:
        return bad_request(f"bootstrap_host must be a host name, got {host!r}")
    if isinstance(room, bool) or not isinstance(room, int) or not 0 <= room < U64:
        return bad_request(f"bootstrap_room must be an unsigned 64-bit integer, got {room!r}")
    if host != FAKE_BOOTSTRAP_HOST and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        return bad_request(f"bootstrap_port must be a port number, got {port!r}")
    return Bootstrap(host, int(port or 0), room)


@dataclass
class Prepared:
    """What the bootstrap settled for one request, read by serving._open."""

    arrived: float  # perf_counter at arrival: the server's TTFT counts from here
    max_new_tokens: int | None = None  # the prefill side generates only the first token
    prefilled: bool = False  # the decode side: the KV came from the prefill server
    finish: Callable[[Any], Any] | None = None  # the prefill side: sends the KV before the last output
    fail: Callable[[str], None] | None = None  # the prefill side: its request ended without a KV to send


class Room:
    """One request's meeting point on the prefill server."""

    def __init__(self) -> None:
        self.bootstrapped = asyncio.Event()  # the decode side has reserved room for the KV
        self.ready = asyncio.Event()  # the KV has arrived (or the prefill failed)
        self.kv: dict[str, Any] | None = None  # what the decode side is told; None: failed
        self.error: str | None = None
        self.created = time.monotonic()


class Disaggregation:
    """A server's part in a disaggregated pair (mode prefill or decode)."""

    def __init__(self, ns: argparse.Namespace, metrics) -> None:
        self.ns, self.metrics = ns, metrics
        self.mode = ns.disaggregation_mode
        self.rooms: dict[int, Room] = {}
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None

    @property
    def active(self) -> bool:
        return self.mode in ("prefill", "decode")

    # --- the bootstrap server (prefill) -------------------------------------------------
    async def start(self) -> None:
        """The prefill side's bootstrap server; the decode side's HTTP client."""
        if self.mode == "prefill":
            app = web.Application()
            app.router.add_route("*", "/route", self.route)
            app.router.add_get("/health", self.bootstrap_health)
            app.router.add_put("/sim/kv/{room}", self.bootstrap_room)
            app.router.add_get("/sim/kv/{room}", self.await_kv)
            self.runner = web.AppRunner(app, access_log=None)
            await self.runner.setup()
            site = web.TCPSite(self.runner, self.ns.host, self.ns.disaggregation_bootstrap_port, reuse_address=True)
            await site.start()
            logger.info(f"Bootstrap server listening on {self.ns.host}:{self.ns.disaggregation_bootstrap_port} "
                        f"(transfer backend {self.ns.disaggregation_transfer_backend}: simulated)")
        elif self.mode == "decode":
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.runner is not None:
            await self.runner.cleanup()

    async def route(self, request: web.Request) -> web.Response:
        """SGLang's /route: GET says where this prefill server's ranks are (the one the decode side asks)."""
        if request.method == "GET":
            return json_response({"rank_ip": self.ns.host, "rank_port": self.ns.disaggregation_bootstrap_port,
                                  "tp_size": self.ns.tp_size, "dp_size": 1})
        if request.method == "PUT":
            return web.Response(text="OK")
        return web.Response(text="Method not allowed", status=405, content_type="application/json")

    async def bootstrap_health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    def room(self, number: int) -> Room:
        self.expire()
        return self.rooms.setdefault(number, Room())

    def expire(self) -> None:
        """Rooms nobody finished within twice the bootstrap timeout are dropped (bounded memory)."""
        limit = time.monotonic() - 2 * self.ns.sim_bootstrap_timeout_s
        for number in [n for n, r in self.rooms.items() if r.created < limit]:
            del self.rooms[number]

    @staticmethod
    def room_number(request: web.Request) -> int | None:
        try:
            return int(request.match_info["room"])
        except ValueError:
            return None

    async def bootstrap_room(self, request: web.Request) -> web.Response:
        """Simulator-only: the decode side bootstraps a room (SGLang: its KV receiver's handshake)."""
        number = self.room_number(request)
        if number is None:
            return web.Response(status=400, text="room must be an integer")
        self.room(number).bootstrapped.set()
        return web.Response(text="OK")

    async def await_kv(self, request: web.Request) -> web.Response:
        """Simulator-only: the decode side waits for a room's KV (SGLang: RDMA writes and a poll)."""
        number = self.room_number(request)
        if number is None:
            return web.Response(status=400, text="room must be an integer")
        room = self.room(number)
        try:
            await asyncio.wait_for(room.ready.wait(), timeout=self.ns.sim_bootstrap_timeout_s)
        except asyncio.TimeoutError:
            return json_response({"error": f"room {number}: no KV within {self.ns.sim_bootstrap_timeout_s:g} s"}, 504)
        self.rooms.pop(number, None)
        if room.kv is None:
            return json_response({"error": room.error or "the prefill failed"}, 500)
        return json_response(room.kv)

    # --- a request on either side -------------------------------------------------------
    async def prepare(self, body: dict, prompt_tokens: int) -> Prepared | web.Response | None:
        """Before a generation request is scheduled: None on a server that is not split;
        the prefill side waits for its room's bootstrap; the decode side bootstraps the room
        and waits for its KV. A failure is the request's error response."""
        if not self.active:
            return None
        arrived = time.perf_counter()
        boot = bootstrap_of(body, self.mode)
        if isinstance(boot, web.Response):
            return boot
        if boot.fake:  # SGLang's fake transfer: the request runs here alone
            return Prepared(arrived)
        if self.mode == "prefill":
            return await self.prepare_prefill(boot, arrived, prompt_tokens)
        return await self.prepare_decode(boot, arrived)

    async def prepare_prefill(self, boot: Bootstrap, arrived: float, prompt_tokens: int) -> Prepared | web.Response:
        room = self.room(boot.room)
        try:
            await asyncio.wait_for(room.bootstrapped.wait(), timeout=self.ns.sim_bootstrap_timeout_s)
        except asyncio.TimeoutError:
            self.rooms.pop(boot.room, None)
            self.metrics.bootstrap_failed()
            return bad_request(f"Bootstrap timeout: no decode server bootstrapped room {boot.room} within "
                               f"{self.ns.sim_bootstrap_timeout_s:g} s", "InternalServerError", 500)
        bootstrapped = time.perf_counter()
        self.metrics.stage("prefill_bootstrap", bootstrapped - arrived)

        async def send_kv(st: Any) -> None:
            """After the prefill step, before the prefill server answers: the KV goes to the decode side."""
            forwarded = time.perf_counter()
            started = st.prefill_started if st.prefill_started is not None else bootstrapped
            self.metrics.stage("prefill_waiting", started - bootstrapped)
            self.metrics.stage("prefill_forward", forwarded - started)
            await asyncio.sleep(self.transfer_s(prompt_tokens))
            sent = time.perf_counter()
            self.metrics.stage("prefill_transfer_kv_cache", sent - forwarded)
            self.metrics.kv_transfer(sent - forwarded)
            room.kv = {"prompt_tokens": prompt_tokens, "cached_tokens": st.cached_tokens}
            room.ready.set()

        def no_kv(why: str) -> None:
            """The prefill ended without its KV (aborted): the decode side hears so at once."""
            if not room.ready.is_set():
                room.error = why
                room.ready.set()

        return Prepared(arrived, max_new_tokens=1, finish=send_kv, fail=no_kv)

    def transfer_s(self, prompt_tokens: int) -> float:
        ns = self.ns
        return (ns.sim_kv_transfer_base_ms + ns.sim_kv_transfer_ms_per_token * prompt_tokens) / 1000.0

    async def prepare_decode(self, boot: Bootstrap, arrived: float) -> Prepared | web.Response:
        assert self.session is not None
        base = f"http://{boot.host}:{boot.port}/sim/kv/{boot.room}"
        try:
            async with self.session.put(base, timeout=aiohttp.ClientTimeout(total=self.ns.sim_bootstrap_timeout_s)) as r:
                if r.status != 200:
                    raise aiohttp.ClientError(f"HTTP {r.status}")
            bootstrapped = time.perf_counter()
            self.metrics.stage("decode_bootstrap", bootstrapped - arrived)
            async with self.session.get(base, timeout=aiohttp.ClientTimeout(total=self.ns.sim_bootstrap_timeout_s + 5)) as r:
                kv = await r.json(content_type=None)
                if r.status != 200:
                    self.metrics.transfer_failed()
                    return bad_request(f"KV transfer failed for room {boot.room}: {kv.get('error', r.status)}",
                                       "InternalServerError", 500)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            self.metrics.bootstrap_failed()
            return bad_request(f"Bootstrap failed: the prefill server's bootstrap server at {boot.host}:{boot.port} "
                               f"did not answer for room {boot.room} ({exc or type(exc).__name__})",
                               "InternalServerError", 500)
        transferred = time.perf_counter()
        self.metrics.stage("decode_transferred", transferred - bootstrapped)
        return Prepared(arrived, prefilled=True, finish=None)


async def finishing(gen: AsyncIterator, prepared: Prepared) -> AsyncIterator:
    """The generator's outputs, the last one held back until the KV transfer is done; closing
    this one closes ``gen`` (an unfinished request is aborted in the engine) and tells the
    decode side that no KV is coming."""
    sent = False
    try:
        async for st, updates in gen:
            if updates and updates[-1].finish is not None:
                await prepared.finish(st)
                sent = True
            yield st, updates
    finally:
        if not sent and prepared.fail is not None:
            prepared.fail("the prefill was aborted before its KV was sent")
        await gen.aclose()
