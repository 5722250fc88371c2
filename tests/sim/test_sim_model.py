"""Unit tests of the simulator's pure parts: timing model, tokenizer, CLI."""

from __future__ import annotations

import math
import random

import pytest

from harness.sim.cli import parse_args
from harness.sim.model import SimModel, fit_accept_probs
from harness.sim.tokens import (
    EOS_TOKEN_ID,
    WORDS,
    chat_prompt_tokens,
    count_tokens,
    plan_output,
    render,
    split_pieces,
)


def test_defaults_from_cli_match_brief():
    ns = parse_args(["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"])
    m = SimModel.from_args(ns)
    assert m.speculative and m.num_steps == 2 and m.num_draft_tokens == 3
    assert m.verify_cycle_ms() == pytest.approx(2 * 3.0 + 12.2 + 3.9 * 3)  # 29.9
    assert m.verify_cycle_ms() == pytest.approx(29.9)
    assert m.expected_accept_length() == pytest.approx(1 + 0.6 + 0.6 * 0.667)
    assert m.expected_accept_length() == pytest.approx(2.0, abs=0.001)
    assert m.decode_step_ms() == pytest.approx(12.2)


def test_plain_model_and_batch_scaling():
    m = SimModel.from_args(parse_args(["--model-path", "m", "--sim-batch-scaling", "0.02"]))
    assert not m.speculative
    assert m.expected_accept_length() == 1.0
    assert m.decode_step_ms(1) == pytest.approx(12.2)
    assert m.decode_step_ms(11) == pytest.approx(12.2 * 1.2)
    assert m.prefill_ms(100, 3) == pytest.approx((5.0 + 0.05 * 100) * 1.04)
    assert m.expected_tokens_per_s(1) == pytest.approx(1000 / 12.2)
    assert m.expected_tokens_per_s(16) == pytest.approx(16 * 1000 / (12.2 * 1.3))


def test_spec_throughput_and_itl():
    m = SimModel(speculative=True, num_steps=3, num_draft_tokens=4, accept_probs=[0.8, 0.5])
    assert m.accept_probs == [0.8, 0.5, 0.5]  # padded with the last value
    expected = 1 + 0.8 + 0.4 + 0.2
    assert m.expected_accept_length() == pytest.approx(expected)
    cycle = 3 * 3.0 + 12.2 + 3.9 * 4
    assert m.expected_itl_ms(1) == pytest.approx(cycle)
    assert m.expected_tokens_per_s(8) == pytest.approx(8 * expected * 1000 / (cycle * 1.07))


def test_accept_probs_fit():
    assert fit_accept_probs([0.9, 0.8, 0.7], 2) == [0.9, 0.8]
    assert fit_accept_probs([0.5], 3) == [0.5, 0.5, 0.5]
    with pytest.raises(ValueError):
        SimModel(accept_probs=[1.5])


def test_expected_accept_length_matches_monte_carlo():
    m = SimModel(speculative=True, num_steps=4, num_draft_tokens=5, accept_probs=[0.9, 0.7, 0.5, 0.3])
    rng = random.Random(1)
    total = 0
    n = 50_000
    for _ in range(n):
        acc = 0
        for p in m.accept_probs:
            if rng.random() < p:
                acc += 1
            else:
                break
        total += 1 + acc
    assert total / n == pytest.approx(m.expected_accept_length(), abs=0.02)


def test_cli_ignores_unknown_flags():
    ns = parse_args(["--model-path", "m", "--mem-fraction-static", "0.9", "--trust-remote-code", "--tp", "2"])
    assert ns.tp_size == 2
    assert ns.served_model_name == "m"
    assert ns.ignored_flags == ["--mem-fraction-static 0.9", "--trust-remote-code"]


def test_tokenizer_and_plans():
    assert split_pieces("Count from 1 to 3.") == ["Count", " from", " 1", " to", " 3", "."]
    assert count_tokens("") == 1
    assert chat_prompt_tokens(["hi there"]) == 2 + 4 + 3
    assert len(set(WORDS)) == len(WORDS) == 64
    plan = plan_output("Please COUNT from 1 to 4")
    assert plan.natural_length() == 8
    text, ids = render(plan, 0, 8)
    assert text == "1, 2, 3, 4" and ids[-1] == EOS_TOKEN_ID
    plan = plan_output("count from 1 to 2", ignore_eos=True)
    assert plan.natural_length() == -1
    text, ids = render(plan, 0, 6)
    assert text.startswith("1, 2 ") and EOS_TOKEN_ID not in ids
    words = plan_output("tell me a story")
    assert render(words, 0, 3) == render(words, 0, 3)  # deterministic
    assert not math.isnan(len(render(words, 0, 100)[0]))


def test_acceptance_follows_the_prompts_content():
    from harness.sim.model import SimModel

    m = SimModel(speculative=True, num_steps=2, accept_probs=[0.6, 0.667],
                 accept_by_text={"Continue this Python code": [0.9, 0.85], "Count ": [0.95]})
    assert m.accept_probs_for("Continue this Python code:\ndef f():") == [0.9, 0.85]
    assert m.accept_probs_for("Count from 1 to 9") == [0.95, 0.95]  # fitted to num_steps like accept_probs
    assert m.accept_probs_for("Continue this Python code: Count the lines") == [0.9, 0.85]  # the first marker wins
    assert m.accept_probs_for("Tell me a story") == [0.6, 0.667]
    assert m.expected_accept_length([0.9, 0.85]) == pytest.approx(1 + 0.9 + 0.9 * 0.85)
    assert m.expected_accept_length() == pytest.approx(1 + 0.6 + 0.6 * 0.667)


# --- the compute-bound knee and the break-even map's truth -------------------------------------

def knee_model(**changes) -> SimModel:
    """conf/exp/sim_crossover's model: server=sim's timing, EAGLE-3 (2 steps, 3 tokens), knee 12."""
    settings = dict(decode_ms=4.0, draft_step_ms=1.0, verify_base_ms=4.0, verify_per_token_ms=0.5,
                    accept_probs=[0.8, 0.75], batch_scaling=0.01, speculative=True, num_steps=2,
                    num_draft_tokens=3, compute_knee_tokens=12)
    return SimModel(**{**settings, **changes})


def test_without_a_knee_every_step_costs_what_it_did():
    for knee in (None, 0):
        m = knee_model(compute_knee_tokens=knee)
        for b in (1, 4, 16, 64, 256):
            assert m.decode_step_ms(b) == 4.0 * (1 + 0.01 * (b - 1))  # exactly the old arithmetic
            assert m.verify_cycle_ms(b) == (2 * 1.0 + 4.0 + 0.5 * 3) * (1 + 0.01 * (b - 1))
            assert m.expected_speedup(b) == pytest.approx(2.4 * 4.0 / 7.5)  # flat: 1.28x at any batch
    assert knee_model(compute_knee_tokens=None).expected_crossover_batch() == 256  # pays at every batch it runs
    assert SimModel(speculative=True).expected_crossover_batch() is None  # the seed box: 0.82x even at batch 1


def test_a_pass_turns_compute_bound_past_the_knee_in_proportion_to_its_tokens():
    m = knee_model()
    bf = m.batch_factor
    assert m.decode_step_ms(12) == pytest.approx(4.0 * bf(12))  # 12 tokens: at the knee, still memory-bound
    assert m.decode_step_ms(24) == pytest.approx(4.0 * bf(24) * 2)  # twice the knee: twice the time
    # a verify passes batch x 3 tokens: at the knee from batch 4, twice past it at batch 8
    assert m.verify_cycle_ms(4) == pytest.approx((2.0 + 5.5) * bf(4))
    assert m.verify_cycle_ms(8) == pytest.approx((2.0 + 5.5 * 2) * bf(8))  # draft steps stay memory-bound
    assert m.verify_cycle_ms(16) == pytest.approx((2.0 + 5.5 * 4) * bf(16))


def test_speedup_falls_past_the_verify_knee_and_the_crossover_is_where_it_reaches_one():
    m = knee_model()
    assert m.expected_speedup(1) == pytest.approx(1.28) and m.expected_speedup(4) == pytest.approx(1.28)
    assert m.expected_speedup(8) == pytest.approx(2.4 * 4.0 / 13.0)  # 0.74x
    assert m.expected_speedup(16) == pytest.approx(2.4 * 4.0 * 16 / 12 / 24.0)  # both compute-bound: 0.53x
    # between batch 4 and 12 the speedup is 2.4 x 4 / (2 + 5.5 x 3b / 12): 1.0 at b = 7.6 x 12 / 16.5
    crossover = m.expected_crossover_batch()
    assert crossover == pytest.approx(7.6 * 12 / 16.5, abs=1e-6)  # 5.527
    assert m.expected_speedup(crossover) >= 1.0 > m.expected_speedup(crossover + 1e-3)
    plain = knee_model(speculative=False)
    assert plain.expected_speedup(8) == 1.0 and plain.expected_crossover_batch() == 256


def test_the_knee_flag_reaches_the_model_and_zero_means_none():
    base = ["--model-path", "m", "--speculative-algorithm", "EAGLE3"]
    assert SimModel.from_args(parse_args([*base, "--sim-compute-knee-tokens", "12"])).compute_knee_tokens == 12
    assert SimModel.from_args(parse_args([*base, "--sim-compute-knee-tokens", "0"])).compute_knee_tokens is None
    assert SimModel.from_args(parse_args(base)).compute_knee_tokens is None
    with pytest.raises(SystemExit):
        parse_args([*base, "--sim-compute-knee-tokens", "-4"])


def test_the_experiments_knee_reaches_the_server_flags():
    from harness.run.compose import compose
    from harness.engines.sim import sim_args, truth_model

    crossover = compose(["+exp=sim_crossover"]).arm("eagle3").typed
    flags = sim_args(crossover.server.sim)
    assert flags[flags.index("--sim-compute-knee-tokens") + 1] == "12.0"
    assert truth_model(crossover).expected_crossover_batch() == pytest.approx(5.527, abs=0.001)
    assert "--sim-compute-knee-tokens" not in sim_args(compose(["+exp=sim_smoke"]).arm("eagle3").typed.server.sim)
    seed_box = truth_model(compose(["+exp=eagle_k2_sim"]).arm("eagle3").typed)
    assert seed_box.expected_speedup(1) == pytest.approx(2.0 * 12.2 / 29.9, abs=0.001)  # unchanged at concurrency 1
    assert seed_box.expected_speedup(16) == pytest.approx(seed_box.expected_speedup(1))  # 48 tokens: under the knee
    assert seed_box.expected_speedup(64) < 0.5  # 192 tokens: the verify pass is past its knee, plain is not


def test_the_scheduler_times_a_step_by_its_running_batch():
    """The knee reaches measured figures because every decode step is timed at the batch running."""
    from harness.sim.scheduler import Scheduler, SimRequest
    from harness.sim.tokens import OutputPlan

    for model in (knee_model(), knee_model(speculative=False)):
        scheduler = Scheduler(model, None, None, [])
        for rid in range(8):
            request = SimRequest(rid, 10, 100, -1, OutputPlan(0, 0, True), random.Random(rid))
            request.histogram = [0] * (model.num_steps + 1)
            scheduler.running[rid] = request
        duration, items = scheduler._decode_step()
        assert len(items) == 8 and duration * 1000 == pytest.approx(model.step_ms(8))
