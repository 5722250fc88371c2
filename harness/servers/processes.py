"""Every process of a running server, with its command line and environment, read from
/proc: locally for the process backend, through `docker exec` for the docker backend
(`container.top()` would give host PIDs, whose /proc we may not be able to map back).

Why the environment matters: the session this tool comes from set NCCL tuning variables
and could not tell whether they reached the TP worker processes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

# Run inside the container with its python3: prints every process but itself as JSON.
INSPECT_SCRIPT = r"""
import json, os
me = os.getpid()
out = []
for name in os.listdir('/proc'):
    if not name.isdigit() or int(name) == me:
        continue
    try:
        cmd = open('/proc/%s/cmdline' % name, 'rb').read().split(b'\0')
        env = open('/proc/%s/environ' % name, 'rb').read().split(b'\0')
        stat = open('/proc/%s/stat' % name).read()
        comm = open('/proc/%s/comm' % name).read().strip()
    except OSError:
        continue
    if not any(cmd):
        continue
    ppid = int(stat.rsplit(')', 1)[1].split()[1])
    out.append({'pid': int(name), 'ppid': ppid, 'name': comm,
                'cmdline': [c.decode(errors='replace') for c in cmd if c],
                'environ': dict(e.decode(errors='replace').split('=', 1) for e in env if b'=' in e)})
print(json.dumps(out))
"""


@dataclass
class ServerProcess:
    pid: int
    ppid: int
    cmdline: list[str]
    environ: dict[str, str] = field(default_factory=dict)
    name: str = ""  # /proc/<pid>/comm: what ps shows (SGLang names its workers, e.g. sglang::scheduler_TP0)

    @property
    def command(self) -> str:
        return " ".join(self.cmdline)

    def describe(self) -> str:
        return f"pid {self.pid} {self.name} ({self.command[:160]})".replace("  ", " ")


def parse_inspection(output: str) -> list[ServerProcess]:
    return [ServerProcess(**row) for row in json.loads(output)]


def read_proc(pid: int) -> ServerProcess | None:
    base = Path("/proc") / str(pid)
    try:
        cmd = (base / "cmdline").read_bytes().split(b"\0")
        env = (base / "environ").read_bytes().split(b"\0")
        stat = (base / "stat").read_text()
        name = (base / "comm").read_text().strip()
    except OSError:
        return None
    if not any(cmd):
        return None
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return ServerProcess(pid=pid, ppid=ppid, name=name, cmdline=[c.decode(errors="replace") for c in cmd if c],
                         environ=dict(e.decode(errors="replace").split("=", 1) for e in env if b"=" in e))


def local_group(pgid: int) -> list[ServerProcess]:
    """The processes of one local process group (the process backend starts each server
    in its own group, so this is the server and all its workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        process = read_proc(int(entry))
        if process is not None:
            found.append(process)
    return sorted(found, key=lambda p: p.pid)


def environment_mismatches(processes: list[ServerProcess], expected: dict[str, str]) -> list[str]:
    """One line per process lacking a variable or holding another value."""
    problems = []
    for process in processes:
        missing = sorted(k for k in expected if k not in process.environ)
        different = sorted(f"{k}={process.environ[k]!r} (expected {v!r})" for k, v in expected.items()
                           if k in process.environ and process.environ[k] != v)
        if missing or different:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"different {', '.join(different)}"] if different else [])
            problems.append(f"{process.describe()}: {'; '.join(parts)}")
    return problems
