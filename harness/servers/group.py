"""What a server made of several servers does with them (a fleet's workers,
harness/servers/fleet.py; a server's nodes, nodes.py): start them together, stop them all,
unite their GPUs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from harness.servers.base import Server, ServerError


def start_together(servers: list[Server], name: str) -> None:
    """Every server launched from this thread (a process backend's child gets SIGTERM when
    the thread that started it ends: PR_SET_PDEATHSIG), then all waited on together (slow
    loaders start in the time of one; a node is ready only once the others joined). The
    first failure raises; the caller's stop() stops them all."""
    for server in servers:
        server.launch()
    pool = ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix=f"wait-{name}")
    try:
        failures = [f for f in pool.map(ready_or_failure, servers) if f is not None]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # on Ctrl-C no wait for the waits: stop() ends them
    if failures:
        raise failures[0]


def ready_or_failure(server: Server) -> ServerError | None:
    try:
        server.await_ready()
    except ServerError as exc:
        return exc
    return None


def stop_all(servers: list) -> None:
    """Every server stopped, each even when another's stop fails; the first failure raised after."""
    errors: list[ServerError] = []
    for server in servers:
        try:
            server.stop()
        except ServerError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def united_gpu_ids(servers: list[Server]) -> list[str] | None:
    """The GPUs of all of them (None: one has all of them, or unknown)."""
    ids: list[str] = []
    for server in servers:
        given = server.gpu_ids()
        if given is None:
            return None
        ids += [g for g in given if g not in ids]
    return ids
