"""The test pyramid holds: a test that starts a whole run is marked, so `make test-fast` (every
unmarked test) stays the inner loop and `make test` the whole suite. The rule is enforced where
runs start (tests/support/runs.py); these tests check the enforcement itself, that no test file
starts a run around it, and that the Makefile leaves out exactly the marked tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from tests.support import ROOT
from tests.support.runs import WHOLE_RUN_MARKERS

A_RUN_STARTED_BY_HAND = re.compile(r'"-m",\s*"(harness\.cli|pytest)"')


def test_an_unmarked_test_that_starts_a_whole_run_fails_saying_what_to_add(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent('''
        import pytest
        from tests.support.runs import require_whole_run_marker, run_suites, specgate

        def test_unmarked_run():
            run_suites("+exp=sim_smoke")  # the marker check fails it before the subprocess starts

        def test_unmarked_sweep():
            specgate("sweep", "+exp=sim_smoke")

        def test_unmarked_but_only_reading():
            assert specgate("list").returncode == 0

        @pytest.mark.slow
        def test_marked():
            require_whole_run_marker()

    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", "-q", "test_inner.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "2 failed, 2 passed" in done.stdout, done.stdout[-3000:]
    for name in ("test_unmarked_run", "test_unmarked_sweep"):
        assert (f"test_inner.py::{name} starts a whole run but carries none of the markers "
                f"{', '.join(WHOLE_RUN_MARKERS)}: add @pytest.mark.slow") in done.stdout, done.stdout[-3000:]
    assert not list(tmp_path.glob("runs*")), "a run started under an unmarked test"


def test_no_test_file_starts_pytest_or_specgate_around_the_helper():
    helper = ROOT / "tests" / "support" / "runs.py"
    this_file = ROOT / "tests" / "test_pyramid.py"  # runs pytest on a small file of its own, not the suites
    by_hand = [f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 1}"
               for path in sorted((ROOT / "tests").rglob("*.py")) if path not in (helper, this_file)
               for text in [path.read_text()] for match in A_RUN_STARTED_BY_HAND.finditer(text)]
    assert by_hand == [], ("start these through tests/support/runs.py (run_suites, start_suites, specgate, "
                           f"start_specgate), which checks the test's marker: {by_hand}")


def test_make_test_fast_leaves_out_every_whole_run_marker_and_nothing_else():
    # and the tests that must run alone (the fast lane runs on parallel workers), and those
    # that read the real engine's set-up, which `make test-fast` does not make
    makefile = (ROOT / "Makefile").read_text()
    (expression,) = re.findall(r'^FAST_LANE\s*:?=\s*(.+)$', makefile, re.M)
    assert sorted(re.findall(r"not (\w+)", expression)) == sorted([*WHOLE_RUN_MARKERS, "serial", "engine_setup"]), expression
    recipe = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    assert '-m "$(FAST_LANE)"' in recipe and "tests/" in recipe, recipe


def test_make_test_runs_every_test_in_one_of_its_passes():
    """The three passes take every test between them, by the same expressions: the tests that
    must be alone first, on no parallel workers, beside nothing but the real engine's set-up; the
    first pass what the others leave; the real engine's pass after its set-up, which it waits for."""
    makefile = (ROOT / "Makefile").read_text()
    assert "bash scripts/make_test.sh" in makefile.split("\ntest: install-run", 1)[1].split("\n\n", 1)[0]
    script = (ROOT / "scripts" / "make_test.sh").read_text()
    (alone,) = re.findall(r'^ALONE="(.+)"$', script, re.M)
    (engine,) = re.findall(r'^ENGINE="(.+)"$', script, re.M)
    assert set(alone.split(" or ")) == {"serial", "benchmark_reduced"}, alone
    assert engine == "(real_engine or engine_setup) and not ($ALONE)", engine
    before, later = script.split('wait "$setup"', 1)
    set_up, tests = before.split("setup=$!", 1)
    assert "ensure_vllm_cpu.sh" in set_up and "ensure_chromium.sh" in set_up
    assert "/proc/self/autogroup" in set_up and "nice -n 19" in set_up  # the lowest weight, in its own session too
    (alone_line,) = [line for line in tests.splitlines() if '-m "$ALONE"' in line]
    assert " -n " not in alone_line, alone_line
    assert tests.index('-m "$ALONE"') < tests.index('-m "not (real_engine or engine_setup or $ALONE)"'), tests
    (engine_line,) = [line for line in later.splitlines() if '-m "$ENGINE"' in line]
    assert "--dist loadfile" in engine_line, engine_line  # a file (or a shared run's files) per worker


def test_the_files_that_read_one_session_run_are_one_unit_of_work():
    """Under --dist loadfile, the files reading a session fixture's run (tests/engines/'s one vLLM
    run) go to one worker together (tests/conftest.py's scheduler): found by the fixture's name,
    so a third reader cannot be forgotten."""
    from tests.conftest import SHARED_RUN_FILES, SharedRunFileScheduling
    readers = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                     if re.search(r"\bdef test_\w+\([^)]*\bvllm_run\b", p.read_text()))
    assert readers == sorted(SHARED_RUN_FILES), readers
    split = SharedRunFileScheduling._split_scope
    units = {split(None, f"{name}::test_x") for name in readers}
    assert len(units) == 1, units
    assert split(None, "tests/engines/test_tiny_models.py::test_x") == "tests/engines/test_tiny_models.py"


def test_what_needs_the_real_engines_set_up_is_marked_so():
    """A test file that reads the vLLM venv, the tiny models or the heads runs after
    `make test`'s background set-up: it is marked engine_setup (or starts the engine itself)."""
    # a path into the checkout's set-up ("/a/checkout/.cache/tiny-models" in a string is no read)
    readers = re.compile(r'"\.cache/tiny-models|"tiny-models"|"eagle3-heads"|\.venv-vllm|SPECGATE_VLLM_VENV|cfg\.build\.python')
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        if path.name != "test_pyramid.py" and readers.search(text) and not re.search(
                r"engine_setup|real_engine|benchmark_reduced", text):
            unmarked.append(str(path.relative_to(ROOT)))
    assert unmarked == [], f"mark these engine_setup (they read scripts/ensure_vllm_cpu.sh's output): {unmarked}"
