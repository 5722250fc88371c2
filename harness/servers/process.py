"""Process backend: the server runs as a local child process (the simulator, or an engine
installed on this host), in its own process group so that it and all its workers are
stopped together, and so that the terminal's Ctrl-C reaches only the harness, which then
stops the server itself."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from harness.config.schema import SpecgateConfig
from harness.secrets import BOOK
from harness.engines import engine_of
from harness.interrupts import exit_status, wait_for_exit
from harness.servers.base import Server, ServerError
from harness.servers.log import ServerLog
from harness.servers.ports import describe_pid, free_port, listener_pids, port_taken
from harness.servers.processes import ServerProcess, group_alive, local_group

PR_SET_PDEATHSIG = 1
TMP_PREFIX = "specgate-tmp-"  # a server's temp folder: specgate-tmp-<harness pid>-<random>


def die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGTERM if the harness dies (even
    by SIGKILL), so no server outlives the pytest run."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class ProcessServer(Server):
    # a folder of its own for the server's temporary files (TMPDIR), removed when it stops:
    # engines leave files in the temp folder at every start (vLLM three ZMQ sockets,
    # ipc:///tmp/<uuid>; SGLang its port files), which would pile up run after run
    private_tmp = True

    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, scrub=None):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.port = cfg.server.port or free_port(cfg.server.host)
        self.base_url = f"http://{cfg.server.host}:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.tmp_dir: Path | None = None  # while the server runs (private_tmp)

    def command(self) -> list[str]:
        return engine_of(self.cfg).launch(self.cfg, self.port, host=self.cfg.server.host, in_container=False).argv

    def environment(self) -> dict[str, str]:
        configured = engine_of(self.cfg).environment(self.cfg)
        # a TMPDIR the experiment sets is the experiment's; otherwise the server's own folder
        ours = {"TMPDIR": str(self.tmp_dir)} if self.tmp_dir is not None and "TMPDIR" not in configured else {}
        return {**os.environ, **ours, **configured}

    def start(self) -> None:
        self.launch()
        self.await_ready()

    def launch(self) -> None:
        self.refuse_a_taken_port()
        if self.private_tmp:
            self.remove_tmp_dir()  # a server launched again gets a fresh one
            # short: a Unix socket's path has at most 107 bytes (vLLM's: <TMPDIR>/<uuid>); the
            # harness's pid in the name: a harness killed with SIGKILL leaves it, for the next
            # session's clean-up (remove_dead_sessions_tmp_dirs) to find
            self.tmp_dir = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
        log = ServerLog(self.log_path, self.scrub)  # the output goes through the redaction policy
        try:
            self.proc = subprocess.Popen(
                # the secrets' values, behind fingerprints everywhere else, go to the server only
                BOOK.reveal(self.command()), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=BOOK.reveal(self.environment()), start_new_session=True, preexec_fn=die_with_parent,
            )
        except OSError as exc:
            log.close()
            self.remove_tmp_dir()
            raise self.failure(f"arm '{self.name}': cannot start the server ({exc})") from None
        self.log_thread = log.follow(iter(lambda: self.proc.stdout.read1(65536), b""), f"logs-{self.name}")

    def await_ready(self) -> None:
        self.wait_ready(self.readiness())
        self.check_it_is_ours_that_answers()

    def readiness(self):
        """The engine's wait strategy (harness/engines/readiness.py), with the backend's deadline."""
        return engine_of(self.cfg).readiness().with_startup_timeout(self.cfg.backend.startup_timeout_s)

    def refuse_a_taken_port(self) -> None:
        """A port another process listens on would answer the readiness check for it
        (harness/servers/ports.py): one sentence before anything starts."""
        host = self.cfg.server.host
        if port_taken(host, self.port):
            holders = listener_pids(self.port)
            whose = f" by {', '.join(describe_pid(p) for p in sorted(holders))}" if holders else ""
            raise ServerError(f"arm '{self.name}': port {self.port} on {host} is already in use{whose}: that server "
                              f"would be measured instead of this arm's; stop it, or set server.port to a free "
                              f"port (unset, a free one is chosen)")

    def check_it_is_ours_that_answers(self) -> None:
        """Once ready, the port's listener must be a process of this server's group; another
        one took the port between the check and the bind (a chosen free port is taken by
        the next process that asks the kernel for one). Unknowable without /proc: passed."""
        holders = listener_pids(self.port)
        ours = {p.pid for p in local_group(self.proc.pid)}
        if holders is None or holders & ours:
            return
        others = ", ".join(describe_pid(p) for p in sorted(holders))
        raise self.failure(f"arm '{self.name}': another process ({others}) answers on port {self.port}, not this "
                           f"arm's server (which {self.exit_description()}): its figures would be that server's; "
                           f"{'run again' if not self.cfg.server.port else 'choose another server.port'}")

    def describe(self) -> dict:
        return {"base_url": self.base_url, "command": self.command(),
                "pid": self.proc.pid if self.proc is not None else None}

    def gpu_ids(self) -> list[str] | None:
        visible = self.environment().get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            return [d.strip() for d in visible.split(",") if d.strip()]
        return [str(g) for g in self.cfg.server.gpus] if self.cfg.server.gpus is not None else None

    def processes(self) -> list[ServerProcess]:
        return local_group(self.proc.pid)

    def is_alive(self) -> bool:
        return self.proc is not None and exit_status(self.proc) is None

    def exit_description(self) -> str:
        if self.proc is None or exit_status(self.proc) is None:
            return "is still running"
        code = self.proc.returncode
        if code < 0:
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def stop(self) -> None:
        if self.proc is None:
            self.remove_tmp_dir()
            return
        if exit_status(self.proc) is None:
            self.signal_group(signal.SIGTERM)
            try:
                wait_for_exit(self.proc, self.cfg.backend.shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                wait_for_exit(self.proc, 10)
        # Workers the server left behind in its group go too (e.g. it crashed).
        self.signal_group(signal.SIGKILL)
        self.wait_group_gone(timeout_s=5)
        self.remove_tmp_dir()
        if self.log_thread is not None:
            self.log_thread.join(timeout=5)

    def remove_tmp_dir(self) -> None:
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            self.tmp_dir = None

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait_group_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not group_alive(self.proc.pid):
                return
            time.sleep(0.05)


def remove_dead_sessions_tmp_dirs() -> list[str]:
    """The temp folders that servers of dead harnesses on this machine left (killed with
    SIGKILL: their servers got SIGTERM, the folder stayed); a live harness's are kept, as is
    anything whose name is not ours. Returns the folders removed."""
    from harness.servers.labels import harness_is_gone

    removed = []
    for path in sorted(Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*")):
        pid = path.name[len(TMP_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or not path.is_dir() or path.is_symlink():
            continue
        if harness_is_gone(pid):
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():  # another user's stays theirs
                removed.append(str(path))
    return removed
