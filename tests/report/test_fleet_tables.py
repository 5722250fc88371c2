"""A fleet's workers in the summary and the report: one row per worker, and the imbalance in words."""

from __future__ import annotations

from harness.report.tables import fleet_lines, fleet_rows

BLOCKS = {
    "aware": {"fleet": {"policy": "cache_aware", "imbalance": {"requests_max_over_mean": 1.5,
                                                               "generation_tokens_max_over_mean": None},
                        "workers": [{"worker": "aware.w0", "requests_finished": 24.0, "prefix_cache_queries": 13056.0,
                                     "prefix_cache_hit_rate": 0.8235, "generation_tokens": 768.0, "accept_length": 2.41},
                                    {"worker": "aware.w1", "requests_finished": 8.0}]}},
    "single": {"status": "measured"},
}


def test_one_row_per_worker_and_nothing_for_one_server():
    assert fleet_rows(BLOCKS, ["aware", "single", "missing"]) == [
        ["aware", "aware.w0", "24", "13056", "82.3%", "768", "2.41"],
        ["aware", "aware.w1", "8", "-", "-", "-", "-"]]


def test_the_policy_and_the_imbalance_in_words():
    assert fleet_lines(BLOCKS, ["aware", "single"]) == [
        "aware: 2 workers behind the router, policy cache_aware; requests max ÷ mean 1.50, "
        "generated tokens max ÷ mean unknown (1.00: even)"]


SPLIT = {"split": {"fleet": {"policy": "round_robin", "disaggregation": "prefill/decode",
                             "imbalance": {"requests_max_over_mean": 1.0, "generation_tokens_max_over_mean": 1.0},
                             "ttft_split_ms": {"bootstrap_ms": 1.46, "prefill_ms": 50.0, "transfer_ms": 22.34},
                             "workers": [{"worker": "split.p0", "role": "prefill", "requests_finished": 32.0},
                                         {"worker": "split.d0", "role": "decode", "requests_finished": 32.0}]}}}


def test_a_split_fleet_names_each_workers_role_and_its_ttft_in_the_stages_reported():
    assert [row[1] for row in fleet_rows(SPLIT, ["split"])] == ["split.p0 (prefill)", "split.d0 (decode)"]
    lines = fleet_lines(SPLIT, ["split"])
    assert lines[0].startswith("split: 1 prefill and 1 decode workers behind the router (--pd-disaggregation)")
    # a stage the servers did not report (first decode) is not shown as zero
    assert lines[1] == ("split: TTFT split (the servers' means): bootstrap 1.5 ms, prefill 50.0 ms, "
                        "KV transfer 22.3 ms")


def test_the_report_names_every_stage_the_measurement_splits_ttft_into():
    """A stage added to the measurement and forgotten here would be measured and never shown."""
    from harness.measure.fleet import TTFT_STAGES
    from harness.report.tables import SPLIT_WORDS

    assert [key for key, _ in SPLIT_WORDS] == list(TTFT_STAGES)
