"""The truth that benchmarks/accuracy.py checks the harness against (pure arithmetic).

The benchmark itself starts servers and takes a minute (``python benchmarks/accuracy.py``);
its timing checks depend on a quiet machine, so CI only checks the expectations here.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from harness.sim.model import SimModel

_spec = importlib.util.spec_from_file_location("accuracy", Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
sys.modules["accuracy"] = accuracy  # dataclasses look their module up there
_spec.loader.exec_module(accuracy)


def test_truth_is_built_from_the_server_flags():
    m = accuracy.sim_model(accuracy.PLAIN_FLAGS + accuracy.SPEC_FLAGS)
    assert m.speculative and m.num_steps == 2 and m.num_draft_tokens == 3
    assert m.verify_cycle_ms(64) == pytest.approx((2 * 1.0 + 5.0 + 3 * 1.0) * 1.63)
    assert m.prefill_ms(1000, 64) == pytest.approx(0.5 * 1.63)  # 0 ms per token
    plain = accuracy.sim_model(accuracy.PLAIN_FLAGS)
    assert not plain.speculative and plain.step_ms(16) == pytest.approx(11.5)


def test_accept_pmf_matches_the_expected_accept_length():
    m = SimModel(speculative=True, accept_probs=[0.6, 0.667], num_steps=2)
    pmf = accuracy.accept_pmf(m)
    assert pmf == pytest.approx([0.4, 0.6 * 0.333, 0.6 * 0.667])
    assert sum(j * p for j, p in enumerate(pmf, start=1)) == pytest.approx(m.expected_accept_length())


def test_expected_cycles_matches_the_scheduler_by_simulation():
    """E[C] of the renewal recursion vs the scheduler's own rule (n = min(1 + accepted, remaining))."""
    m = SimModel(speculative=True, accept_probs=[0.6, 0.667], num_steps=2)
    tokens = 40
    rng = random.Random(1)
    total, trials = 0, 20000
    for _ in range(trials):
        left = tokens
        while left > 0:
            accepted = 0
            for p in m.accept_probs:
                if rng.random() < p:
                    accepted += 1
                else:
                    break
            left -= min(1 + accepted, left)
            total += 1
    assert accuracy.expected_cycles(m, tokens) == pytest.approx(total / trials, rel=0.01)
    assert accuracy.expected_cycles(m, 1) == 1.0 and accuracy.expected_cycles(m, 0) == 0.0


def test_tok_s_truth_per_wave():
    m = SimModel(decode_ms=10, prefill_base_ms=0.5, prefill_ms_per_token=0, batch_scaling=0.01)
    # one request: 0.5 ms prefill + 299 steps of 10 ms for 300 tokens
    assert accuracy.tok_s_truth(m, 1, 300, 20) == pytest.approx(300 / 2.9905)
    assert accuracy.tok_s_truth(m, 64, 300, 20) == pytest.approx(64 * 300 / ((0.5 + 299 * 10) * 1.63 / 1000))


def test_check_rows():
    ok = accuracy.Check("ITL p50 (ms)", 16, 11.6, 11.5, 2.0, True)
    assert ok.ok and ok.error == pytest.approx(100 * 0.1 / 11.5)
    bad = accuracy.Check("accept length", 64, 2.03, 2.0, 0.02, False)
    assert not bad.ok and "| NO |" in bad.row()
    assert not accuracy.Check("x", 1, None, 1.0, 1.0, True).ok
