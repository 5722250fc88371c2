"""Client vs server: each figure beside the server's of the same meaning, and a
disagreement flagged in results.json and the summary (harness/measure/agreement.py)."""

from __future__ import annotations

from types import SimpleNamespace

from harness.measure.agreement import DISAGREEMENT_RATIO, OUTSIDE_SERVER_MS, disagreements, sentence
from harness.engines.base import ITL_PER_STEP, ITL_PER_TOKEN
from harness.measure.metrics import ArmResult, Stat
from harness.run.outcome import ArmOutcome
from harness.report.summary import format_summary

# 4 requests of 300 tokens: 4 x 299 decoded after the prefill token
REQUESTS, TOKENS = 4, 1200
DECODED = TOKENS - REQUESTS


def client(ttft_ms: float = 5.0, tpot_ms: float = 3.2, failed: int = 0) -> ArmResult:
    return ArmResult.of(arm="eagle3", ttft_ms=Stat(mean=ttft_ms), decode_step_ms=tpot_ms,
                        completion_tokens=TOKENS, requests_ok=REQUESTS, requests_failed=failed)


def sglang_window(ttft_ms: float = 4.0, tpot_ms: float = 3.2) -> dict:
    """What SGLang's histograms say over the window: TTFT per request, one count per
    decoded token, the sum the decode time."""
    return {"ttft_mean_ms": ttft_ms, "itl_sum_s": tpot_ms * DECODED / 1000.0, "itl_count": DECODED,
            "itl_mean_ms": tpot_ms, "itl_observed_per": ITL_PER_TOKEN}


def summary_of(outcome: ArmOutcome) -> str:
    experiment = SimpleNamespace(name="x", description="", arm_names=[outcome.name])
    return format_summary(experiment, {outcome.name: outcome.result}, {outcome.name: outcome.to_json()}, [], {})


def outcome_of(result: ArmResult, window: dict) -> ArmOutcome:
    return ArmOutcome(name=result.arm, status="measured", result=result, server_windows=[window],
                      client_server_disagreement=disagreements(result, window, repeat=0))


def test_a_server_per_token_figure_that_is_not_the_clients_tpot_is_flagged_in_the_record_and_summary():
    # the simulator's old observation: the interval ÷ tokens once per output
    outcome = outcome_of(client(tpot_ms=3.2), sglang_window(tpot_ms=1.7))
    [entry] = outcome.to_json()["client_server_disagreement"]
    assert entry["metric"] == "decode_ms_per_token"
    assert (entry["client"], entry["server"]) == (3.2, 1.7)
    assert entry["ratio"] == round(1.7 / 3.2, 4) and entry["difference"] > DISAGREEMENT_RATIO
    line = ("eagle3: the server's own decode time per token (1.70 ms) and the client's TPOT (3.20 ms) "
            "disagree by 47 % (> 10 %): one of them is not measuring what it claims")
    assert sentence("eagle3", entry) == line
    assert f"- {line}" in summary_of(outcome)


def test_a_server_ttft_beyond_both_the_ratio_and_what_lies_outside_its_clock_is_flagged():
    # e.g. a TTFT clock started at admission, after the request waited in the queue
    [entry] = disagreements(client(ttft_ms=80.0), sglang_window(ttft_ms=40.0), repeat=0)
    assert entry["metric"] == "ttft_mean_ms" and entry["difference"] == 0.5
    assert "the server's own TTFT mean (40.00 ms) and the client's TTFT mean (80.00 ms)" in sentence("eagle3", entry)


def test_agreement_is_silent():
    result, window = client(ttft_ms=5.0, tpot_ms=3.2), sglang_window(ttft_ms=4.6, tpot_ms=3.1)
    assert disagreements(result, window, repeat=0) == []
    outcome = outcome_of(result, window)
    assert outcome.to_json()["client_server_disagreement"] == []
    assert "disagree" not in summary_of(outcome)


def test_a_ttft_gap_within_what_lies_outside_the_servers_clock_is_not_flagged():
    # 60 % of a 5 ms TTFT, but under OUTSIDE_SERVER_MS: HTTP and the client's own loop
    gap = OUTSIDE_SERVER_MS * 0.3
    assert disagreements(client(ttft_ms=5.0), sglang_window(ttft_ms=5.0 - gap), repeat=0) == []


def test_an_engine_counting_steps_is_read_per_token_through_the_clients_token_count():
    # vLLM: one observation per engine step of ~2.4 tokens; the sum is still the decode time
    window = {"ttft_mean_ms": 4.5, "itl_sum_s": 3.2 * DECODED / 1000.0, "itl_count": DECODED / 2.4,
              "itl_mean_ms": 3.2 * 2.4, "itl_observed_per": ITL_PER_STEP}
    assert disagreements(client(tpot_ms=3.2), window, repeat=0) == []
    assert disagreements(client(tpot_ms=3.2 * 2.4), window, repeat=0)[0]["metric"] == "decode_ms_per_token"


def test_nothing_is_compared_without_server_figures_or_with_failed_requests():
    assert disagreements(client(), {}, repeat=0) is None
    assert disagreements(client(failed=1), sglang_window(tpot_ms=1.7), repeat=0) is None
    assert "client_server_disagreement" not in outcome_of(client(), {}).to_json()


def test_with_repeats_the_sentence_names_the_repeat():
    [entry] = disagreements(client(), sglang_window(tpot_ms=1.7), repeat=1)
    assert sentence("eagle3", entry, repeats=3).startswith("eagle3 (repeat 2): ")


def test_a_generation_counter_that_disagrees_with_the_tokens_streamed_is_flagged_and_a_close_one_is_not():
    # a counter that says 10x what the client received passes every per-request check
    [entry] = disagreements(client(), {"generation_tokens": 10 * TOKENS}, repeat=0)
    assert (entry["metric"], entry["client"], entry["server"], entry["floor_tokens"]) == (
        "generated_tokens", TOKENS, 10 * TOKENS, TOKENS / REQUESTS)
    assert sentence("eagle3", entry) == (
        "eagle3: the server's counter of generated tokens (12000 tokens) and the tokens the client received "
        "(1200 tokens) disagree by 90 % (> 10 %): one of them is not measuring what it claims")
    # one request counted on the other side of a snapshot, or another client's: within the floor
    assert disagreements(client(), {"generation_tokens": TOKENS + TOKENS / REQUESTS}, repeat=0) == []
    assert disagreements(client(), {"generation_tokens": TOKENS - 3}, repeat=0) == []
