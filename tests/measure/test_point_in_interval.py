"""A figure and its interval come from one estimator: for every registered metric with
samples, the figure an arm's result reports (harness/measure/metrics.py summarize) is the
point of the registry's interval over the same requests, and lies inside it; the steady
window's output rate likewise (issue 32: a speedup of 1.5879 outside its own interval
[1.536, 1.5863]). Random loads, seeded, in several shapes."""

from __future__ import annotations

import numpy as np
import pytest

from harness.load.records import LoadResult, RequestRecord
from harness.measure.estimate import estimate
from harness.measure.metrics import summarize
from harness.measure.registry import all_metrics, metric_value
from harness.measure.samples import measured
from harness.measure.steady import rate_evidence

SHAPES = {
    # name: (requests, concurrency, latency spread (lognormal sigma), usage tokens beyond the chunks', edge failures)
    "few requests": (6, 2, 0.3, 0, False),
    "skewed latencies": (240, 8, 1.3, 0, False),
    "usage counts a token the chunks do not": (120, 4, 0.5, 1, False),
    "a failed request at each edge": (120, 4, 0.5, 0, True),
}


def closed_loop(seed: int, requests: int, concurrency: int, sigma: float, extra: int, edge_failures: bool) -> LoadResult:
    """`concurrency` slots sending back to back, each request streaming a random number of
    chunks of 1-3 tokens at lognormal gaps; speculative verify counts on every request."""
    rng = np.random.default_rng(seed)
    slots, records = [0.0] * concurrency, []
    for index in range(requests):
        slot = index % concurrency
        send = slots[slot] + 0.0005
        ttft = 0.02 * rng.lognormal(0.0, sigma)
        chunks = int(rng.integers(2, 40))
        gaps = 0.004 * rng.lognormal(0.0, sigma, size=chunks - 1)
        times = list(send + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        tokens = [int(t) for t in rng.integers(1, 4, size=chunks)]
        end = times[-1] + 0.0002
        records.append(RequestRecord(index=index, warmup=False, send_time=send, chunk_times=times,
                                     chunk_tokens=tokens, status=200, completion_tokens=sum(tokens) + extra,
                                     spec_verify_ct=max(1, int(sum(tokens) / 2.2)), end_time=end))
        slots[slot] = end
    if edge_failures:  # sent first and ended last, and failed: in the load's span, in no figure
        first, last = min(r.send_time for r in records), max(r.end_time for r in records)
        records += [RequestRecord(index=-1, warmup=False, send_time=first - 0.3, status=500, error="boom",
                                  end_time=first - 0.2),
                    RequestRecord(index=-2, warmup=False, send_time=last, status=500, error="boom", end_time=last + 0.4)]
    start = min(r.send_time for r in records)
    end = max(r.end_time for r in records)
    return LoadResult(records=records, start_time=start, end_time=end, api="chat", model="m", run_start=0.0,
                      concurrency=concurrency)


def sampled_metrics():
    return [m for m in all_metrics() if m.samples is not None and not m.between_arms]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_registered_figure_is_the_point_of_its_own_interval(shape, seed):
    load = closed_loop(seed, *SHAPES[shape])
    result = summarize("a", load)
    lines = measured([r.to_json(0.0) for r in load.records])  # the time axis summarize puts them on (t0 = run_start 0)
    assert sampled_metrics(), "the registry lost its sampled metrics"
    for m in sampled_metrics():
        figure = metric_value(result, m.path)
        found = m.estimate(lines)
        if figure is None:
            assert found.point is None, m.path
            continue
        assert found.point == pytest.approx(figure, rel=1e-9), (shape, m.path, figure, found.point)
        if found.low is not None:  # too few groups for a bootstrap: no interval, said so
            assert found.low <= figure <= found.high, (shape, m.path, figure, found)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_steady_figure_is_the_point_of_its_own_interval(seed):
    load = closed_loop(seed, 400, 6, 0.6, 0, False)
    result = summarize("a", load)
    figure = result.steady["output_tok_s"]
    assert figure is not None, result.steady
    found = estimate(rate_evidence([r.to_json(0.0) for r in load.measured], result.steady, load.concurrency))
    assert found.point == pytest.approx(figure, rel=1e-5)  # the block keeps 3 decimals
    assert found.low <= figure <= found.high, (figure, found)
