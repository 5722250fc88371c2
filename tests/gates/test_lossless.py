"""The lossless gate: a speculative arm's outputs against another arm's, request by
request, under greedy decoding. The comparison and its words, the config rules, what each
engine is asked for and how its answer is kept, and whole runs on the simulator."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.gates import registry
from harness.gates import speculative
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.engines import ENGINES
from harness.load import LoadPlan, run_load
from harness.load.details import keep_generate, keep_openai
from harness.load.records import RequestRecord
from harness.gates.lossless import NEAR_TIE_NATS, compare, summary, top_logprobs_to_ask
from harness.measure.metrics import ArmResult, Stat
from harness.config.schema import GateConfig, WorkloadConfig
from harness.record.requests import read_lines

from tests.support import runs
from tests.support.sim_process import FAST, SPEC, Sim

ROOT = Path(__file__).resolve().parents[2]


def line(index: int, text: str, ids: list[int] | None = None, tokens: list[str] | None = None,
         tops: list | None = None, ok: bool = True, warmup: bool = False, repeat: int = 0) -> dict:
    """A requests.jsonl line with what the request generated."""
    return {"index": index, "warmup": warmup, "ok": ok, "repeat": repeat, "text": text if ok else None,
            "token_ids": ids, "tokens": tokens, "top_logprobs": tops}


def sure(n: int, margin: float = 3.0) -> list:
    """Top-2 logprobs at n positions, the first token ahead by `margin` nats."""
    return [[["a", -0.1], ["b", -0.1 - margin]] for _ in range(n)]


# --- the comparison -----------------------------------------------------------------------------


def test_identical_outputs_match_and_warmups_are_left_out():
    reference = [line(0, "x", warmup=True), line(0, "one two"), line(1, "three")]
    other = [line(0, "something else", warmup=True), line(0, "one two"), line(1, "three")]
    found = compare("baseline", reference, "eagle3", other)
    assert (found.identical, found.compared, found.exact_match, found.divergences) == (2, 2, 1.0, [])
    assert summary(found, "eagle3", "baseline", 1.0) == (
        "eagle3: 2 of 2 requests generated exactly what they did in baseline (100.0% exact match, gate ≥ 100.0%)")


def test_divergence_by_token_ids_names_position_tokens_and_a_real_defect():
    reference = [line(0, "1, 2, 3", ids=[1001, 11, 1002, 11, 1003], tokens=["1", ",", " 2", ",", " 3"], tops=sure(5))]
    other = [line(0, "1, 2 fox 3", ids=[1001, 11, 1002, 103, 1003], tokens=["1", ",", " 2", " fox", " 3"], tops=sure(5))]
    found = compare("baseline", reference, "eagle3", other)
    [d] = found.divergences
    assert (d.position, d.unit, d.by, d.kind) == (3, "token", "token ids", "real divergence")
    assert d.margin == pytest.approx(3.0)
    words = summary(found, "eagle3", "baseline", 1.0)
    assert words.startswith("eagle3: 0 of 1 requests generated exactly what they did in baseline (0.0% exact match")
    assert "1 diverged (1 real divergence, 0 near-tie flips)" in words
    assert ("the first: request 0 at token 3, by token ids: baseline ',' (id 11), eagle3 ' fox' (id 103); "
            "baseline's top-1 minus top-2 logprob there is 3.00 nats ≥ 0.1: a real divergence") in words
    assert "a defect, not a near-tie flip" in words


def test_a_near_tie_flip_is_told_apart_from_a_defect():
    tops = sure(3)
    tops[1] = [["b", -0.70], ["c", -0.73]]  # the reference barely preferred "b"
    reference = [line(0, "abd", ids=[1, 2, 4], tokens=["a", "b", "d"], tops=tops), line(1, "ok", ids=[9])]
    other = [line(0, "acd", ids=[1, 3, 4], tokens=["a", "c", "d"], tops=tops), line(1, "ok", ids=[9])]
    found = compare("plain", reference, "draft", other)
    [d] = found.divergences
    assert d.kind == "near-tie flip" and d.margin == pytest.approx(0.03) and d.margin < NEAR_TIE_NATS
    words = summary(found, "draft", "plain", 0.5)
    assert "1 of 2 requests" in words and "(50.0% exact match, gate ≥ 50.0%)" in words
    assert "1 diverged (0 real divergences, 1 near-tie flip)" in words
    assert ("request 0 at token 1, by token ids: plain 'b' (id 2), draft 'c' (id 3); plain's top-1 minus top-2 "
            "logprob there is 0.030 nats < 0.1: a near-tie flip") in words
    assert "not by itself a defect" in words and "real divergence" not in words.split("the first:")[1]


def test_without_ids_the_divergence_is_found_by_tokens_then_by_characters():
    by_tokens = compare("a", [line(0, "xy z", tokens=["x", "y", " z"], tops=sure(3))],
                        "b", [line(0, "xq z", tokens=["x", "q", " z"], tops=sure(3))]).divergences[0]
    assert (by_tokens.position, by_tokens.by, by_tokens.reference.token, by_tokens.candidate.token) == (1, "tokens", "y", "q")
    assert by_tokens.kind == "real divergence"
    by_text = compare("a", [line(0, "the lighthouse stood")], "b", [line(0, "the lightship stood")]).divergences[0]
    assert (by_text.position, by_text.unit, by_text.word, by_text.margin) == (9, "character", 1, None)
    assert by_text.describe() == ("request 0 at character 9 (word 1), by characters (no token ids): a 'lighthouse', "
                                  "b 'lightship'; no logprobs of a there, so a near-tie flip cannot be told from a defect")
    assert "1 without logprobs to tell" in summary(compare("a", [line(0, "p")], "b", [line(0, "q")]), "b", "a", 1.0)


def test_an_output_that_stops_early_says_so():
    found = compare("a", [line(0, "one two", ids=[1, 2], tokens=["one", " two"])],
                    "b", [line(0, "one", ids=[1], tokens=["one"])])
    [d] = found.divergences
    assert d.position == 1 and str(d.reference) == "a ' two' (id 2)" and str(d.candidate) == "b nothing (its output had ended)"


def test_failed_requests_are_not_comparable_and_said():
    reference = [line(0, "same"), line(1, "x", ok=False), line(2, "same"), line(3, "same")]
    other = [line(0, "same"), line(1, "same"), line(2, "y", ok=False)]
    found = compare("baseline", reference, "eagle3", other)
    assert (found.identical, found.compared, found.exact_match) == (1, 1, 1.0)
    assert found.not_comparable == ["request 1 failed in baseline", "request 2 failed in eagle3",
                                    "request 3 was not sent in eagle3"]
    assert summary(found, "eagle3", "baseline", 1.0).endswith(
        "; 3 request(s) not comparable (request 1 failed in baseline; request 2 failed in eagle3; "
        "request 3 was not sent in eagle3)")
    nothing = compare("baseline", [line(0, "x", ok=False)], "eagle3", [line(0, "x")])
    assert nothing.exact_match is None
    assert summary(nothing, "eagle3", "baseline", 1.0) == (
        "eagle3: no request could be compared with baseline's; 1 request(s) not comparable (request 0 failed in baseline)")


def test_repeats_are_matched_repeat_by_repeat():
    reference = [line(0, "a", repeat=0), line(0, "a", repeat=1)]
    other = [line(0, "a", repeat=0), line(0, "b", repeat=1)]
    [d] = compare("p", reference, "s", other).divergences
    assert d.request == "request 0 of repeat 1"


# --- the gate ---------------------------------------------------------------------------------------


def result(arm: str) -> ArmResult:
    return ArmResult.of(arm=arm, output_tok_s=100.0, request_per_s=1.0, ttft_ms=Stat(1, 1, 1, 1), itl_ms=Stat(1, 1, 1, 1),
                        decode_step_ms=1.0, accept_length=None, accept_length_source=None, verify_cycle_ms=None,
                        requests_ok=2, requests_failed=0)


def context(arm: str, lines: dict, min_exact_match: float = 1.0, measured=("baseline", "eagle3")) -> registry.GateContext:
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig),
                          {"lossless": {"eagle3": {"against": "baseline", "min_exact_match": min_exact_match}}})
    results = {name: result(name) for name in measured}
    return registry.GateContext(arm=arm, gate=cfg, result=results.get(arm), gpu=None, plain_arm="baseline",
                            results=results, reference=None, reference_label="", telemetry_source="off",
                            requests=lines.get(arm, []), arm_requests=lines)


def test_the_gate_passes_at_the_floor_and_fails_below_it():
    lines = {"baseline": [line(0, "a"), line(1, "b")], "eagle3": [line(0, "a"), line(1, "c")]}
    [v] = speculative.lossless(context("eagle3", lines))
    assert (v.name, v.passed, v.value, v.threshold) == ("lossless", False, 0.5, 1.0)
    assert v.detail.startswith("eagle3: 1 of 2 requests generated exactly what they did in baseline")
    [v] = speculative.lossless(context("eagle3", lines, min_exact_match=0.5))
    assert v.passed is True
    [v] = speculative.lossless(context("eagle3", {"baseline": [line(0, "a", ok=False)], "eagle3": [line(0, "a")]}))
    assert v.passed is False and v.value is None and "no request could be compared" in v.detail


def test_the_gate_skips_what_it_cannot_judge():
    [v] = speculative.lossless(context("baseline", {}))
    assert v.passed is None and "no threshold configured for arm 'baseline' (gate.lossless)" in v.detail
    [v] = speculative.lossless(context("eagle3", {"eagle3": [line(0, "a")]}, measured=("eagle3",)))
    assert v.passed is None and "arm 'baseline' was not measured in this run" in v.detail
    [v] = speculative.lossless(context("eagle3", {}, measured=("baseline",)))
    assert v.passed is False and "the arm was not measured" in v.detail


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, message", [
    (["workload.temperature=0.7"],
     "gate.lossless compares outputs under greedy decoding: workload.temperature must be 0, got 0.7"),
    (["gate.lossless.eagle3.against=plain"],
     "gate.lossless names arm 'plain', which is not an arm; arms: baseline, eagle3"),
    (["gate.lossless.eagle3.against=eagle3"],
     "gate.lossless.eagle3.against names arm 'eagle3' itself; compare it with another arm (e.g. the plain-decoding one)"),
    (["gate.lossless.eagle3.min_exact_match=1.5"],
     "gate.lossless.eagle3.min_exact_match must be a finite number >= 0 and <= 1, got 1.5"),
    (["arms.eagle3=['drafter=eagle3_k25','workload.max_tokens=64']"],
     "gate.lossless compares arm 'eagle3' with 'baseline' request by request, but they send different requests: "
     "workload.max_tokens is 64 in 'eagle3' and 500 in 'baseline' (set it for the whole experiment, not in one "
     "arm's overrides)"),
    (["arms.eagle3=['drafter=eagle3_k25','workload.temperature=0.5']"],
     "gate.lossless compares outputs under greedy decoding: workload.temperature must be 0, got 0.5 in arm 'eagle3'"),
    (["workload.logprobs=21"],
     "workload.logprobs must be a finite number >= 0 and <= 20 (e.g. 0: token ids only), got 21"),
    (["arms.eagle3=['drafter=eagle3_k25','server.sim.lossy_rate=2']"],
     "arm 'eagle3': server.sim.lossy_rate must be a finite number >= 0 and <= 1, got 2"),
])
def test_config_mistakes_are_one_sentence(overrides, message):
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", *overrides])
    assert str(caught.value) == message


def test_greedy_without_the_gate_is_not_required():
    experiment = compose(["+exp=sim_smoke", "~gate.lossless.eagle3", "workload.temperature=0.7"])
    assert experiment.base.workload.temperature == 0.7


# --- what is asked for, and how the answer is kept ----------------------------------------------


def test_the_gate_asks_for_ids_and_two_logprobs_unless_told_otherwise():
    with_gate = compose(["+exp=sim_smoke"]).arm("baseline").cfg  # the compared-with arm asks too
    assert top_logprobs_to_ask(with_gate) == 2
    assert top_logprobs_to_ask(compose(["+exp=sim_smoke", "workload.logprobs=0"]).arm("eagle3").cfg) == 0
    assert top_logprobs_to_ask(compose(["+exp=sim_smoke", "~gate.lossless.eagle3"]).arm("eagle3").cfg) is None
    assert top_logprobs_to_ask(compose(["+exp=sim_smoke", "~gate.lossless.eagle3", "workload.logprobs=5"]).arm("eagle3").cfg) == 5


def test_each_engine_asks_in_its_own_fields():
    vllm, sglang = ENGINES["vllm"], ENGINES["sglang"]
    assert vllm.output_details("chat", 2) == {"return_token_ids": True, "logprobs": True, "top_logprobs": 2}
    assert vllm.output_details("completions", 2) == {"return_token_ids": True, "logprobs": 2}
    assert vllm.output_details("chat", 0) == {"return_token_ids": True}
    assert sglang.output_details("chat", 3) == {"return_token_ids": True, "logprobs": True, "top_logprobs": 3}
    assert sglang.output_details("generate", 2) == {"return_logprob": True, "top_logprobs_num": 2,
                                                    "return_text_in_logprobs": True}
    assert sglang.output_details("generate", 0) == {}  # output_ids come anyway


def test_openai_shapes_are_kept_per_position():
    rec = RequestRecord(index=0, warmup=False)
    chat = [{"content": [{"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "b", "logprob": -2.0},
                                                                          {"token": "a", "logprob": -0.1}]}]},
            {"content": [{"token": "c", "logprob": -0.5, "top_logprobs": []}]}]
    keep_openai(rec, True, [[5], [7]], chat)
    assert (rec.token_ids, rec.tokens, rec.top_logprobs) == ([5, 7], ["a", "c"], [[["a", -0.1], ["b", -2.0]], []])
    rec = RequestRecord(index=0, warmup=False)
    keep_openai(rec, False, [], [{"tokens": ["x", "y"], "top_logprobs": [{"q": -3.0, "x": -0.2}, {"y": -0.1}]}])
    assert (rec.token_ids, rec.tokens, rec.top_logprobs) == (None, ["x", "y"], [[["x", -0.2], ["q", -3.0]], [["y", -0.1]]])


@pytest.mark.parametrize("cumulative", [True, False], ids=["cumulative", "incremental"])
def test_generate_chunks_are_settled_whether_cumulative_or_not(cumulative):
    ids, texts = [[1], [2, 3]], ["a", "bc"]
    logprobs = [[[-0.1, 1, "a"]], [[-0.2, 2, "b"], [-0.3, 3, "c"]]]
    tops = [[[[-0.1, 1, "a"], [-2.0, 9, "z"]]], [[[-0.2, 2, "b"]], [[-0.3, 3, None]]]]
    if cumulative:
        ids, texts = [[1], [1, 2, 3]], ["a", "abc"]
        logprobs, tops = [logprobs[0], logprobs[0] + logprobs[1]], [tops[0], tops[0] + tops[1]]
    rec = RequestRecord(index=0, warmup=False, completion_tokens=3)
    keep_generate(rec, texts, ids, logprobs, tops)
    assert (rec.text, rec.token_ids, rec.tokens) == ("abc", [1, 2, 3], ["a", "b", "c"])
    assert rec.top_logprobs == [[["a", -0.1], ["z", -2.0]], [["b", -0.2]], [["3", -0.3]]]


@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_a_load_keeps_text_ids_and_logprobs_from_the_simulator(api):
    sim, engine = Sim(FAST + SPEC), ENGINES["sim"]
    try:
        workload = WorkloadConfig(name="t", api=api, prompt="Count from 1 to 12", max_tokens=40, concurrency=2,
                                  num_prompts=3, warmup_requests=0, timeout_s=10.0)
        load = run_load(LoadPlan.of(workload, sim.url, "m", request_extras=lambda a: {**engine.request_extras(a),
                                                                            **engine.output_details(a, 2)}))
    finally:
        sim.kill()
    for rec in load.records:
        assert rec.ok, rec.error
        assert rec.text == ", ".join(str(k) for k in range(1, 13))
        assert len(rec.token_ids) == len(rec.tokens) == len(rec.top_logprobs) == rec.completion_tokens == 24
        assert rec.token_ids[-1] == 2 and "".join(rec.tokens) == rec.text  # the EOS: an id, no text
        assert rec.top_logprobs[1] == [[",", -0.1], [" brown", -3.0]]
        assert rec.to_json()["token_ids"] == rec.token_ids


# --- whole runs --------------------------------------------------------------------------------------


def run_suites(exp: str, root: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = runs.run_suites(f"+exp={exp}", "backend=process", f"record.root={root}", "-rA")
    return proc, json.loads((root / "latest" / "results.json").read_text())


@pytest.mark.slow
def test_sim_lossy_fails_the_lossless_gate_only_naming_the_divergence(tmp_path):
    proc, results = run_suites("sim_lossy", tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = [(g["name"], g["arm"]) for g in results["gates"] if g["status"] == "failed"]
    assert failed == [("lossless", "eagle3")], failed
    [verdict] = [g for g in results["gates"] if g["name"] == "lossless" and g["arm"] == "eagle3"]
    assert verdict["value"] < 1.0 and "real divergence" in verdict["detail"]
    first = verdict["detail"].split("the first: ")[1]
    assert first.startswith("request ") and " at token " in first and "by token ids: baseline " in first
    assert "(id " in first and ", eagle3 " in first and "nats ≥ 0.1" in first, first
    assert "FAILED suites/test_speculative.py::test_lossless[eagle3]" in proc.stdout
    lines = read_lines(tmp_path / "latest")
    texts = {(x["arm"], x["index"]): x["text"] for x in lines if not x["warmup"]}
    assert any(texts[("eagle3", i)] != texts[("baseline", i)] for i in range(4))


@pytest.mark.slow
def test_sim_smoke_passes_the_lossless_gate(sim_smoke_on_processes):
    proc, results = sim_smoke_on_processes.proc, sim_smoke_on_processes.results
    assert proc.returncode == 0, proc.stdout[-3000:]
    [verdict] = [g for g in results["gates"] if g["name"] == "lossless" and g["arm"] == "eagle3"]
    assert verdict["status"] == "passed" and verdict["value"] == 1.0
    assert verdict["detail"] == ("eagle3: 4 of 4 requests generated exactly what they did in baseline "
                                 "(100.0% exact match, gate ≥ 100.0%)")


def test_the_turns_of_a_conversation_are_matched_turn_by_turn():
    from harness.gates.lossless import compare

    def line(index, turn, text):
        return {"index": index, "turn": turn, "repeat": 0, "ok": True, "text": text, "warmup": False}

    plain = [line(0, 0, "a b"), line(0, 1, "c d"), line(1, 0, "e")]
    spec = [line(0, 0, "a b"), line(0, 1, "c x"), line(1, 0, "e")]
    found = compare("baseline", plain, "eagle3", spec)
    assert found.identical == 2 and len(found.divergences) == 1  # turn 2 is not lost under turn 1's key
    assert found.divergences[0].request == "request 0 turn 2"
