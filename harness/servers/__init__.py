"""Server backends behind one interface (`Server`). Only this package starts servers.

Also the images a docker backend runs (images.py) and the control-plane HTTP client (client.py).
May import: config, engines, record (the server log goes through the redaction)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness.servers.base import Server, ServerError
from harness.servers.labels import Session


def make_server(arm_name: str, cfg: DictConfig, log_path: Path, session: Session, scrub=None) -> Server:
    """The backend named by `backend.kind` (config validation has rejected unknown kinds);
    `scrub` redacts each line of the server's log before it is written."""
    kind = cfg.backend.kind
    if kind == "docker":
        from harness.servers.docker import DockerServer

        return DockerServer(arm_name, cfg, log_path, session, scrub)
    if kind == "process":
        from harness.servers.process import ProcessServer

        return ProcessServer(arm_name, cfg, log_path, scrub)
    if kind == "attach":
        from harness.servers.attach import AttachedServer

        return AttachedServer(arm_name, cfg, log_path, scrub)
    raise ServerError(f"backend '{kind}' is not available; valid: docker, process, attach")


def remove_dead_sessions_containers(cfg: DictConfig, session: Session) -> list[str]:
    """Once per Docker engine and session, before the first server: remove the containers
    that dead specgate sessions left behind. Returns their names (for the log)."""
    if cfg.backend.kind != "docker":
        return []
    from harness.servers.images import docker_client
    from harness.servers.labels import remove_containers

    return remove_containers(docker_client(cfg.backend.docker_host), only_dead=True, keep_session=session.id)


__all__ = ["Server", "ServerError", "Session", "make_server", "remove_dead_sessions_containers"]
