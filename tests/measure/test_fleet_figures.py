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


# --- a split fleet (prefill/decode): read by role ---------------------------------------------

def staged(stages: dict[str, tuple[float, float]], **counts) -> str:
    """metrics() plus SGLang's per-stage histogram: stage -> (count, sum in s), and a TTFT histogram."""
    lines = [metrics(**{k: v for k, v in counts.items() if k != "ttft"})]
    lines.append("# TYPE sglang:per_stage_req_latency_seconds histogram")
    for stage, (count, total) in stages.items():
        lines.append(f'sglang:per_stage_req_latency_seconds_count{{stage="{stage}",tp_rank="0"}} {count}')
        lines.append(f'sglang:per_stage_req_latency_seconds_sum{{stage="{stage}",tp_rank="0"}} {total}')
    if counts.get("ttft") is not None:
        count, total = counts["ttft"]
        lines += ["# TYPE sglang:time_to_first_token_seconds histogram",
                  f"sglang:time_to_first_token_seconds_count {count}", f"sglang:time_to_first_token_seconds_sum {total}"]
    return "\n".join(lines) + "\n"


ROLES = ["prefill", "decode", "decode"]


def split_snapshots():
    """Two decode workers share 10 requests (6 and 4); one prefill worker prefilled all 10."""
    zero = {"prefill_forward": (0, 0), "prefill_transfer_kv_cache": (0, 0)}
    before = [parse(staged(zero, requests=0, prompt=0, cached=0, tokens=0), NAMES),
              parse(staged({"decode_waiting": (0, 0), "decode_bootstrap": (0, 0)}, requests=0, prompt=0, tokens=0,
                           ttft=(0, 0)), NAMES),
              parse(staged({"decode_waiting": (0, 0), "decode_bootstrap": (0, 0)}, requests=0, prompt=0, tokens=0,
                           ttft=(0, 0)), NAMES)]
    after = [parse(staged({"prefill_forward": (10, 0.5), "prefill_transfer_kv_cache": (10, 0.2)},
                          requests=10, prompt=10000, cached=6000, tokens=10), NAMES),
             parse(staged({"decode_waiting": (6, 0.03), "decode_bootstrap": (6, 0.006)}, requests=6, prompt=6000,
                          tokens=384, ttft=(6, 0.6)), NAMES),
             parse(staged({"decode_waiting": (4, 0.02), "decode_bootstrap": (4, 0.004)}, requests=4, prompt=4000,
                          tokens=256, ttft=(4, 0.4)), NAMES)]
    return before, after


def test_a_split_fleet_counts_each_request_once_from_its_decode_workers_and_its_hits_where_it_was_prefilled():
    from harness.measure.fleet import split_window

    before, after = split_snapshots()
    whole = split_window(SGLang(), ROLES, before, after)
    assert whole["requests_finished"] == 10  # not 20: the prefill worker counted each request too
    assert whole["generation_tokens"] == 640
    assert whole["ttft_mean_ms"] == 100.0  # the decode workers' TTFT: from arrival, the prefill's share in it
    assert whole["prefix_cache_queries"] == 10000 and whole["prefix_cache_hit_rate"] == 0.6  # the prefill side's
    assert whole["ttft_split_ms"] == {"bootstrap_ms": 1.0, "prefill_ms": 50.0, "transfer_ms": 20.0,
                                      "first_decode_ms": 5.0}


def test_a_stage_no_worker_reported_is_left_out_of_the_split_and_a_silent_worker_leaves_no_window():
    from harness.measure.fleet import split_window

    before, after = split_snapshots()
    plain = [parse(metrics(requests=0), NAMES)] * 3
    split = split_window(SGLang(), ROLES, plain, [parse(metrics(requests=4), NAMES)] * 3)
    assert "ttft_split_ms" not in split  # a server without the per-stage histogram: no split, no zeros
    assert split_window(SGLang(), ROLES, [None, *before[1:]], after) == {}


def test_a_split_fleets_summary_keeps_roles_averages_the_split_and_balances_each_role_apart():
    from harness.measure.fleet import prefill_imbalances, split_window

    before, after = split_snapshots()
    workers = worker_windows(SGLang(), [("a.p0", "u0"), ("a.d0", "u1"), ("a.d1", "u2")], before, after, ROLES)
    assert [w.get("role") for w in workers] == ROLES
    split = split_window(SGLang(), ROLES, before, after)["ttft_split_ms"]
    summary = fleet_summary("cache_aware", [workers, workers], [split, {**split, "transfer_ms": 40.0}])
    assert summary["disaggregation"] == "prefill/decode"
    assert summary["ttft_split_ms"]["transfer_ms"] == 30.0 and summary["ttft_split_ms"]["prefill_ms"] == 50.0
    assert summary["imbalance"]["requests_max_over_mean"] == 1.2  # 6 and 4 over the decode workers only
    assert prefill_imbalances(workers)["requests_max_over_mean"] == 1.0
    assert "disaggregation" not in fleet_summary("round_robin", [[{"worker": "a.w0", "url": "u"}]])


def test_a_fleets_imbalance_and_a_splits_transfer_are_registry_metrics_of_the_arm():
    from harness.measure.registry import metric
    from harness.run.arm import server_figures

    window = {"prefix_cache_hit_rate": 0.6, "imbalance": {"requests_max_over_mean": 1.2},
              "ttft_split_ms": {"transfer_ms": 21.5, "prefill_ms": 43.0}}
    assert server_figures(window) == {"prefix_cache_hit_rate": 0.6, "worker_imbalance": 1.2, "kv_transfer_ms": 21.5}
    assert server_figures({"imbalance": {"requests_max_over_mean": None}}) == {}  # one server: none of them
    assert metric("worker_imbalance").better == "lower" and metric("kv_transfer_ms").in_compare
