"""A smoke of benchmarks/clients.py: specgate's own client only (the peers need their own
venvs, minutes to make), at c = 1 and 4, against the simulator's emission log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_clients_benchmark_checks_specgate_against_the_simulators_truth(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/clients.py", "--quick", "--clients", "specgate",
                           "--concurrency", "1,4", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "clients_quick.json").read_text())
    rows = {row["concurrency"]: row for row in doc["rows"]}
    assert sorted(rows) == [1, 4] and rows[1]["requests"] == 4 and rows[4]["requests"] == 8
    for c, row in rows.items():
        err = row["errors"]
        print(c, err)
        assert row["truth"]["requests"] == row["requests"] and row["truth"]["tokens"] == 200 * row["requests"]
        # the client sends before the server's handler starts and reads after the server writes:
        # its TTFT can only be longer, at every percentile
        assert err["ttft_p50_ms"] >= 0 and err["ttft_p99_ms"] >= 0
        assert abs(err["itl_p50_ms"]) < 0.5 and abs(err["tok_s_pct"]) < 2.0
        assert err["cpu_s_per_mtok"] > 0
    md = (tmp_path / "clients_quick.md").read_text()
    assert "| specgate | 4 | 8 |" in md and "Targets (issues 13 and 24):" in md
