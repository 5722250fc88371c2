"""The simulator split into a prefill and a decode server (harness/sim/disagg.py), driven as
SGLang's router drives them: the same body to both, extended with bootstrap_host, _port and
_room. Real processes on loopback; the handshake, the answers of each side, the stages
each reports, and every way a split request fails in one sentence."""

from __future__ import annotations

import concurrent.futures
import json
import random

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness.servers.ports import free_port
from tests.support.sim_process import Sim

FAST = ["--sim-startup-s", "0.1", "--sim-prefill-base-ms", "2", "--sim-prefill-ms-per-token", "0.02",
        "--sim-decode-step-ms", "2", "--sim-kv-transfer-base-ms", "30", "--sim-kv-transfer-ms-per-token", "0"]


@pytest.fixture(scope="module")
def pair():
    bootstrap = free_port()
    with Sim(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap), *FAST]) as prefill, \
            Sim(["--disaggregation-mode", "decode", "--sim-bootstrap-timeout-s", "2", *FAST]) as decode:
        yield prefill, decode, bootstrap


def room() -> int:
    return random.getrandbits(64)


def split_request(pair, path: str, body: dict) -> tuple[requests.Response, requests.Response]:
    """As the router sends it: to both servers at once, with the same bootstrap fields."""
    prefill, decode, bootstrap = pair
    body = {**body, "bootstrap_host": "127.0.0.1", "bootstrap_port": bootstrap, "bootstrap_room": room()}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        to_prefill = pool.submit(prefill.post, path, body)
        to_decode = pool.submit(decode.post, path, body)
        return to_prefill.result(), to_decode.result()


def stages(server: Sim) -> dict[str, tuple[float, float]]:
    """sglang:per_stage_req_latency_seconds per stage: (count, sum)."""
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(requests.get(server.url + "/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name.startswith("sglang:per_stage_req_latency_seconds_") and "stage" in sample.labels:
                entry = found.setdefault(sample.labels["stage"], [0.0, 0.0])
                if sample.name.endswith("_count"):
                    entry[0] = sample.value
                elif sample.name.endswith("_sum"):
                    entry[1] = sample.value
    return {stage: (count, total) for stage, (count, total) in found.items()}


def counter(server: Sim, name: str) -> float:
    for family in text_string_to_metric_families(requests.get(server.url + "/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return 0.0


def test_a_split_request_is_prefilled_on_one_server_and_decoded_on_the_other(pair):
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "count the racks"}], "max_tokens": 12,
            "ignore_eos": True}
    from_prefill, from_decode = split_request(pair, "/v1/chat/completions", body)
    assert from_prefill.status_code == 200 and from_decode.status_code == 200, (from_prefill.text, from_decode.text)
    # the prefill server makes the first token only (SGLang: finish length once the KV is sent)
    assert from_prefill.json()["usage"]["completion_tokens"] == 1
    assert from_prefill.json()["choices"][0]["finish_reason"] == "length"
    # the decode server's answer is the whole request, the same text a whole server gives
    decoded = from_decode.json()
    assert decoded["usage"]["completion_tokens"] == 12
    whole_text = decoded["choices"][0]["message"]["content"]
    assert whole_text.split()[0] == from_prefill.json()["choices"][0]["message"]["content"].split()[0]


def test_each_side_reports_its_stages_and_the_decode_ttft_holds_the_transfer(pair):
    prefill, decode, _ = pair
    before_p, before_d = stages(prefill), stages(decode)
    ttft_before = counter(decode, "sglang:time_to_first_token_seconds_sum")
    body = {"text": "a long enough prompt " * 20, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    from_prefill, from_decode = split_request(pair, "/generate", body)
    assert from_decode.status_code == 200 and len(from_decode.json()["output_ids"]) == 4
    after_p, after_d = stages(prefill), stages(decode)

    def grew(after, before, stage):
        count, total = after[stage]
        return count - before.get(stage, (0, 0))[0], total - before.get(stage, (0, 0))[1]

    assert {"prefill_bootstrap", "prefill_waiting", "prefill_forward", "prefill_transfer_kv_cache"} <= set(after_p)
    assert {"decode_bootstrap", "decode_transferred", "decode_waiting"} <= set(after_d)
    count, transfer_s = grew(after_p, before_p, "prefill_transfer_kv_cache")
    assert count == 1 and 0.03 <= transfer_s < 1.0  # the 30 ms transfer, not less
    count, waited_s = grew(after_d, before_d, "decode_transferred")
    assert count == 1 and waited_s >= 0.03  # the decode side waited for the KV, the transfer included
    ttft = counter(decode, "sglang:time_to_first_token_seconds_sum") - ttft_before
    assert ttft >= waited_s  # its TTFT runs from the request's arrival


def test_streams_through_a_split_pair(pair):
    body = {"model": "sim-model", "prompt": "stream me", "max_tokens": 5, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    from_prefill, from_decode = split_request(pair, "/v1/completions", body)
    chunks = [json.loads(line[6:]) for line in from_decode.text.splitlines() if line.startswith("data: {")]
    assert from_decode.text.rstrip().endswith("data: [DONE]")
    assert chunks[-1]["usage"]["completion_tokens"] == 5 and len(chunks) >= 3  # text chunks, then the usage


def test_a_request_without_bootstrap_fields_is_refused_in_one_sentence(pair):
    _prefill, decode, _ = pair
    reply = decode.post("/v1/completions", {"model": "sim-model", "prompt": "hi", "max_tokens": 2})
    assert reply.status_code == 400
    assert "--disaggregation-mode decode: a request needs bootstrap_host" in reply.json()["message"]
    bad = decode.post("/generate", {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": 1,
                                    "bootstrap_room": -3})
    assert bad.status_code == 400 and "unsigned 64-bit" in bad.json()["message"]


def test_the_fake_bootstrap_host_runs_the_request_alone(pair):
    """SGLang's warm-up and health checks: bootstrap_host 2.2.2.2, no transfer."""
    prefill, decode, _ = pair
    for server, tokens in ((decode, 3), (prefill, 1)):
        reply = server.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
                                          "bootstrap_host": "2.2.2.2", "bootstrap_room": 0})
        assert reply.status_code == 200 and len(reply.json()["output_ids"]) == 3
    assert requests.get(decode.url + "/health_generate", timeout=10).status_code == 200


def test_a_decode_server_whose_prefill_side_is_gone_fails_the_request_and_counts_it(pair):
    _prefill, decode, _ = pair
    failed = counter(decode, "sglang:num_bootstrap_failed_reqs_total")
    reply = decode.post("/generate", {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": free_port(),
                                      "bootstrap_room": room()})
    assert reply.status_code == 500 and "Bootstrap failed" in reply.json()["message"]
    assert counter(decode, "sglang:num_bootstrap_failed_reqs_total") == failed + 1


def test_a_prefill_no_decode_server_bootstraps_times_out_and_counts_it():
    bootstrap = free_port()
    with Sim(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap),
              "--sim-bootstrap-timeout-s", "0.3", *FAST]) as prefill:
        reply = prefill.post("/generate", {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": bootstrap,
                                           "bootstrap_room": room()})
        assert reply.status_code == 500 and "Bootstrap timeout" in reply.json()["message"]
        assert counter(prefill, "sglang:num_bootstrap_failed_reqs_total") == 1
        route = requests.get(f"http://127.0.0.1:{bootstrap}/route", timeout=5).json()
        assert route["rank_port"] == bootstrap  # SGLang's bootstrap route answers where the prefill's ranks are
        info = requests.get(prefill.url + "/server_info", timeout=5).json()
        assert info["disaggregation_mode"] == "prefill" and info["disaggregation_bootstrap_port"] == bootstrap


def test_a_bootstrap_port_in_use_fails_the_start_in_one_sentence():
    taken = free_port()
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        sim = Sim(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(taken), *FAST], wait=False)
        try:
            assert sim.proc.wait(20) == 1
            assert f"The bootstrap server cannot listen on 127.0.0.1:{taken}" in sim.output()
        finally:
            sim.kill()
