"""The break-even map from steady windows: `specgate sweep +exp=eagle_k2_sim` over concurrency
on the simulator reads each speedup within 3 % of SimModel's truth at every point. Over the
whole load a short closed loop reads 0.67x at concurrency 16 where the truth is 0.82x: the
ramp-in and the tail, when fewer than all slots are busy, weigh differently in the two arms.
One sweep (3 points x 2 arms x 3 repeats, ~3 min on 2 busy CPUs) serves the tests here."""

from __future__ import annotations

import json

import pytest

from harness.run.compose import compose
from harness.engines.sim import truth_model
from tests.support.runs import specgate

pytestmark = pytest.mark.slow  # one real sweep
CONCURRENCY = (1, 4, 16)
OVERRIDES = ["+exp=eagle_k2_sim", "backend=process", "gate.repeats=3"]  # the median of 3 repeats per arm


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    done = specgate("sweep", *OVERRIDES, f"workload.concurrency={','.join(map(str, CONCURRENCY))}",
                    f"record.root={runs}", "-p", "no:cacheprovider", "--no-progress", "-q", timeout=600)
    (sweep_dir,) = runs.iterdir()
    return done, sweep_dir, json.loads((sweep_dir / "sweep.json").read_text())


def test_the_steady_speedup_is_within_3_percent_of_the_truth_at_every_point(sweep):
    done, _, data = sweep
    model = truth_model(compose(OVERRIDES).arm("eagle3").cfg)
    assert sorted(p["arms"]["eagle3"]["concurrency"] for p in data["points"]) == list(CONCURRENCY), done.stdout[-3000:]
    for point in data["points"]:
        eagle3 = point["arms"]["eagle3"]
        c, truth_speedup = eagle3["concurrency"], model.expected_speedup(eagle3["concurrency"])
        print(f"concurrency {c}: steady {eagle3['speedup']:.4f}, whole load {eagle3['speedup_whole']:.4f}, "
              f"truth {truth_speedup:.4f}")
        assert eagle3["basis"] == "steady", point["label"]
        assert eagle3["speedup"] == pytest.approx(truth_speedup, rel=0.03), point["label"]
        assert eagle3["steady.output_tok_s"] is not None and point["arms"]["baseline"]["steady.output_tok_s"]


def test_each_point_keeps_its_whole_load_figures_and_its_timeslices(sweep):
    _, sweep_dir, data = sweep
    last = max(data["points"], key=lambda p: p["arms"]["eagle3"]["concurrency"])
    results = json.loads((sweep_dir / last["record"] / "results.json").read_text())
    eagle3 = results["arms"]["eagle3"]
    assert eagle3["basis_vs_baseline"] == "steady"
    assert eagle3["speedup_whole_vs_baseline"] == pytest.approx(eagle3["output_tok_s"]
                                                                / results["arms"]["baseline"]["output_tok_s"], rel=1e-3)
    assert eagle3["steady"]["rule"] == "closed_loop" and eagle3["steady"]["repeats_conclusive"] == 3
    repeats = eagle3["timeslices"]["repeats"]
    assert len(repeats) == 3 and all(len(r["slices"]) >= 4 for r in repeats)  # 4 s of sends and the drain, 1 s slices
    assert all(s["output_tok_s"] is not None for r in repeats for s in r["slices"])
