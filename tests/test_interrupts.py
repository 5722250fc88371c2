"""harness/interrupts.py, the one module that says what a signal does: each of its settings in
a fresh interpreter started as a shell's background job (SIGINT and SIGTERM inherited
ignored), since what matters is what a process does whatever its parent left it. The drivers'
own Ctrl-C tests (tests/e2e, tests/ab, tests/capacity, tests/calibrate) start them the same way."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from tests.support import ROOT


def both_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run(code: str, preexec=both_ignored) -> subprocess.CompletedProcess:
    script = "import os, signal, time\nfrom harness import interrupts\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          preexec_fn=preexec)
    return done


def interrupted_by(sig: str) -> str:
    """Code: True if `sig` sent to this process raised KeyboardInterrupt within a quarter second.
    A signal a process sends itself is delivered before kill() returns and Python runs its
    handler at the next bytecode: the wait only bounds the answer False (the signal ignored)."""
    return f"""
def interrupted_by_{sig}():
    try:
        os.kill(os.getpid(), signal.{sig})
        time.sleep(0.25)
    except KeyboardInterrupt:
        return True
    return False
"""


CHECKS = interrupted_by("SIGINT") + interrupted_by("SIGTERM")


def test_a_run_stops_on_ctrl_c_and_sigterm_inherited_ignored():
    # the plugin's setting (pytest suites/, specgate run, replay, a point): Python's own Ctrl-C
    # handler, which asyncio.Runner turns into cancelling a load
    done = run(CHECKS + """
assert interrupted_by_SIGINT() is False and interrupted_by_SIGTERM() is False  # as the parent left them
interrupts.interruptible_run()
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
assert interrupted_by_SIGINT() and interrupted_by_SIGTERM()
print("ok")
""")
    assert done.stdout == "ok\n", done.stderr


def test_a_driver_stops_on_ctrl_c_and_sigterm_inside_its_block_and_puts_them_back_after():
    # specgate ab, calibrate, capacity, sweep
    done = run(CHECKS + """
driver = interrupts.Interrupts()
with driver.installed():
    assert interrupted_by_SIGINT() and driver.seen == signal.SIGINT
    assert interrupted_by_SIGTERM() and driver.seen == signal.SIGTERM
    try:
        driver.check()  # a signal swallowed somewhere is raised again at the next step
    except KeyboardInterrupt:
        print("checked")
assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
print("ok")
""")
    assert done.stdout == "checked\nok\n", done.stderr


def test_a_second_ctrl_c_is_ignored_while_servers_stop_and_the_handler_is_back_after():
    done = run(CHECKS + """
interrupts.interruptible_run()
with interrupts.sigint_ignored():
    assert interrupted_by_SIGINT() is False
assert interrupted_by_SIGINT()
print("ok")
""")
    assert done.stdout == "ok\n", done.stderr


def test_a_ray_task_can_be_cancelled_though_its_worker_ignores_ctrl_c():
    # Ray's cancellation and _thread.interrupt_main raise only where SIGINT has Python's handler
    done = run("""
import _thread
with interrupts.sigint_raises():
    try:
        _thread.interrupt_main()
        time.sleep(1)
    except KeyboardInterrupt:
        print("raised")
assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
print("ok")
""")
    assert done.stdout == "raised\nok\n", done.stderr


def test_a_child_of_a_ray_worker_gets_ctrl_c_back_unblocked_and_slurms_time_limit_ignored():
    def like_a_ray_worker() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    code = """
import subprocess, sys
def prepared():
    interrupts.ignore_time_limit_signal()
    interrupts.sigint_default_and_unblocked()
child = subprocess.run(["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"], capture_output=True, text=True,
                       preexec_fn=prepared)
print(child.stdout, end="")
"""
    done = run(code, preexec=like_a_ray_worker)
    masks = dict(line.split(":\t") for line in done.stdout.splitlines())
    assert set(masks) == {"SigBlk", "SigIgn"}, done.stderr
    bit = lambda sig: 1 << (sig - 1)  # noqa: E731
    assert not int(masks["SigBlk"], 16) & bit(signal.SIGINT) and not int(masks["SigIgn"], 16) & bit(signal.SIGINT)
    assert int(masks["SigIgn"], 16) & bit(signal.SIGUSR2)


def test_a_process_its_parent_stops_ignores_ctrl_c_and_hands_back_on_sigterm_or_exits():
    done = run(CHECKS + """
interrupts.leave_ctrl_c_to_parent()
assert interrupted_by_SIGINT() is False and interrupted_by_SIGTERM()
interrupts.leave_ctrl_c_to_parent(exit_on_sigterm=True)
print("exiting", flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("not reached")
""")
    assert (done.returncode, done.stdout) == (0, "exiting\n"), done.stderr


def test_a_server_loop_stops_on_sigterm_and_ctrl_c_and_a_load_calls_handlers_between_callbacks():
    done = run("""
import asyncio

async def serve(sig):
    stop = asyncio.Event()
    interrupts.stop_on_signals(asyncio.get_running_loop(), stop.set)
    asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), sig)
    await asyncio.wait_for(stop.wait(), 5)

for sig in (signal.SIGTERM, signal.SIGINT):
    asyncio.run(serve(sig))
print("stopped")

def handler(signum, frame):
    calls.append(frame)

calls = []
signal.signal(signal.SIGUSR1, handler)
with asyncio.Runner() as runner:
    with interrupts.signals_between_callbacks(runner.get_loop()):
        async def load():
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep(0.2)
        runner.run(load())
assert calls == [None] and signal.getsignal(signal.SIGUSR1) is handler  # called by the loop; back after
print("ok")
""")
    assert done.stdout == "stopped\nok\n", done.stderr


LOCK_THAT_A_SIGNAL_HITS = """
class LockThatASignalHits:
    '''Popen's waitpid lock, with a Ctrl-C landing just after it is taken: where CPython's
    Popen.poll has taken it and not yet entered the try block that gives it back.'''

    def __init__(self, lock):
        self.lock, self.hits = lock, 1

    def acquire(self, *args):
        taken = self.lock.acquire(*args)
        if taken and self.hits:
            self.hits -= 1
            os.kill(os.getpid(), signal.SIGINT)
        return taken

    def release(self):
        self.lock.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
"""


def test_a_ctrl_c_landing_inside_a_childs_poll_is_acted_on_after_it_and_the_child_can_still_be_waited_on():
    """Seen in a clean clone's make test: a sweep's Ctrl-C landed in Popen.poll between its
    lock's acquire and the try that releases it; the sweep then waited for its Hydra app for
    good (a zombie, reaped by no one). exit_status and wait_for_exit hold the signal over that
    step and raise it after; the plain poll is shown leaking the lock, which is why."""
    done = run(LOCK_THAT_A_SIGNAL_HITS + """
import subprocess, sys
interrupts.interruptible_run()

plain = subprocess.Popen([sys.executable, "-c", "pass"])
plain._waitpid_lock = LockThatASignalHits(plain._waitpid_lock)
try:
    plain.poll()
except KeyboardInterrupt:
    pass
print("plain poll leaves the lock held:", plain._waitpid_lock.lock.locked())

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
child._waitpid_lock = LockThatASignalHits(child._waitpid_lock)
try:
    interrupts.exit_status(child)
    raise SystemExit("the Ctrl-C was lost")
except KeyboardInterrupt:
    pass
assert not child._waitpid_lock.lock.locked()
assert interrupts.wait_for_exit(child, 10) == 0
try:
    interrupts.wait_for_exit(subprocess.Popen(["sleep", "5"]), 0.2)
    raise SystemExit("no timeout")
except subprocess.TimeoutExpired:
    pass
with interrupts.sigint_ignored():  # held, then acted on as the handler says: ignored
    assert interrupts.uninterrupted(lambda: os.kill(os.getpid(), signal.SIGINT) or "done") == "done"
print("ok")
""")
    assert done.stdout.endswith("ok\n"), done.stdout + done.stderr
    print(done.stdout)


def test_a_server_whose_poll_a_ctrl_c_hit_still_stops_at_once():
    """The process backend asks its server whether it runs throughout a load, where a Ctrl-C
    lands: the stop that follows must not wait its whole shutdown timeout on a lock."""
    done = run(LOCK_THAT_A_SIGNAL_HITS + """
from pathlib import Path
import tempfile
from harness.run.compose import compose
from harness.servers.process import ProcessServer
interrupts.interruptible_run()
cfg = compose(["+exp=sim_smoke", "backend=process", "telemetry=off", "backend.shutdown_timeout_s=20"]).arm("baseline").typed
server = ProcessServer("baseline", cfg, Path(tempfile.mkdtemp()) / "server.log")
server.start()
server.proc._waitpid_lock = LockThatASignalHits(server.proc._waitpid_lock)
try:
    server.is_alive()
except KeyboardInterrupt:
    pass
started = time.monotonic()
server.stop()
assert time.monotonic() - started < 5, time.monotonic() - started
assert not server.is_alive() and server.proc.returncode is not None
print("ok")
""")
    assert done.stdout == "ok\n", done.stdout + done.stderr
