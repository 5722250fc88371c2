"""A shared-prefix workload end to end on the simulator: each arm's prefix-cache hit rate
from the server's counters, and every arm and repeat starting from an empty cache, also
when they share one server (backend=attach), where the first arm's traffic would
otherwise warm the second's cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.runs import run_suites
from tests.support.sim_process import free_port

pytestmark = pytest.mark.slow

# workload=shared_prefix at concurrency 1: 4 groups x 8 prompts of 512 + 32 tokens; each
# group's first prompt misses, the other 7 hit its 512-token prefix
QUERIES = 32 * 544
COLD = 4 * 7 * 512 / QUERIES  # 0.8235: a load that starts from an empty cache


def results(root: Path) -> dict:
    return json.loads((root / "latest" / "results.json").read_text())


def test_each_arm_starts_from_an_empty_cache_on_its_own_server(tmp_path):
    done = run_suites("+exp=sim_shared_prefix", "backend=process", f"record.root={tmp_path}", "-q")
    assert done.returncode == 0, done.stdout[-4000:]
    arms = results(tmp_path)["arms"]
    for name in ("baseline", "eagle3"):
        assert arms[name]["prefix_cache_hit_rate"] == pytest.approx(COLD, abs=1e-6)
        window = arms[name]["server_metrics"][0]
        assert window["prefix_cache_queries"] == QUERIES
        assert arms[name]["prefix_cache_resets"] == [{"repeat": 0, "reset": True, "route": "POST /flush_cache"}]
    assert arms["eagle3"]["accept_length"] > 2.0  # beside the accept length
    summary = (tmp_path / "latest" / "summary.md").read_text()
    assert "cache hit" in summary and "82.4%" in summary


def test_arms_sharing_one_server_start_from_the_same_cache_only_when_it_is_reset(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "harness.sim", "--model-path", "sim-model", "--port", str(port),
                               "--sim-decode-step-ms", "2", "--sim-startup-s", "0.2"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    common = ["workload=shared_prefix", "workload.concurrency=1", "backend=attach", f"backend.url=http://127.0.0.1:{port}",
              "+arms.first=['drafter=none']", "+arms.second=['drafter=none']", "plain_arm=first", "gate.repeats=2", "-q"]
    try:
        reset = tmp_path / "reset"
        done = run_suites(*common, f"record.root={reset}")
        assert done.returncode == 0, done.stdout[-4000:]
        arms = results(reset)["arms"]
        for name in ("first", "second"):  # the second arm and each repeat: the same cold start
            assert arms[name]["prefix_cache_hit_rate"] == pytest.approx(COLD, abs=1e-6)
            assert [w["prefix_cache_hit_rate"] for w in arms[name]["server_metrics"]] == pytest.approx([COLD, COLD])
            assert [r["reset"] for r in arms[name]["prefix_cache_resets"]] == [True, True]

        kept = tmp_path / "kept"
        done = run_suites(*common, "workload.reset_prefix_cache=false", f"record.root={kept}")
        assert done.returncode == 0, done.stdout[-4000:]
        arms = results(kept)["arms"]
        for name in ("first", "second"):  # the same prompts as the loads before: warm, nearly every token hits
            assert arms[name]["prefix_cache_hit_rate"] > 0.99
            assert all(not r["reset"] and "reset_prefix_cache=false" in r["reason"]
                       for r in arms[name]["prefix_cache_resets"])
        assert "second: the prefix cache was not reset before 2 of 2 load(s)" in (kept / "latest" / "summary.md").read_text()
    finally:
        server.terminate()
        server.wait(timeout=10)
