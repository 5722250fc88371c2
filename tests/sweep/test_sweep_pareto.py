"""The sweep report's throughput per GPU against throughput per user: which points it takes,
what it divides by, and the frontier (the points no other beats on both axes)."""

from __future__ import annotations

import pytest

from harness.sweep.report import ParetoPoint, frontier, frontier_words, pareto_chart, pareto_points


def point(label, c, arms):
    return {"label": label, "swept": [f"workload.concurrency={c}"], "overrides": [f"workload.concurrency={c}"],
            "exit_status": 0, "arms": arms}


def figures(c, tok_s, tpot, gpus=1, steady=None):
    return {"concurrency": c, "output_tok_s": tok_s, "steady.output_tok_s": steady, "tpot_ms.p50": tpot, "gpus": gpus}


def test_each_arm_per_gpu_against_per_user_from_its_steady_rate_and_tpot():
    points = [point("c1", 1, {"plain": figures(1, 90.0, 10.0, gpus=8, steady=100.0),
                              "eagle": figures(1, 150.0, 5.0, gpus=8)})]
    found = {p.series: p for p in pareto_points(points)}
    assert found["plain"].per_user == pytest.approx(100.0)  # 1000 / TPOT p50
    assert found["plain"].per_gpu == pytest.approx(100.0 / 8)  # the steady window's rate where there is one
    assert found["eagle"].per_gpu == pytest.approx(150.0 / 8)  # else the whole load's
    assert all(p.per_gpu_known and p.concurrency == 1 for p in found.values())


def test_an_arm_without_a_tpot_or_a_rate_is_left_out_and_an_unknown_gpu_count_is_per_server():
    points = [point("c1", 1, {"plain": figures(1, 90.0, None), "eagle": figures(1, None, 5.0),
                              "draft": figures(1, 80.0, 4.0, gpus=None)})]
    (only,) = pareto_points(points)
    assert (only.series, only.per_gpu, only.per_gpu_known) == ("draft", 80.0, False)
    assert "tok/s per server" in frontier_words([only])[0]


def test_the_frontier_keeps_the_points_no_other_beats_on_both_axes():
    p = lambda name, user, gpu: ParetoPoint(name, 1, user, gpu, True)
    fast_user, middle, dominated, high_gpu = p("a", 100, 10), p("b", 50, 40), p("c", 40, 30), p("d", 10, 90)
    assert frontier([dominated, high_gpu, fast_user, middle]) == [fast_user, middle, high_gpu]
    assert frontier([p("a", 50, 40), p("b", 50, 30)]) == [p("a", 50, 40)]  # a tie on one axis: the better other
    assert frontier([]) == []


def test_the_chart_is_drawn_only_when_something_was_measured():
    assert pareto_chart([]) is None
    drawn = pareto_chart([ParetoPoint("a", 1, 100.0, 10.0, True), ParetoPoint("a", 4, 40.0, 30.0, True)])
    assert drawn.startswith("data:image/png;base64,")
