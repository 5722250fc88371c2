"""Attach backend: a server someone already started at `backend.url`. Nothing is
launched or stopped; its log is not ours to read.

Whether it is still alive after a load is asked over HTTP only, so a slow health route
must not read as a dead server: a check that times out or answers non-2xx is retried
until `backend.health_timeout_s`; only a refused connection (nothing listens any more) or
that deadline ends it. A slow but answering route is noted in the record, not failed.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.config.schema import SpecgateConfig
from harness.secrets import BOOK
from harness.http_client import ClientError, ServerClient, ServerRefused
from harness.engines import engine_of
from harness.servers.base import Server
from harness.servers.log import ServerLog

SLOW_HEALTH_S = 1.0  # a health answer slower than this is worth a note in the record
RETRY_PAUSE_S = 0.5


class AttachedServer(Server):
    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, scrub=None):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.base_url = BOOK.reveal(cfg.backend.url).rstrip("/")  # a URL's user and password: the client needs them
        self.timeout_s = cfg.backend.startup_timeout_s
        self.health_timeout_s = cfg.backend.health_timeout_s
        self.readiness = engine_of(cfg).readiness().with_startup_timeout(self.timeout_s)
        self.healthy = False
        self.gone = ""  # how the last liveness check found it gone, in words
        self.slowest_health_s = 0.0  # the slowest answering liveness check

    def start(self) -> None:
        log = ServerLog(self.log_path, self.scrub)
        log.write(f"attached to {self.base_url}; its log is kept by whoever started it\n".encode())
        log.close()
        self.wait_ready(self.readiness, watch_exit=False)  # its liveness is only these routes
        self.healthy = True

    def stop(self) -> None:
        self.healthy = False

    def is_alive(self) -> bool:
        """Its health routes answer 2xx within backend.health_timeout_s (retried meanwhile)."""
        start = time.monotonic()
        deadline = start + self.health_timeout_s
        last = "no answer"
        with ServerClient(self.base_url) as client:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.gone = (f"did not answer its health route within backend.health_timeout_s="
                                 f"{self.health_timeout_s:g}s ({last})")
                    return False
                answered, last, refused = self.check_once(client, remaining)
                if answered:
                    self.slowest_health_s = max(self.slowest_health_s, time.monotonic() - start)
                    return True
                if refused:
                    self.gone = f"stopped answering: {last}"
                    return False
                time.sleep(min(RETRY_PAUSE_S, max(0.0, deadline - time.monotonic())))

    def check_once(self, client: ServerClient, timeout_s: float) -> tuple[bool, str, bool]:
        """(all health routes answered 2xx, the last problem in words, the connection was refused)."""
        for path in self.readiness.paths:
            try:
                client.get(path, timeout_s=max(0.5, timeout_s))
            except ClientError as exc:
                return False, str(exc), isinstance(exc, ServerRefused)
        return True, "ok", False

    def exit_description(self) -> str:
        return self.gone or "stopped answering"

    def describe(self) -> dict:
        found = super().describe()
        if self.slowest_health_s > SLOW_HEALTH_S:
            found["health_route_slow_s"] = round(self.slowest_health_s, 2)
        return found
