"""Server backends behind one interface (`Server`). Only this package starts servers.

Also the images a docker backend runs (images.py); the control-plane HTTP client they use is harness/http_client.py."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from harness.config.schema import SpecgateConfig
from harness.servers.base import Server, ServerError
from harness.servers.labels import Session


def docker_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    from harness.servers.docker import DockerServer  # each backend's module only when it is asked for

    return DockerServer(arm_name, cfg, log_path, session, scrub)


def process_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    from harness.servers.process import ProcessServer

    return ProcessServer(arm_name, cfg, log_path, scrub)


def srun_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    from harness.servers.srun import SrunServer

    return SrunServer(arm_name, cfg, log_path, session, scrub)


def attached_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    from harness.servers.attach import AttachedServer

    return AttachedServer(arm_name, cfg, log_path, scrub)


# backend.kind -> what starts (or reaches) its server: the one list of backends
BACKENDS: dict[str, Callable[..., Server]] = {"docker": docker_server, "process": process_server,
                                              "srun": srun_server, "attach": attached_server}


def make_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    """The backend named by `backend.kind` (config validation has rejected unknown kinds);
    `scrub` redacts each line of the server's log before it is written."""
    if cfg.backend.kind not in BACKENDS:
        raise ServerError(f"backend '{cfg.backend.kind}' is not available; valid: {', '.join(BACKENDS)}")
    if cfg.server.workers > 1 or cfg.router.disaggregated:  # workers (whole, or prefill and decode) behind SGLang's router
        from harness.servers.fleet import FleetServer

        return FleetServer(arm_name, cfg, log_path, session, scrub, one_server)
    return one_server(arm_name, cfg, log_path, session, scrub)


def one_server(arm_name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None) -> Server:
    """One server of the backend: on one node, or spanning `server.nnodes` nodes."""
    if cfg.server.nnodes > 1:
        from harness.servers.nodes import NodesServer

        return NodesServer(arm_name, cfg, log_path, session, scrub, BACKENDS[cfg.backend.kind])
    return BACKENDS[cfg.backend.kind](arm_name, cfg, log_path, session, scrub)


def build_image(cfg: SpecgateConfig) -> str | None:
    """The image a docker arm's server will run, found or built now (None for the other
    backends), for a driver to call before it measures anything: a build that fails is one
    sentence (ServerError) before any load, and no load sits beside a build."""
    if cfg.backend.kind != "docker":
        return None
    from harness.servers.images import ImageError, docker_client, ensure_image

    try:
        return ensure_image(cfg.build, docker_client(cfg.backend.docker_host)).tag
    except ImageError as exc:
        raise ServerError(str(exc)) from None


def remove_dead_sessions_leftovers(cfg: SpecgateConfig, session: Session) -> list[str]:
    """Once per backend (a Docker engine, the SLURM cluster, this machine's processes) and
    session, before the first server: remove the containers, cancel the SLURM jobs, or remove
    the servers' temp folders that dead specgate sessions left behind. Returns their names
    (for the log)."""
    if cfg.backend.kind == "srun":
        from harness.servers.srun import cancel_jobs

        return cancel_jobs(only_dead=True, keep_session=session.id)
    if cfg.backend.kind == "process":
        from harness.servers.process import remove_dead_sessions_tmp_dirs

        return remove_dead_sessions_tmp_dirs()
    if cfg.backend.kind != "docker":
        return []
    from harness.servers.images import docker_client
    from harness.servers.labels import remove_containers

    return remove_containers(docker_client(cfg.backend.docker_host), only_dead=True, keep_session=session.id)


__all__ = ["BACKENDS", "Server", "ServerError", "Session", "build_image", "make_server", "remove_dead_sessions_leftovers"]
