"""`record.*` options do what they say in a real run (a suite run in a subprocess)."""

import json

from harness.record.requests import has_requests, read_lines
import pytest

from tests.support.runs import run_suites

pytestmark = pytest.mark.slow  # every test here runs the suites


def test_keep_requests_false_writes_no_request_files(tmp_path):
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", "record.keep_requests=false", "backend=process",
                      "-k", "requests_succeed and baseline")
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "latest").resolve()
    assert not has_requests(record) and not list(record.rglob("*.parquet"))
    results = json.loads((record / "results.json").read_text())
    assert results["arms"]["baseline"]["requests"]["ok"] > 0  # measured all the same


def test_keep_requests_true_writes_one_line_per_request(sim_smoke_on_processes):
    proc, record = sim_smoke_on_processes.proc, sim_smoke_on_processes.record  # record.keep_requests: true, the default
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = read_lines(record)
    results = json.loads((record / "results.json").read_text())
    for arm in ("baseline", "eagle3"):
        measured = [line for line in lines if not line["warmup"] and line["arm"] == arm]
        assert len(measured) == results["arms"][arm]["requests"]["ok"]
