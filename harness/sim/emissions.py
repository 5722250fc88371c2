"""The simulator's own record of when it emitted each streamed chunk: the truth a client's
timings are checked against (``benchmarks/clients.py``).

Off unless ``--sim-record-emissions``: a server under a long load would otherwise keep a
list per request forever. When on, each streaming generation request keeps

* ``arrival``: when its handler was entered (the request's headers are in; its body not yet
  read), on the server's ``time.perf_counter()`` clock;
* ``chunk_times`` / ``chunk_tokens``: for each SSE chunk that carried tokens, the clock just
  before the chunk was handed to the socket, and how many output tokens it carried (the
  server's own count, the same cumulative difference a client reads from ``usage``);

and, once its handler ended, it joins the finished list that ``GET /sim/emissions`` returns
(``DELETE /sim/emissions`` empties it). The server's TTFT is then ``chunk_times[0] -
arrival``, its ITL the gaps between chunk times: what a client would measure if it took no
time of its own and the loopback took none (a client's TTFT also holds its own connect and
send, the server's HTTP parsing before the handler, and both event loops' lag).
``perf_counter`` is CLOCK_MONOTONIC on Linux, shared by every process of the machine, so a
benchmark on the same machine may compare these times with its own directly.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from aiohttp import web

TRACE_KEY = "sim_emission_trace"


@dataclass
class RequestTrace:
    path: str
    arrival: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)

    def chunk(self, tokens: int) -> None:
        """A chunk carrying ``tokens`` output tokens is about to go out."""
        if tokens > 0:
            self.chunk_times.append(time.perf_counter())
            self.chunk_tokens.append(tokens)


class EmissionLog:
    """The finished requests' traces, when recording is on."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.finished: list[RequestTrace] = []

    def start(self, request: web.Request) -> None:
        if self.enabled:
            request[TRACE_KEY] = RequestTrace(request.path, time.perf_counter())

    def finish(self, request: web.Request) -> None:
        trace = request.get(TRACE_KEY)
        if trace is not None and trace.chunk_times:
            self.finished.append(trace)

    def payload(self) -> dict:
        return {"clock": "perf_counter", "enabled": self.enabled,
                "requests": [asdict(t) for t in self.finished]}

    def clear(self) -> int:
        n, self.finished = len(self.finished), []
        return n


def trace_of(request: web.Request) -> RequestTrace | None:
    """The request's trace (None when recording is off): serving's stream loops call
    ``chunk`` on it."""
    return request.get(TRACE_KEY)
