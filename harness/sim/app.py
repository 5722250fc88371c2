"""aiohttp application: SGLang 0.5.x's HTTP routes on top of ``EngineClient``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from harness.sim import disagg, serving
from harness.sim.cli import server_args_dict
from harness.sim.emissions import EmissionLog
from harness.sim.errors import CONTENT_TYPE_ERROR, bad_request, json_response, validation_error
from harness.sim.manager import EngineClient
from harness.sim.tokens import OutputPlan

logger = logging.getLogger("harness.sim")

SGLANG_VERSION = "0.5.23"
HEALTH_CHECK_TIMEOUT_S = 20.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class UvicornStyleAccessLogger(AbstractAccessLogger):
    """One line per request, in uvicorn's format (what SGLang prints)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time_: float) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        client = f"{peer[0]}:{peer[1]}" if peer else "-"
        self.logger.info(
            '%s - "%s %s HTTP/%d.%d" %d %s',
            client, request.method, request.path_qs, request.version.major, request.version.minor,
            response.status, response.reason,
        )


# --sim-fail-after-abort: what every generation request is answered once a client has disconnected mid-stream
ABORT_FAULT_MESSAGE = "Scheduler hit an exception after aborting a request (simulated fault: --sim-fail-after-abort)"


class SimServer:
    """Server-wide state shared by the handlers (one instance per process)."""

    def __init__(self, ns: argparse.Namespace, engine: EngineClient):
        self.ns = ns
        self.engine = engine
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.status = "Starting"
        self.gracefully_exit = False
        self.group_broken = False  # a node of a multi-node server left: the server exits with an error
        self.abort_broke = False  # --sim-fail-after-abort: a client has disconnected, and every later request fails
        self.emissions = EmissionLog(bool(getattr(ns, "sim_record_emissions", False)))  # GET /sim/emissions
        self.disagg = disagg.Disaggregation(ns, engine.metrics)  # a prefill or decode server's part (disagg.py)

    # --------------------------------------------------------------- status
    def is_up(self) -> bool:
        nodes_joined = self.engine.nodes is None or self.engine.nodes.complete  # every node met at the init address
        if (self.status != "Up" and self.engine.ready and nodes_joined
                and time.monotonic() - self.started >= self.ns.sim_startup_s):
            self.status = "Up"
            logger.info("The server is fired up and ready to roll!")
        return self.status == "Up"

    async def announce_when_ready(self) -> None:
        while not self.is_up():
            await asyncio.sleep(0.02)

    # ------------------------------------------------------ request helpers
    @staticmethod
    async def read_json(request: web.Request) -> object | web.Response:
        """Content-type check (validate_json_request) and body parse, SGLang's 400s."""
        content_type = request.headers.get("content-type", "").lower()
        if content_type.split(";", 1)[0].strip() != "application/json":
            return validation_error([dict(CONTENT_TYPE_ERROR)])
        raw = await request.read()
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            pos = getattr(e, "pos", 0)
            msg = getattr(e, "msg", str(e))
            return validation_error(
                [{"type": "json_invalid", "loc": ("body", pos), "msg": "JSON decode error", "input": {}, "ctx": {"error": msg}}]
            )

    async def _run(self, request: web.Request, work: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """Run a generation handler; on any exit close its engine generator (abort if unfinished)."""
        if self.abort_broke:
            work.close()  # never started
            self.emissions.finish(request)
            return bad_request(ABORT_FAULT_MESSAGE, "InternalServerError", 500)
        try:
            return await work
        except ConnectionResetError:
            logger.info("Client disconnected; request aborted.")
            if self.ns.sim_fail_after_abort:  # the fault: an abort that broke the scheduler
                self.abort_broke = True
                logger.error(ABORT_FAULT_MESSAGE)
            return web.Response(status=499)  # never sent: the peer is gone
        finally:
            gen = request.get(serving.GEN_KEY)
            if gen is not None:
                await gen.aclose()
            self.emissions.finish(request)

    async def prepare(self, request: web.Request, body: dict, p: serving.GenParams) -> web.Response | None:
        """A split server's bootstrap before the request is scheduled (harness/sim/disagg.py):
        its error response, or None once it may go on."""
        prepared = await self.disagg.prepare(body, p.prompt_tokens)
        if isinstance(prepared, web.Response):
            self.emissions.finish(request)
            return prepared
        if prepared is not None:
            request[disagg.KEY] = prepared
        return None

    # ------------------------------------------------------------- routes
    async def health(self, request: web.Request) -> web.Response:
        if self.gracefully_exit or not self.is_up():
            return web.Response(status=503)
        if request.path == "/health":
            return web.Response(status=200)
        # /health_generate: run one real token through the scheduler.
        try:
            async with asyncio.timeout(HEALTH_CHECK_TIMEOUT_S):
                async for _st, _updates in self.engine.generate(1, 1, OutputPlan(0, 0, False), False, log_metrics=False):
                    pass
        except TimeoutError:
            logger.error("Health check failed. Server couldn't get a response from detokenizer.")
            return web.Response(status=503)
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.is_up() else 503)

    async def model_info(self, request: web.Request) -> web.Response:
        ns = self.ns
        return json_response(
            {
                "model_path": ns.model_path,
                "served_model_name": ns.served_model_name,
                "tokenizer_path": ns.tokenizer_path or ns.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": serving.WEIGHT_VERSION,
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": ns.disaggregation_mode,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": None,
                "architectures": None,
            }
        )

    def internal_state(self) -> dict:
        args = server_args_dict(self.ns)
        engine = self.engine
        state = {
            **args,
            "world_size": self.ns.tp_size,
            "startup_time": self.started_wall,
            "effective_max_running_requests_per_dp": self.ns.sim_max_running_requests,
            "last_gen_throughput": engine.last_gen_throughput,
        }
        # InternalStateManager._add_speculative: present only once a verify ran.
        accept = engine.avg_spec_accept_length()
        if accept is not None:
            state["avg_spec_accept_length"] = accept
        return state

    async def server_info(self, request: web.Request) -> web.Response:
        return json_response(
            {
                **server_args_dict(self.ns),
                "launch_command": self.ns.launch_command,
                "max_total_num_tokens": 1_000_000,
                "kv_events": None,
                "startup_time": self.started_wall,
                "internal_states": [self.internal_state()],
                "version": SGLANG_VERSION,
                "frontend": "python",
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        name = self.ns.served_model_name
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.ns.context_length,
                    }
                ],
            }
        )

    async def model_card(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if model != self.ns.served_model_name:
            return json_response(
                {
                    "error": {
                        "message": f"The model '{model}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                status=404,
            )
        return json_response(
            {"id": model, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": model,
             "parent": None, "max_model_len": self.ns.context_length}
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.engine.metrics.render(), headers={"Content-Type": self.engine.metrics.content_type})

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.flush_cache():
            return web.Response(
                text=(
                    "Cache flushed.\nPlease check backend logs for more details. "
                    "(When there are running or waiting requests, the operation will not be performed.)\n"
                )
            )
        return web.Response(text="Flush cache failed.\n", status=400)

    async def sim_gpu(self, request: web.Request) -> web.Response:
        """Simulator-only (not SGLang): one reading per TP rank's simulated GPU."""
        gpu = self.engine.gpu
        return json_response({"gpus": gpu.read(), **gpu.describe()})

    async def emissions_route(self, request: web.Request) -> web.Response:
        """Simulator-only (not SGLang): each finished streaming request's arrival and chunk
        emission times (harness/sim/emissions.py); DELETE empties the list."""
        if request.method == "DELETE":
            return json_response({"cleared": self.emissions.clear()})
        return json_response(self.emissions.payload())

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.emissions.start(request)
        body = await self.read_json(request)
        if isinstance(body, web.Response):
            return body
        p = serving.parse_chat(body, self.ns.context_length)
        if isinstance(p, web.Response):
            return p
        if (refused := await self.prepare(request, body, p)) is not None:
            return refused
        return await self._run(request, serving.chat_completions(request, self.engine, p))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.emissions.start(request)
        body = await self.read_json(request)
        if isinstance(body, web.Response):
            return body
        p = serving.parse_completion(body)
        if isinstance(p, web.Response):
            return p
        if (refused := await self.prepare(request, body, p)) is not None:
            return refused
        return await self._run(request, serving.completions(request, self.engine, p))

    async def generate(self, request: web.Request) -> web.StreamResponse:
        self.emissions.start(request)
        body = await self.read_json(request)
        if isinstance(body, web.Response):
            return body
        parsed = serving.parse_generate(body)
        if isinstance(parsed, web.Response):
            return parsed
        p, rid = parsed
        if (refused := await self.prepare(request, body, p)) is not None:
            return refused
        return await self._run(request, serving.generate(request, self.engine, p, rid))


def build_app(server: SimServer) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    s = server
    r = app.router
    r.add_get("/health", s.health, allow_head=False)
    r.add_get("/health_generate", s.health, allow_head=False)
    r.add_get("/ready", s.ready, allow_head=False)
    r.add_get("/get_model_info", s.model_info, allow_head=False)
    r.add_get("/model_info", s.model_info, allow_head=False)
    r.add_get("/get_server_info", s.server_info, allow_head=False)
    r.add_get("/server_info", s.server_info, allow_head=False)
    r.add_get("/v1/models", s.models, allow_head=False)
    r.add_get("/v1/models/{model:.+}", s.model_card, allow_head=False)
    r.add_get("/metrics", s.metrics, allow_head=False)
    r.add_get("/flush_cache", s.flush_cache, allow_head=False)
    r.add_post("/flush_cache", s.flush_cache)
    r.add_get("/sim/gpu", s.sim_gpu, allow_head=False)  # simulator-only
    r.add_get("/sim/emissions", s.emissions_route, allow_head=False)  # simulator-only
    r.add_delete("/sim/emissions", s.emissions_route)
    r.add_post("/v1/chat/completions", s.chat)
    r.add_post("/v1/completions", s.completions)
    r.add_post("/generate", s.generate)
    r.add_put("/generate", s.generate)
    return app
