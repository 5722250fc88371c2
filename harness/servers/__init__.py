"""Server backends behind one interface (`Server`). Only this package starts servers."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness.servers.base import Server, ServerError


def make_server(arm_name: str, cfg: DictConfig, log_path: Path) -> Server:
    """The backend named by `backend.kind` (config validation has rejected unknown kinds)."""
    kind = cfg.backend.kind
    if kind == "process":
        from harness.servers.process import ProcessServer

        return ProcessServer(arm_name, cfg, log_path)
    if kind == "attach":
        from harness.servers.attach import AttachedServer

        return AttachedServer(arm_name, cfg, log_path)
    raise ServerError(f"backend '{kind}' is not available; valid: process, attach")


__all__ = ["Server", "ServerError", "make_server"]
