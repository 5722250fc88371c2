"""Whole runs in a subprocess, as a user starts them: `pytest suites/ ...` and `specgate <command> ...`.

The one place the tests start them, so that one rule holds: a test that starts a whole run
(servers, a load, a record) carries one of WHOLE_RUN_MARKERS, and `make test-fast`, which
leaves out every marked test, stays fast. A helper called from an unmarked test fails that
test with the sentence that says what to add. tests/conftest.py tells this module which test
is running; tests/test_pyramid.py checks the rule and that no test file goes around it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

WHOLE_RUN_MARKERS = ("slow", "cluster", "real_engine", "benchmark_reduced")
# `specgate` commands that start servers; the others (list, show, compare, report, clean)
# read configs or records and finish in seconds.
WHOLE_RUN_COMMANDS = frozenset({"run", "sweep", "capacity", "calibrate", "replay", "ab"})
# A config mistake stops pytest and specgate with this status before anything starts.
REFUSED = 4

current_test: pytest.Item | None = None  # set by tests/conftest.py before each test's set-up


def require_whole_run_marker() -> None:
    """Fail the running test unless it is marked as a whole run (a module-scoped fixture
    is set up in its first test: that test's markers count)."""
    test = current_test
    if test is None:
        return  # not under pytest's run loop (a helper used from a script)
    if not any(test.get_closest_marker(name) for name in WHOLE_RUN_MARKERS):
        pytest.fail(f"{test.nodeid} starts a whole run but carries none of the markers "
                    f"{', '.join(WHOLE_RUN_MARKERS)}: add @pytest.mark.slow (or pytestmark = "
                    f"pytest.mark.slow for the module), so that `make test-fast` leaves it out.",
                    pytrace=False)


def suites_argv(*args: str, path: str = "suites/") -> list[str]:
    return [sys.executable, "-m", "pytest", path, "-p", "no:cacheprovider", "--no-progress", *args]


def specgate_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


def run_suites(*args: str, path: str = "suites/", cwd: Path = ROOT, env: dict[str, str] | None = None,
               timeout: float = 300, refused: bool = False) -> subprocess.CompletedProcess:
    """`pytest <path> <args>` in a subprocess, its output captured. ``env`` adds to this
    process's environment. ``refused=True``: a run that a config mistake must stop before
    anything starts (exit status 4, checked here), so no marker is needed; --collect-only
    starts nothing either."""
    collect_only = "--collect-only" in args
    if not (refused or collect_only):
        require_whole_run_marker()
    done = subprocess.run(suites_argv(*args, path=path), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=_environment(env))
    _check_refused(done, refused)
    return done


def start_suites(*args: str, path: str = "suites/", cwd: Path = ROOT, **popen: Any) -> subprocess.Popen:
    """`pytest <path> <args>` started in the background (a test that interrupts or kills it)."""
    require_whole_run_marker()
    return subprocess.Popen(suites_argv(*args, path=path), cwd=cwd, **popen)


def specgate(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 300,
             refused: bool = False) -> subprocess.CompletedProcess:
    """`specgate <args>` in a subprocess, its output captured; as run_suites for ``env`` and
    ``refused``. Only the commands that start servers need the marker."""
    if args and args[0] in WHOLE_RUN_COMMANDS and not refused:
        require_whole_run_marker()
    done = subprocess.run(specgate_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=_environment(env))
    _check_refused(done, refused)
    return done


def start_specgate(*args: str, prefix: tuple[str, ...] | list[str] = (), cwd: Path = ROOT,
                   **popen: Any) -> subprocess.Popen:
    """`specgate <args>` started in the background; ``prefix`` goes before the interpreter
    (e.g. a wrapper that restores SIGINT)."""
    require_whole_run_marker()
    return subprocess.Popen([*prefix, *specgate_argv(*args)], cwd=cwd, **popen)


def as_a_background_job() -> None:
    """A ``preexec_fn``: started as a non-interactive shell's background job, or by a script, a
    process inherits SIGINT ignored, and Python keeps it so unless a handler is installed. Every
    driver must still stop on Ctrl-C then (harness/interrupts.py): the Ctrl-C tests start it so."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _environment(extra: dict[str, str] | None) -> dict[str, str] | None:
    return None if extra is None else {**os.environ, **extra}


def _check_refused(done: subprocess.CompletedProcess, refused: bool) -> None:
    # An unmarked test may only start runs that stop at once: hold it to that.
    if refused:
        assert done.returncode == REFUSED, (f"expected a config error (exit status {REFUSED}) before anything "
                                            f"started, got {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")


def wait_until(check, timeout_s: float = 60, what: str = "the moment to act") -> None:
    """Poll `check` until it holds; AssertionError naming `what` when it never does."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} never came")
