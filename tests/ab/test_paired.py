"""The A/B verdict (harness/gates/change.py judge_paired, harness/gates/ab.py): B against A
paired by round, so what the machine did between rounds cancels; a round-blocked interval;
too few rounds, or a round one side did not measure, are said, not guessed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.ab.driver import RoundPair
from harness.config.schema import GateConfig
from harness.gates.ab import no_regression_between_sides
from harness.gates.change import Sequential, evidence, judge, judge_paired
from harness.gates.registry import ABContext
from tests.gates.test_change import lines
from tests.support.arm_results import result

MACHINE = [1.0, 1.08, 0.94, 1.05]  # the box's speed in each round: 8 % apart, as a drifting GPU box


def rounds(slower: float, n_rounds: int = 3, metric: str = "output_tok_s", seed: int = 0):
    """(A, B) evidence per round: both sides at the round's machine speed, B `slower`."""
    out = []
    for r in range(n_rounds):
        step = 4.0 * MACHINE[r]
        out.append((evidence(metric, lines(48, seed + 2 * r, step_ms=step, concurrency=8)),
                    evidence(metric, lines(48, seed + 2 * r + 1, step_ms=step * (1 + slower), concurrency=8))))
    return out


def test_the_machines_drift_between_rounds_cancels_in_the_pairs():
    same = judge_paired("output_tok_s", rounds(0.0), 0.02, lower_is_better=False)
    assert same.outcome == "passed", same
    assert abs(same.worse) < 0.01 and same.low < 0 < same.high < 0.02
    # the same data judged run against run (A of round 1 against B of round 2) sees the machine
    across = judge("output_tok_s", rounds(0.0)[0][0], rounds(0.0)[1][1], 0.02, lower_is_better=False)
    assert across.outcome == "failed" and across.worse > 0.05


@pytest.mark.parametrize("metric, lower_is_better", [("output_tok_s", False), ("tpot_ms.p50", True)])
def test_a_five_percent_slower_b_fails_in_every_round_order(metric, lower_is_better):
    change = judge_paired(metric, rounds(0.05, metric=metric), 0.02, lower_is_better)
    assert change.outcome == "failed", change
    assert 0.02 < change.low < change.worse < change.high and 0.03 < change.worse < 0.07
    assert len(change.rounds) == 3 and all(0.02 < r < 0.08 for r in change.rounds)


def test_one_round_that_counted_is_inconclusive_and_says_so():
    pairs = rounds(0.10)
    pairs[1] = (pairs[1][0], None)  # side B was not measured in round 2
    pairs[2] = (None, pairs[2][1])
    change = judge_paired("output_tok_s", pairs, 0.02, lower_is_better=False)
    assert change.outcome == "inconclusive" and change.rounds[1:] == [None, None]
    assert change.why == "1 round(s) measured it in both A and B, fewer than the 2 a paired change needs"


def test_the_gate_names_the_sides_the_rounds_and_what_counted():
    gate = OmegaConf.structured(GateConfig(compare={"output_tok_s": "2%"}))
    pairs = []
    for r in range(3):
        step = 4.0 * MACHINE[r]
        pairs.append(RoundPair(r + 1, {"A": lines(48, 10 + r, step_ms=step, concurrency=8),
                                       "B": lines(48, 20 + r, step_ms=step * 1.10, concurrency=8)}))
    pairs.append(RoundPair(4, {"A": lines(48, 30, concurrency=8)}))  # B's server died in round 4
    (verdict,) = no_regression_between_sides(ABContext(gate, {"baseline": pairs}, {"A": "main", "B": "branch"}))
    assert verdict.status == "failed" and verdict.scope == "ab" and verdict.name == "ab.output_tok_s"
    assert "baseline: B regressed: output_tok_s A " in verdict.detail
    assert "over 3 of 4 rounds (per round: " in verdict.detail and ", – worse); allowed 2.0%" in verdict.detail
    assert verdict.interval[0] > 0.02 and math.isclose(verdict.threshold, 0.02)


@pytest.mark.parametrize("p, df, published", [(0.95, 1, 6.3138), (0.95, 2, 2.9200), (0.95, 4, 2.1318),
                                              (0.975, 9, 2.2622), (0.99, 3, 4.5407), (0.999, 1, 318.31),
                                              (0.95, 120, 1.6577)])
def test_students_t_quantiles_match_the_published_table(p, df, published):
    from harness.gates.change import t_quantile

    assert t_quantile(df, p) == pytest.approx(published, rel=2e-4)


def ab_rounds(slower: float, n: int = 3):
    return [RoundPair(r + 1, {"A": lines(48, 40 + r, concurrency=8),
                              "B": lines(48, 50 + r, step_ms=4.0 * (1 + slower), concurrency=8)},
                      {"A": result(), "B": result()}) for r in range(n)]


def test_a_round_whose_client_or_gpu_could_not_be_trusted_makes_the_verdict_inconclusive():
    gate = OmegaConf.structured(GateConfig(compare={"output_tok_s": "2%"}, min_clock_ratio_under_load=0.9))
    clean = ab_rounds(0.10)
    (failed,) = no_regression_between_sides(ABContext(gate, {"baseline": clean}, {"A": "a", "B": "b"}))
    assert failed.status == "failed"
    stalled = ab_rounds(0.10)
    stalled[1].results["B"].client = {"client_bound_figures": ["output_tok_s"], "loop_lag_ms": {"p99": 140.0}}
    (v,) = no_regression_between_sides(ABContext(gate, {"baseline": stalled}, {"A": "a", "B": "b"}))
    assert v.status == "inconclusive" and v.cause.startswith("round 2 side B: client-bound: event-loop lag p99 140 ms")
    assert v.detail.startswith("inconclusive, not the build's alone (round 2 side B: client-bound")
    slow_gpu = ab_rounds(0.0)
    slow_gpu[0].gpus["A"] = {"gpus": {"uuid": {"index": 0, "sm_clock_ratio_under_load": 0.7}}}  # A slowed: B flattered
    (v,) = no_regression_between_sides(ABContext(gate, {"baseline": slow_gpu}, {"A": "a", "B": "b"}))
    assert v.status == "inconclusive" and "round 1 side A: GPU 0 ran at 70% of its max SM clock under load" in v.detail


def test_trouble_that_can_only_have_made_its_side_look_worse_leaves_a_verdict_that_stands_despite_it():
    """Seen in a clean clone: B 33 % slower in every round, one round's A client-bound on the busy
    box, and the bisect undecided. A stalled client only lowers its side's throughput, a slowed
    GPU only slows its side: B worse than such an A is worse still, and a B that passed while
    its own side was in trouble passed anyway. An ITL, which a stalled loop reads in bursts,
    keeps both sides' trouble inconclusive."""
    stall = {"client_bound_figures": ["output_tok_s", "itl_ms.p50"], "loop_lag_ms": {"p99": 28.0}}
    gate = OmegaConf.structured(GateConfig(compare={"output_tok_s": "2%"}, min_clock_ratio_under_load=0.9))
    a_stalled = ab_rounds(0.30)
    a_stalled[2].results["A"].client = dict(stall)
    (v,) = no_regression_between_sides(ABContext(gate, {"baseline": a_stalled}, {"A": "a", "B": "b"}))
    assert v.status == "failed" and "stands despite round 3 side A: client-bound" in v.detail, v.detail
    assert "so B is worse still" in v.detail
    itl = OmegaConf.structured(GateConfig(compare={"itl_ms.p50": "2%"}))
    (v,) = no_regression_between_sides(ABContext(itl, {"baseline": a_stalled}, {"A": "a", "B": "b"}))
    assert v.status == "inconclusive" and "round 3 side A: client-bound" in v.cause
    b_slowed = ab_rounds(0.0)
    b_slowed[0].gpus["B"] = {"gpus": {"uuid": {"index": 0, "sm_clock_ratio_under_load": 0.7}}}
    (v,) = no_regression_between_sides(ABContext(gate, {"baseline": b_slowed}, {"A": "a", "B": "b"}))
    assert v.status == "passed" and "and B passed anyway" in v.detail, v.detail
    both = ab_rounds(0.30)
    both[0].results["A"].client, both[1].results["B"].client = dict(stall), dict(stall)
    (v,) = no_regression_between_sides(ABContext(gate, {"baseline": both}, {"A": "a", "B": "b"}))
    assert v.status == "inconclusive"  # a stalled B could be the whole of B's slowness


# --- ab.rounds=auto: a group-sequential test (harness/gates/change.py Sequential) ---------------

class Figure:
    """A side's figure in one round and nothing else the paired judge reads of it."""

    def __init__(self, value: float):
        self.figure, self.groups_count, self.unit, self.percentile = value, 48, "requests", None

    def value(self) -> float:
        return self.figure


def until_decided(worse_by: float, noise: float, rng, sequential) -> tuple[str, int]:
    """One A/B judged after every round, stopped at its first decision: (outcome, rounds)."""
    pairs = []
    for n in range(1, (sequential.max_rounds if sequential else 10) + 1):
        change_ = rng.normal(math.log1p(worse_by), noise)
        pairs.append((Figure(4.0), Figure(4.0 * math.exp(change_))))  # TPOT: B's higher is worse
        if n < 3:
            continue
        change = judge_paired("tpot_ms.p50", pairs, 0.02, True, 0.95, sequential)
        if change.outcome != "inconclusive":
            return change.outcome, n
    return "inconclusive", n


def test_stopping_once_the_data_look_decided_keeps_the_error_of_every_verdict_together():
    # B exactly at the allowed change, three verdicts judged together, 10 looks each: a fixed 95 %
    # test at every look fails some verdict far more often than 5 %; the sequential split does not
    rng = np.random.default_rng(7)
    sequential = Sequential(max_rounds=10, verdicts=3)
    def family_fails(judged_as) -> float:
        runs = [[until_decided(0.02, 0.013, rng, judged_as)[0] for _ in range(3)] for _ in range(300)]
        return sum("failed" in run for run in runs) / len(runs)
    assert family_fails(sequential) <= 0.05
    assert family_fails(None) > 0.10  # optional stopping without the split: the error it prevents


def test_a_clear_slowdown_stops_early_and_identical_builds_are_decided_the_same():
    rng = np.random.default_rng(8)
    sequential = Sequential(max_rounds=10, verdicts=3)
    slow = [until_decided(0.10, 0.013, rng, sequential) for _ in range(50)]
    assert all(outcome == "failed" for outcome, _ in slow) and np.mean([n for _, n in slow]) <= 4.5
    same = [until_decided(0.0, 0.013, rng, sequential) for _ in range(50)]
    assert not any(outcome == "failed" for outcome, _ in same)
    assert sum(outcome == "passed" for outcome, _ in same) >= 35  # the same within 2 %, an equivalence verdict


def test_a_sequential_ab_does_not_look_before_round_three_and_says_each_looks_share():
    sequential = Sequential(max_rounds=8, verdicts=4)
    assert sequential.looks == 6 and sequential.confidence(0.95) == pytest.approx(1 - 0.05 / 24)
    two = judge_paired("tpot_ms.p50", [(Figure(4.0), Figure(8.0))] * 2, 0.02, True, 0.95, sequential)
    assert two.outcome == "inconclusive" and two.why == "a sequential A/B's first look is at round 3; 2 counted"
    assert "5% error split over 6 looks (rounds 3-8) and 4 verdicts, each look at 99.79%" in sequential.describe(0.95)
