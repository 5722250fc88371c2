"""The load against servers that misbehave (tests/support/fake_openai.py), and against the
simulator with speculation: a server's numbers are checked, not believed, and every
fault ends in one sentence that names it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from openai import OpenAI
from openai.types import Completion

from harness.http_client import ServerClient
from harness.engines import ENGINES
from harness.load import LoadPlan, RequestRecord, run_load
from harness.load.crosscheck import SLACK_TOKENS, StreamTally, usage_problem
from harness.load.requests import Sampling, _json_instead_of_stream, make_session, request_func
from harness.config.schema import BackendConfig, SpecgateConfig, WorkloadConfig
from harness.sim.tokens import count_output_tokens, plan_output, render

from tests.support.fake_openai import FakeOpenAI
from tests.support.sim_process import FAST, SPEC, Sim

REPO = Path(__file__).resolve().parents[2]
WORDS_16 = "the quick brown fox jumps over a lazy dog while seven tired engineers measure every token"


def stream_one(url: str, api: str = "chat", max_tokens: int = 16, timeout_s: float = 5.0,
               count_tokens=None) -> RequestRecord:
    request = request_func(api, "fake-model", Sampling(max_tokens), count_tokens=count_tokens)

    async def go():
        async with make_session(2) as session:
            rec = RequestRecord(index=0, warmup=False)
            return await request.stream(session, url, request.body("hi"), rec, timeout_s)

    return asyncio.run(go())


def workload(**kw) -> WorkloadConfig:
    base = dict(name="faults", api="chat", prompt="hi", max_tokens=16, concurrency=2, num_prompts=2,
                warmup_requests=0, timeout_s=10.0)
    return WorkloadConfig(**{**base, **kw})


def errors_of(url: str, **kw) -> set[str | None]:
    return {r.error for r in run_load(LoadPlan.of(workload(**kw), url, "fake-model")).records}


# --------------------------------------------------------------------------- honest servers pass


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("chunk_sizes", [(1,), (3, 2, 3, 1)], ids=["plain", "speculative"])
@pytest.mark.parametrize("continuous_usage", [True, False], ids=["per-chunk-usage", "final-usage-only"])
def test_an_honest_server_passes_every_check(fake_openai, api, chunk_sizes, continuous_usage):
    fake = fake_openai("ok", chunk_sizes=chunk_sizes, continuous_usage=continuous_usage)
    for count_tokens in (None, count_output_tokens):
        rec = stream_one(fake.url, api, count_tokens=count_tokens)
        assert rec.ok, rec.error
        assert rec.completion_tokens == 16 == sum(rec.chunk_tokens)
    if continuous_usage:
        assert rec.chunk_tokens[:4] == list(chunk_sizes * 4)[:4]


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("max_tokens", [16, 8, 1])
def test_total_usage_on_the_finish_chunk_is_the_total_not_one_chunks_count(fake_openai, api, max_tokens):
    """llama.cpp's server before its PR 15444 and llama-cpp-python: content chunks without usage,
    then the finish chunk carrying the whole answer's usage. Read as a per-chunk count, it
    failed every request at 16 tokens ("per-chunk usage claims 16 tokens for token chunk 17")
    and at 8 made each request's chunks add up to 16 tokens for 8."""
    fake = fake_openai("usage_on_finish")
    for count_tokens in (None, count_output_tokens):
        rec = stream_one(fake.url, api, max_tokens=max_tokens, count_tokens=count_tokens)
        assert rec.ok, rec.error
        assert rec.completion_tokens == max_tokens == sum(rec.chunk_tokens)
        assert rec.chunk_tokens == [1] * max_tokens  # one word a chunk, as streamed
        assert rec.finish_reason == "length"


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_the_model_an_answer_names_is_recorded(fake_openai, api):
    assert stream_one(fake_openai("ok").url, api).model == "fake-model"
    rec = stream_one(fake_openai("ok", named_model="other-model").url, api)
    assert rec.ok and rec.model == "other-model" and rec.to_json(0.0)["model"] == "other-model"


@pytest.fixture(scope="module")
def spec_sim():
    sim = Sim(FAST + SPEC)
    try:
        yield sim
    finally:
        sim.kill()


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("prompt, ignore_eos", [("Write about the sea.", True), ("Count from 1 to 30", False)],
                         ids=["words", "count-then-eos"])
def test_the_speculative_simulator_passes_with_its_exact_tokenizer(spec_sim, api, prompt, ignore_eos):
    """No false alarm on our own server: several tokens a chunk, an EOS without text,
    coalesced steps -- all within the rule."""
    w = workload(api=api, prompt=prompt, ignore_eos=ignore_eos, max_tokens=120, num_prompts=4, concurrency=4)
    res = run_load(LoadPlan.of(w, spec_sim.url, "m", request_extras=ENGINES["sim"].request_extras,
                               spec_details=ENGINES["sim"].spec_details, count_tokens=count_output_tokens))
    assert all(r.ok for r in res.records), {r.error for r in res.records}
    assert any(n > 1 for r in res.records for n in r.chunk_tokens)  # speculation did put several in a chunk
    if not ignore_eos:
        assert {r.finish_reason for r in res.records} == {"stop"} and {r.completion_tokens for r in res.records} == {60}


def test_the_simulators_tokenizer_counts_its_output_exactly():
    for prompt, ignore_eos in (("Count from 1 to 40", False), ("Count from 1 to 40", True), ("Write a poem.", False)):
        plan = plan_output(prompt, ignore_eos)
        text, ids = render(plan, 0, 100)
        assert count_output_tokens(text) == sum(1 for i in ids if i != 2)  # all but the EOS (id 2, no text)


def test_only_a_simulator_we_started_lends_its_tokenizer():
    def cfg(kind):
        return SpecgateConfig(backend=BackendConfig(kind=kind))

    assert ENGINES["sim"].token_counter(cfg("process")) is count_output_tokens
    assert ENGINES["sim"].token_counter(cfg("docker")) is count_output_tokens
    assert ENGINES["sim"].token_counter(cfg("attach")) is None  # behind a URL may be any server
    assert ENGINES["vllm"].token_counter(cfg("process")) is None
    assert ENGINES["sglang"].token_counter(cfg("process")) is None


# --------------------------------------------------------------------------- 1. usage cross-checked


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("continuous_usage", [True, False], ids=["per-chunk-usage", "final-usage-only"])
def test_a_wild_usage_lie_fails_the_request(fake_openai, api, continuous_usage):
    fake = fake_openai("lying_usage", lie_factor=10**6, continuous_usage=continuous_usage)
    res = run_load(LoadPlan.of(workload(api=api), fake.url, "fake-model"))
    nbytes = len(WORDS_16.encode())
    assert {r.error for r in res.records} == {
        f"the server claims 16000000 completion tokens but streamed 16 token chunks carrying {nbytes} bytes "
        f"of text, room for at most {nbytes + 16 + SLACK_TOKENS} tokens"}


def test_a_3x_lie_in_the_final_usage_contradicts_the_per_chunk_usage(fake_openai):
    fake = fake_openai("lying_usage", lie_factor=3, lie_in_chunks=False)
    assert errors_of(fake.url) == {"the server's final usage claims 48 completion tokens but its per-chunk usage counted 16"}


@pytest.mark.parametrize("continuous_usage", [True, False], ids=["per-chunk-usage", "final-usage-only"])
def test_a_consistent_3x_lie_is_caught_by_the_servers_tokenizer(fake_openai, continuous_usage):
    fake = fake_openai("lying_usage", lie_factor=3, continuous_usage=continuous_usage)
    rec = stream_one(fake.url, count_tokens=count_output_tokens)
    tolerance = (3 if continuous_usage else 1) + 1  # the largest chunk as claimed, plus 5 % of 16 rounded up
    assert rec.error == ("the server claims 48 completion tokens but the text it streamed is 16 tokens by its "
                         f"tokenizer (tolerance {tolerance})")


def test_an_under_count_below_one_token_a_chunk_fails(fake_openai):
    fake = fake_openai("lying_usage", lie_factor=0.5, continuous_usage=False)
    assert errors_of(fake.url) == {
        "the server claims 8 completion tokens but streamed 16 chunks of text, each of which carried at least one token"}


def test_a_lie_piled_onto_one_chunk_fails():
    """Totals within the bytes bound, but one chunk claims far more than its text holds."""
    tally = StreamTally()
    claims = [1] * 5 + [20] + [1] * 5
    for number, tokens in enumerate(claims, start=1):
        tally.add_chunk_usage(number, tokens, tally.add_text(" word"))
    problem = usage_problem(sum(claims), tally, claims, per_chunk_total=sum(claims))
    assert problem == ("the server's per-chunk usage claims 20 tokens for token chunk 6, which carried 5 bytes of "
                       f"text, room for at most {5 + 1 + SLACK_TOKENS} tokens")
    honest = StreamTally()
    honest.add_chunk_usage(1, 3, honest.add_text(""))  # a partial UTF-8 character held back: tokens, no text yet
    honest.add_chunk_usage(2, 1, honest.add_text("\N{GRINNING FACE}"))
    assert usage_problem(4, honest, [3, 1], per_chunk_total=4) is None


# --------------------------------------------------------------------------- 2. nothing streamed


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_stream_of_only_done_says_it_had_no_tokens(fake_openai, api):
    fake = fake_openai("done_no_tokens")
    assert errors_of(fake.url, api=api) == {"the stream finished without any tokens"}


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("continuous_usage", [True, False], ids=["per-chunk-usage", "final-usage-only"])
def test_a_stream_without_output_is_zero_tokens_whatever_its_usage_says(fake_openai, api, continuous_usage):
    # content null in every chunk while the usage grows: it used to pass at hundreds of tok/s
    fake = fake_openai("null_content", continuous_usage=continuous_usage)
    [error] = errors_of(fake.url, api=api)
    if continuous_usage:  # the chunks' usage counted tokens: the count meets no bytes
        assert error.endswith("streamed no output at all (every chunk's content, reasoning and tool calls empty "
                              "or null): zero bytes of output is zero tokens"), error
    else:  # no chunk carried text or a count: nothing was streamed
        assert error == "the stream finished without any tokens"


@pytest.mark.parametrize("mode, api, fragment", [
    ("string_counts", "chat", "malformed reply from the server: usage.completion_tokens is '"),
    ("string_counts", "completions", "malformed reply from the server: usage.completion_tokens is '"),
    ("string_delta", "chat", "malformed reply from the server: AttributeError: "),
])
def test_a_reply_of_the_wrong_shape_fails_the_request_with_its_reason(fake_openai, mode, api, fragment):
    # a count as a string, a delta that is a string: a failed request, never an exception out of the load
    fake = fake_openai(mode)
    [error] = errors_of(fake.url, api=api)
    assert error.startswith(fragment), error


def test_a_redirected_post_says_where_it_was_sent(fake_openai):
    # aiohttp used to follow the 301 as a GET, and the user saw only "HTTP 404"
    fake = fake_openai("redirect")
    [error] = errors_of(fake.url, api="chat")
    assert error.startswith(f"HTTP 301: the server redirected the POST to {fake.url}/v1/chat/completions to "
                            f"/moved/v1/chat/completions;"), error


# --------------------------------------------------------------------------- 3. errors in a 200


@pytest.mark.parametrize("error_format", ["json", "sse"])
@pytest.mark.parametrize("error_body", [
    {"object": "error", "message": "model overloaded", "type": "ServiceUnavailable", "param": None, "code": 503},
    {"error": {"message": "model overloaded", "type": "ServiceUnavailable", "code": 503}},
], ids=["object-error", "nested-error"])
def test_a_200_carrying_an_error_reports_the_servers_message(fake_openai, error_format, error_body):
    fake = fake_openai("error_200", error_format=error_format, error_body=error_body)
    res = run_load(LoadPlan.of(workload(), fake.url, "fake-model"))
    assert {(r.status, r.error) for r in res.records} == {(200, "server error: model overloaded")}


def test_a_200_with_a_whole_completion_instead_of_a_stream_says_so():
    message = _json_instead_of_stream(b'{"object": "chat.completion", "choices": []}')
    assert message.startswith("the server answered with one JSON body instead of an SSE stream (was stream: true ignored?)")


# --------------------------------------------------------------------------- 4. hangs


def test_a_server_that_accepts_and_sends_nothing_fails_at_the_first_byte_timeout(fake_openai):
    fake = fake_openai("hang_before_headers")
    t = time.perf_counter()
    errors = errors_of(fake.url, timeout_s=60.0, first_byte_timeout_s=0.5)
    assert time.perf_counter() - t < 5
    assert errors == {"no response within workload.first_byte_timeout_s=0.5s "
                      "(the server accepted the request but sent nothing)"}


def test_without_a_first_byte_timeout_the_whole_request_timeout_applies(fake_openai):
    fake = fake_openai("hang_before_headers")
    assert errors_of(fake.url, timeout_s=0.5, first_byte_timeout_s=None) == {"timed out after 0.5s"}


def test_the_first_byte_timeout_does_not_cut_a_slow_stream(fake_openai):
    fake = fake_openai("ok", step_s=0.15)
    res = run_load(LoadPlan.of(workload(max_tokens=5, first_byte_timeout_s=0.3), fake.url, "fake-model"))
    assert all(r.ok for r in res.records), {r.error for r in res.records}
    assert all(r.e2e_s > 0.6 for r in res.records)  # longer than the first-byte limit, yet whole


def test_a_stream_that_stalls_mid_stream_says_so_at_the_timeout(fake_openai):
    fake = fake_openai("hang_mid_stream", fault_after=3)
    t = time.perf_counter()
    res = run_load(LoadPlan.of(workload(timeout_s=1.0), fake.url, "fake-model"))
    assert time.perf_counter() - t < 5
    for rec in res.records:
        assert rec.error.startswith("timed out after 1s: the stream stalled mid-stream after 3 token chunks "
                                    "(nothing for the last "), rec.error
        assert len(rec.chunk_times) == 3


def test_a_stream_still_flowing_at_the_timeout_is_not_called_stalled(fake_openai):
    fake = fake_openai("ok", step_s=0.05)
    errors = errors_of(fake.url, max_tokens=200, timeout_s=0.6)
    assert len(errors) == 1
    error = errors.pop()
    assert error.startswith("timed out after 0.6s while still streaming (") and "stalled" not in error


# --------------------------------------------------------------------------- 5. the old faults, against the fake


def test_an_http_500_keeps_the_servers_message(fake_openai):
    fake = fake_openai("http500")
    res = run_load(LoadPlan.of(workload(), fake.url, "fake-model"))
    assert {(r.status, r.error) for r in res.records} == {(500, "HTTP 500: the fake was told to fail")}


def test_a_malformed_sse_line_is_named(fake_openai):
    fake = fake_openai("malformed_sse")
    assert errors_of(fake.url) == {"malformed SSE line: data is not a JSON object: '{\"choices\": [ oops'"}


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_connection_dropped_mid_stream_is_named_with_what_arrived(fake_openai, api):
    fake = fake_openai("drop_mid_stream", fault_after=2)
    res = run_load(LoadPlan.of(workload(api=api), fake.url, "fake-model"))
    for rec in res.records:
        assert rec.error.startswith("connection dropped mid-stream after 2 token chunks: ClientPayloadError"), rec.error
        assert len(rec.chunk_times) == 2


# --------------------------------------------------------------------------- the fake itself


def test_the_fake_speaks_openai_to_the_official_client(fake_openai):
    fake = fake_openai("ok", chunk_sizes=(2,))
    client = OpenAI(base_url=fake.url + "/v1", api_key="not-a-key", max_retries=0, timeout=10)
    chunks = list(client.chat.completions.create(model=fake.model, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=6, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "the quick brown fox jumps over"
    assert chunks[-1].usage.completion_tokens == 6 and chunks[-2].choices[0].finish_reason == "length"
    whole = client.completions.create(model=fake.model, prompt="hi", max_tokens=3)
    assert isinstance(whole, Completion) and whole.choices[0].text == "the quick brown"
    assert client.chat.completions.create(model=fake.model, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=2).usage.completion_tokens == 2


def test_the_fake_serves_the_control_plane_and_a_slow_health(fake_openai):
    ok = ServerClient(fake_openai("ok").url, timeout_s=0.3)
    assert ok.health() and ok.served_model() == "fake-model" and ok.metrics_text() == ""
    slow = ServerClient(fake_openai("slow_health", health_delay_s=2.0).url, timeout_s=0.3)
    t = time.perf_counter()
    assert not slow.health()
    assert time.perf_counter() - t < 1.5


def test_the_fake_shuts_down_cleanly_while_handlers_hang():
    before = set(threading.enumerate())
    fakes = [FakeOpenAI("hang_before_headers").start(), FakeOpenAI("hang_mid_stream").start()]
    clients = []
    for fake in fakes:
        sock = socket.create_connection(("127.0.0.1", fake.port))
        sock.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                     b'Content-Length: 16\r\n\r\n{"stream": true}')
        clients.append(sock)
    assert clients[1].recv(100).startswith(b"HTTP/1.1 200")  # the mid-stream hang did start its stream
    time.sleep(0.2)
    t = time.perf_counter()
    for fake in fakes:
        fake.close()
    assert time.perf_counter() - t < 2
    assert set(threading.enumerate()) <= before
    for fake, sock in zip(fakes, clients):
        sock.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", fake.port), timeout=1).close()


def test_the_fake_runs_as_a_process_until_killed():
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), "--mode", "hang_mid_stream",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        assert ServerClient(url).served_model() == "fake-model"
        errors = errors_of(url, timeout_s=1.0)
        assert len(errors) == 1 and errors.pop().startswith("timed out after 1s: the stream stalled mid-stream after 2")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_a_server_that_ignores_max_tokens_is_caught(fake_openai):
    # the requests succeed (the stream is honest about what it sends), but the record's
    # output-length check says this run measured another workload (workload_as_configured)
    from harness.measure import output_length
    fake = fake_openai("ignores_max_tokens")
    load = run_load(LoadPlan.of(workload(max_tokens=8), fake.url, "fake-model"))
    assert all(r.ok for r in load.records)
    block = output_length.judge(load.records)
    assert block["over"] == block["checked"] > 0 and block["over_example"] == [32, 8]
