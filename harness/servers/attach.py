"""Attach backend: a server someone already started at `backend.url`. Nothing is
launched or stopped; its log is not ours to read."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness.client import ClientError, ServerClient
from harness.engines import engine_of
from harness.servers.base import Server
from harness.servers.log import ServerLog


class AttachedServer(Server):
    def __init__(self, name: str, cfg: DictConfig, log_path: Path, scrub=None):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.base_url = cfg.backend.url.rstrip("/")
        self.timeout_s = cfg.backend.startup_timeout_s
        self.healthy = False

    def start(self) -> None:
        log = ServerLog(self.log_path, self.scrub)
        log.write(f"attached to {self.base_url}; its log is kept by whoever started it\n".encode())
        log.close()
        try:
            ServerClient(self.base_url).wait_healthy(self.timeout_s, paths=engine_of(self.cfg).health_paths)
        except ClientError as exc:
            raise self.failure(f"arm '{self.name}': no healthy server at {self.base_url} within {self.timeout_s:g} s ({exc})") from None
        self.healthy = True

    def stop(self) -> None:
        self.healthy = False

    def is_alive(self) -> bool:
        try:
            return ServerClient(self.base_url, timeout_s=2).health()
        except ClientError:
            return False
