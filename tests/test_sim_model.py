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
