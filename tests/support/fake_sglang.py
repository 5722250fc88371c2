"""A fake SGLang server over real loopback HTTP (aiohttp in a daemon thread), reproducing the SSE
shapes of SGLang 0.5.x; the prompt picks a misbehaviour (see tests/servers/test_client.py's docstring).
Shared by the client, load and dataset tests."""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web

class ThreadLoop:
    """An asyncio loop in a daemon thread, for servers the tests talk to."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        async def cancel_rest():
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.call(cancel_rest(), timeout=5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


class FakeSGLang:
    def __init__(
        self,
        spec: bool = True,
        accept_pattern=(3, 2, 3, 1),
        step_s: float = 0.002,
        continuous_usage: bool = True,
        model: str = "fake-model",
        health_ready_after: int = 0,
    ):
        self.spec = spec
        self.accept_pattern = list(accept_pattern)
        self.step_s = step_s
        self.continuous_usage = continuous_usage
        self.model = model
        self.health_ready_after = health_ready_after
        self.health_calls = 0
        self.bodies: list[dict] = []
        self.active = 0
        self.max_active = 0
        self.models_payload = None  # override /v1/models body
        self.tl = ThreadLoop()
        self.port = self.tl.call(self._start())
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self):
        app = web.Application()
        app.router.add_get("/health", self.h_health)
        app.router.add_get("/health_generate", self.h_health)
        app.router.add_get("/get_model_info", self.h_model_info)
        app.router.add_get("/get_server_info", self.h_server_info)
        app.router.add_get("/v1/models", self.h_models)
        app.router.add_get("/metrics", self.h_metrics)
        app.router.add_post("/flush_cache", self.h_flush)
        app.router.add_get("/bad_json", self.h_bad_json)
        app.router.add_get("/boom", self.h_boom)
        app.router.add_post("/v1/chat/completions", self.h_stream)
        app.router.add_post("/v1/completions", self.h_stream)
        app.router.add_post("/generate", self.h_stream)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=2048)  # 300 clients connect at once
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    def close(self):
        try:
            self.tl.call(self.runner.cleanup())
        finally:
            self.tl.stop()

    # -- control plane
    async def h_health(self, request):
        self.health_calls += 1
        if self.health_calls <= self.health_ready_after:
            return web.Response(status=503)
        return web.Response(status=200)

    async def h_model_info(self, request):
        return web.json_response({"model_path": "/models/fake", "is_generation": True})

    async def h_server_info(self, request):
        states = [{"avg_spec_accept_length": 2.5, "last_gen_throughput": 100.0}] if self.spec else [{}]
        return web.json_response({"version": "0.5.23", "internal_states": states})

    async def h_models(self, request):
        if self.models_payload is not None:
            return web.json_response(self.models_payload)
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def h_metrics(self, request):
        return web.Response(text="# HELP sglang:num_running_reqs x\nsglang:num_running_reqs 0\n")

    async def h_flush(self, request):
        return web.Response(text="Cache flushed.\n")

    async def h_bad_json(self, request):
        return web.Response(text="<html>not json</html>", content_type="text/html")

    async def h_boom(self, request):
        return web.json_response(
            {"object": "error", "message": "model is still loading", "type": "ServiceUnavailable", "code": 503},
            status=503,
        )

    # -- data plane
    def schedule(self, max_tokens: int) -> list[int]:
        """Tokens per chunk: 1 from prefill, then accept lengths (plain: 1 each)."""
        out, left, k = [1], max_tokens - 1, 0
        while left > 0:
            n = min(self.accept_pattern[k % len(self.accept_pattern)], left) if self.spec else 1
            out.append(n)
            left -= n
            k += 1
        return out

    async def h_stream(self, request: web.Request):
        if request.content_type != "application/json":  # SGLang's validate_json_request
            return web.json_response(
                {"object": "error", "message": "Unsupported Media Type: Only 'application/json' is allowed",
                 "type": "Bad Request", "param": None, "code": 400},
                status=400,
            )
        body = await request.json()
        self.bodies.append(body)
        path = request.path
        if path == "/generate":
            prompt = body.get("text", "")
            max_tokens = body["sampling_params"]["max_new_tokens"]
        elif path == "/v1/chat/completions":
            prompt = body["messages"][0]["content"]
            max_tokens = body["max_tokens"]
        else:
            prompt = body["prompt"]
            max_tokens = body["max_tokens"]
        if "http400" in prompt:
            return web.json_response(
                {"object": "error", "message": "The prompt is too long for this model.", "type": "BadRequestError",
                 "param": None, "code": 400},
                status=400,
            )
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._stream(request, path, body, prompt, max_tokens)
        finally:
            self.active -= 1

    async def _stream(self, request, path, body, prompt, max_tokens):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj):
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        if "slow" in prompt:
            await asyncio.sleep(5)
        sched = self.schedule(max_tokens)
        ct, verify, text = 0, 0, ""
        prompt_tokens = len(prompt.split())
        so = body.get("stream_options") or {}
        continuous = self.continuous_usage and so.get("continuous_usage_stats")
        rid = "r1"
        if path == "/v1/chat/completions":
            await send({"id": rid, "object": "chat.completion.chunk", "model": body["model"],
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        for i, n in enumerate(sched):
            await asyncio.sleep(self.step_s)
            if i >= 1:
                verify += 1
            ct += n
            delta = " tok" * n
            text += delta
            if i == 2 and "malformed" in prompt:
                await resp.write(b"data: {\"choices\": [ oops\n\n")
            if i == 2 and "garbage" in prompt:
                await resp.write(b"this is not sse\n\n")
            if i == 2 and "drop" in prompt:
                request.transport.close()
                return resp
            if i == 2 and "errchunk" in prompt:
                await send({"error": {"object": "error", "message": "Generation aborted: out of memory",
                                      "type": "INTERNAL_SERVER_ERROR", "param": None, "code": 500}})
                await resp.write(b"data: [DONE]\n\n")
                return resp
            last = i == len(sched) - 1
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": ct, "total_tokens": prompt_tokens + ct}
            if path == "/generate":
                fr = None
                if last:
                    fr = {"type": "abort", "message": "Request was aborted by the scheduler"} if "abort" in prompt \
                        else {"type": "length", "length": ct}
                meta = {"id": rid, "finish_reason": fr, "prompt_tokens": prompt_tokens, "completion_tokens": ct,
                        "cached_tokens": 0}
                if self.spec and verify:
                    meta.update(spec_verify_ct=verify, spec_accept_length=ct / verify, spec_accept_rate=0.5)
                await send({"text": text, "output_ids": list(range(ct)), "meta_info": meta})
                continue
            if path == "/v1/chat/completions":
                chunk = {"id": rid, "object": "chat.completion.chunk", "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}]}
            else:
                chunk = {"id": rid, "object": "text_completion", "model": body["model"],
                         "choices": [{"index": 0, "text": delta,
                                      "finish_reason": ("abort" if "abort" in prompt else "length") if last else None}]}
            if continuous:
                chunk["usage"] = usage
            await send(chunk)
        if path == "/generate":
            await resp.write(b"data: [DONE]\n\n")
            return resp
        if path == "/v1/chat/completions":
            await send({"id": rid, "object": "chat.completion.chunk", "model": body["model"],
                        "choices": [{"index": 0, "delta": {},
                                     "finish_reason": "abort" if "abort" in prompt else "length"}]})
        if self.spec and body.get("return_spec_tokens_details") and verify:
            await send({"id": rid, "model": body["model"], "choices": [],
                        "sglext": {"spec_tokens_details": {"spec_accept_rate": 0.5, "spec_accept_length": ct / verify,
                                                           "spec_verify_ct": verify, "spec_num_correct_drafts": 0}}})
        if so.get("include_usage") and "nousage" not in prompt:
            await send({"id": rid, "model": body["model"], "choices": [],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": ct,
                                  "total_tokens": prompt_tokens + ct}})
        await resp.write(b"data: [DONE]\n\n")
        return resp
