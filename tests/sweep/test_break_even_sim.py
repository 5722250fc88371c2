"""The break-even accept length measured for real: `specgate sweep +exp=sim_break_even` over two
concurrencies on the simulator, whose truth is verify cycle ÷ plain step at the running batch
(SimModel, from the arms' own configs), then `specgate report` on that sweep's record. One sweep
(2 points x 5 arms, 2 s loads) serves every test here.

The curve's arms force their acceptance (`drafter.forced_accept_length`, SGLang's simulated
acceptance as the simulator honours it); the real drafter's arm is shown beside the curve."""

from __future__ import annotations

import json
import time

import pytest
from markupsafe import escape

from harness import cli
from harness.engines.sim import truth_model
from harness.run.compose import compose
from tests.support.runs import specgate

pytestmark = pytest.mark.slow  # one real sweep serves every test here
CONCURRENCY = (1, 6)  # truth 1.875 (below the knee) and 2.56 (the verify pass compute-bound)
BASE = ["+exp=sim_break_even", "backend=process"]
FORCED_ARMS = ("acc_1_5", "acc_2_25", "acc_3")  # the curve (break_even_arms unset: the forced arms)
ENTRY_KEYS = {"concurrency", "k", "arms", "with", "measured", "interval", "formula", "points", "words", "real", "extrapolated"}


def overrides() -> list[str]:
    return BASE


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    started = time.monotonic()
    done = specgate("sweep", *overrides(), f"workload.concurrency={','.join(map(str, CONCURRENCY))}",
                    f"record.root={runs}", "-p", "no:cacheprovider", "--no-progress", "-q", timeout=400)
    print(f"sweep of {len(CONCURRENCY)} points x 5 arms took {time.monotonic() - started:.1f} s")
    (sweep_dir,) = runs.iterdir()
    return done, sweep_dir, json.loads((sweep_dir / "sweep.json").read_text())


def truth(concurrency: int) -> float:
    """The simulator's break-even at this running batch: its verify cycle over its plain step."""
    arms = compose(overrides())
    spec, plain = truth_model(arms.arm("eagle3").typed), truth_model(arms.arm("baseline").typed)
    return spec.verify_cycle_ms(concurrency) / plain.decode_step_ms(concurrency)


def entries(data) -> dict[int, dict]:
    found = {e["concurrency"]: e for e in data["break_even_accept_length"]}
    assert sorted(found) == list(CONCURRENCY) and len(data["break_even_accept_length"]) == len(CONCURRENCY)
    return found


def test_the_measured_break_even_is_within_5_percent_of_the_truth_at_each_concurrency(sweep):
    done, _, data = sweep
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for c, entry in entries(data).items():
        true, lengths = truth(c), [p[0] for p in entry["points"]]
        print(f"concurrency {c}: truth {true:.3f}; {entry['words']}; points {entry['points']}")
        assert min(lengths) < true < max(lengths), "the experiment must sweep across the truth"
        assert entry["measured"] == pytest.approx(true, rel=0.05), entry["words"]
        low, high = entry["interval"]
        assert low is not None and high is not None, entry["words"]
        assert low <= entry["measured"] <= high
        if not low <= true <= high:  # a 90 % interval misses now and then; say so, never hide it
            print(f"concurrency {c}: the truth {true:.3f} lies outside the interval [{low}, {high}]")
        assert entry["formula"] == pytest.approx(true, rel=0.10)  # the registry's verify cycle ÷ plain step


def test_sweep_json_has_every_field_and_the_real_drafter_beside_the_forced_arms(sweep):
    _, _, data = sweep
    for c, entry in entries(data).items():
        assert set(entry) == ENTRY_KEYS and entry["k"] == 2 and entry["with"] == []
        assert entry["arms"] == list(FORCED_ARMS)  # by measured accept length
        assert [p[0] for p in entry["points"]] == sorted(p[0] for p in entry["points"])
        assert all(p[2] is not None and p[2][0] <= p[1] <= p[2][1] for p in entry["points"])
        real = {r["arm"]: r for r in entry["real"]}
        assert set(real) == {"eagle3"}  # the real drafter, beside the curve
        assert real["eagle3"]["accept_length"] == pytest.approx(2.4, abs=0.15)  # sim's accept_probs 0.8, 0.75
    for point in data["points"]:
        marked = {arm for arm, figures in point["arms"].items() if figures.get("benchmark_only")}
        assert marked == set(FORCED_ARMS), point["label"]


def test_the_summary_says_the_measured_break_even_per_concurrency(sweep):
    _, sweep_dir, data = sweep
    text = (sweep_dir / "summary.md").read_text()
    assert "## Break-even accept length (measured)" in text
    for c, entry in entries(data).items():
        assert f"- concurrency {c}, k=2: {entry['words']}" in text


def test_the_sweep_report_draws_both_charts_of_the_map(sweep, capsys):
    _, sweep_dir, data = sweep
    assert cli.main(["report", str(sweep_dir)]) == 0
    capsys.readouterr()
    page = (sweep_dir / "report.html").read_text()
    assert "<h2>Break-even accept length (measured)</h2>" in page
    assert 'alt="speedup against the measured accept length, one line per concurrency" src="data:image/png;base64,' in page
    assert 'alt="break-even accept length against concurrency: measured, formula and the real drafter" src="data:image/png;base64,' in page
    for entry in data["break_even_accept_length"]:
        assert str(escape(entry["words"])) in page
    assert "http://" not in page and "https://" not in page and "<script" not in page
