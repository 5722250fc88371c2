"""Labels on everything specgate creates, and cleanup by label: at session start the
leftovers of dead sessions go (e.g. after a kill -9), `specgate clean` removes all."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the docker SDK (and paramiko under it) is imported only where a container is touched
    import docker

LABEL = "specgate"  # on every container and image specgate creates
SESSION, RUN, ARM, PID, HOST = "specgate.session", "specgate.run", "specgate.arm", "specgate.pid", "specgate.host"
RECORD = "specgate.record"  # the record folder's absolute path: two runs started in the same second share a name


@dataclass
class Session:
    """One pytest (or specgate) run: its labels tie its containers to it."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    run: str = ""  # the run record's folder name
    record: str = ""  # the run record's folder, absolute (unique where names are not)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)


def container_labels(session: Session, arm: str) -> dict[str, str]:
    return {LABEL: "1", SESSION: session.id, RUN: session.run, RECORD: session.record, ARM: arm, PID: str(session.pid),
            HOST: session.host}


def session_is_dead(labels: dict[str, str]) -> bool:
    """A session on this host whose harness process is gone. Sessions of other hosts
    (a shared remote engine) are never judged from here."""
    if labels.get(HOST) != socket.gethostname():
        return False
    return harness_is_gone(labels.get(PID, "0"))


def harness_is_gone(pid: str) -> bool:
    """No process of that pid on this machine (a pid that is not a number: none)."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return True
    except PermissionError:
        return False
    return int(pid) <= 0


def labelled_containers(client: docker.DockerClient, label: str = LABEL) -> list:
    """The containers carrying `label` (`key` or `key=value`), running or not. Those removed
    while the list is read are left out: the SDK lists ids, then inspects each, and another
    run removing its own container in between would otherwise fail this one with NotFound
    (seen in a clean clone's make test: a suite's session start died in its cleanup)."""
    return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)


def remove_containers(client: docker.DockerClient, only_dead: bool, keep_session: str | None = None) -> list[str]:
    """Remove specgate's containers (all, or those of dead sessions); returns their names."""
    removed = []
    for container in labelled_containers(client):
        labels = container.labels or {}
        if labels.get(SESSION) == keep_session:
            continue
        if only_dead and not session_is_dead(labels):
            continue
        if remove_container(container):
            removed.append(container.name)
    return removed


def remove_container(container) -> bool:
    """Force-remove a container; False when it is gone already or another session is
    removing it (two runs starting at once both clear a dead session's leftovers: Docker
    answers the second with 409 "removal ... is already in progress")."""
    import docker.errors

    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "already in progress" in str(exc):
            return False
        raise
