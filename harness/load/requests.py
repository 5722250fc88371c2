"""Request functions: one per API, each builds its streaming body and reads its stream.

``chat`` (``/v1/chat/completions``), ``completions`` (``/v1/completions``) and the
native ``generate`` (``/generate``) sit behind one interface, :class:`RequestFunc`:
:meth:`~RequestFunc.body` makes the JSON body of one request (with ``stream: true``)
from a prompt or a chat's messages (the text APIs get the chat as text:
:func:`~harness.load.conversation.as_text`), and :meth:`~RequestFunc.stream` sends it and
fills a :class:`RequestRecord` while the SSE stream arrives.  Failures never raise out of ``stream``; they land in
``record.error`` (and ``record.status``), so a run never reports a silent zero.

Token counting per chunk (what the record's ``chunk_tokens`` mean):

* ``generate``: ``meta_info.completion_tokens`` is cumulative, so a chunk's token count
  is the difference from the previous chunk's.  Exact.
* ``chat`` / ``completions``: we ask for ``stream_options.continuous_usage_stats``
  (every content chunk then carries a cumulative ``usage``), so a chunk's count is again
  the cumulative difference.  Exact.  If a server ignores that option (no per-chunk
  usage), each chunk with text counts as 1 token and, once the final ``include_usage``
  chunk arrives, the last chunk absorbs the remainder so that
  ``sum(chunk_tokens) == completion_tokens``.  A usage first seen on the chunk that ends
  the answer (its ``finish_reason``; no chunk before carried one) is that final usage, the
  whole answer's count, not the last chunk's (llama.cpp's server before its PR 15444,
  llama-cpp-python).  Either way ``completion_tokens`` is the
  server's own count from the usage chunk; a stream without one is an error (counting
  chunks would under-count speculative decoding by the accept length).

The server's count is checked, not believed: once an OpenAI stream has ended, its
``completion_tokens`` is cross-checked against the text and chunks that actually arrived
(:mod:`harness.load.crosscheck` has the rule), and a count the stream cannot explain
fails the request.  An engine that knows the server's tokenizer exactly passes
``count_tokens`` (the simulator does), which tightens the check to a few percent.

Errors in a 200: a JSON body instead of a stream, or an error object as an SSE event,
reports the server's own message (``server error: ...``).  Timeouts: the whole request
has ``timeout_s``; the response's first byte (status line and headers) has
``first_byte_timeout_s``, so a server that accepts a request and then sends nothing
fails in a minute, not at the end of a long ``timeout_s``.

The model each answer names (its chunks' ``model``) is kept as ``record.model``: the first
named, or the first that is not the one asked (a router that sent the request to another
model's worker), which the arm counts (:mod:`harness.measure.metrics`).

Speculative details: ``generate`` reads ``spec_verify_ct`` / ``spec_accept_length`` from
``meta_info``.  OpenAI streams carry them in engine-specific fields, so the engine passes
``spec_details(event)``, which picks them out of one parsed event; the last event that
has them wins.  Engine-specific body fields come in as ``extras``.

What was generated is kept too (:mod:`harness.load.details`): the text always, and the
output token ids and top logprobs where the engine returns them (asked for through
``extras`` only when a lossless gate compares arms).

Cancellations (``workload.cancel``, :mod:`harness.load.cancel`): a request the load chose
has a cut on its record; the read loop stops once ``cancel_after_tokens`` tokens arrived
(the chunk that ends the answer excepted), or a timer stops the exchange ``cancel_after_ms``
after the request was sent; either way the connection is closed, not pooled, and the record
is ``cancelled`` (not ok, not an error).

The read loops are the measurement's hot path: one clock read per read off the socket
(:func:`sse_payloads`; the events in one read arrived together), no work per chunk beyond
parsing it (orjson), appending its time, token count, text, ids and logprobs, and
tallying its text's bytes; the ids and logprobs are put in order once the stream ended.
The answer's text (content only) is also kept when asked (``keep_answer``: a next turn
needs it in its history), into ``record.answer``.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, ClassVar, Sequence

import aiohttp
import orjson

from harness.http_client import JSON_HEADERS, _error_of, _StreamFailure, _loads, _sse_payload, server_error_message
from harness.load.conversation import as_text
from harness.load.crosscheck import CountTokens, StreamTally, usage_problem
from harness.load.details import keep_generate, keep_openai
from harness.load.records import RequestRecord

SpecDetails = Callable[[dict], "dict | None"]
RequestExtras = Callable[[str], dict]
Prompt = str | Sequence[dict[str, str]]  # a prompt's text, or a chat's messages ({role, content})

MAX_LINE_BYTES = 16 * 1024**2  # /generate streams its cumulative text: long lines
STALL_S = 1.0  # a timed-out stream silent this long (or half the timeout) had stalled, not merely run long


@dataclass(frozen=True)
class Sampling:
    """The sampling settings every request of a load shares."""

    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = False


class RequestFunc(ABC):
    """One API's request: its path, its body, and how its stream is read."""

    api: ClassVar[str]
    path: ClassVar[str]

    def __init__(self, model: str, sampling: Sampling, extras: dict | None = None,
                 spec_details: SpecDetails | None = None, count_tokens: CountTokens | None = None):
        self.model = model
        self.sampling = sampling
        self.extras = dict(extras or {})
        self.spec_details = spec_details
        self.count_tokens = count_tokens  # the server's exact tokenizer, when the engine knows it

    @abstractmethod
    def body(self, prompt: Prompt, max_tokens: int | None = None) -> dict:
        """The JSON body of one streaming request for ``prompt`` (its text, or a chat's
        messages); ``max_tokens`` replaces the sampling's for this request."""

    @abstractmethod
    async def read(self, content: aiohttp.StreamReader, rec: RequestRecord, keep_answer: bool) -> None:
        """Read the SSE stream into ``rec`` (and its text into ``rec.answer`` when
        ``keep_answer``); raise :class:`_StreamFailure` on a bad stream."""

    async def stream(self, session: aiohttp.ClientSession, base_url: str, body: dict, rec: RequestRecord,
                     timeout_s: float, first_byte_timeout_s: float | None = None,
                     keep_answer: bool = False) -> RequestRecord:
        """Send one streaming request and fill ``rec`` (send_time, chunks, usage, status,
        error, end_time; the streamed text as ``answer`` when ``keep_answer``).
        ``timeout_s`` limits the whole request, ``first_byte_timeout_s`` (None: no limit
        of its own) the wait for the response's status line and headers.  Never raises for
        server/network trouble -- that becomes ``rec.error``; cancellation (Ctrl-C) does
        propagate."""
        url = base_url.rstrip("/") + self.path
        rec.send_time = time.perf_counter()  # moved to the body's write by the session's trace, once it happens
        try:
            async with asyncio.timeout(timeout_s):
                if await _until_cut(self.exchange(session, url, body, rec, first_byte_timeout_s, keep_answer),
                                    rec.cancel_after_ms):
                    return rec  # an error the exchange said, before the stream
            rec.error = _completion_error(rec)
        except _Cancelled:
            rec.cancelled = True  # the client's own doing: neither ok nor an error
        except _StreamFailure as e:
            rec.error = str(e)
        except TimeoutError:
            rec.error = _timeout_message(timeout_s, rec.chunk_times, time.perf_counter())
        except aiohttp.ClientConnectorError as e:
            rec.error = f"cannot connect to {url}: {e.os_error or e}"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                ConnectionResetError) as e:
            rec.error = (f"connection dropped mid-stream after {len(rec.chunk_times)} token chunks: {type(e).__name__}: {e}"
                         if rec.status is not None else  # no status line yet: e.g. a server going away
                         f"the connection closed before any response: {type(e).__name__}: {e}")
        except aiohttp.ClientError as e:
            rec.error = f"{type(e).__name__}: {e}"
        except ValueError as e:  # aiohttp: line longer than read_bufsize ("Chunk too big")
            rec.error = f"bad stream from server: {e}"
        except (TypeError, AttributeError, KeyError, IndexError) as e:
            # a reply of the wrong shape (a count as a string, a delta that is a string): the
            # request fails with what was wrong, as any malformed reply does
            rec.error = f"malformed reply from the server: {type(e).__name__}: {e}"
        finally:
            rec.end_time = time.perf_counter()
        return rec

    async def exchange(self, session: aiohttp.ClientSession, url: str, body: dict, rec: RequestRecord,
                       first_byte_timeout_s: float | None, keep_answer: bool) -> bool:
        """POST ``body`` and read its stream into ``rec``; True when the answer was an error
        (``rec.error`` says it) instead of a stream. A request cancelled mid-stream
        (:mod:`harness.load.cancel`) has its connection closed, not handed back to the pool,
        so the server sees the client go, as when a browser tab is closed."""
        async with await _post_until_first_byte(session, url, body, first_byte_timeout_s, rec) as resp:
            rec.status = resp.status
            if 300 <= resp.status < 400:
                rec.error = redirect_message(url, resp.status, resp.headers.get("Location"))
                return True
            if resp.status != 200:
                text = await resp.read()
                rec.error = f"HTTP {resp.status}: {server_error_message(text)}"
                return True
            if resp.content_type == "application/json":
                rec.error = _json_instead_of_stream(await resp.read())
                return True
            try:
                await self.read(resp.content, rec, keep_answer)
            except (_Cancelled, asyncio.CancelledError):  # a cut, or the cut's timer, or Ctrl-C
                resp.close()  # drop the connection: the server must notice the client is gone
                raise
        return False


class _Cancelled(Exception):
    """The client cut the request short on purpose (workload.cancel)."""


async def _until_cut(exchange: Awaitable[bool], after_ms: float | None) -> bool:
    """Run ``exchange``, cutting it ``after_ms`` after now (None: never); a cut raises
    :class:`_Cancelled`. A deadline of its own, so the request's timeouts are not taken for it."""
    if after_ms is None:
        return await exchange
    cut = asyncio.timeout(after_ms / 1000.0)
    try:
        async with cut:
            return await exchange
    except TimeoutError:
        if not cut.expired():  # another deadline's (the request's timeout_s or first byte)
            raise
        raise _Cancelled from None


def _cut_reached(toks: list[int], after_tokens: int) -> None:
    """Raise :class:`_Cancelled` once ``after_tokens`` tokens arrived (only cut requests ask)."""
    if sum(toks) >= after_tokens:
        raise _Cancelled


async def _post_until_first_byte(session: aiohttp.ClientSession, url: str, body: dict,
                                 first_byte_timeout_s: float | None, rec: RequestRecord) -> aiohttp.ClientResponse:
    """POST ``body``; the response once its status line and headers are in. ``rec``'s
    send time is stamped when the body goes to the socket (:func:`make_session`'s trace)."""
    deadline = asyncio.timeout(first_byte_timeout_s)
    try:
        async with deadline:
            # no redirects: aiohttp would re-send a POST answered 301/302/303 as a GET and the
            # user would see only the GET's 404; a redirect is said as such (redirect_message)
            return await session.post(url, data=orjson.dumps(body), headers=JSON_HEADERS, trace_request_ctx=[rec],
                                      allow_redirects=False)
    except TimeoutError:
        if not deadline.expired():  # aiohttp's own connect timeout: not ours to name
            raise
        raise _StreamFailure(f"no response within workload.first_byte_timeout_s={first_byte_timeout_s:g}s "
                             f"(the server accepted the request but sent nothing)") from None


def redirect_message(url: str, status: int, location: str | None) -> str:
    """A POST the server redirected: where to, so the user can point specgate there."""
    where = f"to {location}" if location else "with no Location header"
    return (f"HTTP {status}: the server redirected the POST to {url} {where}; specgate does not follow a "
            f"redirect with a request body (a client re-sends it as a GET): point backend.url at the server itself")


def _json_instead_of_stream(body: bytes) -> str:
    """The error of a 200 whose body is one JSON document where an SSE stream was asked for."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    message = _error_of(data) if isinstance(data, dict) else None
    if message is not None:
        return f"server error: {message}"
    snippet = body[:200].decode("utf-8", "replace")
    return f"the server answered with one JSON body instead of an SSE stream (was stream: true ignored?): {snippet!r}"


def _timeout_message(timeout_s: float, chunk_times: list[float], now: float) -> str:
    """Why a request ran out of ``timeout_s``: before any token, stalled mid-stream, or still streaming."""
    if not chunk_times:
        return f"timed out after {timeout_s:g}s"
    silent_s = now - chunk_times[-1]
    if silent_s >= min(STALL_S, timeout_s / 2):
        return (f"timed out after {timeout_s:g}s: the stream stalled mid-stream after {len(chunk_times)} "
                f"token chunks (nothing for the last {silent_s:.1f}s)")
    return (f"timed out after {timeout_s:g}s while still streaming ({len(chunk_times)} token chunks so far): "
            f"workload.timeout_s limits the whole request")


def _raise_server_error(event: dict, token_chunks: int) -> None:
    """Raise the server's own message when ``event`` is an error object."""
    message = _error_of(event)
    if message is not None:
        where = "server error mid-stream" if token_chunks else "server error"
        raise _StreamFailure(f"{where}: {message}")


def _completion_error(rec: RequestRecord) -> str | None:
    """What is wrong with a stream that ended cleanly, or None."""
    if rec.finish_reason == "abort":
        return "request aborted by the server (finish_reason=abort)"
    if not rec.chunk_times:
        return "the stream finished without any tokens"
    if not rec.completion_tokens:
        return f"the server reported {rec.completion_tokens} completion tokens for a stream that carried text"
    return None


class _OpenAIStream(RequestFunc):
    """The OpenAI-compatible routes: usage-based token counting, ``[DONE]`` at the end."""

    chat: ClassVar[bool]

    def body(self, prompt: Prompt, max_tokens: int | None = None) -> dict:
        body: dict[str, Any] = {"model": self.model}
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        else:
            body["prompt"] = _text_of(prompt)
        s = self.sampling
        body.update(
            max_tokens=int(s.max_tokens if max_tokens is None else max_tokens),
            temperature=float(s.temperature),
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
        if s.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.extras)
        return body

    async def read(self, content: aiohttp.StreamReader, rec: RequestRecord, keep_answer: bool) -> None:
        await _read_openai(content, rec, self.chat, self.spec_details, self.count_tokens, keep_answer, self.model)


class ChatRequest(_OpenAIStream):
    api = "chat"
    path = "/v1/chat/completions"
    chat = True


class CompletionsRequest(_OpenAIStream):
    api = "completions"
    path = "/v1/completions"
    chat = False


class GenerateRequest(RequestFunc):
    """The native ``/generate`` route: cumulative ``meta_info`` per chunk."""

    api = "generate"
    path = "/generate"

    def body(self, prompt: Prompt, max_tokens: int | None = None) -> dict:
        s = self.sampling
        sampling: dict[str, Any] = {"max_new_tokens": int(s.max_tokens if max_tokens is None else max_tokens),
                                    "temperature": float(s.temperature)}
        if s.ignore_eos:
            sampling["ignore_eos"] = True
        return {"text": _text_of(prompt), "sampling_params": sampling, "stream": True, **self.extras}

    async def read(self, content: aiohttp.StreamReader, rec: RequestRecord, keep_answer: bool) -> None:
        await _read_generate(content, rec, keep_answer)


def _text_of(prompt: Prompt) -> str:
    """The prompt text of a text API: the text itself, or a chat flattened."""
    return prompt if isinstance(prompt, str) else as_text(prompt)


REQUEST_FUNCS: dict[str, type[RequestFunc]] = {f.api: f for f in (ChatRequest, CompletionsRequest, GenerateRequest)}


def request_func(api: str, model: str, sampling: Sampling, extras: dict | None = None,
                 spec_details: SpecDetails | None = None, count_tokens: CountTokens | None = None) -> RequestFunc:
    """The request function of ``api`` (a ``workload.api`` value)."""
    try:
        cls = REQUEST_FUNCS[api]
    except KeyError:
        raise ValueError(f"unknown api {api!r}: expected one of {', '.join(REQUEST_FUNCS)}") from None
    return cls(model, sampling, extras, spec_details, count_tokens)


def make_session(concurrency: int, read_bufsize: int = 256 * 1024) -> aiohttp.ClientSession:
    """One session for a whole load: connections kept alive and reused (a connector limit
    above the concurrency, so a request never waits for a connection), no total timeout
    (per-request timeouts are applied by :meth:`RequestFunc.stream`). Its trace stamps each
    request's send time when its body is handed to the socket (see :func:`_stamp_sent`)."""
    connector = aiohttp.TCPConnector(limit=max(1, int(concurrency)) + 8, limit_per_host=0, keepalive_timeout=60)
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_stamp_sent)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        read_bufsize=read_bufsize,  # what one read takes off the socket; a line may be longer (sse_payloads)
        trace_configs=[trace],
    )


async def _stamp_sent(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
    """The request's body is about to be written to the socket (aiohttp calls this right
    before the transport write; the connection is open, the headers go with the body): its
    send time, as close to the socket as aiohttp lets a client see. So a request's TTFT holds
    neither the client's own queueing before it (a burst of sends on one event loop) nor a
    new connection's set-up; both are in its send gap (harness/load/client_health.py)."""
    pending = ctx.trace_request_ctx
    if pending:  # the first chunk only (a JSON body is one)
        pending.pop().send_time = time.perf_counter()


async def prewarm(session: aiohttp.ClientSession, base_url: str, connections: int) -> None:
    """Open ``connections`` connections in ``session``'s pool before the measured load
    (``workload.prewarm_connections``): that many GETs of ``/v1/models`` at once, each
    connection back in the pool, kept alive, when its answer has been read."""
    url = base_url.rstrip("/") + "/v1/models"

    async def one() -> None:
        async with session.get(url) as resp:
            await resp.read()

    await asyncio.gather(*(one() for _ in range(max(0, connections))))


async def sse_payloads(content: aiohttp.StreamReader, max_line: int = MAX_LINE_BYTES):
    """Each SSE data payload of the stream with the time its bytes were read: one clock read
    and one await per read off the socket, however many events it held (they arrived
    together), rather than one per line. Lines to skip (blank, comments, ``event:``) are
    skipped; a line longer than ``max_line`` is a bad stream (what aiohttp's readline says
    of one longer than its buffer)."""
    clock = time.perf_counter
    rest = b""
    while True:
        data = await content.readany()
        if not data:
            break
        t = clock()
        lines = (rest + data if rest else data).split(b"\n")
        rest = lines.pop()
        if len(rest) > max_line:
            raise ValueError(f"Chunk too big: an SSE line longer than {max_line} bytes")
        for line in lines:
            payload = _sse_payload(line)
            if payload is not None:
                yield t, payload
    if rest:  # a last line without its newline
        payload = _sse_payload(rest)
        if payload is not None:
            yield clock(), payload


async def _read_openai(content: aiohttp.StreamReader, rec: RequestRecord, chat: bool,
                       spec_details: SpecDetails | None, count_tokens: CountTokens | None,
                       keep_answer: bool = False, asked: str | None = None) -> None:
    times, toks = rec.chunk_times, rec.chunk_tokens
    tally = StreamTally()
    answer: list[str] | None = [] if keep_answer else None  # the content only: reasoning is not sent back
    id_chunks: list[list[int]] = []  # each chunk's choice.token_ids, where asked for
    logprob_chunks: list[dict] = []  # each chunk's choice.logprobs, where asked for
    last_ct = 0
    by_usage = False
    saw_done = False
    final_usage = None
    spec = None
    cut = rec.cancel_after_tokens
    async for t, payload in sse_payloads(content):
        if payload == b"[DONE]":
            saw_done = True
            continue
        data = _loads(payload)
        if "error" in data or data.get("object") == "error":
            _raise_server_error(data, len(times))
        named = data.get("model")
        if named != rec.model and rec.model in (None, asked):  # the first named, or the first other than asked
            rec.model = named if isinstance(named, str) else rec.model
        choices = data.get("choices")
        usage = data.get("usage")
        if choices:
            ch = choices[0]
            if chat:
                d = ch.get("delta")
                said = d.get("content") if d else None
                text = (said or d.get("reasoning_content") or d.get("reasoning") or _tool_call_text(d)) if d else None
            else:
                said = text = ch.get("text")
            if answer is not None and said:
                answer.append(said)
            nbytes = tally.add_text(text) if text else 0
            fr = ch.get("finish_reason")
            if usage and fr and not by_usage:
                # a usage first seen on the chunk that ends the answer is the whole answer's (llama.cpp's
                # server before its PR 15444, llama-cpp-python), not this chunk's count
                final_usage, usage = usage, None
            if usage and _count(usage, "completion_tokens", "usage") is not None:
                n = usage["completion_tokens"] - last_ct
                if n > 0:
                    times.append(t)
                    toks.append(n)
                    last_ct += n
                    by_usage = True
                    tally.add_chunk_usage(len(times), n, nbytes)
            elif text:
                times.append(t)
                toks.append(1)
            if fr:
                rec.finish_reason = fr
            elif cut is not None:  # a chunk that ends the answer is not cut: the user has it whole
                _cut_reached(toks, cut)
            ids, logprobs = ch.get("token_ids"), ch.get("logprobs")
            if ids:
                id_chunks.append(ids)
            if logprobs:
                logprob_chunks.append(logprobs)
        elif usage:
            final_usage = usage
        if spec_details is not None:
            found = spec_details(data)
            if found is not None:
                spec = found
    if not saw_done:
        raise _StreamFailure(
            f"connection dropped mid-stream: the stream ended without [DONE] after {len(times)} token chunks"
        )
    rec.text = tally.text
    keep_openai(rec, chat, id_chunks, logprob_chunks)
    _settle_usage(rec, final_usage, last_ct if by_usage else None, tally, count_tokens)
    if spec is not None:
        rec.spec_verify_ct = spec.get("spec_verify_ct")
        rec.spec_accept_length = spec.get("spec_accept_length")
        rec.spec_accepted_drafts = spec.get("spec_accepted_drafts")
        rec.spec_correct_drafts_histogram = correct_drafts_histogram(spec)
    if answer is not None:
        rec.answer = "".join(answer)


def _count(block: dict, key: str, where: str) -> int | None:
    """A token count of the server's reply: a non-negative integer or absent, else the reply is malformed."""
    value = block.get(key)
    if value is None or (type(value) is int and value >= 0):
        return value
    raise _StreamFailure(f"malformed reply from the server: {where}.{key} is {value!r}, not a token count")


def _tool_call_text(delta: dict) -> str | None:
    """A tool call's streamed payload (its name and argument text): output like content,
    so a stream of tool calls is not a stream without output."""
    calls = delta.get("tool_calls")
    if not isinstance(calls, list):
        return None
    parts = [str((call.get("function") or {}).get(key) or "") for call in calls if isinstance(call, dict)
             for key in ("name", "arguments")]
    return "".join(parts) or None


def correct_drafts_histogram(spec: dict) -> list[int] | None:
    """SGLang's ``spec_correct_drafts_histogram`` (verify cycles by accepted drafts), when
    it is a list of counts; anything else is no histogram rather than a wrong one."""
    hist = spec.get("spec_correct_drafts_histogram")
    if not isinstance(hist, list) or not hist or not all(type(n) is int and n >= 0 for n in hist):
        return None
    return hist


def _settle_usage(rec: RequestRecord, final_usage: dict | None, per_chunk_total: int | None,
                  tally: StreamTally, count_tokens: CountTokens | None) -> None:
    """Set the record's token counts from a finished OpenAI stream's usage, once they are
    checked against what was streamed (:mod:`harness.load.crosscheck`)."""
    if final_usage is None and per_chunk_total is None:
        if not rec.chunk_times:  # the most basic fact first: nothing came at all
            raise _StreamFailure("the stream finished without any tokens")
        raise _StreamFailure(
            "the server sent no usage chunk (stream_options.include_usage), so the completion token count is unknown"
        )
    if final_usage is not None:
        rec.prompt_tokens = _count(final_usage, "prompt_tokens", "usage")
        rec.completion_tokens = _count(final_usage, "completion_tokens", "usage")
    else:
        rec.completion_tokens = per_chunk_total
    toks = rec.chunk_tokens
    if not (toks and rec.completion_tokens):
        return  # no tokens, or a zero count: _completion_error names it
    problem = usage_problem(rec.completion_tokens, tally, toks, per_chunk_total, count_tokens)
    if problem:
        raise _StreamFailure(problem)
    missing = rec.completion_tokens - sum(toks)
    if missing > 0:  # fallback counting (1 per chunk), or a last step with no chunk: the last chunk absorbs the rest
        toks[-1] += missing


async def _read_generate(content: aiohttp.StreamReader, rec: RequestRecord, keep_answer: bool = False) -> None:
    times, toks = rec.chunk_times, rec.chunk_tokens
    last_ct = 0
    saw_done = False
    meta: dict = {}
    last: dict = {}  # the last event with meta_info: its "text" is the whole answer (cumulative)
    texts: list[str] = []  # each chunk's text, output_ids and logprobs: cumulative or not, settled at the end
    id_chunks: list[list[int]] = []
    logprob_chunks: list[list] = []
    top_chunks: list[list] = []
    async for t, payload in sse_payloads(content):
        if payload == b"[DONE]":
            saw_done = True
            continue
        data = _loads(payload)
        if "error" in data or data.get("object") == "error":
            _raise_server_error(data, len(times))
        text, ids, m = data.get("text"), data.get("output_ids"), data.get("meta_info")
        if text is not None:
            texts.append(text)
        if ids is not None:
            id_chunks.append(ids)
        if m:
            meta, last = m, data
            if "output_token_logprobs" in m:
                logprob_chunks.append(m["output_token_logprobs"] or [])
                top_chunks.append(m.get("output_top_logprobs") or [])
            ct = m.get("completion_tokens")
            if ct is not None and ct > last_ct:
                times.append(t)
                toks.append(ct - last_ct)
                last_ct = ct
                if rec.cancel_after_tokens is not None and not m.get("finish_reason"):
                    _cut_reached(toks, rec.cancel_after_tokens)
    if not saw_done:
        raise _StreamFailure(
            f"connection dropped mid-stream: the stream ended without [DONE] after {len(times)} token chunks"
        )
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        if fr.get("type") == "abort" and fr.get("message"):
            rec.finish_reason = "abort"
            raise _StreamFailure(f"request aborted by the server: {fr['message']}")
        rec.finish_reason = fr.get("type")
    elif fr:
        rec.finish_reason = str(fr)
    rec.prompt_tokens = _count(meta, "prompt_tokens", "meta_info")
    rec.completion_tokens = _count(meta, "completion_tokens", "meta_info")
    if rec.completion_tokens is None:
        raise _StreamFailure("the server's meta_info carried no completion_tokens")
    keep_generate(rec, texts, id_chunks, logprob_chunks, top_chunks)
    if meta.get("spec_verify_ct") is not None:
        rec.spec_verify_ct = meta.get("spec_verify_ct")
        rec.spec_accept_length = meta.get("spec_accept_length")
        rec.spec_correct_drafts_histogram = correct_drafts_histogram(meta)
    if keep_answer:
        rec.answer = str(last.get("text") or "")
