"""The reduced benchmark of the merge gates (benchmarks/verdicts.py): in every mode (one run
against the one before, against a noise profile, against a history, an A/B of 3 rounds)
identical builds never fail and a 20 % slower decode step is caught (beyond the run-to-run
floor of one run against one, 12 %), on the gating workload the README recommends. Without
drift, so that a handful of comparisons decides it, and so every identical run is a draw of
the same build on the same box: the stream's runs (one after another, as runs on main) are taken
from the A/Bs' runs, which were measured one after another too, instead of measuring 12 more
(30 fresh servers instead of 42). The full
benchmark (40 identical, 3 x 20 regressed per mode, on the drifting `gpu_box` model) writes
benchmarks/results/verdicts.md."""

from __future__ import annotations

import importlib.util
import os
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
    verdicts.measure_ab(settings, say=lambda line: None)
    stream_from_the_abs(settings)
    results = verdicts.judge_stream(settings, ["single", "profile", "history"])
    results["ab, 3 rounds"] = verdicts.judge_abs(settings)
    for mode, tallies in results.items():
        identical, slower = tallies["identical"], tallies["20% slower"]
        assert identical.comparisons == 3 and identical.failed == 0, (mode, identical.examples)
        assert slower.comparisons == 2 and slower.failed == 2, (mode, slower.inconclusive_metrics)
    table = verdicts.render(results, settings, minutes=None)
    assert "| ab, 3 rounds | 20% slower | 2 | 2 | " in table
    # ab.rounds=auto over the same rounds: a 20 % slower B is decided at its first look (round 3);
    # an identical one would go on past the 3 rounds measured here, so it is not judged
    auto = verdicts.judge_abs_auto(settings)
    assert auto["20% slower"].comparisons == 2 and auto["20% slower"].failed == 2 and auto["20% slower"].rounds == [3, 3]
    assert all(t.failed == 0 for case, t in auto.items() if case == "identical")


def stream_from_the_abs(settings) -> None:
    """The stream's identical runs are the identical A/Bs' runs in the order they were measured
    (each a fresh server), its slower runs the slower A/Bs' first B sides: the cache files
    linked under the stream's keys, so that no comparison of one mode sees a run twice."""
    identical = [f"ab-identical-{i:03d}-r{r + 1}{side}" for i in range(settings.identical)
                 for r in range(settings.ab_rounds) for side in (("A", "B") if r % 2 == 0 else ("B", "A"))]
    keys = verdicts.stream_keys(settings)
    assert len(identical) >= len(keys), "too few identical A/B runs for the stream"
    links = dict(zip(keys, identical))
    for slowdown in settings.slowdowns:
        links.update({f"slow{slowdown:.2f}-{j:03d}": f"ab-slow{slowdown:.2f}-{j:03d}-r1B" for j in range(settings.regressed)})
    for stream_key, ab_key in links.items():
        os.link(settings.cache / f"{ab_key}.pkl.gz", settings.cache / f"{stream_key}.pkl.gz")
