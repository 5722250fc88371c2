"""The prefix-cache hit rate from each engine's counters over the window, each engine's
reset route, and a window across a counter reset left without figures (and saying why) rather than computed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.run.compose import compose
from harness.engines import ENGINES
from harness.engines.sglang import SGLang
from harness.engines.vllm import VLLM
from harness.measure.registry import metric
from harness.measure.server_metrics import parse, window

SGLANG_TEXT = """# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{{model_name="m",is_streaming="true"}} {prompt}
# TYPE sglang:cached_tokens counter
sglang:cached_tokens_total{{model_name="m",is_streaming="true"}} {cached}
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m"}} {tokens}
# TYPE sglang:spec_verify_calls counter
sglang:spec_verify_calls_total{{model_name="m"}} {verify}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{model_name="m"}} {gauge}
"""
VLLM_TEXT = """# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{{engine="0"}} {queries}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{engine="0"}} {hits}
"""


def sglang(prompt=0, cached=0, tokens=0, verify=0, gauge=0.0):
    return parse(SGLANG_TEXT.format(prompt=prompt, cached=cached, tokens=tokens, verify=verify, gauge=gauge),
                 SGLang.prometheus)


def test_the_hit_rate_is_the_windows_hits_over_its_queries_per_engine():
    block = window(SGLang(), sglang(prompt=1000, cached=300), sglang(prompt=5000, cached=2300, gauge=0.9))
    assert block["prefix_cache_queries"] == 4000 and block["prefix_cache_hits"] == 2000
    assert block["prefix_cache_hit_rate"] == pytest.approx(0.5)  # not the gauge (0.9: the last prefill batch's)
    before = parse(VLLM_TEXT.format(queries=100, hits=0), VLLM.prometheus)
    after = parse(VLLM_TEXT.format(queries=900, hits=600), VLLM.prometheus)
    assert window(VLLM(), before, after)["prefix_cache_hit_rate"] == pytest.approx(0.75)


def test_no_hit_counter_is_no_hit_rate_with_its_reason_and_no_queries_is_no_figure():
    text = '# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total{{model_name="m"}} {n}\n'
    block = window(SGLang(), parse(text.format(n=0), SGLang.prometheus), parse(text.format(n=80), SGLang.prometheus))
    assert block["prefix_cache_hit_rate"] is None and "no hit since it started" in block["prefix_cache_note"]
    assert "prefix_cache_hit_rate" not in window(SGLang(), sglang(prompt=10), sglang(prompt=10))


def test_counters_that_went_backwards_inside_the_window_give_no_figure_and_say_why():
    """A counter reset inside the window (a restart behind an attached URL, an engine that
    zeroes counters on a flush): the difference would be garbage, so no figure is computed."""
    before = sglang(prompt=5000, cached=2000, tokens=9000, verify=4000)
    after = sglang(prompt=800, cached=100, tokens=1200, verify=500)
    block = window(SGLang(), before, after)
    assert "went backwards inside the measured window" in block["counter_reset_note"]
    assert "sglang:spec_verify_calls_total: 4000 -> 500" in block["counters_went_backwards"]
    assert block.get("accept_length") is None and block.get("prefix_cache_hit_rate") is None
    # gauges move both ways: a lower one is no reset
    assert window(SGLang(), sglang(prompt=1, gauge=0.9), sglang(prompt=2, gauge=0.1))["prefix_cache_hit_rate"] == 0


def test_vllm_spec_counters_going_backwards_give_no_figure_too():
    text = ('# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{{engine="0"}} {d}\n'
            '# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {p}\n')
    before, after = parse(text.format(d=50, p=40), VLLM.prometheus), parse(text.format(d=60, p=10), VLLM.prometheus)
    assert "position=0" in window(VLLM(), before, after)["counter_reset_note"]


def test_the_hit_rate_is_a_registry_metric_shown_in_the_summary():
    entry = metric("prefix_cache_hit_rate")
    assert entry.column == "cache hit" and entry.format(0.5) == "50.0%"


class FakeClient:
    def __init__(self, status: int, text: str):
        self.status, self.text, self.calls = status, text, []

    def post_json(self, path, body, check=True):
        self.calls.append(path)
        return SimpleNamespace(status_code=self.status, text=self.text)


def cfg(*overrides: str):
    return compose(["+exp=sim_smoke", *overrides]).arm("baseline").typed


def test_each_engine_owns_its_reset_route():
    assert ENGINES["sglang"].prefix_cache_reset_route == "/flush_cache"
    assert ENGINES["sim"].prefix_cache_reset_route == "/flush_cache"
    assert ENGINES["vllm"].prefix_cache_reset_route == "/reset_prefix_cache"
    sim = ENGINES["sim"]
    ok = FakeClient(200, "Cache flushed.\n")
    assert sim.reset_prefix_cache(ok, cfg()).to_json() == {"reset": True, "route": "POST /flush_cache"}
    busy = sim.reset_prefix_cache(FakeClient(400, "Flush cache failed.\n"), cfg())
    assert not busy.reset and busy.reason == "HTTP 400: Flush cache failed."


def test_vllm_resets_only_in_dev_mode_and_reads_its_success_field():
    vllm = VLLM()
    plain = cfg()  # the route needs VLLM_SERVER_DEV_MODE=1 in the server's environment
    client = FakeClient(200, '{"success": true}')
    missing = vllm.reset_prefix_cache(client, plain)
    assert not missing.reset and missing.route is None and "VLLM_SERVER_DEV_MODE=1" in missing.reason
    assert client.calls == []
    dev = cfg("+server.env.VLLM_SERVER_DEV_MODE=1")
    assert vllm.reset_prefix_cache(client, dev).reset and client.calls == ["/reset_prefix_cache"]
    held = vllm.reset_prefix_cache(FakeClient(200, '{"success": false}'), dev)
    assert not held.reset and "success=false" in held.reason
    gone = vllm.reset_prefix_cache(FakeClient(404, '{"detail":"Not Found"}'), cfg("backend=attach",
                                                                                  "backend.url=http://127.0.0.1:1"))
    assert not gone.reset and "VLLM_SERVER_DEV_MODE" in gone.reason


def test_an_engine_without_a_route_says_so():
    class NoRoute(SGLang):
        name = "noroute"
        prefix_cache_reset_route = None

    done = NoRoute().reset_prefix_cache(FakeClient(200, ""), cfg())
    assert done.to_json() == {"reset": False, "route": None, "reason": "engine noroute has no route that resets its prefix cache"}
