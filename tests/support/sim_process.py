"""The simulator as a real subprocess (``python -m harness.sim``) on a free loopback port, killed
with its whole process group; FAST and SPEC are the launch flags of a quick plain and a
speculative simulator. Shared by the simulator, lossless and load-fault tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from harness.servers.ports import free_port, listener_pids
from tests.support import ROOT as REPO

FAST = ["--sim-decode-step-ms", "2", "--sim-prefill-base-ms", "1", "--sim-startup-s", "0.2"]
SPEC = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft",
    "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
    "--sim-draft-step-ms", "0.2", "--sim-verify-base-ms", "1.0", "--sim-verify-per-token-ms", "0.1",
]


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (a /proc scan, no psutil)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.append(int(entry))
    return out


def session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:  # gone
        return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Sim:
    def __init__(self, args: list[str], env: dict | None = None, wait: bool = True):
        self.args, self.env = args, env
        self.launch()
        if wait:
            self.wait_healthy()
            for _ in range(3):  # the free port was taken by another test's server before this one bound it
                if self.owns_its_port():
                    break
                self.kill()
                self.launch()
                self.wait_healthy()
            assert self.owns_its_port(), f"port {self.port} answers for another process"

    def launch(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile("w+")  # server output, shown when start-up fails
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.sim", "--model-path", "sim-model", "--port", str(self.port), *self.args],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
        )

    def owns_its_port(self) -> bool:
        """Whether the listener on its port is this simulator (or a process of its session)."""
        holders = listener_pids(self.port)
        return holders is None or any(session_of(p) == self.proc.pid for p in holders)

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise TimeoutError(self.output())

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        # The whole session: the server and any child it left behind.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(5)
        self.log.close()

    def __enter__(self) -> "Sim":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def post(self, path: str, body: dict, **kw) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=30, **kw)
