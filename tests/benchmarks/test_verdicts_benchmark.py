"""The reduced benchmark of the reference-run gate (benchmarks/verdicts.py): identical runs
never fail it, and a 10 % slower decode step does, on the gating workload the README
recommends. The full benchmark (40 identical, 3 x 20 regressed, two workloads) writes
benchmarks/results/verdicts.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("verdicts", Path(__file__).resolve().parents[2] / "benchmarks" / "verdicts.py")
verdicts = importlib.util.module_from_spec(_spec)
sys.modules["verdicts"] = verdicts  # dataclasses look their module up there
_spec.loader.exec_module(verdicts)


@pytest.mark.benchmark_reduced
def test_identical_runs_pass_and_a_ten_percent_slower_server_fails(tmp_path):
    tallies = verdicts.run_workload("gating", identical=8, regressed=4, slowdowns=[0.10], log_dir=tmp_path,
                                    say=lambda line: None)
    identical, slower = tallies["identical"], tallies["10% slower"]
    assert identical.comparisons == 8 and identical.failed == 0, identical.examples
    assert slower.comparisons == 4 and slower.failed >= 3, (slower.failed, slower.inconclusive_metrics)
