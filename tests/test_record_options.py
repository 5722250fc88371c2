"""`record.*` options do what they say in a real run (a suite run in a subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

from harness.record.requests import has_requests, read_lines

ROOT = Path(__file__).resolve().parent.parent


def run_suites(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider", "--no-progress", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_keep_requests_false_writes_no_request_files(tmp_path):
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", "record.keep_requests=false", "backend=process",
                      "-k", "requests_succeed and baseline")
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "latest").resolve()
    assert not has_requests(record) and not list(record.rglob("*.parquet"))
    results = json.loads((record / "results.json").read_text())
    assert results["arms"]["baseline"]["requests"]["ok"] > 0  # measured all the same


def test_keep_requests_true_writes_one_line_per_request(tmp_path):
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", "backend=process", "-k", "requests_succeed and baseline")
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "latest").resolve()
    lines = read_lines(record)
    results = json.loads((record / "results.json").read_text())
    measured = [line for line in lines if not line["warmup"]]
    assert len(measured) == results["arms"]["baseline"]["requests"]["ok"]
