"""Forced acceptance on the simulator (issue 33): SGLang's simulated acceptance
(SGLANG_SIMULATE_ACC_LEN / _METHOD, one length per verify step for the whole batch) and the
simulator's per-position rates (--sim-forced-accept-rates, vLLM's unconditional rates): the
truth the model gives, what the scheduler draws, the filler it emits, and a live server."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from harness.engines.sim import Simulator
from harness.measure import server_metrics
from harness.sim.cli import parse_args
from harness.sim.model import SimModel
from harness.sim.scheduler import Scheduler
from harness.sim.tokens import FILLER_TEXT, FILLER_TOKEN_ID, TOP_LOGPROB, count_output_tokens, plan_output, render
from tests.support import ROOT
from tests.support.sim_process import FAST, SPEC, Sim

K3 = dict(speculative=True, num_steps=3, num_draft_tokens=4)


def forced(**changes) -> SimModel:
    return SimModel(**{**K3, **changes})


# --- the truth ---------------------------------------------------------------------------------

def test_match_expected_truth_is_the_length_clamped_to_what_a_cycle_yields():
    for length, mean in ((1.5, 1.5), (2.5, 2.5), (3.0, 3.0), (0.4, 1.0), (6.0, 4.0)):
        assert forced(forced_accept_length=length, forced_accept_method="match-expected").expected_accept_length() == mean
    off = forced(forced_accept_length=-1, forced_accept_method="match-expected")  # SGLang's default: off
    assert not off.forced and off.expected_accept_length() == pytest.approx(1 + 0.6 + 0.6 * 0.667 + 0.6 * 0.667 ** 2)
    plain = SimModel(forced_accept_length=2.5)  # a plain server drafts nothing: nothing is forced
    assert not plain.forced and plain.expected_accept_length() == 1.0


@pytest.mark.parametrize("length", [1.0, 1.2, 2.5, 3.8])
def test_multinomials_exact_mean_matches_200k_of_its_draws(length: float):
    m = forced(forced_accept_length=length)  # multinomial: SGLang's default method
    rng = random.Random(7)
    draws = [m.draw_forced_length(rng) for _ in range(200_000)]
    assert set(draws) <= {1, 2, 3, 4}
    assert sum(draws) / len(draws) == pytest.approx(m.expected_accept_length(), abs=0.01)
    if length in (1.0, 1.2, 3.8):  # SGLang's caveat: the clamp pulls the mean away from L near the ends
        assert abs(m.expected_accept_length() - length) > 0.1


def test_multinomials_mean_by_hand():
    """One draft step, L = 1: two tokens exactly when the normal draw reaches 1.5, P = 1 - Phi(0.5)."""
    m = SimModel(speculative=True, num_steps=1, num_draft_tokens=2, forced_accept_length=1.0)
    assert m.expected_accept_length() == pytest.approx(1 + 0.5 * math.erfc(0.5 / math.sqrt(2)))  # 1.3085
    assert m.expected_accept_length() == pytest.approx(1.3085, abs=1e-4)


def test_rates_truth_is_one_plus_their_sum_and_each_position_is_conditional():
    m = forced(forced_accept_rates=[0.9, 0.5, 0.2])
    assert m.expected_accept_length() == pytest.approx(2.6)
    assert m.forced_conditional_probs() == pytest.approx([0.9, 0.5 / 0.9, 0.2 / 0.5])
    assert forced(forced_accept_rates=[0.5, 0.0, 0.0]).forced_conditional_probs() == [0.5, 0.0, 0.0]


def test_the_break_even_accept_length_is_where_the_speedup_is_one():
    base = dict(decode_ms=4.0, draft_step_ms=1.0, verify_base_ms=4.0, verify_per_token_ms=0.5,
                compute_knee_tokens=12, **K3)
    m = SimModel(**base)
    for batch in (1, 2, 4, 6):  # break-even 2.25 to 3.75: within what a cycle of 3 steps yields
        length = m.break_even_accept_length(batch)
        assert length == pytest.approx(m.verify_cycle_ms(batch) / m.decode_step_ms(batch))
        at = SimModel(**base, forced_accept_length=length, forced_accept_method="match-expected")
        assert at.expected_speedup(batch) == pytest.approx(1.0)
        assert SimModel(**base, forced_accept_length=length * 1.05,
                        forced_accept_method="match-expected").expected_speedup(batch) > 1.0


def test_the_env_and_the_flag_reach_the_model():
    flags = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    env = {"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    m = SimModel.from_args(parse_args(flags), env=env)
    assert m.forced and m.forced_accept_length == 2.5 and m.expected_accept_length() == 2.5
    assert SimModel.from_args(parse_args(flags), env={"SGLANG_SIMULATE_ACC_LEN": "2.5"}).forced_accept_method == "multinomial"
    assert not SimModel.from_args(parse_args(flags), env={"SGLANG_SIMULATE_ACC_LEN": "-1"}).forced
    assert not SimModel.from_args(parse_args(flags), env={}).forced
    rates = SimModel.from_args(parse_args([*flags, "--sim-forced-accept-rates", "0.8,0.6,0.3"]), env={})
    assert rates.forced and rates.expected_accept_length() == pytest.approx(2.7)


def test_the_truth_model_of_an_arm_reads_sglangs_env_set_by_hand():
    from harness.engines.sim import truth_model
    from harness.run.compose import compose

    def truth(arm: str, *env: str) -> SimModel:
        return truth_model(compose(["+exp=sim_smoke", *(f"++server.env.{e}" for e in env)]).arm(arm).typed)

    assert truth("eagle3", "SGLANG_SIMULATE_ACC_LEN=2.5", "SGLANG_SIMULATE_ACC_METHOD=match-expected"
                 ).expected_accept_length() == 2.5
    multinomial = truth("eagle3", "SGLANG_SIMULATE_ACC_LEN=2.5")  # SGLang's default method: not quite 2.5
    assert multinomial.forced and multinomial.expected_accept_length() == pytest.approx(2.3413, abs=1e-4)
    assert truth("eagle3").expected_accept_length() == pytest.approx(2.4)  # its drafter's own: 1 + 0.8 + 0.8 x 0.75
    assert not truth("baseline", "SGLANG_SIMULATE_ACC_LEN=2.5").forced  # plain decoding drafts nothing


@pytest.mark.parametrize("env, extra, words", [
    ({"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "uniform"}, [], "not one of SGLang's methods"),
    ({"SGLANG_SIMULATE_ACC_LEN": "two"}, [], "is not a number"),
    ({"SGLANG_SIMULATE_ACC_LEN": "inf"}, [], "not a finite number"),
    ({}, ["--sim-forced-accept-rates", "0.8,0.6"], "has 2 rate(s) but a cycle drafts 3"),
    ({}, ["--sim-forced-accept-rates", "0.5,0.6,0.2"], "increases"),
    ({}, ["--sim-forced-accept-rates", "1.2,0.6,0.2"], "outside [0, 1]"),
    ({}, ["--sim-forced-accept-rates", "0.8,x,0.2"], "not a comma list of numbers"),
    ({"SGLANG_SIMULATE_ACC_LEN": "2.5"}, ["--sim-forced-accept-rates", "0.8,0.6,0.2"], "both force the acceptance"),
])
def test_bad_forced_settings_are_refused_in_one_sentence(env: dict, extra: list, words: str):
    flags = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", *extra]
    with pytest.raises(ValueError) as caught:
        SimModel.from_args(parse_args(flags), env=env)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("env, extra", [
    ({"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "uniform"}, []),
    ({}, ["--sim-forced-accept-rates", "0.5,0.6"]),
])
def test_a_server_with_a_bad_forced_setting_does_not_start(env: dict, extra: list):
    out = subprocess.run([sys.executable, "-m", "harness.sim", "--model-path", "m", *SPEC, *extra],
                         cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("python -m harness.sim: error: "), lines


# --- the scheduler's draws ---------------------------------------------------------------------

def scheduler(model: SimModel, requests_: int, max_tokens: int, prompt: str = "tell me a story") -> Scheduler:
    """A scheduler in this process with ``requests_`` requests added and prefilled."""
    s = Scheduler(model, None, None, [])
    plan = plan_output(prompt)
    for rid in range(requests_):
        s._handle(("add", rid, 5, max_tokens, plan.natural_length(), tuple(plan), (), (), False))
    s._prefill_step()
    return s


def step_lengths(s: Scheduler, steps: int) -> list[list[int]]:
    """Each decode step's tokens per request."""
    return [[item[2] for item in s._decode_step()[1]] for _ in range(steps)]


@pytest.mark.parametrize("length", [1.5, 2.5, 3.0])
def test_match_expected_gives_the_whole_batch_one_length_a_step_and_its_mean_is_l(length: float):
    s = scheduler(forced(forced_accept_length=length, forced_accept_method="match-expected"), 16, 10**6)
    steps = step_lengths(s, 4000)
    assert all(len(set(step)) == 1 for step in steps)  # SGLang's batch-wide draw
    mean = sum(step[0] for step in steps) / len(steps)
    assert mean == pytest.approx(length, rel=0.02)
    assert {step[0] for step in steps} <= {math.floor(length), math.ceil(length)}


def test_multinomial_in_the_scheduler_has_the_models_mean():
    m = forced(forced_accept_length=2.5)
    steps = step_lengths(scheduler(m, 4, 10**6), 6000)
    assert all(len(set(step)) == 1 for step in steps)
    assert sum(step[0] for step in steps) / len(steps) == pytest.approx(m.expected_accept_length(), rel=0.02)


def test_rates_are_drawn_per_request_with_their_unconditional_shares():
    rates = [0.9, 0.5, 0.2]
    s = scheduler(forced(forced_accept_rates=rates), 64, 10**6)
    steps = step_lengths(s, 3000)
    cycles = [n for step in steps for n in step]
    assert sum(len(set(step)) > 1 for step in steps) > 0.9 * len(steps)  # each request its own draw
    for i, rate in enumerate(rates):  # position i accepted with all before it: at least i + 2 tokens
        assert sum(n >= i + 2 for n in cycles) / len(cycles) == pytest.approx(rate, rel=0.02)
    assert sum(cycles) / len(cycles) == pytest.approx(2.6, rel=0.02)


@pytest.mark.parametrize("how", [dict(forced_accept_length=2.5, forced_accept_method="match-expected"),
                                 dict(forced_accept_rates=[0.9, 0.5, 0.2])])
def test_forced_cycles_emit_the_filler_and_run_to_max_tokens(how: dict):
    """A count's natural end is its 10th token; forced, only its first token is the model's."""
    s = scheduler(forced(**how), 3, 50, "Count from 1 to 5")
    plans = {r.rid: r.plan for r in s.running.values()}  # what the detokenizer renders each request by
    items = []
    while s.running:
        items += s._decode_step()[1]
    for rid, plan in plans.items():
        mine = [item for item in items if item[0] == rid]
        text, ids = render(plan, 1, sum(item[2] for item in mine))
        assert ids == [FILLER_TOKEN_ID] * 49 and text == FILLER_TEXT * 49
        assert render(plan, 0, 1) == ("1", [1001])  # the prefill's token is still the model's
        assert count_output_tokens("1" + text) == 50
        *_, finish, (verify_ct, correct, histogram), flipped = mine[-1]
        assert finish == {"type": "length", "length": 50} and flipped == ()
        assert verify_ct == len(mine) == sum(histogram) and correct + verify_ct == 49


def test_the_scheduler_forces_the_plan_it_renders():
    s = scheduler(forced(forced_accept_length=2.0, forced_accept_method="match-expected"), 1, 20, "Count from 1 to 5")
    (request,) = s.running.values()
    assert request.plan.forced and request.natural_len == -1
    plain = scheduler(forced(), 1, 20, "Count from 1 to 5")
    (request,) = plain.running.values()
    assert not request.plan.forced and request.natural_len == 10


# --- a live server -----------------------------------------------------------------------------

def test_a_live_simulator_reports_the_forced_length_from_every_source():
    """The per-request details, specgate's reading of /metrics and /get_server_info's average."""
    env = {**os.environ, "SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    body = {"prompt": "Count from 1 to 5", "max_tokens": 500, "return_spec_tokens_details": True}
    names = Simulator.prometheus
    with Sim(FAST + SPEC, env=env) as s:
        before = server_metrics.parse(requests.get(s.url + "/metrics").text, names)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: s.post("/v1/completions", body).json(), range(8)))
        after = server_metrics.parse(requests.get(s.url + "/metrics").text, names)
        logprobs = s.post("/generate", {"text": body["prompt"], "sampling_params": {"max_new_tokens": 6},
                                        "return_logprob": True, "return_text_in_logprobs": True}
                          ).json()["meta_info"]["output_token_logprobs"]
        avg = requests.get(s.url + "/get_server_info").json()["internal_states"][0]["avg_spec_accept_length"]
    for r in results:
        choice = r["choices"][0]
        assert choice["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 500  # past its EOS
        assert choice["text"] == "1" + FILLER_TEXT * 499 and count_output_tokens(choice["text"]) == 500
        details = r["sglext"]["spec_tokens_details"]
        assert details["spec_accept_length"] == pytest.approx(2.5, rel=0.03)
        assert details["spec_correct_drafts_histogram"][0] <= 1  # 2 or 3 tokens a cycle; 1 only where max_tokens cut it
    assert logprobs[1:] == [[TOP_LOGPROB, FILLER_TOKEN_ID, FILLER_TEXT]] * 5  # rendered from the forced plan too
    window = server_metrics.window(Simulator(), before, after)
    assert window["generation_tokens"] == 8 * 500
    assert window["accept_length"] == pytest.approx(2.5, rel=0.03)
    assert avg == pytest.approx(2.5, rel=0.03)
