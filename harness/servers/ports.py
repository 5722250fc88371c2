"""Local TCP ports for the process backend: a free one to start a server on, whether a
configured one is already taken, and which processes listen on one (from /proc).

Why it matters: a server's readiness is its health route answering on its port. When
another server already listens there (a leftover engine, another run), that one answers,
the arm's own server fails to bind moments or minutes later (an engine binds after loading
its weights), and the figures would be another server's. So a taken port is refused before
the server starts, and once ready the listener must be a process of the arm's own server.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

LISTEN = "0A"  # the TCP state /proc/net/tcp writes for a listening socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick); another process may still take it
    before the server binds it, which :func:`listener_pids` then shows."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_taken(host: str, port: int) -> bool:
    """Whether a server could not bind ``host:port`` now because something holds it (a
    listener, on that address or on every address). Binds as servers do (SO_REUSEADDR, so a
    port in TIME_WAIT after a server stopped is free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    """The socket inodes listening on ``port`` on any local address (IPv4 and IPv6)."""
    found: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found


def listener_pids(port: int, proc: Path = Path("/proc")) -> set[int] | None:
    """The processes holding a socket that listens on ``port``; None when this cannot be
    told (no /proc, or no listener found in a table we can read)."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    links = {f"socket:[{inode}]" for inode in inodes}
    pids: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                if os.readlink(entry / "fd" / fd) in links:
                    pids.add(int(entry.name))
                    break
            except OSError:
                continue
    return pids or None


def describe_pid(pid: int, proc: Path = Path("/proc")) -> str:
    """`pid 123 (python3)`: the program's name only, since a command line may carry a secret."""
    try:
        name = (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        name = ""
    return f"pid {pid} ({name})" if name else f"pid {pid}"
