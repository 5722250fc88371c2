"""The reduced benchmark of the merge gates (benchmarks/verdicts.py): in every mode (one run
against the one before, against a noise profile, against a history, an A/B of 3 rounds)
identical builds never fail and a 20 % slower decode step is caught (beyond the run-to-run
floor of one run against one, 12 %), on the gating workload the README recommends. Without
drift, so that a handful of comparisons decides it; the full
benchmark (40 identical, 3 x 20 regressed per mode, on the drifting `gpu_box` model) writes
benchmarks/results/verdicts.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("verdicts", Path(__file__).resolve().parents[2] / "benchmarks" / "verdicts.py")
verdicts = importlib.util.module_from_spec(_spec)
sys.modules["verdicts"] = verdicts  # dataclasses (and the cache's pickles) look their module up there
_spec.loader.exec_module(verdicts)


@pytest.mark.benchmark_reduced
def test_every_mode_passes_identical_builds_and_catches_a_twenty_percent_slower_one(tmp_path):
    settings = verdicts.Settings(identical=3, regressed=2, slowdowns=(0.20,), history=3, profile_runs=3, drift="none",
                                 cache=tmp_path)
    (tmp_path / "logs").mkdir()
    verdicts.measure_stream(settings, say=lambda line: None)
    verdicts.measure_ab(settings, say=lambda line: None)
    results = verdicts.judge_stream(settings, ["single", "profile", "history"])
    results["ab, 3 rounds"] = verdicts.judge_abs(settings)
    for mode, tallies in results.items():
        identical, slower = tallies["identical"], tallies["20% slower"]
        assert identical.comparisons == 3 and identical.failed == 0, (mode, identical.examples)
        assert slower.comparisons == 2 and slower.failed == 2, (mode, slower.inconclusive_metrics)
    table = verdicts.render(results, settings, minutes=None)
    assert "| ab, 3 rounds | 20% slower | 2 | 2 | " in table
