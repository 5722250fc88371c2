"""srun backend: the server runs as a SLURM job step (`srun ... <the engine's launch>`), as
GPU teams start servers on the clusters they operate. Outside an allocation srun makes one
for the step; inside one (SLURM_JOB_ID set, e.g. specgate under sbatch/salloc) the step runs
in it. The environment goes with the step (`--export=ALL`, srun's default, plus the engine's
variables): the environment suite then says whether the NCCL variables reached the task's
processes on the node, the multi-node question a cluster makes hard.

The local `srun` process is this backend's child (in its own process group, dying with the
harness, as the process backend's servers do); stopping it ends the step, and the job is
cancelled by name on the way out whatever happened. The step's processes are read from the
node's /proc: the step's own pids (`scontrol listpids`) and their descendants, which can be
done only on the node itself, so a step on another node says so instead.

A fleet's workers and a multi-node server's nodes are each a step (harness/servers/fleet.py,
nodes.py). The server listens on `server.host` of the node it runs on: loopback (the default)
is reachable only when that node is this machine (the single-node cluster of `make slurm`);
a step that landed elsewhere with a loopback host is refused in one sentence.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config.schema import SpecgateConfig
from harness.servers.base import ServerError
from harness.servers.labels import HOST, PID, Session, session_is_dead
from harness.servers.process import ProcessServer
from harness.servers.processes import INSPECT_SCRIPT, ServerProcess, parse_inspection, read_proc, stat_fields

LOOPBACK = ("127.0.0.1", "localhost", "::1")
LISTING_END = "--specgate-listpids-end--"  # between a remote reading's pid listing and its process dump
JOB_ID_WAIT_S = 30.0


JOB_PREFIX = "specgate-"  # a server's step (this module)
SWEEP_JOB_PREFIX = "specgate_"  # a launched sweep's points (harness/sweep/launch.py job_name)


def job_name(session: Session, name: str) -> str:
    """The step's job name: the session and the server, so a leftover is found by name."""
    return f"{JOB_PREFIX}{session.id}-{name}"


def job_comment(session: Session) -> str:
    """What a leftover job says of its harness (SLURM's job comment): the process and host,
    as a container's labels do, so a job of a dead session is told from a running one's."""
    return f"specgate {PID}={session.pid} {HOST}={session.host}"


@dataclass(frozen=True)
class Job:
    """A SLURM job of a specgate session, as squeue lists it."""

    id: str
    name: str
    comment: str

    def labels(self) -> dict[str, str]:
        """The comment's pid and host as labels.session_is_dead reads them ({} when not ours)."""
        words = self.comment.split()
        if not words or words[0] != "specgate":
            return {}
        return dict(word.split("=", 1) for word in words[1:] if "=" in word)

    def session_id(self) -> str:
        return self.name[len(JOB_PREFIX):].split("-", 1)[0] if self.name.startswith(JOB_PREFIX) else ""

    def is_sweep_point(self) -> bool:
        return self.name.startswith(SWEEP_JOB_PREFIX)


class SlurmUnreachable(ServerError):
    """squeue could not list the jobs (SLURM's client is installed but no controller answers):
    nothing could be checked, which is not the same as something found and left."""


SLURM_CONF = Path("/etc/slurm/slurm.conf")  # SLURM's own default; $SLURM_CONF wins, as for its tools
CONTROLLER_PORT = 6817  # SlurmctldPort's default


def controller_refuses() -> str | None:
    """Why no SLURM controller can answer, when slurm.conf names its hosts and every one
    refuses the connection (nothing listens: SLURM's client without a cluster); None when one
    accepts or it cannot be told here (no slurm.conf: configless; a host unknown or silent),
    squeue then deciding. squeue itself retries a refused controller for ~9 s before it says
    so, which a `specgate clean` on such a machine would wait every time."""
    conf = Path(os.environ.get("SLURM_CONF") or SLURM_CONF)
    try:
        text = conf.read_text(errors="replace")
    except OSError:
        return None
    hosts = re.findall(r"^\s*(?:SlurmctldHost|ControlMachine)\s*=\s*([^\s#]+)", text, re.MULTILINE | re.IGNORECASE)
    port_line = re.search(r"^\s*SlurmctldPort\s*=\s*(\d+)", text, re.MULTILINE | re.IGNORECASE)
    port = int(port_line.group(1)) if port_line else CONTROLLER_PORT
    addresses = []
    for host in hosts:  # the primary, then the backups: SlurmctldHost=name or name(address)
        name, _, address = host.partition("(")
        addresses.append(address.rstrip(")") or name)
    if not addresses:
        return None
    for address in addresses:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return None
        except ConnectionRefusedError:
            continue
        except OSError:
            return None
    return (f"no SLURM controller listens at {', '.join(f'{a}:{port}' for a in addresses)} "
            f"(SlurmctldHost in {conf}): SLURM is installed here but its cluster is not running")


def specgate_jobs() -> list[Job]:
    """This user's SLURM jobs that specgate started (by job name: servers' steps and sweeps'
    points); [] where SLURM is absent."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return []
    refused = controller_refuses()
    if refused:
        raise SlurmUnreachable(refused)
    try:
        rows = run_tool([squeue, "--noheader", f"--user={getpass.getuser()}", "--format=%A|%j|%k"])
    except ServerError as exc:
        raise SlurmUnreachable(str(exc)) from None
    jobs = [Job(*row.split("|", 2)) for row in rows.splitlines() if row.count("|") >= 2]
    return [job for job in jobs if job.name.startswith((JOB_PREFIX, SWEEP_JOB_PREFIX))]


def cancel_jobs(only_dead: bool, keep_session: str | None = None) -> list[str]:
    """Cancel specgate's SLURM jobs (all: servers' steps and sweeps' points; or the steps of
    dead sessions on this host: a harness killed with SIGKILL, whose srun was killed with it
    before it could end its step); returns their names. A sweep's point is never judged dead:
    it runs its own whole run to its end, bounded by its own timeouts, whoever submitted it."""
    cancelled = []
    for job in specgate_jobs():
        if keep_session is not None and job.session_id() == keep_session:
            continue
        if only_dead and (job.is_sweep_point() or not (job.labels() and session_is_dead(job.labels()))):
            continue
        run_tool([slurm_tool("scancel"), job.id])
        cancelled.append(job.name)
    return cancelled


def slurm_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ServerError(f"backend=srun needs SLURM's `{name}` on this machine's PATH (a cluster's login or "
                          f"compute node; here `make slurm` starts a single-node cluster)")
    return found


def run_tool(argv: list[str], timeout_s: float = 10.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"`{' '.join(argv[:2])}` failed: {exc}") from None
    if done.returncode != 0:
        raise ServerError(f"`{' '.join(argv[:2])}` failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def descendants_of(roots: set[int], processes: list[ServerProcess]) -> list[ServerProcess]:
    """The processes among `processes` that are a root or below one (by their ppids)."""
    children: dict[int, list[ServerProcess]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    found, todo = {}, [p for p in processes if p.pid in roots]
    while todo:
        process = todo.pop()
        if process.pid not in found:
            found[process.pid] = process
            todo += children.get(process.pid, [])
    return [found[pid] for pid in sorted(found)]


def descendants(roots: set[int]) -> list[int]:
    """The roots and every process below them, from this machine's /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return sorted(found)


class SrunServer(ProcessServer):
    # the step may run on another node, where a folder of this machine's does not exist; a
    # SLURM site gives each job a temp folder of its own (job_container/tmpfs)
    private_tmp = False

    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None):
        super().__init__(name, cfg, log_path, scrub)
        self.job_name = job_name(session, name)
        self.comment = job_comment(session)
        self.job_id: str | None = None
        self.node: str | None = None

    def command(self) -> list[str]:
        flags = [slurm_tool("srun"), f"--job-name={self.job_name}", f"--comment={self.comment}", "--ntasks=1",
                 "--nodes=1", "--unbuffered",
                 "--kill-on-bad-exit=1", *self.cfg.backend.srun_args]
        return [*flags, *super().command()]

    def launch(self) -> None:
        super().launch()
        self.job_id, self.node = self.wait_job()
        if self.cfg.server.host in LOOPBACK and self.node not in this_machine():
            raise self.failure(f"arm '{self.name}': its step runs on node {self.node}, and server.host="
                               f"{self.cfg.server.host} is that node's own loopback, which this machine cannot "
                               f"reach; set server.host=0.0.0.0 to reach it at {self.node}")
        if self.cfg.server.host not in LOOPBACK:
            self.base_url = f"http://{self.node}:{self.port}"

    def wait_job(self) -> tuple[str, str]:
        """The step's job id and node, from squeue by job name (srun says neither)."""
        squeue = slurm_tool("squeue")
        deadline = time.monotonic() + JOB_ID_WAIT_S
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise self.failure(f"arm '{self.name}': srun {self.exit_description()} before its step started")
            rows = run_tool([squeue, "--noheader", f"--name={self.job_name}", "--format=%A %T %N"]).split()
            if len(rows) >= 3 and rows[1] == "RUNNING" and rows[2]:
                return rows[0], rows[2]
            time.sleep(0.2)
        raise self.failure(f"arm '{self.name}': its SLURM job {self.job_name} did not start running within "
                           f"{JOB_ID_WAIT_S:g} s (a busy partition? see squeue)")

    def check_it_is_ours_that_answers(self) -> None:
        """The port's listener must be a process of the step (on this node: read here)."""
        from harness.servers.ports import describe_pid, listener_pids

        if self.node not in this_machine():
            return  # another node's sockets cannot be read from here
        holders = listener_pids(self.port)
        ours = {p.pid for p in self.processes()}
        if holders is None or holders & ours:
            return
        others = ", ".join(describe_pid(p) for p in sorted(holders))
        raise self.failure(f"arm '{self.name}': another process ({others}) answers on port {self.port}, not this "
                           f"arm's step; run again")

    def step_pids(self) -> set[int]:
        listing = run_tool([slurm_tool("scontrol"), "listpids", str(self.job_id)])
        return {int(line.split()[0]) for line in listing.splitlines()[1:] if line.split() and line.split()[0].isdigit()}

    def processes(self) -> list[ServerProcess]:
        """The step's processes: read from /proc here when the step runs on this machine, else on
        its node through a step of the same job beside it (remote_processes)."""
        if self.job_id is None:
            raise ServerError(f"arm '{self.name}': its SLURM step has not started")
        if self.node not in this_machine():
            return self.remote_processes()
        found = [read_proc(pid) for pid in descendants(self.step_pids())]
        return [p for p in found if p is not None]

    def remote_processes(self) -> list[ServerProcess]:
        """The step's processes as its node sees them: `srun --jobid=J --overlap` runs a shell on
        that node inside the job (SLURM lets a step share the job's resources with --overlap),
        which lists the job's pids there (`scontrol listpids` answers only on the node) and dumps
        every process's command line and environment (the docker backend's POSIX-sh inspection:
        no interpreter needed on the node); the step's are the listed pids and their descendants."""
        script = f"scontrol listpids {self.job_id}; echo {LISTING_END}; {INSPECT_SCRIPT}"
        output = run_tool([slurm_tool("srun"), f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                           f"--nodelist={self.node}", "--quiet", "sh", "-c", script], timeout_s=60.0)
        listing, _, dump = output.partition(LISTING_END)
        roots = {int(row.split()[0]) for row in listing.splitlines()[1:] if row.split() and row.split()[0].isdigit()}
        return descendants_of(roots, parse_inspection(dump))

    def describe(self) -> dict:
        return {**super().describe(), "job_name": self.job_name, "job_id": self.job_id, "node": self.node}

    def gpu_ids(self) -> list[str] | None:
        return None  # the step's GPUs are SLURM's (--gres in backend.srun_args)

    def stop(self) -> None:
        """srun's end ends the step; the job is cancelled by name as well, whatever srun did."""
        try:
            super().stop()
        finally:
            if shutil.which("scancel"):
                subprocess.run(["scancel", f"--name={self.job_name}"], capture_output=True, timeout=10)


def this_machine() -> set[str]:
    """The names SLURM may give this machine as a node."""
    return {socket.gethostname(), socket.gethostname().split(".")[0], os.uname().nodename}
