"""harness.http_client and the load's request functions (harness.load.requests) against a fake
SGLang over real loopback HTTP (no mocks of aiohttp).

The fake server (FakeSGLang) reproduces the SSE shapes of SGLang 0.5.x:
chat:        role chunk, content chunks (+ cumulative usage when continuous_usage_stats),
             finish chunk, sglext chunk (spec_tokens_details), usage chunk, [DONE]
completions: text chunks (+ usage), sglext chunk, usage chunk, [DONE]
generate:    {"text": cumulative, "meta_info": {completion_tokens (cumulative), spec_*,
             finish_reason: {"type": ...}}} chunks, [DONE]
The prompt picks a misbehaviour: "http400", "malformed", "garbage", "drop", "slow",
"errchunk", "nousage", "abort".
"""

from __future__ import annotations

import asyncio
import time

import pytest

from harness import http_client as client
from harness.http_client import (
    ClientError,
    ServerBadResponse,
    ServerClient,
    ServerHTTPError,
    ServerUnhealthy,
    ServerUnreachable,
)
from harness.load import RequestRecord
from harness.load.requests import (
    ChatRequest,
    Sampling,
    make_session,
    request_func,
)
from harness.engines import ENGINES
from harness.servers.ports import free_port
from tests.support.fake_sglang import FakeSGLang, ThreadLoop

SGLANG = ENGINES["sglang"]
sglang_request_extras, sglang_spec_details = SGLANG.request_extras, SGLANG.spec_details


@pytest.fixture(scope="module")
def fake():
    srv = FakeSGLang()
    yield srv
    srv.close()


def sglang_request(api: str, max_tokens: int = 10, model: str = "fake-model", temperature: float = 0.0,
                   ignore_eos: bool = True):
    return request_func(api, model, Sampling(max_tokens, temperature, ignore_eos), sglang_request_extras(api),
                        sglang_spec_details)


def stream_one(url: str, api: str, prompt: str, max_tokens: int = 10, timeout_s: float = 5.0) -> RequestRecord:
    request = sglang_request(api, max_tokens)

    async def go():
        async with make_session(4) as session:
            rec = RequestRecord(index=0, warmup=False)
            return await request.stream(session, url, request.body(prompt), rec, timeout_s)

    return asyncio.run(go())


# --------------------------------------------------------------------------- request bodies


def test_build_request_bodies():
    chat = sglang_request("chat", 7, "m", 0.5, True)
    body = chat.body("hi")
    assert chat.path == "/v1/chat/completions" and body["model"] == "m"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stream"] is True and body["stream_options"]["include_usage"] is True
    assert body["stream_options"]["continuous_usage_stats"] is True
    assert body["return_spec_tokens_details"] is True
    assert body["max_tokens"] == 7 and body["temperature"] == 0.5 and body["ignore_eos"] is True

    completions = sglang_request("completions", 7, "m", 0.0, False)
    body = completions.body("hi")
    assert completions.path == "/v1/completions" and body["prompt"] == "hi" and "ignore_eos" not in body
    assert body["return_spec_tokens_details"] is True and body["stream"] is True

    generate = sglang_request("generate", 7, "m", 0.0, True)
    assert generate.path == "/generate"
    assert generate.body("hi") == {"text": "hi", "stream": True,
                                   "sampling_params": {"max_new_tokens": 7, "temperature": 0.0, "ignore_eos": True}}

    # without an engine's extras the bodies carry only generic OpenAI fields
    generic = request_func("chat", "m", Sampling(7)).body("hi")
    assert "return_spec_tokens_details" not in generic and "ignore_eos" not in generic
    assert chat.body("a") is not chat.body("a")  # a fresh body per request
    with pytest.raises(ValueError, match="unknown api 'embeddings': expected one of chat, completions, generate"):
        request_func("embeddings", "m", Sampling(1))


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_stream_ok_counts_tokens_and_spec(fake, api):
    rec = stream_one(fake.url, api, "count to ten", max_tokens=10)
    assert rec.ok, rec.error
    assert rec.status == 200
    # 1 prefill token, then accept lengths 3,2,3,1 -> 9 more
    assert rec.chunk_tokens == [1, 3, 2, 3, 1]
    assert rec.completion_tokens == 10 == sum(rec.chunk_tokens)
    assert rec.prompt_tokens == 3
    assert rec.spec_verify_ct == 4
    assert rec.spec_accept_length == pytest.approx(2.5)
    assert rec.finish_reason == "length"
    assert len(rec.chunk_times) == 5
    assert rec.send_time < rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.end_time
    assert rec.ttft_s > 0 and rec.decode_s > 0


def test_stream_fallback_without_per_chunk_usage():
    """A server that ignores continuous_usage_stats: 1 token per text chunk, the last
    chunk absorbs the rest so the total equals the usage chunk's count."""
    srv = FakeSGLang(continuous_usage=False)
    try:
        rec = stream_one(srv.url, "chat", "count", max_tokens=10)
        assert rec.ok, rec.error
        assert rec.completion_tokens == 10
        assert rec.chunk_tokens == [1, 1, 1, 1, 6]
        assert rec.spec_verify_ct == 4
    finally:
        srv.close()


def test_stream_http_error_keeps_server_message(fake):
    rec = stream_one(fake.url, "chat", "http400 please")
    assert not rec.ok
    assert rec.status == 400
    assert rec.error == "HTTP 400: The prompt is too long for this model."


@pytest.mark.parametrize("api", ["chat", "generate"])
def test_stream_malformed_json(fake, api):
    rec = stream_one(fake.url, api, "malformed")
    assert not rec.ok and rec.status == 200
    assert rec.error.startswith("malformed SSE line: ")


def test_stream_garbage_line(fake):
    rec = stream_one(fake.url, "completions", "garbage")
    assert not rec.ok
    assert rec.error.startswith("malformed SSE line: ") and "this is not sse" in rec.error


@pytest.mark.parametrize("api", ["chat", "generate"])
def test_stream_connection_dropped(fake, api):
    rec = stream_one(fake.url, api, "drop")
    assert not rec.ok
    assert "connection dropped mid-stream" in rec.error
    assert len(rec.chunk_times) == 2  # what arrived before the drop is kept


def test_stream_timeout(fake):
    t = time.perf_counter()
    rec = stream_one(fake.url, "chat", "slow", timeout_s=0.3)
    assert time.perf_counter() - t < 3
    assert rec.error == "timed out after 0.3s"
    assert not rec.ok


def test_stream_error_chunk_mid_stream(fake):
    rec = stream_one(fake.url, "chat", "errchunk")
    assert not rec.ok
    assert rec.error == "server error mid-stream: Generation aborted: out of memory"


def test_stream_without_usage_is_an_error(fake):
    # No per-chunk usage reaches us only if the server ignores continuous stats; emulate
    # a server that sends neither per-chunk nor final usage.
    srv = FakeSGLang(continuous_usage=False)
    try:
        rec = stream_one(srv.url, "chat", "nousage")
        assert not rec.ok
        assert "no usage chunk" in rec.error
    finally:
        srv.close()


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_stream_abort_is_an_error(fake, api):
    rec = stream_one(fake.url, api, "abort")
    assert not rec.ok
    assert "abort" in rec.error


def test_stream_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    rec = stream_one(url, "chat", "x")
    assert not rec.ok
    assert rec.status is None
    assert rec.error.startswith(f"cannot connect to {url}/v1/chat/completions")


def test_plain_server_has_no_spec_fields():
    srv = FakeSGLang(spec=False)
    try:
        for api in ("chat", "generate"):
            rec = stream_one(srv.url, api, "x", max_tokens=5)
            assert rec.ok, rec.error
            assert rec.chunk_tokens == [1, 1, 1, 1, 1]
            assert rec.spec_verify_ct is None and rec.spec_accept_length is None
    finally:
        srv.close()


# --------------------------------------------------------------------------- control plane


def test_control_plane(fake):
    c = ServerClient(fake.url)
    assert c.health()
    assert c.get_json("/get_model_info")["model_path"] == "/models/fake"
    assert c.models()["data"][0]["id"] == "fake-model"
    assert c.served_model() == "fake-model"
    assert "sglang:num_running_reqs" in c.metrics_text()
    assert SGLANG.server_accept_length(c) == 2.5
    assert SGLANG.server_version(c)
    assert c.post_json("/flush_cache", {"x": 1}).status_code == 200


def test_post_form_probe_and_unchecked_post_json(fake):
    c = ServerClient(fake.url)
    resp = c.post_form("/v1/chat/completions", {"model": "m", "max_tokens": 3})
    assert resp.status_code == 400
    assert "Only 'application/json' is allowed" in resp.json()["message"]
    resp = c.post_json("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "http400"}],
                                                "max_tokens": 3}, check=False)
    assert resp.status_code == 400


def test_stream_events(fake):
    c = ServerClient(fake.url)
    body = ChatRequest("fake-model", Sampling(10), sglang_request_extras("chat")).body("count")
    events = c.stream_events("/v1/chat/completions", body)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 10
    assert any("sglext" in e for e in events)
    with pytest.raises(ServerBadResponse, match="malformed SSE line"):
        c.stream_events("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "malformed"}]))
    with pytest.raises(ServerBadResponse, match="out of memory"):
        c.stream_events("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "errchunk"}]))
    with pytest.raises(ServerHTTPError, match="too long"):
        c.stream_events("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "http400"}]))


def test_served_model_falls_back_to_model_path():
    srv = FakeSGLang()
    srv.models_payload = {"object": "list", "data": []}
    try:
        assert ServerClient(srv.url).served_model(SGLANG.served_model_fallback) == "/models/fake"
        with pytest.raises(ClientError, match="/v1/models listed none"):
            ServerClient(srv.url).served_model()  # an engine without an info route of its own
    finally:
        srv.close()


def test_the_configured_model_is_the_one_measured_and_an_ambiguous_list_is_refused():
    # vLLM --lora-modules / SGLang multi-LoRA: /v1/models lists the base model and its adapters
    srv = FakeSGLang()
    srv.models_payload = {"object": "list", "data": [{"id": "base-model"}, {"id": "lora-b"}]}
    try:
        client = ServerClient(srv.url)
        assert client.served_model(wanted="lora-b") == "lora-b"  # not the first listed
        with pytest.raises(ClientError, match=r"serves several models \(base-model, lora-b\): set "
                                              r"server.served_model_name to the one to measure"):
            client.served_model(SGLANG.served_model_fallback)
        with pytest.raises(ClientError, match=r"serves base-model, lora-b, not server.served_model_name 'lora-c'"):
            client.served_model(wanted="lora-c")
        srv.models_payload = {"object": "list", "data": [{"id": "only"}]}
        assert client.served_model() == "only"
    finally:
        srv.close()


def test_server_accept_length_absent_on_plain_server():
    srv = FakeSGLang(spec=False)
    try:
        assert SGLANG.server_accept_length(ServerClient(srv.url)) is None
    finally:
        srv.close()


def test_control_plane_errors(fake):
    c = ServerClient(fake.url)
    with pytest.raises(ServerHTTPError) as ei:
        c._json("GET", "/boom")
    assert ei.value.status == 503
    assert "HTTP 503" in str(ei.value) and "model is still loading" in str(ei.value)
    with pytest.raises(ServerHTTPError) as ei:
        c.post_json("/no/such/route", {})
    assert ei.value.status in (404, 405)
    with pytest.raises(ServerBadResponse) as ei:
        c._json("GET", "/bad_json")
    assert "not JSON" in str(ei.value)
    dead = ServerClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(ServerUnreachable) as ei:
        dead.get_json("/get_model_info")
    assert "Cannot connect to" in str(ei.value)
    assert isinstance(ei.value, ClientError)
    assert dead.health() is False


def test_server_error_message_shapes():
    m = client.server_error_message
    assert m('{"object":"error","message":"bad temp","type":"BadRequestError","code":400}') == "bad temp"
    assert m('{"error":{"message":"nested","type":"x"}}') == "nested"
    assert m('{"error":"flat"}') == "flat"
    assert m('{"detail":[{"msg":"field required"},{"msg":"too big"}]}') == "field required; too big"
    assert m("Internal Server Error") == "Internal Server Error"
    assert m("") == "(empty body)"


def test_wait_healthy_polls_until_ready():
    srv = FakeSGLang(health_ready_after=3)
    try:
        waited = ServerClient(srv.url).wait_healthy(10, poll_s=0.05)
        assert waited < 5
        assert srv.health_calls >= 4
    finally:
        srv.close()


def test_wait_healthy_stops_when_process_died():
    c = ServerClient(f"http://127.0.0.1:{free_port()}")
    t = time.monotonic()
    with pytest.raises(ServerUnhealthy) as ei:
        c.wait_healthy(30, is_alive=lambda: False)
    assert time.monotonic() - t < 1
    assert "exited before" in str(ei.value)


def test_wait_healthy_deadline():
    srv = FakeSGLang(health_ready_after=10**9)
    try:
        t = time.monotonic()
        with pytest.raises(ServerUnhealthy) as ei:
            ServerClient(srv.url).wait_healthy(0.6, is_alive=lambda: True, poll_s=0.1)
        assert time.monotonic() - t < 3
        assert "not healthy within 0.6s" in str(ei.value) and "HTTP 503" in str(ei.value)
    finally:
        srv.close()


# --------------------------------------------------------------------------- the wire


class RawRecorder:
    """A raw asyncio TCP server recording each request's head bytes."""

    def __init__(self):
        self.heads: list[bytes] = []
        self.tl = ThreadLoop()
        self.port = self.tl.call(self._start())
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if b"/generate" in head.split(b"\r\n", 1)[0]:
                body = (b'data: {"text":"a","meta_info":{"completion_tokens":1,"prompt_tokens":1,'
                        b'"finish_reason":{"type":"length"}}}\n\ndata: [DONE]\n\n')
                ctype = b"text/event-stream"
            elif b"/v1/" in head.split(b"\r\n", 1)[0]:
                body = (b'data: {"choices":[{"index":0,"delta":{"content":"a"},"text":"a"}],'
                        b'"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
                        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
                        b"data: [DONE]\n\n")
                ctype = b"text/event-stream"
            else:
                body, ctype = b"{}", b"application/json"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        finally:
            writer.close()

    def close(self):
        self.server.close()
        self.tl.stop()


def test_every_post_carries_json_content_type_on_the_wire():
    raw = RawRecorder()
    try:
        c = ServerClient(raw.url)
        c.post_json("/update_weights", {"a": 1})
        c.post_json("/flush_cache", {})
        c.stream_events("/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
        for api in ("chat", "completions", "generate"):
            rec = stream_one(raw.url, api, "x", max_tokens=1)
            assert rec.ok, rec.error
        assert len(raw.heads) == 6
        for head in raw.heads:
            assert head.startswith(b"POST ")
            lines = [ln.lower() for ln in head.split(b"\r\n")]
            assert any(ln.startswith(b"content-type: application/json") for ln in lines), head
    finally:
        raw.close()
