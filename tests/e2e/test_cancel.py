"""Cancellations end to end (workload.cancel, docs/workloads.md#cancellations): whole runs on the
simulator (backend=process). A run with cancellations passes its gates and counts them; a
server whose abort breaks it fails the keep-serving check with its sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.load.cancel import CancelPlan
from tests.support.runs import run_suites

pytestmark = pytest.mark.slow  # whole runs
CANCEL = "workload.cancel={fraction:0.3,after_tokens:8}"
LOAD = ("workload.num_prompts=10", "workload.concurrency=2")  # seed 0 draws requests 6 and 8 of 10


def results_of(root: Path) -> dict:
    return json.loads((root / "latest" / "results.json").read_text())


def test_a_run_with_cancellations_passes_and_counts_them(tmp_path):
    assert [i for i in range(10) if CancelPlan(0.3, 8, None, 0).chosen(i)] == [6, 8]
    proc = run_suites("+exp=sim_smoke", "backend=process", f"record.root={tmp_path}", CANCEL, *LOAD, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = (tmp_path / "latest" / "summary.md").read_text()
    assert "## Cancellations" in summary
    for arm in ("baseline", "eagle3"):
        block = results_of(tmp_path)["arms"][arm]
        assert block["cancel"] == {"fraction": 0.3, "after_tokens": 8, "chosen": 2, "cancelled": 2,
                                   "tokens_before_cancel": block["cancel"]["tokens_before_cancel"]}
        assert block["cancel"]["tokens_before_cancel"] >= 16
        assert block["requests"] == {"ok": 8, "failed": 0}
        assert f"- {arm}: 2 request(s) cancelled after 8 tokens (fraction 0.3 asked: 2 chosen)" in summary
    gates = {(g["name"], g["arm"]): g for g in results_of(tmp_path)["gates"]}
    assert gates[("serves_after_cancel", "eagle3")]["status"] == "passed"
    assert "2 request(s) not comparable" in gates[("lossless", "eagle3")]["detail"]


def test_a_server_broken_by_an_abort_fails_the_keep_serving_check(tmp_path):
    proc = run_suites("+exp=sim_smoke", "backend=process", f"record.root={tmp_path}", CANCEL, *LOAD,
                      "server.sim.fail_after_abort=true", "--arm", "baseline", path="suites/test_throughput.py",
                      timeout=300)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    gate = {g["name"]: g for g in results_of(tmp_path)["gates"]}["serves_after_cancel"]
    assert gate["status"] == "failed"
    assert gate["detail"].startswith("baseline: the server did not keep serving after cancelled requests: ")
    assert "was cancelled: HTTP 500: Scheduler hit an exception after aborting a request" in gate["detail"]
    assert "the server did not keep serving after cancelled requests" in proc.stdout
