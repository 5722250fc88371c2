"""The accept length from two sources over one window: the requests' own verify counts
and the server's /metrics counters. Where both exist they must agree within
gate.max_accept_length_source_gap; where one exists the gate skips, saying which; a load
with failed requests is not like for like. Plus the per-request distribution and the
per-position acceptance the requests carry."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.gates import registry
from harness.gates import speculative
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.engines.sglang import TOKENS_PER_VERIFY, SGLang
from harness.engines.vllm import ONE_PLUS_ACCEPTED, VLLM
from harness.load import LoadResult, RequestRecord
from harness.measure.metrics import combine_repeats, summarize
from harness.config.schema import GateConfig
from harness.measure.server_metrics import parse, window
from tests.support.arm_results import result


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def line(tokens: int, verify: int | None, ok: bool = True, warmup: bool = False, repeat: int = 0) -> dict:
    return {"ok": ok, "warmup": warmup, "repeat": repeat, "completion_tokens": tokens if ok else None,
            "spec_verify_ct": verify if ok else None}


def sglang_window(tokens: float, verify: float) -> dict:
    return {"generation_tokens": tokens, "spec_verify_calls": verify, "accept_length": tokens / verify,
            "accept_length_definition": TOKENS_PER_VERIFY}


def context(lines: list[dict], windows: list[dict], **cfg) -> registry.GateContext:
    return registry.GateContext(arm="eagle3", gate=gate_cfg(**cfg), result=result(), gpu=None, plain_arm="baseline",
                            results={}, reference=None, reference_label="", telemetry_source="off",
                            requests=lines, server_windows=windows)


# 300 tokens in 150 cycles and 100 in 40: Σ 400 ÷ Σ 190 = 2.1053; the warm-up is outside the window
HONEST = [line(50, 50, warmup=True), line(300, 150), line(100, 40)]


def test_sources_that_count_the_same_requests_agree():
    [v] = speculative.accept_length_sources_agree(context(HONEST, [sglang_window(400, 190)]))
    assert v.status == "passed" and v.value == 0.0 and v.threshold == 0.02
    assert "= 2.1053" in v.detail and "Σ completion tokens ÷ Σ spec_verify_ct" in v.detail
    assert "Δ generation tokens ÷ Δ verify calls" in v.detail


def test_a_server_counter_off_by_more_than_the_gap_fails_with_both_definitions():
    # the server counted 410 verify calls' worth of 400 tokens: 1.9048 vs 2.1053, 9.5 % apart
    [v] = speculative.accept_length_sources_agree(context(HONEST, [sglang_window(400, 210)]))
    assert v.status == "failed" and v.value == pytest.approx(0.0952, abs=1e-4)
    assert "disagree by 9.52% of the larger (> 2%)" in v.detail
    assert "the requests' own counts: Σ completion tokens ÷ Σ spec_verify_ct" in v.detail and "= 2.1053" in v.detail
    assert "prefill-produced token included" in v.detail
    assert "the server's counters: Δ generation tokens ÷ Δ verify calls" in v.detail and "= 1.9048" in v.detail


def test_a_gap_within_the_limit_passes_and_a_tighter_limit_fails_it():
    windows = [sglang_window(400, 193)]  # 2.0725 vs 2.1053: 1.6 %
    [loose] = speculative.accept_length_sources_agree(context(HONEST, windows))
    [tight] = speculative.accept_length_sources_agree(context(HONEST, windows, max_accept_length_source_gap=0.01))
    assert loose.status == "passed" and tight.status == "failed"


def test_one_source_skips_and_says_which():
    vllm = {"accept_length": 2.5, "accept_length_definition": ONE_PLUS_ACCEPTED, "spec_drafts": 10}
    [server_only] = speculative.accept_length_sources_agree(context([line(40, None)], [vllm]))
    assert server_only.status == "skipped" and "one source only" in server_only.detail
    assert "1 + Δ accepted draft tokens ÷ Δ drafts" in server_only.detail and "no verify counts" in server_only.detail
    [requests_only] = speculative.accept_length_sources_agree(context(HONEST, [{"ttft_mean_ms": 5.0}]))
    assert requests_only.status == "skipped" and "= 2.1053" in requests_only.detail
    assert "no generation-token and verify-call counters" in requests_only.detail
    [plain] = speculative.accept_length_sources_agree(context([line(40, None)], [{"ttft_mean_ms": 5.0}]))
    assert plain.status == "skipped" and "no speculation measured" in plain.detail


def test_failed_requests_make_the_comparison_not_like_for_like():
    lines = [*HONEST, line(0, None, ok=False)]
    [v] = speculative.accept_length_sources_agree(context(lines, [sglang_window(430, 190)]))
    assert v.status == "skipped" and "not like for like: 1 measured request(s) failed" in v.detail
    assert "= 2.1053" in v.detail and "= 2.2632" in v.detail


def test_each_repeat_is_judged_against_its_own_window():
    lines = HONEST + [line(200, 100, repeat=1), line(100, 50, repeat=1)]  # repeat 2: 300 ÷ 150 = 2.0
    ok, bad = speculative.accept_length_sources_agree(context(lines, [sglang_window(400, 190), sglang_window(300, 120)]))
    assert ok.status == "passed" and "(repeat 1)" in ok.detail
    assert bad.status == "failed" and "(repeat 2)" in bad.detail and "= 2.5000" in bad.detail


def test_null_switches_the_comparison_off_and_a_bad_gap_is_a_config_error():
    [v] = speculative.accept_length_sources_agree(context(HONEST, [sglang_window(400, 300)], max_accept_length_source_gap=None))
    assert v.status == "skipped" and "null" in v.detail
    assert compose(["+exp=sim_smoke"]).arms[0].cfg.gate.max_accept_length_source_gap == 0.02
    with pytest.raises(ConfigError, match="max_accept_length_source_gap must be a finite number >= 0 and < 1"):
        compose(["+exp=sim_smoke", "gate.max_accept_length_source_gap=2"])


SGLANG_METRICS = """# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m",engine_type="unified",is_streaming="true"}} {stream}
sglang:generation_tokens_total{{model_name="m",engine_type="unified",is_streaming="false"}} {plain}
# TYPE sglang:spec_verify_calls counter
sglang:spec_verify_calls_total{{model_name="m",engine_type="unified"}} {verify}
"""


def test_the_sglang_window_reads_tokens_per_verify_call_over_both_streaming_labels():
    names = SGLang.prometheus
    before = parse(SGLANG_METRICS.format(stream=100, plain=0, verify=50), names)
    after = parse(SGLANG_METRICS.format(stream=400, plain=100, verify=240), names)
    block = window(SGLang(), before, after)
    assert block["generation_tokens"] == 400 and block["spec_verify_calls"] == 190
    assert block["accept_length"] == pytest.approx(400 / 190)
    assert block["accept_length_definition"] == TOKENS_PER_VERIFY
    # a plain arm's verify counter does not move: no accept length, not a division by zero
    assert "accept_length" not in window(SGLang(), before, before)
    # vLLM's names have no verify counter: its accept length stays 1 + accepted ÷ drafts
    vllm = window(VLLM(), before, after)
    assert vllm.get("generation_tokens") is None and "spec_verify_calls" not in vllm


# --- the per-request distribution and per-position acceptance -------------------------------

def spec_request(index: int, tokens: int, verify: int, histogram: list[int] | None = None,
                 warmup: bool = False) -> RequestRecord:
    r = RequestRecord(index=index, warmup=warmup, send_time=1.0, chunk_times=[1.1, 1.2], chunk_tokens=[1, tokens - 1],
                      status=200, completion_tokens=tokens, prompt_tokens=5, spec_verify_ct=verify,
                      spec_correct_drafts_histogram=histogram)
    r.end_time = 1.25
    return r


def load_of(*records: RequestRecord) -> LoadResult:
    return LoadResult(records=list(records), start_time=1.0, end_time=1.3, api="chat", model="m")


def test_the_per_request_distribution_in_results_json():
    # per-request accept lengths 1.0, 1.5, 2.0, 2.1, 3.0 (and a warm-up's 50, left out)
    load = load_of(spec_request(0, 100, 2, warmup=True), spec_request(1, 10, 10), spec_request(2, 15, 10),
                   spec_request(3, 20, 10), spec_request(4, 21, 10), spec_request(5, 30, 10))
    block = summarize("eagle3", load).to_json()["accept_length_per_request"]
    assert block["n"] == 5 and block["min"] == 1.0 and block["max"] == 3.0 and block["p50"] == 2.0
    assert block["p10"] == pytest.approx(1.2) and block["p90"] == pytest.approx(2.64)
    assert block["bin_width"] == 0.25
    assert block["histogram"] == [[1.0, 1], [1.5, 1], [2.0, 2], [3.0, 1]]


def test_a_plain_arm_has_no_distribution_and_repeats_pool_their_requests():
    plain = RequestRecord(index=0, warmup=False, send_time=1.0, chunk_times=[1.1], chunk_tokens=[5], status=200,
                          completion_tokens=5)
    plain.end_time = 1.2
    assert "accept_length_per_request" not in summarize("baseline", load_of(plain)).to_json()
    first, second = summarize("eagle3", load_of(spec_request(0, 20, 10))), summarize("eagle3", load_of(spec_request(0, 30, 10)))
    block = combine_repeats("eagle3", [first, second]).to_json()["accept_length_per_request"]
    assert block["n"] == 2 and block["histogram"] == [[2.0, 1], [3.0, 1]]


def test_per_position_acceptance_from_the_requests_histograms():
    # cycles by accepted drafts: 4 accepted none, 3 one, 3 both (of 2 draft positions), over two requests
    load = load_of(spec_request(0, 16, 7, [2, 2, 3]), spec_request(1, 6, 3, [2, 1]), spec_request(2, 8, 4))
    block = summarize("eagle3", load).to_json()
    # position 1 accepted in 6 of 10 cycles, position 2 in 3 of 10
    assert block["acceptance_per_position"] == [0.6, 0.3]
    assert "acceptance_per_position" not in summarize("eagle3", load_of(spec_request(0, 8, 4))).to_json()


VLLM_METRICS = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{model_name="m",engine="0"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="0"}} {proposed}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="0"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",engine="0",position="0"}} {first}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",engine="0",position="1"}} {second}
"""


def test_the_vllm_window_is_one_plus_accepted_per_draft_with_its_acceptance_per_position():
    names = VLLM.prometheus
    before = parse(VLLM_METRICS.format(drafts=10, proposed=30, accepted=12, first=8, second=4), names)
    after = parse(VLLM_METRICS.format(drafts=110, proposed=330, accepted=162, first=98, second=64), names)
    block = window(VLLM(), before, after)
    assert (block["spec_drafts"], block["spec_draft_tokens"], block["spec_accepted_tokens"]) == (100, 300, 150)
    assert block["accept_length"] == pytest.approx(2.5) and block["acceptance_rate"] == pytest.approx(0.5)
    assert block["acceptance_per_position"] == pytest.approx([0.9, 0.6])
    assert block["accept_length_definition"] == ONE_PLUS_ACCEPTED
    assert "accept_length" not in window(VLLM(), before, before)  # no draft ran: no accept length
    assert "spec_drafts" not in window(SGLang(), before, after)  # SGLang's formula reads other counters


def vllm_window(accepted: float, drafts: float) -> dict:
    return {"spec_drafts": drafts, "spec_accepted_tokens": accepted, "accept_length": 1 + accepted / drafts,
            "accept_length_definition": ONE_PLUS_ACCEPTED}


def stream_line(chunks: list[int], ok: bool = True, warmup: bool = False) -> dict:
    """A record line of an engine without verify counts (vLLM): only the stream's chunks."""
    return {"ok": ok, "warmup": warmup, "repeat": 0, "completion_tokens": sum(chunks) if ok else None,
            "spec_verify_ct": None, "chunk_tokens": chunks}


# two requests: the prefill's token, then steps of 1 + accepted tokens, the last one maybe cut
# short by max_tokens: 9 decode chunks holding 16 tokens, 2 of them last steps of 1 token
STREAMED = [stream_line([1, 2, 3, 1, 2, 1]), stream_line([1, 3, 1, 2, 1])]


def test_without_verify_counts_the_streams_tokens_per_decode_chunk_is_the_second_source():
    # the server: 9 drafts, 9 accepted tokens: 1 + 9/9 = 2.0; the stream over every step:
    # 16 ÷ 9 with the last steps as streamed, (16 + 2 + 2) ÷ 9 as whole steps of 3 (its longest chunk)
    [v] = speculative.accept_length_sources_agree(context(STREAMED, [vllm_window(9, 9)]))
    assert v.status == "passed" and v.value == 0.0, v.detail
    assert "the stream over every decode step" in v.detail and "a whole step of 3 tokens" in v.detail
    assert "= 1.7778 to 2.2222" in v.detail and "= 2.0000" in v.detail and ONE_PLUS_ACCEPTED in v.detail


def test_a_last_step_cut_short_by_max_tokens_does_not_lower_the_streams_figure():
    # vLLM with the target as its own draft: every step accepts 3 of 3 (server 4.0), and
    # max_tokens=16 ends each output one token into the 5th step: 1 + 4+4+4 + 3
    lines = [stream_line([1, 4, 4, 4, 3]) for _ in range(6)]
    [v] = speculative.accept_length_sources_agree(context(lines, [vllm_window(72, 24)]))
    assert v.status == "passed" and v.value == 0.0, v.detail


def test_the_stream_counts_the_last_steps_the_server_counts():
    # seen on vLLM's CPU build (EAGLE-3, 12 requests of 32 tokens): the whole steps alone read
    # 1.3028 against the server's 1.3985 over every step (another run 1.3629, one chunk per step exactly). Here:
    # each request accepts nothing for 6 steps, then 3 of 3 twice, the last cut to 2 tokens by
    # max_tokens. Whole steps (6 x 1 + 4) ÷ 7 = 1.43; the server over all 8: 1 + 6/8 = 1.75
    lines = [stream_line([1, 1, 1, 1, 1, 1, 1, 4, 2]) for _ in range(4)]
    window = {**vllm_window(24, 32), "spec_draft_tokens": 96}  # k = 3: a whole step is 4 tokens
    [v] = speculative.accept_length_sources_agree(context(lines, [window]))
    assert v.status == "passed" and v.value == 0.0, v.detail
    assert "a whole step of 4 tokens" in v.detail and "= 1.5000 to 1.7500" in v.detail


def test_a_stream_and_a_server_that_disagree_fail():
    # the server claims 1 + 13.5/9 = 2.5 accepted per step where the stream saw at most 2.2222
    [v] = speculative.accept_length_sources_agree(context(STREAMED, [vllm_window(13.5, 9)]))
    assert v.status == "failed" and "disagree by 11.11% of the larger" in v.detail, v.detail
    # over longer outputs the last steps' slack shrinks: 6 requests of 30 steps of 2 tokens, k = 3,
    # so the stream reads 2.0 to (360 + 6 x 2) ÷ 180 = 2.0667; a server claiming 1 + 1.25 is 8.1 % above
    lines = [stream_line([1] + [2] * 30) for _ in range(6)]
    window = {**vllm_window(225, 180), "spec_draft_tokens": 540}
    [v] = speculative.accept_length_sources_agree(context(lines, [window]))
    assert v.status == "failed" and v.value == pytest.approx(0.0815, abs=1e-3), v.detail


@pytest.mark.parametrize("drafts, why", [
    (6, "9 decode chunks but 6 drafts: the drafter proposed nothing in some steps"),
    (12, "9 decode chunks for 12 drafts: the server merged steps into chunks"),
])
def test_decode_chunks_that_are_not_the_servers_draft_steps_are_not_compared(drafts, why):
    [v] = speculative.accept_length_sources_agree(context(STREAMED, [vllm_window(drafts, drafts)]))
    assert v.status == "skipped" and "not like for like: " + why in v.detail, v.detail


def position_context(windows: list[dict], floors: list[float], histogram: list[int] | None = None):
    ctx = context([], windows, min_acceptance_per_position={"eagle3": floors})
    ctx.result.correct_drafts_histogram = histogram or []
    return ctx


def test_acceptance_per_position_is_gated_from_the_servers_counters_pooled_over_repeats():
    # repeat 1: 10 drafts, 60 % accepted at position 1; repeat 2: 30 drafts, 40 %: pooled 45 %
    windows = [{"spec_drafts": 10, "acceptance_per_position": [0.6, 0.2]},
               {"spec_drafts": 30, "acceptance_per_position": [0.4, 0.1]}]
    first, second = speculative.min_acceptance_per_position(position_context(windows, [0.4, 0.2]))
    assert (first.name, first.status, first.value) == ("min_acceptance_per_position.1", "passed", pytest.approx(0.45))
    assert "acceptance at draft position 1 (the server's counters)" in first.detail
    assert (second.status, second.value) == ("failed", pytest.approx(0.125))


def test_without_counters_the_requests_histograms_give_the_shares():
    # 10 cycles: 5 accepted none, 3 one, 2 two: position 1 accepted in 5 of 10, position 2 in 2
    [first, second] = speculative.min_acceptance_per_position(position_context([], [0.5, 0.3], [5, 3, 2]))
    assert first.status == "passed" and "the requests' histograms" in first.detail
    assert second.status == "failed" and second.value == pytest.approx(0.2)


def test_a_position_nobody_measured_fails_rather_than_passes():
    windows = [{"spec_drafts": 10, "acceptance_per_position": [0.6]}]
    [_, second] = speculative.min_acceptance_per_position(position_context(windows, [0.1, 0.1]))
    assert second.status == "failed" and second.value is None
    [none] = speculative.min_acceptance_per_position(position_context([], [0.1]))
    assert none.status == "failed" and none.value is None
