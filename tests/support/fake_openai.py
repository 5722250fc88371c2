"""An OpenAI-compatible server that misbehaves on purpose, one way per ``mode``: the
servers that specgate's numbers must not believe.  Standard library only.

Three ways to use it::

    with FakeOpenAI("hang_mid_stream") as fake:             # a context manager
        run_load(LoadPlan.of(workload, fake.url, fake.model))

    def test_x(fake_openai):                                # a fixture factory (tests/load/conftest.py)
        fake = fake_openai("lying_usage", lie_factor=3)     # closed when the test ends

    python tests/support/fake_openai.py --mode hang_mid_stream --port 0   # a process: prints its port
                                                                  # on the first line, serves until killed

then ``backend=attach backend.url=http://127.0.0.1:PORT`` runs suites against it.

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (streamed or not; a body
that is not ``application/json`` gets SGLang's 400), ``POST /tokenize`` (vLLM's shape:
``{"model", "prompt"}`` -> ``{"count", "tokens", "max_model_len"}``, counted as the usage
counts prompts), ``GET /v1/models``, ``/health``
(and SGLang's ``/health_generate``) and ``/metrics`` (empty, or ``metrics(fake, n)``'s text for
its n-th scrape: counters that restart or lie; ``fake.streamed_tokens`` is what it really
streamed).  ``named_model`` is the model its answers name, where a server behind a
router may name another than the one asked (default: the model it serves).  A stream is what a real server sends: HTTP/1.1 chunked
``text/event-stream`` of ``data: {json}\\n\\n`` events -- for chat a role chunk, then
``choices[0].delta.content`` chunks and an empty-delta chunk with the finish reason; for
completions ``choices[0].text`` chunks, the last with the finish reason -- then, when
``stream_options.include_usage`` is set, a usage chunk (``choices: []``), then
``data: [DONE]``.  With ``stream_options.continuous_usage_stats`` every content chunk
also carries the cumulative usage (unless ``continuous_usage=False``: a server that
ignores the option).  The output is ``max_tokens`` words (16 if unset), one token each
(``"the", " quick", ...``: a word with its leading space, the simulator's word pieces),
``chunk_sizes`` tokens per chunk in turn (``(3, 2)``: an honest speculative server).
A prompt is one token a word, or with ``chars_per_token=n`` each word ``ceil(len / n)``
tokens (long words in pieces, as a real tokenizer splits rare words); ``prompt_offset``
tokens are added to every prompt the usage reports (a BOS, a chat template).

Every response closes its connection, so no idle keep-alive holds a thread; ``close()``
releases hanging handlers and joins every thread it started.
"""

from __future__ import annotations

import argparse
import os
import itertools
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

MODES = {
    "ok": "streams honestly",
    "http500": "answers every generation request with HTTP 500 and an OpenAI error body",
    "malformed_sse": "sends a data: line that is not JSON after `fault_after` chunks",
    "drop_mid_stream": "closes the connection after `fault_after` chunks, mid chunked body",
    "hang_before_headers": "reads the request, then sends nothing until closed",
    "hang_mid_stream": "sends headers and `fault_after` chunks, then nothing until closed",
    "lying_usage": "claims `lie_factor` x the tokens it streams (per-chunk usage too, unless lie_in_chunks=False)",
    "done_no_tokens": "streams only `data: [DONE]`: no tokens, no usage",
    "error_200": "answers 200 with an error object: a JSON body (error_format='json') or one data: line ('sse')",
    "null_content": "streams every chunk with null content (null text) while its usage grows: no output at all",
    "string_counts": "streams honestly but every usage count is a string ('5')",
    "string_delta": "chat: every chunk's delta is a string, not an object",
    "redirect": "answers every generation POST with a 301 to the same path under /moved",
    "ignores_max_tokens": "streams honestly, but 4x the max_tokens asked",
    "usage_on_finish": "no per-chunk usage; the total rides on the finish chunk, no usage chunk after it "
                       "(llama.cpp's server before its PR 15444, llama-cpp-python)",
    "slow_health": "GET /health takes `health_delay_s`",
    "dies_mid_load": "serves `die_after` requests honestly, then exits mid-stream (as a process only)",
}
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven",
         "tired", "engineers", "measure", "every", "token")
DEFAULT_MAX_TOKENS = 16
ERROR_BODY = {"object": "error", "message": "model overloaded", "type": "ServiceUnavailable", "param": None,
              "code": 503}
CONTENT_TYPE_ERROR = {"object": "error", "message": "Unsupported Media Type: Only 'application/json' is allowed",
                      "type": "Bad Request", "param": None, "code": 400}  # SGLang's shape: the default engine's
HANDLER_SOCKET_TIMEOUT_S = 5.0  # a client that connects and sends nothing cannot hold close() longer


class _JoiningServer(ThreadingHTTPServer):
    """ThreadingHTTPServer whose server_close() joins its handler threads.

    The stock server makes handlers daemon threads and then does not track them, so
    server_close() returned while released handlers were still unwinding (a test that
    counted threads right after close() saw them). Handlers stay daemons, so a fake a
    test forgot to close cannot hold the interpreter's exit.
    """

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handler_threads: list[threading.Thread] = []
        self.handler_threads_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  daemon=True)
        with self.handler_threads_lock:
            self.handler_threads = [t for t in self.handler_threads if t.is_alive()]
            self.handler_threads.append(thread)
        thread.start()

    def server_close(self) -> None:
        super().server_close()
        with self.handler_threads_lock:
            threads, self.handler_threads = self.handler_threads, []
        for thread in threads:
            thread.join()


class FakeOpenAI:
    """One fake server on ``host``:``port`` (0: a free port) in background threads."""

    def __init__(self, mode: str = "ok", *, lie_factor: float = 3, lie_in_chunks: bool = True,
                 error_format: str = "json", error_body: dict | None = None, health_delay_s: float = 2.0,
                 chunk_sizes: tuple[int, ...] = (1,), continuous_usage: bool = True, fault_after: int = 2,
                 step_s: float = 0.0, model: str = "fake-model", host: str = "127.0.0.1", port: int = 0,
                 verbose: bool = False, fault_every: int = 1, die_after: int = 3, may_exit: bool = False,
                 chars_per_token: int | None = None, prompt_offset: int = 0,
                 metrics: Callable[["FakeOpenAI", int], str] | None = None, named_model: str | None = None):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
        if error_format not in ("json", "sse"):
            raise ValueError(f"unknown error_format {error_format!r}: expected json or sse")
        if mode == "dies_mid_load" and not may_exit:
            raise ValueError("dies_mid_load exits the process: run the fake as a process (python tests/support/fake_openai.py)")
        self.mode = mode
        self.fault_every = max(1, int(fault_every))  # every Nth generation request misbehaves; the rest are honest
        self.die_after = die_after
        self.lie_factor = lie_factor
        self.lie_in_chunks = lie_in_chunks
        self.error_format = error_format
        self.error_body = dict(error_body or ERROR_BODY)
        self.health_delay_s = health_delay_s
        self.chunk_sizes = tuple(chunk_sizes)
        self.continuous_usage = continuous_usage
        self.fault_after = fault_after
        self.step_s = step_s
        self.model = model
        self.verbose = verbose
        self.chars_per_token = chars_per_token
        self.prompt_offset = prompt_offset
        self.metrics = metrics
        self.metrics_scrapes = 0
        self.named_model = named_model or model
        self.streamed_tokens = 0  # completion tokens its streams carried, in all
        self.bodies: list[dict] = []  # every generation request's JSON body, in arrival order
        self.posts: list[str] = []  # every POST's path, in arrival order
        self.closing = threading.Event()  # set by close(): hanging handlers return
        self._address = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None  # the bound port, once started (kept after close)

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> "FakeOpenAI":
        server = _JoiningServer(self._address, _Handler)
        server.fake = self
        server.count_lock = threading.Lock()
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Release hanging handlers, stop serving, close the socket, join every thread."""
        if self._server is None:
            return
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{self._address[0]}:{self.port}"

    # --- what it says ------------------------------------------------------------------
    def claimed(self, tokens: int, mode: str) -> int:
        """The completion tokens it reports for ``tokens`` streamed by a request in ``mode``."""
        return round(tokens * self.lie_factor) if mode == "lying_usage" else tokens

    def mode_of(self, number: int) -> str:
        """How the ``number``-th generation request (0-based) is served."""
        if self.mode == "dies_mid_load":
            return "dies_mid_load" if number >= self.die_after else "ok"
        return self.mode if number % self.fault_every == self.fault_every - 1 else "ok"

    def prompt_tokens(self, text: str) -> int:
        """A prompt's tokens: one a word, or ``ceil(len / chars_per_token)`` each (at least 1 in all)."""
        per = self.chars_per_token
        return max(1, sum(1 if per is None else -(-len(word) // per) for word in text.split()))

    def chunks(self, max_tokens: int) -> Iterator[tuple[str, int]]:
        """(text, cumulative tokens) of each content chunk."""
        sizes = itertools.cycle(self.chunk_sizes)
        done = 0
        while done < max_tokens:
            n = min(next(sizes), max_tokens - done)
            text = "".join(_word(i) for i in range(done, done + n))
            done += n
            yield text, done


def _word(i: int) -> str:
    word = WORDS[i % len(WORDS)]
    return word if i == 0 else " " + word


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streams, like uvicorn
    timeout = HANDLER_SOCKET_TIMEOUT_S
    server_version = "fake-openai"

    @property
    def fake(self) -> FakeOpenAI:
        return self.server.fake

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the client left (e.g. timed out): nothing to tell it
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.fake.verbose:
            super().log_message(format, *args)

    # --- plumbing ----------------------------------------------------------------------
    def send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def send_event(self, obj: Any) -> None:
        self.write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def end_stream(self) -> None:
        self.write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- GET ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path in ("/health", "/health_generate"):  # SGLang's two: the default engine (sim) asks both
            if self.fake.mode == "slow_health":
                self.fake.closing.wait(self.fake.health_delay_s)
            self.send_json(200, {})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": self.fake.model, "object": "model",
                                                             "owned_by": "fake-openai"}]})
        elif self.path == "/metrics":
            with self.server.count_lock:
                scrape, self.fake.metrics_scrapes = self.fake.metrics_scrapes, self.fake.metrics_scrapes + 1
            text = self.fake.metrics(self.fake, scrape).encode() if self.fake.metrics else b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(text)
            self.close_connection = True
        else:
            self.send_json(404, {"object": "error", "message": f"no route {self.path}", "type": "NotFound",
                                 "param": None, "code": 404})

    # --- POST --------------------------------------------------------------------------
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.count_lock:
            self.fake.posts.append(self.path)
        if self.path == "/tokenize":
            self.tokenize(json.loads(raw))
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self.send_json(404, {"object": "error", "message": f"no route {self.path}", "type": "NotFound",
                                 "param": None, "code": 404})
            return
        if self.headers.get_content_type() != "application/json":
            self.send_json(400, CONTENT_TYPE_ERROR)
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_json(400, {"object": "error", "message": "the body is not JSON", "type": "Bad Request",
                                 "param": None, "code": 400})
            return
        with self.server.count_lock:
            self.fake.bodies.append(body)
            self.mode = self.fake.mode_of(len(self.fake.bodies) - 1)
        self.generate(body, chat=self.path == "/v1/chat/completions")

    def tokenize(self, body: dict) -> None:
        count = self.fake.prompt_tokens(str(body.get("prompt", "")))
        self.send_json(200, {"count": count, "tokens": list(range(count)), "max_model_len": 4096})

    def generate(self, body: dict, chat: bool) -> None:
        fake = self.fake
        if self.mode == "http500":
            self.send_json(500, {"object": "error", "message": "the fake was told to fail",
                                 "type": "InternalServerError", "param": None, "code": 500})
        elif self.mode == "hang_before_headers":
            fake.closing.wait()
            self.close_connection = True
        elif self.mode == "redirect":
            self.send_response(301)
            self.send_header("Location", "/moved" + self.path)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
        elif self.mode == "error_200" and fake.error_format == "json":
            self.send_json(200, fake.error_body)
        elif not body.get("stream"):
            self.send_json(200, self.completion(body, chat))
        else:
            self.stream(body, chat)

    def completion(self, body: dict, chat: bool) -> dict:
        """The whole answer of a request without ``stream``."""
        max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS)
        text = "".join(_word(i) for i in range(max_tokens))
        prompt_tokens = self.fake.prompt_tokens(_prompt_text(body)) + self.fake.prompt_offset
        usage = _usage(prompt_tokens, self.fake.claimed(max_tokens, self.mode))
        if chat:
            return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                    "model": self.fake.named_model, "usage": usage,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "length", "logprobs": None}]}
        return {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()),
                "model": self.fake.named_model, "usage": usage,
                "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": None}]}

    def stream(self, body: dict, chat: bool) -> None:
        fake = self.fake
        self.start_stream()
        if self.mode == "done_no_tokens":
            self.end_stream()
            return
        if self.mode == "error_200":
            self.send_event(fake.error_body)
            self.end_stream()
            return
        options = body.get("stream_options") or {}
        continuous = (fake.continuous_usage and bool(options.get("continuous_usage_stats"))
                      and self.mode != "usage_on_finish")
        prompt_tokens = self.fake.prompt_tokens(_prompt_text(body)) + self.fake.prompt_offset
        max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS) * (4 if self.mode == "ignores_max_tokens" else 1)
        head = {"id": "chatcmpl-fake" if chat else "cmpl-fake", "created": int(time.time()), "model": fake.named_model,
                "object": "chat.completion.chunk" if chat else "text_completion"}
        if chat:
            self.send_event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "finish_reason": None}]})
        streamed = 0
        for number, (text, streamed) in enumerate(fake.chunks(max_tokens)):
            if number == fake.fault_after and self.fault_mid_stream():
                return
            time.sleep(fake.step_s)
            last = streamed == max_tokens
            text = None if self.mode == "null_content" else text
            if chat:
                delta = text if self.mode == "string_delta" else {"content": text}
                choice = {"index": 0, "delta": delta, "finish_reason": None}
            else:
                choice = {"index": 0, "text": text, "finish_reason": "length" if last else None}
            event = {**head, "choices": [choice]}
            if continuous:
                event["usage"] = self.usage(prompt_tokens, fake.claimed(streamed, self.mode) if fake.lie_in_chunks else streamed)
            elif last and not chat and self.mode == "usage_on_finish":
                event["usage"] = self.usage(prompt_tokens, streamed)
            self.send_event(event)
        if chat:
            finish = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
            if self.mode == "usage_on_finish":
                finish["usage"] = self.usage(prompt_tokens, streamed)
            self.send_event(finish)
        with self.server.count_lock:
            fake.streamed_tokens += streamed
        if options.get("include_usage") and self.mode != "usage_on_finish":
            self.send_event({**head, "choices": [], "usage": self.usage(prompt_tokens, fake.claimed(streamed, self.mode))})
        self.end_stream()

    def usage(self, prompt_tokens: int, completion_tokens: int) -> dict:
        usage = _usage(prompt_tokens, completion_tokens)
        return {k: str(v) for k, v in usage.items()} if self.mode == "string_counts" else usage

    def fault_mid_stream(self) -> bool:
        """The fault of this mode at ``fault_after`` chunks; True when the stream ends here."""
        mode = self.mode
        if mode == "malformed_sse":
            self.write_chunk(b'data: {"choices": [ oops\n\n')
        elif mode == "drop_mid_stream":  # no terminating chunk: the body is cut short
            self.close_connection = True
            return True
        elif mode == "dies_mid_load":  # the server process is gone, mid-stream, as after a crash
            os._exit(1)
        elif mode == "hang_mid_stream":
            self.fake.closing.wait()
            self.close_connection = True
            return True
        return False


def _prompt_text(body: dict) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    return str(body.get("prompt", ""))


# --- as a process -----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="An OpenAI-compatible server that misbehaves on purpose. "
                                                 "Prints its port on the first line, serves until killed.")
    parser.add_argument("--mode", choices=list(MODES), default="ok",
                        help="; ".join(f"{name}: {what}" for name, what in MODES.items()))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--lie-factor", type=float, default=3)
    parser.add_argument("--lie-only-in-final-usage", action="store_true")
    parser.add_argument("--error-format", choices=["json", "sse"], default="json")
    parser.add_argument("--health-delay-s", type=float, default=2.0)
    parser.add_argument("--chunk-sizes", default="1", help="tokens per chunk in turn, e.g. 3,2,3,1")
    parser.add_argument("--no-continuous-usage", action="store_true", help="ignore continuous_usage_stats")
    parser.add_argument("--fault-after", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.0, help="pause before each content chunk")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    parser.add_argument("--fault-every", type=int, default=1, help="every Nth generation request misbehaves")
    parser.add_argument("--die-after", type=int, default=3, help="dies_mid_load: requests served before it exits")
    args = parser.parse_args(argv)
    fake = FakeOpenAI(args.mode, lie_factor=args.lie_factor, lie_in_chunks=not args.lie_only_in_final_usage,
                      error_format=args.error_format, health_delay_s=args.health_delay_s,
                      chunk_sizes=tuple(int(n) for n in args.chunk_sizes.split(",")),
                      continuous_usage=not args.no_continuous_usage, fault_after=args.fault_after,
                      step_s=args.step_s, model=args.model, host=args.host, port=args.port, verbose=args.verbose,
                      fault_every=args.fault_every, die_after=args.die_after, may_exit=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with fake:
        print(fake.port, flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
