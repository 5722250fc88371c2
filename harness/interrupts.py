"""Signals, in one place: the only module of harness/ that says what a signal does
(tests/test_architecture.py checks it). It imports nothing of the project, so every package
uses it, the simulator (a program of its own) included.

Every driver stops on Ctrl-C and SIGTERM, whatever its parent left them set to: a shell's
background job or a script's child starts with SIGINT ignored, and Python then leaves Ctrl-C
ignored unless a handler is installed. Either signal unwinds as KeyboardInterrupt (servers
stopped, the record closed as interrupted, exit 2). The children a driver starts meanwhile
get the default back: a Python handler is reset on exec, an ignored signal is not.

- a run's pytest (`pytest suites/`, `specgate run`, `specgate replay`, a sweep's or a
  calibration's point), through the plugin: :func:`interruptible_run`, for the process's life;
- `specgate ab`, `calibrate`, `capacity` and `sweep`: :class:`Interrupts`, around their work;
- a second Ctrl-C while servers stop, or while a sweep cancels its jobs: :func:`sigint_ignored`;
- a Ray task or actor (a Ray worker ignores SIGINT; Ray's cancellation and
  ``_thread.interrupt_main`` raise as SIGINT would): :func:`sigint_raises`;
- a point's pytest started from a Ray worker or a SLURM job: :func:`ignore_time_limit_signal`
  and :func:`sigint_default_and_unblocked`, before exec;
- a process its parent stops (the load's processes, the simulator's workers):
  :func:`leave_ctrl_c_to_parent`;
- a load's event loop: :func:`signals_between_callbacks`; the simulator's server loop:
  :func:`stop_on_signals`;
- a child process asked whether it ended, or waited on with a timeout: :func:`exit_status`,
  :func:`wait_for_exit` (the signal held back over Popen's locked step, acted on after it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_interrupt(signum: int, frame: Any) -> None:
    """A handler: the signal unwinds as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signum}")


def interruptible_run() -> None:
    """For the rest of this process (a run's pytest): Ctrl-C raises KeyboardInterrupt through
    Python's own handler (which ``asyncio.Runner`` turns into cancelling a load), also when it
    was inherited ignored; SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so servers are
    stopped and the record is closed. Off the main thread (pytest embedded): left as it is."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread: keep the defaults
        pass


class Interrupts:
    """Ctrl-C and SIGTERM as KeyboardInterrupt while :meth:`installed`, remembered: a signal
    that lands while the interpreter swallows exceptions (a fork's handlers, as a server
    process starts) is not lost, but raised again at the next step (:meth:`check`)."""

    def __init__(self):
        self.seen: int | None = None

    def handle(self, signum, frame):
        self.seen = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def check(self) -> None:
        if self.seen is not None:
            raise KeyboardInterrupt(f"signal {self.seen}")

    @contextmanager
    def installed(self) -> Iterator["Interrupts"]:
        """Both signals handled here inside the block, whatever they were; put back after."""
        previous = {sig: signal.signal(sig, self.handle) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ctrl-C ignored while it lasts (a server's stop, a point's or a sweep's jobs' teardown,
    that a second Ctrl-C must not cut short); put back after. Off the main thread: nothing to guard."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def sigint_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt inside the block, put back after. A Ray worker ignores
    SIGINT, and Ray's cancellation (``ray.cancel``) and ``_thread.interrupt_main`` raise only
    where SIGINT has Python's handler: a task or actor method that must be stoppable runs in
    this block (in the worker's main thread)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ignore_time_limit_signal() -> None:
    """SLURM sends the time-limit signal (SIGUSR2) to every process of the job, and its default
    action ends a process at once: a point's pytest ignores it and is stopped by its job
    (called before exec, as ``preexec_fn``)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def sigint_default_and_unblocked() -> None:
    """Before exec, in a child of a Ray worker (which blocks and ignores SIGINT, and a child
    inherits both): SIGINT's default action back, and unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _exit_now(signum: int, frame: Any) -> None:
    os._exit(0)


def leave_ctrl_c_to_parent(*, exit_on_sigterm: bool = False) -> None:
    """In a process its parent stops: Ctrl-C ignored (a terminal sends it to the whole process
    group; the parent decides what happens), SIGTERM (the parent's stop) raises
    KeyboardInterrupt, so what finished is handed back (the load's processes), or, with
    ``exit_on_sigterm``, ends the process at once (the simulator's workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_now if exit_on_sigterm else raise_interrupt)


def stop_on_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call ``stop`` on the loop (a server's graceful shutdown), whatever
    they were set to before."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


@contextmanager
def signals_between_callbacks(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While the load runs, every Python signal handler (the plugin's SIGTERM, which raises
    KeyboardInterrupt) is called by the loop between two callbacks, not in whatever bytecode
    the signal lands on. Landing inside a transport's callback, uvloop takes the
    KeyboardInterrupt for the transport's own fatal error: it closes that connection, logs,
    and goes on, so the interrupt is lost and a request fails for nothing (seen in 1 of 6
    interrupted loads). Raised from a loop callback, it stops the loop at once, as asyncio's
    does. SIGINT's default handler is left to ``asyncio.Runner``, which cancels the load."""
    moved: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signal.valid_signals():
            handler = signal.getsignal(sig)
            if callable(handler) and handler is not signal.default_int_handler:
                try:
                    loop.add_signal_handler(sig, handler, sig, None)
                except (ValueError, RuntimeError, OSError):  # a signal the loop cannot watch keeps its way
                    continue
                moved[sig] = handler
    try:
        yield
    finally:
        for sig, handler in moved.items():
            if not loop.is_closed():
                loop.remove_signal_handler(sig)
            signal.signal(sig, handler)


def uninterrupted(call: Callable[[], T]) -> T:
    """``call()`` with Ctrl-C and SIGTERM held back until it returns, then acted on as their
    handlers say (raised, ignored...). For a short step that an exception raised halfway
    leaves broken. Off the main thread, where no signal handler runs: ``call()`` as it is."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    held: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
        return call()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            _act_on(held[0], previous[held[0]])


def _act_on(signum: int, handler: Any) -> None:
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # its default action, now that the default is back


def exit_status(proc: subprocess.Popen) -> int | None:
    """``proc.poll()``, which a signal cannot break. Popen.poll (and a wait with a timeout)
    takes a lock before the try block that releases it: a KeyboardInterrupt raised between
    the two leaves the lock held, every later poll then says "running" and every wait blocks
    for ever (seen: a sweep's Ctrl-C hung for good in the wait for its Hydra app)."""
    return uninterrupted(proc.poll)


def wait_for_exit(proc: subprocess.Popen, timeout_s: float | None = None) -> int:
    """``proc.wait(timeout_s)`` made of :func:`exit_status` steps, a signal acted on between
    two of them (as Popen's own timed wait: 0.5 ms apart at first, doubling to 50 ms);
    subprocess.TimeoutExpired when it has not ended in time."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = 0.0005
    while (code := exit_status(proc)) is None:
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return code
