"""The server's /metrics text as the record keeps it: a NaN or infinite sample (valid
Prometheus text) is a missing figure with its reason, never a number and never a crash."""

import json

from harness.engines.sglang import SGLang
from harness.measure.server_metrics import parse, window

TTFT = """# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{{model_name="m"}} {total}
sglang:time_to_first_token_seconds_count{{model_name="m"}} {count}
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m"}} {tokens}
# TYPE sglang:spec_verify_calls counter
sglang:spec_verify_calls_total{{model_name="m"}} {verify}
"""


def test_a_finite_window_gives_every_figure():
    names = SGLang.prometheus
    block = window(SGLang(), parse(TTFT.format(total=1, count=10, tokens=0, verify=0), names),
                   parse(TTFT.format(total=3, count=30, tokens=200, verify=100), names))
    assert block["ttft_mean_ms"] == 100.0 and block["accept_length"] == 2.0
    assert "non_finite_samples" not in block


def test_a_nan_sample_is_a_missing_figure_with_its_reason_and_the_rest_stands():
    names = SGLang.prometheus
    before = parse(TTFT.format(total=1, count=10, tokens=0, verify=0), names)
    after = parse(TTFT.format(total="NaN", count=30, tokens=200, verify=100), names)
    block = window(SGLang(), before, after)
    assert block["ttft_mean_ms"] is None
    assert block["accept_length"] == 2.0  # the other counters are whole
    assert block["non_finite_samples"] == ["sglang:time_to_first_token_seconds_sum"]
    assert "reported sglang:time_to_first_token_seconds_sum as NaN or infinite" in block["non_finite_note"]
    json.dumps(block, allow_nan=False)  # what the record writer does: no ValueError


def test_an_infinite_counter_before_the_load_makes_its_delta_missing():
    names = SGLang.prometheus
    before = parse(TTFT.format(total=1, count=10, tokens="+Inf", verify=0), names)
    after = parse(TTFT.format(total=3, count=30, tokens=200, verify=100), names)
    block = window(SGLang(), before, after)
    assert block.get("accept_length") is None
    assert block["non_finite_samples"] == ["sglang:generation_tokens_total"]
