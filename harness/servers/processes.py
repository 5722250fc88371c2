"""Every process of a running server, with its command line and environment, read from
/proc: locally for the process backend, through `docker exec` for the docker backend
(`container.top()` would give host PIDs, whose /proc we may not be able to map back).

Why the environment matters: the debugging session this tool comes from set NCCL tuning variables
and could not tell whether they reached the TP worker processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.secrets import BOOK, FINGERPRINT, fingerprint

# Run inside the container with `sh -c` (POSIX sh, cat, od and tr: no interpreter of the
# engine's needed, so any server image can be inspected): one block per process, its
# command line and environment hex-encoded, since both hold NUL bytes and may hold newlines.
INSPECT_SCRIPT = r"""
me=$$
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  [ "$pid" = "$me" ] && continue
  stat=$(cat "$dir/stat" 2>/dev/null) || continue
  ppid=${stat##*) }; ppid=${ppid#* }; ppid=${ppid%% *}
  [ "$ppid" = "$me" ] && continue
  cmd=$(od -An -v -tx1 "$dir/cmdline" 2>/dev/null | tr -d ' \n') || continue
  [ -n "$cmd" ] || continue
  env=$(od -An -v -tx1 "$dir/environ" 2>/dev/null | tr -d ' \n')
  comm=$(od -An -v -tx1 "$dir/comm" 2>/dev/null | tr -d ' \n')
  echo "pid=$pid ppid=$ppid comm=$comm cmdline=$cmd environ=$env"
done
"""


@dataclass
class ServerProcess:
    pid: int
    ppid: int
    cmdline: list[str] = field(repr=False)  # as the server got it, secrets and all: shown through .command
    environ: dict[str, str] = field(default_factory=dict, repr=False)  # never in a repr (a traceback's locals)
    name: str = ""  # /proc/<pid>/comm: what ps shows (engines name their workers, e.g. <engine>::scheduler_TP0)
    where: str = ""  # which server of several it belongs to (a fleet's worker, e.g. eagle3.w1); "": the only one

    @property
    def command(self) -> str:
        """The command line as the config holds it: each secret given to the server as its fingerprint."""
        return " ".join(BOOK.conceal(self.cmdline))

    def describe(self) -> str:
        place = f"{self.where}: " if self.where else ""
        return f"{place}pid {self.pid} {self.name} ({self.command[:160]})".replace("  ", " ")


def parse_inspection(output: str) -> list[ServerProcess]:
    """INSPECT_SCRIPT's lines -> processes (a process that ended mid-read is left out)."""
    found = []
    for line in output.splitlines():
        fields = dict(part.partition("=")[::2] for part in line.split())
        try:
            pid, ppid = int(fields["pid"]), int(fields["ppid"])
            cmd, env, comm = (bytes.fromhex(fields.get(k, "")) for k in ("cmdline", "environ", "comm"))
        except (KeyError, ValueError):
            continue
        found.append(ServerProcess(pid=pid, ppid=ppid, name=comm.decode(errors="replace").strip(),
                                   cmdline=split_nul(cmd), environ=environ_of(env)))
    return found


def split_nul(data: bytes) -> list[str]:
    return [part.decode(errors="replace") for part in data.split(b"\0") if part]


def environ_of(data: bytes) -> dict[str, str]:
    return dict(part.split("=", 1) for part in split_nul(data) if "=" in part)


def read_proc(pid: int) -> ServerProcess | None:
    base = Path("/proc") / str(pid)
    try:
        cmdline = split_nul((base / "cmdline").read_bytes())
        environ = environ_of((base / "environ").read_bytes())
        stat = (base / "stat").read_text()
        name = (base / "comm").read_text().strip()
    except OSError:
        return None
    if not cmdline:
        return None
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return ServerProcess(pid=pid, ppid=ppid, name=name, cmdline=cmdline, environ=environ)


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


def live_processes() -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command's name) of every process but
    zombies; field 1 is the parent, 2 the process group, 3 the session."""
    found = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(pid_dir.name))
        if fields is not None and fields[0] != "Z":
            found.append((int(pid_dir.name), fields))
    return found


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces), or None
    once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: a server's workers
    orphaned by its exit wait for PID 1 to reap them, which in a container may take a second
    (kill(-pgid, 0) answers for zombies too, so a stopped server looked alive that long)."""
    return any(int(fields[2]) == pgid for _, fields in live_processes())


def as_configured(actual: str, expected: str) -> str:
    """A process's value in the form the config holds it: a secret's fingerprint, or as is."""
    return fingerprint(actual) if FINGERPRINT.fullmatch(expected) else actual


def environment_mismatches(processes: list[ServerProcess], expected: dict[str, str]) -> list[str]:
    """One line per process lacking a variable or holding another value."""
    problems = []
    for process in processes:
        missing = sorted(k for k in expected if k not in process.environ)
        different = sorted(f"{k}={as_configured(process.environ[k], v)!r} (expected {v!r})" for k, v in expected.items()
                           if k in process.environ and as_configured(process.environ[k], v) != v)
        if missing or different:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"different {', '.join(different)}"] if different else [])
            problems.append(f"{process.describe()}: {'; '.join(parts)}")
    return problems
