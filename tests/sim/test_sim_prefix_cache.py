"""The simulator's prefix cache: shared prefixes hit and skip their prefill time, the
counters say so honestly, and /flush_cache empties it and resets the speculative totals
as SGLang's does."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import requests

from harness.engines.sim import Simulator
from harness.measure import server_metrics
from harness.sim.prefix_cache import PrefixCache, chat_tokens, page_hashes, text_tokens
from harness.sim.tokens import chat_prompt_tokens, count_tokens
from tests.support.sim_process import FAST, SPEC, Sim

PREFIX = " ".join(f"w{i}" for i in range(400))  # 400 tokens
# prefill costs 1 ms per token here, so 400 cached tokens save 400 ms of TTFT
SLOW_PREFILL = ["--sim-prefill-ms-per-token", "1.0"]


def test_cache_matches_whole_pages_and_never_the_last_token():
    cache = PrefixCache(page_size=4)
    a = text_tokens(" ".join(f"a{i}" for i in range(10)))
    cache.insert(page_hashes(a, 4))
    assert cache.match(page_hashes(a, 4), len(a)) == 8  # two full pages; the last token is always computed
    b = a[:6] + ("x", "y", "z", "q")
    assert cache.match(page_hashes(b, 4), len(b)) == 4  # diverges inside the second page
    exact = PrefixCache(page_size=1)
    exact.insert(page_hashes(a, 1))
    assert exact.match(page_hashes(a, 1), len(a)) == 9
    exact.reset()
    assert exact.match(page_hashes(a, 1), len(a)) == 0
    off = PrefixCache(enabled=False)
    off.insert(page_hashes(a, 1))
    assert off.match(page_hashes(a, 1), len(a)) == 0


def test_prompt_tokens_have_the_counted_length():
    assert len(chat_tokens(["hello there", "again"])) == chat_prompt_tokens(["hello there", "again"])
    assert len(text_tokens("Count from 1 to 3.")) == count_tokens("Count from 1 to 3.")
    assert len(text_tokens("")) == count_tokens("") == 1


def _metrics(s: Sim):
    return server_metrics.parse(requests.get(s.url + "/metrics").text, Simulator.prometheus)


def _ttft_s(s: Sim, prompt: str) -> float:
    t0 = time.perf_counter()
    r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "stream": True}, stream=True)
    for line in r.iter_lines():
        if line:
            break
    elapsed = time.perf_counter() - t0
    r.close()
    time.sleep(0.05)  # let it finish before the next
    return elapsed


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with Sim(FAST + SLOW_PREFILL) as s:
        yield s


def test_a_shared_prefix_hits_skips_its_prefill_and_is_counted(sim: Sim):
    assert sim.post("/flush_cache", {}).status_code == 200
    before = _metrics(sim)
    cold = _ttft_s(sim, PREFIX + " first question")
    warm = _ttft_s(sim, PREFIX + " second question")
    other = _ttft_s(sim, "unrelated " + PREFIX)
    after = _metrics(sim)
    window = server_metrics.Window(before, after)
    hits, queries = window.delta("sglang:cached_tokens_total"), window.delta("sglang:prompt_tokens_total")
    assert hits == 400  # the second prompt's 400 shared tokens; the first and the unrelated one hit nothing
    assert queries == 402 + 402 + 401
    assert cold - warm > 0.3  # 400 ms of prefill saved (1 ms a token), less scheduling noise
    assert other - warm > 0.3
    rate = requests.get(sim.url + "/metrics").text
    assert "sglang:cache_hit_rate{" in rate


def test_flush_empties_the_cache(sim: Sim):
    _ttft_s(sim, PREFIX + " warm it")
    before = _metrics(sim)
    assert sim.post("/flush_cache", {}).status_code == 200
    _ttft_s(sim, PREFIX + " after the flush")
    after = _metrics(sim)
    assert (server_metrics.Window(before, after).delta("sglang:cached_tokens_total") or 0) == 0


def test_flush_is_refused_while_requests_run(sim: Sim):
    # a minute of decoding at 2 ms a token: still running when the flush comes, however busy the box
    r = sim.post("/v1/completions", {"prompt": "busy", "max_tokens": 30_000, "ignore_eos": True, "stream": True},
                 stream=True)
    # the line iterator is kept: one dropped after its first line is closed at once, and its
    # urllib3 stream closes the connection, so the server aborted the request before the flush
    # whenever its next write came first (1 in 3 under two workers)
    lines = r.iter_lines()
    first = next(lines)
    refused = sim.post("/flush_cache", {})
    r.close()
    assert refused.status_code == 400 and "failed" in refused.text, (r.status_code, first[:200], refused.text)


def test_disable_radix_cache_never_hits():
    s = Sim(FAST + ["--disable-radix-cache"])
    try:
        _ttft_s(s, PREFIX + " one")
        _ttft_s(s, PREFIX + " two")
        assert "sglang:cached_tokens_total" not in _metrics(s).values
    finally:
        s.kill()


def test_flush_resets_the_speculative_totals_like_sglang():
    """SGLang's flush_cache calls reset_metrics(): the totals behind /get_server_info's
    avg_spec_accept_length start again; the Prometheus counters keep counting."""
    s = Sim(FAST + SPEC + ["--decode-log-interval", "5"])
    try:
        s.post("/v1/completions", {"prompt": "hi", "max_tokens": 200, "ignore_eos": True})
        state = requests.get(s.url + "/get_server_info").json()["internal_states"][0]
        assert "avg_spec_accept_length" in state
        verify_before = _metrics(s).values["sglang:spec_verify_calls_total"]
        assert s.post("/flush_cache", {}).status_code == 200
        state = requests.get(s.url + "/get_server_info").json()["internal_states"][0]
        assert "avg_spec_accept_length" not in state  # no completed window since the flush
        assert _metrics(s).values["sglang:spec_verify_calls_total"] == verify_before
    finally:
        s.kill()
