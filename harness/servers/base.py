"""The one Server interface every backend implements: a context-managed running server.

A suite never knows which backend started the server: it gets `base_url`, can ask
whether the server is alive, and reads its log. Backends raise `ServerError` with one
sentence (and the log's last lines) when a server fails to start or dies.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.engines.readiness import HttpWaitStrategy
    from harness.servers.log import Scrub
    from harness.servers.processes import ServerProcess

LOG_TAIL_LINES = 50


class ServerError(Exception):
    """A server could not be started, never became healthy, or died (one sentence + log tail)."""


class ImageError(Exception):
    """An image could not be found, pulled or built (one sentence, and what to do)."""


class Server(ABC):
    def __init__(self, name: str, log_path: Path, scrub: "Scrub | None" = None):
        self.name = name  # the arm this server belongs to
        self.log_path = Path(log_path)
        self.scrub = scrub  # the record's redaction of text: the log is written through it
        self.base_url: str = ""
        self.log_thread: "threading.Thread | None" = None  # what copies the server's output into log_path

    @abstractmethod
    def start(self) -> None:
        """Start (or reach) the server and wait until it is healthy; raise ServerError."""

    def launch(self) -> None:
        """The first half of `start`: set the server going without waiting for it (a fleet
        launches every worker from its own thread, then waits on them together: a child
        process dies with the thread that started it, harness/servers/process.py)."""
        self.start()

    def await_ready(self) -> None:
        """The second half of `start`: wait until what `launch` started is healthy."""

    @abstractmethod
    def stop(self) -> None:
        """Stop everything this server started. Safe to call twice, and after a failed start."""

    @abstractmethod
    def is_alive(self) -> bool:
        """False once the server's process has exited."""

    def describe(self) -> dict:
        """What the run record should know about this server (backend-specific)."""
        return {"base_url": self.base_url}

    def gpu_ids(self) -> list[str] | None:
        """The GPUs this server was given (indices or UUIDs, as docker device requests and
        CUDA_VISIBLE_DEVICES name them); None: all of them, or unknown."""
        return None

    def members(self) -> list["Server"]:
        """The servers that each hold part of the model's work, reachable on their own: this
        one; a fleet's workers (harness/servers/fleet.py), for /metrics and what only a
        worker answers."""
        return [self]

    def member_roles(self) -> list[str]:
        """What each member does, in members() order: 'server' (whole requests); a split
        fleet's 'prefill' and 'decode' workers (harness/servers/fleet.py)."""
        return ["server"] * len(self.members())

    def gpu_urls(self) -> list[str]:
        """Where each part of this server answers for its own GPUs (the simulator's /sim/gpu):
        every member's address; a multi-node server's, every node's."""
        return [member.base_url for member in self.members()]

    def bad_request_message(self, body, engine) -> str:
        """The message of a 400 body from this server's address: the engine's own shape."""
        return engine.bad_request_message(body)

    def router_metrics_url(self) -> str | None:
        """Where a fleet's router exports its own Prometheus metrics; None: no router."""
        return None

    def processes(self) -> list["ServerProcess"]:
        """Every process of the server, with its command line and environment."""
        raise ServerError(f"the {type(self).__name__} backend cannot see the server's processes")

    def exit_description(self) -> str:
        """How the server ended, in words (backends that own a process say more)."""
        return "the server stopped answering"

    def settle_log(self, timeout_s: float = 5.0) -> None:
        """A server that has ended: its output read to the end first, so that the tail shows
        what it died of (a crash at start is seen before its last lines are copied)."""
        if self.log_thread is not None and not self.is_alive():
            self.log_thread.join(timeout=timeout_s)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if not self.log_path.is_file():
            return "(no server log)"
        with self.log_path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip() or "(server log is empty)"

    def wait_ready(self, readiness: "HttpWaitStrategy", watch_exit: bool = True) -> None:
        """Wait on the engine's readiness strategy, so a crash fails at once (with how it
        ended) and a hang fails at the deadline, both with the log tail."""
        readiness.wait_until_ready(self, watch_exit=watch_exit)

    def failure(self, sentence: str) -> ServerError:
        self.settle_log()
        return ServerError(f"{sentence}\n--- last {LOG_TAIL_LINES} lines of {self.log_path} ---\n{self.log_tail()}")
