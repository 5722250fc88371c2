"""A fleet's figures (harness/measure/fleet.py): the fleet's counters are its workers' summed;
each worker's share from its own; a worker the router sent nothing counts zero, a counter no
worker exports stays unknown; the imbalance is max ÷ mean; the router's own counters per worker."""

from __future__ import annotations

from harness.engines.sglang import SGLang
from harness.measure.fleet import fleet_summary, imbalance, router_counters, router_window, summed, worker_windows
from harness.measure.server_metrics import parse

NAMES = SGLang.prometheus


def metrics(requests=None, prompt=None, cached=None, tokens=None, verify=None) -> str:
    lines = []
    for name, value in (("sglang:num_requests", requests), ("sglang:prompt_tokens", prompt),
                        ("sglang:cached_tokens", cached), ("sglang:generation_tokens", tokens),
                        ("sglang:spec_verify_calls", verify)):
        if value is not None:
            lines += [f"# TYPE {name} counter", f'{name}_total{{model_name="m"}} {value}']
    return "\n".join(lines) + "\n"


def test_the_fleets_counters_are_its_workers_summed_and_missing_with_any_worker_missing():
    a, b = parse(metrics(requests=3, tokens=30), NAMES), parse(metrics(requests=1, tokens=10), NAMES)
    total = summed([a, b])
    assert total.values["sglang:num_requests_total"] == 4 and total.values["sglang:generation_tokens_total"] == 40
    assert summed([a, None]) is None and summed([]) is None


def test_each_worker_counts_its_own_and_one_the_router_sent_nothing_counts_zero():
    before = [parse(metrics(requests=0, prompt=0, cached=0, tokens=0, verify=0), NAMES), parse("", NAMES)]
    after = [parse(metrics(requests=4, prompt=1000, cached=800, tokens=100, verify=40), NAMES), parse("", NAMES)]
    busy, idle = worker_windows(SGLang(), [("a.w0", "u0"), ("a.w1", "u1")], before, after)
    assert busy["requests_finished"] == 4 and busy["prefix_cache_hit_rate"] == 0.8 and busy["accept_length"] == 2.5
    assert idle["requests_finished"] == 0 and idle["generation_tokens"] == 0  # counters SGLang shows after a first request
    assert "prefix_cache_hit_rate" not in idle and "accept_length" not in idle  # nothing counted: no ratio


def test_a_counter_no_worker_exports_is_unknown_not_zero():
    before = [parse(metrics(requests=0), NAMES)] * 2
    after = [parse(metrics(requests=2), NAMES)] * 2
    w0, _ = worker_windows(SGLang(), [("a.w0", "u0"), ("a.w1", "u1")], before, after)
    assert w0["requests_finished"] == 2 and "prefix_cache_queries" not in w0 and "generation_tokens" not in w0


def test_a_worker_whose_metrics_did_not_answer_or_went_backwards_has_no_figures_and_says_why():
    good = parse(metrics(requests=5, tokens=50), NAMES)
    silent, reset = worker_windows(SGLang(), [("a.w0", "u0"), ("a.w1", "u1")], [None, good],
                                   [good, parse(metrics(requests=1, tokens=10), NAMES)])
    assert "did not answer" in silent["note"] and "requests_finished" not in silent
    assert "went backwards" in reset["note"] and "requests_finished" not in reset


def test_imbalance_is_max_over_mean_and_unknown_with_an_unknown_worker():
    assert imbalance([16.0, 16.0]) == 1.0
    assert imbalance([24.0, 8.0]) == 1.5
    assert imbalance([4.0, 0.0]) == 2.0  # one of two workers took everything
    assert imbalance([4.0, None]) is None and imbalance([0.0, 0.0]) is None and imbalance([]) is None


def test_the_arms_fleet_block_sums_each_worker_over_the_repeats():
    repeat = [{"worker": "a.w0", "url": "u0", "requests_finished": 3.0, "prefix_cache_queries": 100.0,
               "prefix_cache_hits": 50.0, "generation_tokens": 30.0, "spec_verify_calls": 10.0},
              {"worker": "a.w1", "url": "u1", "requests_finished": 1.0, "prefix_cache_queries": 100.0,
               "prefix_cache_hits": 0.0, "generation_tokens": 10.0, "spec_verify_calls": 5.0}]
    block = fleet_summary("round_robin", [repeat, repeat])
    w0, w1 = block["workers"]
    assert w0["requests_finished"] == 6 and w0["prefix_cache_hit_rate"] == 0.5 and w0["accept_length"] == 3.0
    assert w1["prefix_cache_hit_rate"] == 0.0 and w1["accept_length"] == 2.0
    assert block["policy"] == "round_robin" and block["imbalance"]["requests_max_over_mean"] == 1.5
    assert fleet_summary("cache_aware", []) == {}


ROUTER_TEXT = """# TYPE smg_router_requests_total counter
smg_router_requests_total{endpoint="chat",streaming="true"} 3
smg_router_requests_total{endpoint="generate",streaming="false"} 1
# TYPE smg_worker_cb_outcomes_total counter
smg_worker_cb_outcomes_total{worker="http://127.0.0.1:1",outcome="success"} 4
# TYPE smg_worker_health gauge
smg_worker_health{worker="http://127.0.0.1:1"} 1
"""


def test_the_routers_counters_per_worker_and_in_total_and_what_grew():
    counters = router_counters(ROUTER_TEXT)
    assert counters == {"smg_router_requests_total": 4.0,
                        "smg_worker_cb_outcomes_total{worker=http://127.0.0.1:1}": 4.0}  # gauges are not counted
    assert router_window({"smg_router_requests_total": 1.0}, counters) == {
        "smg_router_requests_total": 3.0, "smg_worker_cb_outcomes_total{worker=http://127.0.0.1:1}": 4.0}
    assert router_window(None, counters) == {}
