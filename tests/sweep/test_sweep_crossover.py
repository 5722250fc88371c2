"""The break-even map for real: `specgate sweep +exp=sim_crossover` over concurrency on the
simulator, whose compute-bound knee gives a known crossover (SimModel truth, 5.53), then
`specgate report` on that sweep's record. One sweep (4 points x 2 arms x 3 repeats, ~3 min
on 2 busy CPUs) serves every test here."""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from harness import cli
from harness.run.compose import compose
from harness.engines.sim import truth_model
from harness.sweep.record import crossing
from tests.support.runs import specgate

pytestmark = pytest.mark.slow  # one real sweep serves every test here
CONCURRENCY = (2, 4, 8, 16)  # the truth, 5.53, lies between 4 and 8
# sim_crossover's own min_speedup_through (1.1x up to 4) passes; a crossover of 8 is more than
# the knee allows, so this gate fails and, with it, the sweep's exit status
OVERRIDES = ["+exp=sim_crossover", "backend=process", "sweep_gate.crossover_at_least.eagle3=8"]
# the median of 3 repeats per arm: one stall of a busy machine's scheduler does not move a point
REPEATS = "gate.repeats=3"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    started = time.monotonic()
    done = specgate("sweep", *OVERRIDES, REPEATS, f"workload.concurrency={','.join(map(str, CONCURRENCY))}",
                    f"record.root={runs}", "-p", "no:cacheprovider", "--no-progress", "-q", timeout=400)
    print(f"sweep of {len(CONCURRENCY)} points took {time.monotonic() - started:.1f} s")
    (sweep_dir,) = runs.iterdir()
    return done, sweep_dir, json.loads((sweep_dir / "sweep.json").read_text())


def truth():
    return truth_model(compose(OVERRIDES).arm("eagle3").typed)


def test_the_measured_crossover_is_within_one_swept_point_of_the_truth(sweep):
    done, _, data = sweep
    (found,) = data["crossovers"]
    speedups = {c: s for c, s in found["points"]}
    true_crossover = truth().expected_crossover_batch()
    print(f"truth {true_crossover:.2f}; measured {found['pays_through']}: {found['words']}; speedups {speedups}")
    assert found["arm"] == "eagle3" and sorted(speedups) == list(CONCURRENCY), done.stdout[-3000:]
    # the grid doubles, so one swept point is a factor of 2 either way
    assert found["pays_through"] is not None
    assert abs(math.log2(found["pays_through"] / true_crossover)) <= 1.0, (found, true_crossover)


def test_the_speedup_is_within_3_percent_of_the_truth_at_every_point(sweep):
    """Measured over each arm's steady window (every slot busy), the speedup is the
    simulator's at the concurrency: the crossover is then where the truth's own speedups
    at the swept points cross, within 3 % (the grid's interpolation is the same for both)."""
    _, _, data = sweep
    model = truth()
    (found,) = data["crossovers"]
    for point in data["points"]:
        eagle3 = point["arms"]["eagle3"]
        c, truth_speedup = eagle3["concurrency"], model.expected_speedup(eagle3["concurrency"])
        print(f"concurrency {c}: speedup {eagle3['speedup']:.4f} ({eagle3['basis']}; whole load "
              f"{eagle3['speedup_whole']:.4f}), truth {truth_speedup:.4f}")
        assert eagle3["basis"] == "steady", point["label"]
        assert eagle3["speedup"] == pytest.approx(truth_speedup, rel=0.03), point["label"]
    on_the_grid = crossing([(c, model.expected_speedup(c)) for c in CONCURRENCY])["pays_through"]
    assert found["pays_through"] == pytest.approx(on_the_grid, rel=0.03), (found, on_the_grid)


def test_the_knee_shows_in_the_measured_break_even_at_every_point(sweep):
    """Break-even = measured verify cycle / measured plain step, both at the point's concurrency:
    flat (1.87) below the knee, then growing as the verify pass turns compute-bound."""
    _, _, data = sweep
    model, plain = truth(), truth_model(compose(OVERRIDES).arm("baseline").typed)
    for point in data["points"]:
        eagle3 = point["arms"]["eagle3"]
        c = eagle3["concurrency"]
        true_break_even = model.verify_cycle_ms(c) / plain.decode_step_ms(c)
        print(f"concurrency {c}: break-even {eagle3['break_even_accept_length']:.3f} (truth {true_break_even:.3f}), "
              f"accept length {eagle3['accept_length']:.3f}, speedup {eagle3['speedup']:.3f} "
              f"(truth {model.expected_speedup(c):.3f})")
        assert eagle3["break_even_accept_length"] == pytest.approx(true_break_even, rel=0.10), point["label"]
        assert eagle3["accept_length"] == pytest.approx(model.expected_accept_length(), abs=0.1)


def test_a_failed_sweep_gate_fails_the_sweep_whose_points_all_passed(sweep):
    done, sweep_dir, data = sweep
    assert [p["exit_status"] for p in data["points"]] == [0] * len(CONCURRENCY), done.stdout[-3000:]
    assert done.returncode == 1 and data["exit_status"] == 1
    verdicts = {v["name"]: v for v in data["sweep_gates"]}
    assert verdicts["min_speedup_through"]["status"] == "passed"
    crossover = verdicts["crossover_at_least"]
    assert crossover["status"] == "failed" and crossover["threshold"] == 8
    assert (crossover["passed"], crossover["scope"], crossover["with"]) == (False, "sweep", [])  # one verdict type
    # decided on the speedups' intervals: even the crossing of their upper ends is below 8
    assert re.fullmatch(r"eagle3 pays up to concurrency ~[\d.]+ \(.*\): crossover below 8 \(crossings of the "
                        r"speedups' 95% interval ends: [\d.]+ to [\d.]+\)", crossover["detail"]), crossover["detail"]
    low, high = crossover["interval"]
    assert low <= crossover["value"] <= high < 8
    assert all(len(p["arms"]["eagle3"]["speedup_interval"]) == 2 for p in data["points"])
    assert f"specgate sweep gate: FAILED crossover_at_least eagle3: {crossover['detail']}" in done.stdout
    summary = (sweep_dir / "summary.md").read_text()
    assert "## Sweep gates" in summary and "- PASSED min_speedup_through eagle3" in summary


def test_the_sweep_report_draws_the_break_even_map(sweep, capsys):
    _, sweep_dir, data = sweep
    assert cli.main(["report", str(sweep_dir)]) == 0
    page = (sweep_dir / "report.html").read_text()
    assert capsys.readouterr().out.strip() == f"report: {sweep_dir / 'report.html'}"
    (found,) = data["crossovers"]
    assert f"eagle3 {found['words']}" in page  # the crossover in words
    # per GPU against per user; speedup vs concurrency; accept length vs break-even
    assert page.count('src="data:image/png;base64,') == 3
    assert "FAILED: 1 sweep gate(s) failed" in page
    assert page.count('<span class="badge passed">passed</span>') == 1
    assert page.count('<span class="badge failed">failed</span>') == 1
    assert page.count("<tr><td><code>") == 2 * len(CONCURRENCY)  # point x arm
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained


def test_the_pareto_frontier_is_speculation_when_interactive_and_plain_at_the_top_of_the_load(sweep):
    """Below the knee EAGLE-3 streams faster for each user and no slower per GPU; at 16 in
    flight its verify pass is compute-bound (speedup < 1 by the truth) and plain decoding
    gives more per GPU: the frontier's two ends are those two arms."""
    from harness.sweep.report import frontier, pareto_points
    _, _, data = sweep
    model = truth()
    assert model.expected_speedup(2) > 1 > model.expected_speedup(16)
    found = pareto_points(data["points"])
    assert {(p.series, p.concurrency) for p in found} == {(a, c) for a in ("baseline", "eagle3") for c in CONCURRENCY}
    assert all(p.per_gpu_known for p in found)  # server.tp_size 1: per GPU = per server
    best = frontier(found)
    print([(p.series, p.concurrency, round(p.per_user, 1), round(p.per_gpu, 1)) for p in best])
    assert (best[0].series, best[0].concurrency) == ("eagle3", 2)
    assert (best[-1].series, best[-1].concurrency) == ("baseline", 16)
