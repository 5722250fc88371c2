"""A real engine in the loop: vLLM's CPU build serving a tiny local model, plain and with
every drafter it has, through every suite, one arm in a container (the run is
tests/engines/conftest.py's, shared with test_vllm_eagle3.py). Here: what holds for any
engine and drafter: the suites pass, draft-model speculation at both bounds, the prefix cache
emptied per load, the client's numbers against vLLM's own, lossless under greedy, the docker
backend. Takes minutes; deselect locally with `-m "not real_engine"` (CI always runs it;
`make install` sets it up)."""

import pytest

from harness.measure.agreement import TTFT
from tests.engines.conftest import IN_A_CONTAINER
from harness.servers.labels import labelled_containers

pytestmark = pytest.mark.real_engine
SPECULATIVE = ("eagle3", "eagle3_random", "ngram", "draft_self", "draft_random")


def test_every_suite_passes_against_vllm(vllm_run):
    proc = vllm_run.proc
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "test_native_generate_reports_meta_info[plain] SKIPPED" in proc.stdout  # vLLM has no /generate


def test_speculation_bounds_are_measured(vllm_run):
    arms = vllm_run.results["arms"]
    k = 3  # num_speculative_tokens
    assert arms["draft_self"]["accept_length"] >= 0.9 * (k + 1), arms["draft_self"]
    assert arms["draft_self"]["accept_length_source"] == "run"  # its requests' own counts (per_request_spec_metrics)
    assert 0.95 <= arms["draft_random"]["accept_length"] <= 1.3, arms["draft_random"]
    assert arms["plain"]["accept_length"] is None


def test_each_load_starts_from_vllms_emptied_prefix_cache(vllm_run):
    """vllm_tiny serves vLLM's dev route (VLLM_SERVER_DEV_MODE=1): every arm's load asked it
    to empty its prefix cache before the /metrics baseline, and vLLM said it did."""
    for name, arm in vllm_run.results["arms"].items():
        resets = arm.get("prefix_cache_resets")
        assert resets and all(r["reset"] and r["route"] == "POST /reset_prefix_cache" for r in resets), (name, resets)


def test_client_numbers_agree_with_vllms_own_histograms(vllm_run):
    for name, arm in vllm_run.results["arms"].items():
        [server] = arm["server_metrics"]
        assert arm["output_tok_s"] > 0
        # The client's TTFT includes the HTTP round trip the server does not see: a little more, same order.
        assert server["ttft_mean_ms"] <= arm["ttft_ms"]["mean"] * 1.05 + 1, (name, server, arm["ttft_ms"])
        client = arm["client"]
        # Same order, or the harness says the two sides disagree. A starved client (beside make
        # test's first pass: event-loop lag p99 0.5-1 s, a client TTFT of 235 ms against vLLM's 32)
        # reads its first chunks late, and the harness must also say the figure is the client's;
        # a starved server front end (two vLLM servers and their clients on 2 cores: the ngram
        # arm's client TTFT 765 ms, p99 4.4 s, against the engine's own 192 ms, the client's loop
        # not lagging) holds requests before vLLM's TTFT clock starts, which only the client sees.
        disagree = TTFT in {d["metric"] for d in arm.get("client_server_disagreement") or []}
        assert disagree or arm["ttft_ms"]["mean"] <= server["ttft_mean_ms"] * 3 + 50, (name, server, arm["ttft_ms"], client)
        # Decode time per token: the client's first-to-last-chunk span vs the sum of the server's
        # inter-token latencies over the same requests (vLLM observes those per engine step).
        # On 2 cores vLLM's busy loop can stall the client's event loop for as long as a request
        # decodes (seen: lag p99 115 ms beside a 120 ms span); the harness must then say the
        # decode figures are the client's, and they are not held against the server's.
        lag = client["loop_lag_ms"]["p99"]
        if lag > 20 and lag >= 0.1 * (arm["e2e_ms"]["mean"] - arm["ttft_ms"]["mean"]):  # gate.client_bound's defaults
            assert "decode_step_ms" in client["client_bound_figures"], (name, client)
            continue
        decoded = arm["completion_tokens"] - arm["requests"]["ok"]
        server_ms = server["itl_sum_s"] * 1000 / decoded
        assert 0.8 <= arm["decode_step_ms"] / server_ms <= 1.25, (name, arm["decode_step_ms"], server_ms)


def test_speculation_is_lossless_under_greedy(vllm_run):
    """Every drafter generates, token for token, what the plain arm did: compared by the
    token ids vLLM returned, with its top-2 logprobs kept at every position."""
    results, lines = vllm_run.results, vllm_run.lines
    measured = [line for line in lines if not line["warmup"]]
    per_arm = len([line for line in measured if line["arm"] == "plain"])
    verdicts = {(g["name"], g["arm"]): g for g in results["gates"]}
    for arm in SPECULATIVE:
        verdict = verdicts[("lossless", arm)]
        assert verdict["status"] == "passed" and verdict["value"] == 1.0, verdict["detail"]
        assert f"{per_arm} of {per_arm} requests generated exactly what they did in plain" in verdict["detail"], verdict["detail"]
    assert per_arm >= 10 and {line["arm"] for line in measured} == {"plain", *SPECULATIVE}
    assert len(measured) == per_arm * (1 + len(SPECULATIVE))
    for line in measured:
        assert len(line["token_ids"]) == len(line["top_logprobs"]) == line["completion_tokens"] == 32, line["arm"]
        assert all(len(top) >= 2 for top in line["top_logprobs"]), line["arm"]


def test_vllm_runs_in_a_container_too(vllm_run):
    """The docker backend with the CPU build: a debootstrapped bookworm image (built once,
    then reused by its hash) running the host venv's vLLM, mounted read-only; its containers
    are gone when the run ends."""
    arm = vllm_run.results["arms"][IN_A_CONTAINER]
    assert arm["accept_length"] >= 3.6, arm
    assert arm["server"]["image"]["tag"].startswith("specgate/vllm-cpu-base:"), arm["server"]
    assert all("image" not in other["server"] for name, other in vllm_run.results["arms"].items()
               if name != IN_A_CONTAINER), "only one arm runs in a container"
    docker = pytest.importorskip("docker")
    left = labelled_containers(docker.from_env(), f"specgate.record={vllm_run.record}")
    assert not left, [c.name for c in left]
