"""A metric's samples (harness/measure/samples.py) read from request lines and from a
record's columns are the same rows, and the bootstrap's fast paths (group sums, the
weighted percentile over many values: harness/gates/change.py) resample to the very
numbers that gathering every drawn row gives."""

from __future__ import annotations

import numpy as np
import pytest

from harness.gates import change
from harness.measure import estimate
from harness.measure.registry import all_metrics
from harness.measure.samples import COLUMNS, WINDOWS_PER_REPEAT
from harness.record.requests import RequestColumns
from tests.gates.test_change import lines


def speculative(found: list[dict]) -> list[dict]:
    """The lines with verify counts (some missing, one zero), a one-token request, a failure and a warm-up."""
    for i, line in enumerate(found):
        line["spec_verify_ct"] = None if i % 7 == 0 else (0 if i == 3 else 1 + i % 5)
        line["chunk_tokens"] = [1 + (i + k) % 3 for k in range(len(line["chunk_ms"]))]
    found[5].update(completion_tokens=1, chunk_ms=found[5]["chunk_ms"][:1], chunk_tokens=[1])
    found[6]["ok"], found[8]["warmup"] = False, True
    found[9]["decode_ms"] = None
    return found


SAMPLED = sorted(m.path for m in all_metrics() if m.samples is not None)


@pytest.mark.parametrize("metric", SAMPLED)
def test_columns_and_lines_give_the_same_samples(metric):
    found = speculative(lines(60, 2, concurrency=4, repeat=1) + lines(30, 3, repeat=2))
    columns = RequestColumns.from_lines(found, COLUMNS)
    a, b = change.evidence(metric, found), change.evidence(metric, columns)
    assert a.groups_count == b.groups_count > 0 and a.samples == b.samples
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.offsets, b.offsets) and a.value() == b.value()


def test_window_rates_are_per_repeat():
    found = lines(60, 2, concurrency=4, repeat=1) + lines(30, 3, repeat=2)
    assert change.evidence("output_tok_s", found).groups_count == 2 * WINDOWS_PER_REPEAT


def gathered_resamples(ev, seed: int, times: int) -> np.ndarray:
    """The plain bootstrap: every drawn group's rows laid end to end, the statistic over them."""
    rng, out, groups = np.random.default_rng(seed), [], ev.groups
    for _ in range(times):
        picks = rng.integers(0, ev.groups_count, size=ev.groups_count)
        value = ev.statistic(np.concatenate([groups[i] for i in picks]))
        out.append(np.nan if value is None else value)
    return np.asarray(out)


@pytest.mark.parametrize("metric", ["itl_ms.p50", "itl_ms.p90", "itl_ms.p99"])
def test_a_weighted_percentile_resample_is_the_gathered_one(metric, monkeypatch):
    ev = change.evidence(metric, lines(400, 1, concurrency=8, tokens=40))
    monkeypatch.setattr(estimate, "MIN_HALF_WINDOW", 20)  # a narrow window: some resamples fall outside it
    monkeypatch.setattr(estimate, "WINDOW_SIGMAS", 1.0)
    monkeypatch.setattr(estimate, "DIRECT_LIMIT", 10)
    weighted = change.resampled(ev, np.random.default_rng(3), 300)
    n = ev.groups_count
    misses = sum(change.WeightedPercentile(ev).one(np.bincount(np.random.default_rng(i).integers(0, n, n),
                                                               minlength=n)) is None for i in range(50))
    assert np.array_equal(weighted, gathered_resamples(ev, 3, 300)) and not np.isnan(weighted).any()
    assert 0 < misses < 50  # both paths of the weighted resample were taken


@pytest.mark.parametrize("metric", ["accept_length", "decode_step_ms", "tpot_ms.mean", "output_tok_s"])
def test_a_resample_from_group_sums_is_the_gathered_one(metric):
    found = speculative(lines(80, 4, concurrency=4))
    found = [line for line in found if line.get("ok") and not line.get("warmup")]
    ev = change.evidence(metric, found)
    assert np.allclose(change.resampled(ev, np.random.default_rng(5), 200), gathered_resamples(ev, 5, 200),
                       rtol=1e-12, atol=0)
