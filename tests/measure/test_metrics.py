"""harness.measure.metrics on hand-made records with known answers."""

from __future__ import annotations

import json

import pytest

from harness.load import LoadResult, RequestRecord
from harness.measure.registry import break_even_accept_length, speedup
from harness.measure.metrics import ArmResult, Stat, combine_repeats, summarize


def rec(index, send, chunk_times, chunk_tokens, verify=None, warmup=False, error=None, status=200):
    r = RequestRecord(index=index, warmup=warmup, send_time=send, chunk_times=list(chunk_times),
                      chunk_tokens=list(chunk_tokens), status=status, error=error)
    if error is None:
        r.completion_tokens = sum(chunk_tokens)
        r.prompt_tokens = 5
        r.spec_verify_ct = verify
        r.spec_accept_length = None if not verify else r.completion_tokens / verify
        r.finish_reason = "length"
    r.end_time = (chunk_times[-1] if chunk_times else send) + 0.01
    return r


def spec_load() -> LoadResult:
    # r1: 10 tokens in 4 verify cycles (ratio 2.5), decode 120 ms, TTFT 100 ms
    r1 = rec(0, 1.00, [1.10, 1.13, 1.16, 1.19, 1.22], [1, 3, 2, 3, 1], verify=4)
    # r2: 3 tokens in 2 verify cycles (ratio 1.5), decode 60 ms, TTFT 50 ms
    r2 = rec(1, 1.00, [1.05, 1.08, 1.11], [1, 1, 1], verify=2)
    # failed measured requests: same server message twice
    f1 = rec(2, 1.01, [], [], error="HTTP 400: The prompt is too long for this model.", status=400)
    f2 = rec(3, 1.02, [1.04], [1], error="HTTP 400: The prompt is too long for this model.", status=400)
    f3 = rec(4, 1.02, [1.04], [1], error="timed out after 5s", status=200)
    # warm-up: huge accept length and slow; must not leak into any metric
    w = rec(0, 0.10, [0.50, 0.90], [1, 99], verify=1, warmup=True)
    return LoadResult(records=[w, r1, r2, f1, f2, f3], start_time=1.00, end_time=1.25, api="chat", model="m")


def test_spec_arm_known_answers():
    a = summarize("eagle3", spec_load())
    assert a.requests_ok == 2 and a.requests_failed == 3
    assert a.errors == {"HTTP 400: The prompt is too long for this model.": 2, "timed out after 5s": 1}
    assert a.completion_tokens == 13
    assert a.duration_s == pytest.approx(0.25)
    # rates over the completed requests' span (first send 1.00 to last end 1.23): the failed
    # ones around them stretch the load's duration, not the rate (the figure is its samples' own)
    assert a.value("output_tok_s") == pytest.approx(13 / 0.23)
    assert a.value("request_per_s") == pytest.approx(2 / 0.23)
    # run-scoped, token-weighted: (10 + 3) / (4 + 2) = 2.1667 ...
    assert a.value("accept_length") == pytest.approx(13 / 6)
    assert a.accept_length_source == "run"
    # ... which is not the mean of the per-request ratios (2.5 + 1.5) / 2 = 2.0
    assert a.value("accept_length") != pytest.approx(2.0)
    # (120 + 60) ms over 6 verify cycles; over 9 + 2 decoded tokens
    assert a.value("verify_cycle_ms") == pytest.approx(30.0)
    assert a.value("decode_step_ms") == pytest.approx(180 / 11)
    assert a.value("ttft_ms.mean") == pytest.approx(75.0) and a.value("ttft_ms.p50") == pytest.approx(75.0)
    assert a.value("ttft_ms.p99") == pytest.approx(50 + 50 * 0.99)
    assert a.stat("itl_ms").n == 6 and a.value("itl_ms.mean") == pytest.approx(30.0) and a.value("itl_ms.p99") == pytest.approx(30.0)
    assert a.stat("tpot_ms").n == 2 and a.value("tpot_ms.mean") == pytest.approx((120 / 9 + 60 / 2) / 2)
    assert a.value("e2e_ms.mean") == pytest.approx((230 + 120) / 2)


def test_break_even_and_speedup():
    assert break_even_accept_length(30.0, 12.2) == pytest.approx(2.459, abs=1e-3)
    with pytest.raises(ValueError):
        break_even_accept_length(30.0, 0.0)
    fast = ArmResult.of(arm="eagle3", output_tok_s=150.0)
    plain = ArmResult.of(arm="baseline", output_tok_s=100.0)
    assert speedup(fast, plain) == pytest.approx(1.5)
    assert speedup(fast, ArmResult(arm="b")) is None
    assert speedup(ArmResult(arm="x"), plain) is None


def test_plain_arm_decode_step_and_no_accept_length():
    # plain decoding: one token per chunk every 12.2 ms
    times = [1.1 + 0.0122 * i for i in range(11)]
    load = LoadResult(records=[rec(0, 1.0, times, [1] * 11)], start_time=1.0, end_time=times[-1] + 0.01,
                      api="chat", model="m")
    a = summarize("baseline", load)
    assert a.value("decode_step_ms") == pytest.approx(12.2)
    assert a.value("tpot_ms.mean") == pytest.approx(12.2)
    assert a.value("accept_length") is None and a.accept_length_source is None and a.value("verify_cycle_ms") is None


def test_server_cumulative_fallback_is_labelled():
    times = [1.1, 1.2, 1.3]
    load = LoadResult(records=[rec(0, 1.0, times, [1, 2, 2])], start_time=1.0, end_time=1.31, api="chat", model="m")
    a = summarize("eagle3", load, server_accept_length=2.3)
    assert a.value("accept_length") == pytest.approx(2.3) and a.accept_length_source == "server_cumulative"
    assert a.value("verify_cycle_ms") is None
    # per-request counts win over the server's cumulative value
    b = summarize("eagle3", spec_load(), server_accept_length=9.9)
    assert b.value("accept_length") == pytest.approx(13 / 6) and b.accept_length_source == "run"


def test_no_data_gives_none_not_zero():
    f = rec(0, 1.0, [], [], error="cannot connect to http://x", status=None)
    w = rec(0, 0.5, [0.6, 0.7], [1, 1], verify=1, warmup=True)
    a = summarize("eagle3", LoadResult(records=[w, f], start_time=1.0, end_time=1.01, api="chat", model="m"))
    assert a.requests_ok == 0 and a.requests_failed == 1
    assert a.value("output_tok_s") is None and a.value("request_per_s") is None
    assert a.value("accept_length") is None and a.value("decode_step_ms") is None and a.value("verify_cycle_ms") is None
    for s in (a.stat(family) for family in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")):
        assert s == Stat() and s.to_json() == {"mean": None, "p50": None, "p90": None, "p99": None}
    empty = summarize("x", LoadResult(records=[], start_time=2.0, end_time=2.0, api="chat", model="m"))
    assert empty.value("output_tok_s") is None and empty.requests_ok == 0 and empty.errors == {}


def test_single_token_requests_have_no_decode():
    r = rec(0, 1.0, [1.05], [1])
    a = summarize("x", LoadResult(records=[r], start_time=1.0, end_time=1.06, api="chat", model="m"))
    assert a.value("output_tok_s") == pytest.approx(1 / 0.06)
    assert a.value("tpot_ms.mean") is None and a.value("decode_step_ms") is None and a.value("itl_ms.mean") is None
    assert a.value("ttft_ms.mean") == pytest.approx(50.0)


def test_to_json_block():
    j = summarize("eagle3", spec_load()).to_json()
    json.dumps(j)
    for k in ("output_tok_s", "request_per_s", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "accept_length",
              "accept_length_source", "verify_cycle_ms", "decode_step_ms", "requests", "errors"):
        assert k in j
    assert set(j["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    assert j["requests"] == {"ok": 2, "failed": 3}
    assert j["accept_length"] == pytest.approx(2.1667, abs=1e-4)
    assert j["accept_length_source"] == "run"
    assert j["verify_cycle_ms"] == pytest.approx(30.0)


# --- the metric registry ----------------------------------------------------------------------

from harness.measure import registry as metric_registry  # noqa: E402
from harness.measure.registry import Metric, cross_arm, metric_value  # noqa: E402


def test_one_lookup_reads_a_result_and_its_record_alike():
    result = summarize("eagle3", spec_load())
    block = result.to_json()
    for m in metric_registry.all_metrics():
        if m.between_arms:
            continue
        live, recorded = metric_value(result, m.path), metric_value(block, m.path)
        assert (live is None) == (recorded is None), m.path
        if live is not None:
            assert recorded == pytest.approx(live, abs=1e-3), m.path
    assert metric_value(block, "requests.ok") == 2 and metric_value(result, "requests.failed") == 3
    assert metric_value({"ttft_ms": None}, "ttft_ms.p99") is None and metric_value({}, "nope.p50") is None


def test_cross_arm_metrics_and_their_record_keys():
    fast = ArmResult.of(arm="eagle3", output_tok_s=150.0, verify_cycle_ms=30.0)
    plain = ArmResult.of(arm="baseline", output_tok_s=100.0, decode_step_ms=12.2)
    values = cross_arm(fast, plain)
    assert values["speedup"] == pytest.approx(1.5)
    assert values["break_even_accept_length"] == pytest.approx(30.0 / 12.2)
    assert values["speedup_whole"] == values["speedup"]  # neither arm has a steady window: the whole load
    assert cross_arm(fast, ArmResult(arm="b")) == {"speedup": None, "break_even_accept_length": None,
                                                   "speedup_whole": None, "break_even_accept_length_whole": None}
    assert [m.key("baseline") for m in metric_registry.all_metrics() if m.between_arms] == [
        "speedup_vs_baseline", "break_even_accept_length_vs_baseline", "speedup_whole_vs_baseline",
        "break_even_accept_length_whole_vs_baseline"]


def test_cross_arm_metrics_rest_on_the_steady_windows_when_both_arms_have_one():
    steady = {"output_tok_s": 120.0, "verify_cycle_ms": 25.0, "inconclusive": None}
    fast = ArmResult.of(arm="eagle3", output_tok_s=150.0, verify_cycle_ms=30.0, steady=steady)
    plain = ArmResult.of(arm="baseline", output_tok_s=100.0, decode_step_ms=12.2,
                         steady={"output_tok_s": 150.0, "decode_step_ms": 10.0, "inconclusive": None})
    values = cross_arm(fast, plain)
    assert metric_registry.basis(fast, plain) == "steady"
    assert values["speedup"] == pytest.approx(0.8) and values["speedup_whole"] == pytest.approx(1.5)
    assert values["break_even_accept_length"] == pytest.approx(2.5)
    assert values["break_even_accept_length_whole"] == pytest.approx(30.0 / 12.2)
    # one arm's window inconclusive: both on the whole load, never one of each
    plain.steady = {"output_tok_s": None, "inconclusive": "too short"}
    assert metric_registry.basis(fast, plain) == "whole" and cross_arm(fast, plain)["speedup"] == pytest.approx(1.5)


def test_every_metric_says_which_direction_is_better():
    for m in metric_registry.all_metrics():
        assert m.better in ("higher", "lower", "neither") and m.unit and m.label
    assert metric_registry.metric("output_tok_s").better == "higher"
    assert metric_registry.metric("ttft_ms.p99").better == "lower"
    with pytest.raises(KeyError, match="not a registered metric"):
        metric_registry.metric("tok_per_s")


def test_a_new_metric_is_one_registry_entry(monkeypatch, tmp_path):
    from harness.report.compare import compare_data
    from harness.report.summary import column_names

    e2e_p90 = Metric("e2e_ms.p90", "E2E p90 ms", "ms", "{:.0f}", "lower", noise=True, column="E2E p90")
    with metric_registry.registered(e2e_p90):
        combined = combine_repeats("eagle3", [summarize("eagle3", spec_load()), summarize("eagle3", spec_load())])
        assert "e2e_ms.p90" in combined.noise  # repeats track its spread
        assert "E2E p90" in column_names()  # a summary column
        (tmp_path / "results.json").write_text(json.dumps({"arms": {"eagle3": combined.to_json()}}))
        data = compare_data([tmp_path])
        assert "e2e_ms.p90" in data["metrics"]  # a compare row
        [row] = [r for r in data["rows"] if r["metric"] == "e2e_ms.p90"]
        assert row["values"] == [pytest.approx(combined.value("e2e_ms.p90"), abs=1e-3)]
    assert "E2E p90" not in column_names()  # gone with its registration


def test_failure_reasons_that_differ_only_in_numbers_are_one_reason_with_a_count():
    from collections import Counter

    from harness.measure.metrics import group_errors

    counts = Counter({f"connection dropped mid-stream after {n} token chunks: ServerDisconnectedError": 1
                      for n in range(13)})
    counts["HTTP 500: model overloaded"] = 4
    counts["timed out after 1s"] = 2
    assert group_errors(counts) == {  # a message alone in its shape keeps its numbers
        "connection dropped mid-stream after N token chunks: ServerDisconnectedError": 13,
        "HTTP 500: model overloaded": 4,
        "timed out after 1s": 2,
    }


def test_figures_break_down_by_the_prompts_category():
    from harness.measure.metrics import category_speedups, combine_repeats

    # code: 10 tokens in 4 cycles over 0.23 s; prose: 3 tokens in 2 cycles over 0.12 s (+ a failed prose request)
    code = rec(0, 1.00, [1.10, 1.13, 1.16, 1.19, 1.22], [1, 3, 2, 3, 1], verify=4)
    prose = rec(1, 1.00, [1.05, 1.08, 1.11], [1, 1, 1], verify=2)
    failed = rec(2, 1.01, [], [], error="HTTP 500: boom", status=500)
    code.category, prose.category, failed.category = "code", "prose", "prose"
    load = LoadResult(records=[code, prose, failed], start_time=1.0, end_time=1.25, api="chat", model="m")
    res = summarize("eagle3", load)
    assert set(res.categories) == {"code", "prose"}
    assert res.categories["code"]["accept_length"] == pytest.approx(2.5)
    assert res.categories["prose"]["accept_length"] == pytest.approx(1.5)
    assert res.categories["prose"]["requests"] == 1  # the failed one has no figures
    assert res.categories["code"]["stream_tok_s"] == pytest.approx(10 / 0.23, rel=1e-3)
    assert res.categories["code"]["tpot_ms.p50"] == pytest.approx(120 / 9, rel=1e-3)
    plain = summarize("baseline", LoadResult(records=[rec(0, 1.0, [1.1, 1.2, 1.3, 1.4, 1.5], [2, 2, 2, 2, 2])],
                                             start_time=1.0, end_time=1.5, api="chat", model="m"))
    assert plain.categories == {}  # no category on any prompt: no breakdown
    plain.categories = {"code": {"stream_tok_s": 20.0}, "math": {"stream_tok_s": 5.0}}
    assert category_speedups(res, plain) == {"code": pytest.approx(10 / 0.23 / 20, rel=1e-3)}  # only shared ones
    twice = combine_repeats("eagle3", [res, res])
    assert twice.categories["code"]["requests"] == 2
    assert twice.categories["code"]["accept_length"] == pytest.approx(2.5)
    assert json.loads(json.dumps(res.to_json()))["categories"]["prose"]["accept_length"] == pytest.approx(1.5)


def test_results_json_reads_back_into_the_same_type_byte_for_byte():
    """read_result: an arm's block of results.json is the ArmResult it was written from; the
    figures the arm set (cache hit rate before J/token, as a run sets them) keep their order,
    and a record written before (J/token only in the gpu block) reads under the path."""
    from harness.measure.metrics import read_result

    a = summarize("eagle3", spec_load(), server_accept_length=None)
    a.figures["prefix_cache_hit_rate"], a.figures["joules_per_token"] = 0.25, 0.125
    both = combine_repeats("eagle3", [a, summarize("eagle3", spec_load())])
    for result in (a, both):
        written = json.dumps(result.to_json(), indent=2)
        back = read_result("eagle3", json.loads(written))
        assert json.dumps(back.to_json(), indent=2) == written
        assert back.value("ttft_ms.p99") == result.to_json()["ttft_ms"]["p99"] and back.requests_ok == result.requests_ok
    old = {"output_tok_s": 50.0, "requests": {"ok": 2, "failed": 0}, "gpu": {"energy": {"joules_per_token": 0.5}}}
    assert read_result("eagle3", old).value("joules_per_token") == 0.5
    assert read_result("eagle3", {"status": "server_failed"}) is None  # an arm that was not measured
