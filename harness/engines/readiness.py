"""How a server is known to be ready: a wait strategy an engine provides
(`Engine.readiness()`) and every backend waits on, as testcontainers' wait strategies do
(`HttpWaitStrategy("/health").with_startup_timeout(120)`).

A strategy polls until the server is ready (harness/http_client.py does the HTTP),
watches the server meanwhile so that one that exits early fails at once with how it ended,
and on timeout fails with the server's log tail attached (the server's own `failure`,
harness/servers/base.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

DEFAULT_STARTUP_TIMEOUT_S = 120.0
DEFAULT_POLL_S = 0.5


class Waited(Protocol):
    """What a strategy needs of the server it waits on (a harness/servers Server)."""

    name: str
    base_url: str

    def is_alive(self) -> bool: ...

    def exit_description(self) -> str: ...

    def failure(self, sentence: str) -> Exception: ...


@dataclass(frozen=True)
class HttpWaitStrategy:
    """Ready when every route in `paths` answers 2xx, in order, within one poll."""

    paths: tuple[str, ...] = ("/health",)
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    poll_s: float = DEFAULT_POLL_S

    def with_startup_timeout(self, seconds: float) -> "HttpWaitStrategy":
        return replace(self, startup_timeout_s=float(seconds))

    def with_poll_interval(self, seconds: float) -> "HttpWaitStrategy":
        return replace(self, poll_s=float(seconds))

    def wait_until_ready(self, server: Waited, watch_exit: bool = True) -> float:
        """Seconds waited. Raises the server's failure (its log tail attached) when it exited
        first or the deadline passed. `watch_exit`: the backend owns a process that can
        exit (an attached server's liveness is only these same routes)."""
        from harness.http_client import ClientError, ServerClient

        is_alive = server.is_alive if watch_exit else None
        try:
            with ServerClient(server.base_url) as client:
                return client.wait_healthy(self.startup_timeout_s, is_alive=is_alive, poll_s=self.poll_s,
                                           paths=self.paths)
        except ClientError as exc:
            if is_alive is not None and not is_alive():
                raise server.failure(f"arm '{server.name}': the server {server.exit_description()} "
                                     f"before it became healthy") from None
            raise server.failure(f"arm '{server.name}': the server at {server.base_url} did not become healthy "
                                 f"within {self.startup_timeout_s:g} s ({exc})") from None
