"""The bootstrap's samples from request columns (harness/gates/samples.py): a percentile
over many values, resampled by weighing the values near the pooled rank, is the very
number gathering every value gives; in-memory lines and columns give the same samples."""

from __future__ import annotations

import numpy as np
import pytest

from harness.gates import samples
from harness.record.requests import RequestColumns

try:
    from tests.test_change import lines
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from test_change import lines


@pytest.mark.parametrize("metric", ["itl_ms.p50", "itl_ms.p90", "itl_ms.p99"])
def test_a_weighted_percentile_resample_is_the_gathered_one(metric, monkeypatch):
    ev = samples.evidence(metric, lines(400, 1, concurrency=8, tokens=40))
    monkeypatch.setattr(samples, "MIN_HALF_WINDOW", 20)  # a narrow window: some resamples fall outside it
    monkeypatch.setattr(samples, "WINDOW_SIGMAS", 1.0)
    monkeypatch.setattr(samples, "DIRECT_LIMIT", 10)
    weighted = ev.resampled(np.random.default_rng(3), 300)
    misses = sum(samples.WeightedPercentile(ev).one(np.bincount(np.random.default_rng(i).integers(0, ev.count, ev.count),
                                                                 minlength=ev.count)) is None for i in range(50))
    monkeypatch.setattr(samples, "DIRECT_LIMIT", 10**9)
    gathered = ev.resampled(np.random.default_rng(3), 300)
    assert np.array_equal(weighted, gathered) and not np.isnan(gathered).any()
    assert 0 < misses < 50  # both paths of the weighted resample were taken


def test_columns_and_lines_give_the_same_samples():
    found = lines(60, 2, concurrency=4, repeat=1) + lines(30, 3)
    columns = RequestColumns.from_lines(found, samples.COLUMNS)
    for metric in ("itl_ms.p50", "tpot_ms.mean", "output_tok_s", "request_per_s", "decode_step_ms", "e2e_ms.p90"):
        a, b = samples.evidence(metric, found), samples.evidence(metric, columns)
        assert a.count == b.count > 0 and np.array_equal(a.rows, b.rows) and a.value() == b.value()
    assert samples.evidence("output_tok_s", found).count == 2 * samples.WINDOWS_PER_REPEAT  # windows of each repeat
