"""Child-process plumbing: spawning (optionally with a scrubbed environment),
naming, and dying together with the parent."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator

from harness.interrupts import leave_ctrl_c_to_parent

# Variables a worker keeps when --sim-scrub-worker-env is on: enough to run Python.
KEPT_ENV_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
_PR_SET_TIMERSLACK = 29


def _prctl(option: int, value: Any) -> None:
    """Linux's prctl(2) on this process; best effort (another OS, a refused option: nothing)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def set_process_name(name: str) -> None:
    """Set /proc/self/comm (what ps/top show), like SGLang's ``sglang::scheduler``."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


def fine_timer_slack(nanoseconds: int = 1000) -> None:
    """Let this process's sleeps end within a microsecond of their deadline (Linux groups
    timer wake-ups within 50 us by default): the scheduler's steps sleep to an absolute time."""
    _prctl(_PR_SET_TIMERSLACK, nanoseconds)


def die_with_parent(parent_pid: int) -> None:
    """Exit when the parent goes away, whatever the cause (even SIGKILL).

    PR_SET_PDEATHSIG makes the kernel signal us; the ppid-watch thread is the
    portable backup (and covers a race where the parent died before prctl ran).
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.2)

    threading.Thread(target=watch, name="ppid-watch", daemon=True).start()


def child_setup(name: str, parent_pid: int) -> None:
    """First thing every worker does."""
    set_process_name(name)
    die_with_parent(parent_pid)
    # The main process owns shutdown; a Ctrl-C sent to the whole process group
    # must not make workers print tracebacks before the parent tells them to stop.
    leave_ctrl_c_to_parent(exit_on_sigterm=True)


@contextlib.contextmanager
def scrubbed_environ(enabled: bool) -> Iterator[None]:
    """Temporarily strip os.environ so spawned children exec with a minimal env.

    The spawn start method execs the child with the process's C ``environ``,
    which ``os.environ`` mutations update; restoring afterwards keeps the main
    process unchanged.  Must be called before any other thread exists.
    """
    if not enabled:
        yield
        return
    saved = dict(os.environ)
    try:
        for key in list(os.environ):
            if key not in KEPT_ENV_VARS:
                del os.environ[key]
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def spawn(target: Callable[..., Any], name: str, args: tuple) -> mp.process.BaseProcess:
    """Start ``target(*args)`` in a fresh interpreter (spawn: no inherited threads/loops)."""
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=target, name=name, args=args, daemon=True)
    proc.start()
    return proc


def stop_all(procs: list[mp.process.BaseProcess], timeout: float = 1.0) -> None:
    """SIGTERM every child, then SIGKILL whatever is left after ``timeout``."""
    for p in procs:
        with contextlib.suppress(Exception):
            if p.is_alive():
                p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(Exception):
            if p.is_alive():
                p.kill()
                p.join(0.5)
