"""Sweep gates (harness/gates/sweep.py, scope "sweep" in the gate registry): their config checked before any server starts, their
verdicts (passed, failed, not evaluable with the reason) on a sweep's points and crossovers.
The real sweep that a failed sweep gate turns into exit status 1 is in test_sweep_crossover.py."""

from __future__ import annotations

import pytest

from harness import cli
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.gates.verdict import Verdict
from harness.gates.registry import SweepContext, judge
from harness.sweep.record import crossovers, summary

EXP = ["+exp=sim_crossover", "backend=process"]


def point(concurrency, speedup, *others, status="measured", interval=None):
    """One point of sweep.json as SweepRecord.point_ended writes it (`interval`: its speedup's)."""
    swept = [f"workload.concurrency={concurrency}", *others]
    label = "_".join([f"concurrency-{concurrency}", *(o.split("=")[1] for o in others)])
    eagle3 = {"status": status, "concurrency": concurrency, "speedup": speedup,
              **({"speedup_interval": list(interval)} if interval else {})}
    return {"label": label, "swept": swept, "overrides": ["+exp=sim_crossover", *swept], "exit_status": 0,
            "arms": {"baseline": {"status": "measured", "concurrency": concurrency, "speedup": None}, "eagle3": eagle3}}


PASSED, FAILED, NOT_EVALUABLE = "passed", "failed", "not_evaluable"


def verdicts_of(gates, points):
    """The registry's sweep gates on the points, as sweep.json keeps their verdicts."""
    return [v.to_json() for v in judge("sweep", SweepContext(gates, points, crossovers(points), "baseline"))]


def describe(v: dict) -> str:
    return Verdict.from_json(v).line()


CURVE = [point(1, 1.3), point(4, 1.2), point(16, 0.9), point(64, 0.6)]  # crossover 2^(2 + 2 x 0.2 / 0.3) = 10.1


def test_speedup_through_passes_when_every_point_up_to_it_pays_and_fails_naming_those_that_do_not():
    (passed,) = verdicts_of({"min_speedup_through": {"eagle3": {"concurrency": 4, "ratio": 1.1}}}, CURVE)
    assert (passed["status"], passed["value"], passed["threshold"]) == (PASSED, 1.2, 1.1)
    assert passed["detail"] == "eagle3: speedup >= 1.1x at every swept concurrency <= 4 (lowest 1.20x at 4)"
    (failed,) = verdicts_of({"min_speedup_through": {"eagle3": {"concurrency": 16, "ratio": 1.1}}}, CURVE)
    assert (failed["status"], failed["value"]) == (FAILED, 0.9)
    assert failed["detail"] == "eagle3: speedup below 1.1x at concurrency <= 16: 0.90x at 16"


def test_crossover_at_least_passes_above_and_fails_below_its_floor():
    (passed,) = verdicts_of({"crossover_at_least": {"eagle3": 8}}, CURVE)
    assert passed["status"] == PASSED and passed["value"] == pytest.approx(10.1)
    assert passed["detail"] == "eagle3 pays up to concurrency ~10.1 (1.20x at 4, 0.90x at 16): crossover >= 8"
    (failed,) = verdicts_of({"crossover_at_least": {"eagle3": 16}}, CURVE)
    assert failed["status"] == FAILED and "crossover below 16" in failed["detail"]
    (losing,) = verdicts_of({"crossover_at_least": {"eagle3": 1}}, [point(1, 0.8), point(4, 0.7)])
    assert losing["status"] == FAILED and losing["value"] is None
    assert losing["detail"] == "eagle3 does not pay even at concurrency 1 (speedup 0.80x); the crossover must be >= 1"


@pytest.mark.parametrize("gates, points, why", [
    ({"min_speedup_through": {"eagle3": {"concurrency": 2, "ratio": 1.0}}}, [point(4, 1.2), point(8, 1.1)],
     "eagle3: no swept point has concurrency <= 2, so its speedup there was not measured"),
    ({"min_speedup_through": {"eagle3": {"concurrency": 8, "ratio": 1.0}}},
     [point(4, 1.2), point(8, None, status="failed")],
     "eagle3: point concurrency-8 (concurrency 8) has no speedup (arm status failed)"),
    ({"crossover_at_least": {"eagle3": 8}}, [point(4, 1.2)],
     "eagle3: no crossover, since no curve has its speedup at two or more concurrencies (sweep workload.concurrency)"),
    ({"crossover_at_least": {"eagle3": 32}}, [point(4, 1.2), point(16, 1.05)],
     "eagle3 pays at every concurrency swept, up to 16 (1.05x there): the crossover lies past 16; "
     "sweep up to 32 or beyond to decide"),
])
def test_a_gate_the_sweep_cannot_decide_is_not_evaluable_with_the_reason(gates, points, why):
    (verdict,) = verdicts_of(gates, points)
    assert (verdict["status"], verdict["detail"]) == (NOT_EVALUABLE, why)


def test_each_setting_of_the_other_swept_keys_is_its_own_curve_and_verdict():
    points = [point(1, 1.6, "drafter.num_steps=2"), point(16, 0.9, "drafter.num_steps=2"),
              point(1, 1.8, "drafter.num_steps=4"), point(16, 1.1, "drafter.num_steps=4")]
    found = verdicts_of({"min_speedup_through": {"eagle3": {"concurrency": 16, "ratio": 1.0}},
                         "crossover_at_least": {"eagle3": 4}}, points)
    by = {(v["name"], tuple(v["with"])): v["status"] for v in found}
    assert by == {("min_speedup_through", ("drafter.num_steps=2",)): FAILED,
                  ("min_speedup_through", ("drafter.num_steps=4",)): PASSED,
                  ("crossover_at_least", ("drafter.num_steps=2",)): PASSED,  # ~10.8, between 1 and 16
                  ("crossover_at_least", ("drafter.num_steps=4",)): PASSED}
    failed = next(v for v in found if v["status"] == FAILED)
    assert describe(failed) == ("FAILED min_speedup_through eagle3 (with drafter.num_steps=2): "
                                "eagle3: speedup below 1x at concurrency <= 16: 0.90x at 16")


def test_verdicts_are_listed_in_the_summary():
    points = CURVE
    data = {"experiment": "sim_crossover", "status": "finished", "exit_status": 1, "points": points,
            "crossovers": crossovers(points), "sweep_gates": verdicts_of({"crossover_at_least": {"eagle3": 16}}, points)}
    text = summary(data)
    assert "## Sweep gates" in text and "- FAILED crossover_at_least eagle3: eagle3 pays up to concurrency ~10.1" in text


@pytest.mark.parametrize("override, sentence", [
    ("+sweep_gate.crossover_at_least.eagle=4",
     "sweep_gate.crossover_at_least.eagle names arm 'eagle', which is not an arm; arms: baseline, eagle3"),
    ("+sweep_gate.crossover_at_least.baseline=4",
     "sweep_gate.crossover_at_least.baseline names the plain arm 'baseline', which has no speedup over itself; "
     "name a speculative arm"),
    ("plain_arm=null", "sweep_gate.min_speedup_through.eagle3 needs plain_arm (the plain-decoding arm its speedup "
                       "is measured against)"),
    ("sweep_gate.min_speedup_through.eagle3.concurrency=0",
     "sweep_gate.min_speedup_through.eagle3.concurrency must be a finite number >= 1 and <= 100000, got 0"),
    ("sweep_gate.min_speedup_through.eagle3.ratio=0",
     "sweep_gate.min_speedup_through.eagle3.ratio must be a finite number > 0, got 0"),
    ("sweep_gate.crossover_at_least.eagle3=0", "sweep_gate.crossover_at_least.eagle3 must be a finite number >= 1, got 0"),
    ("sweep_gate.min_speedup_through.eagle3=1.1",
     "sweep_gate.min_speedup_through.eagle3 must be a mapping of concurrency, ratio, got 1.1"),
])
def test_a_wrong_sweep_gate_is_one_sentence_at_compose_time(override, sentence):
    with pytest.raises(ConfigError) as caught:
        compose([*EXP, override])
    assert str(caught.value) == sentence


def test_a_wrong_sweep_gate_stops_the_sweep_before_any_server(tmp_path, capsys):
    root = tmp_path / "runs"
    status = cli.main(["sweep", *EXP, "workload.concurrency=1,2", "+sweep_gate.crossover_at_least.eagle=4",
                       f"record.root={root}"])
    assert status == 4 and not root.exists()
    assert capsys.readouterr().err.strip() == (
        "specgate: sweep point 0 (workload.concurrency=1): sweep_gate.crossover_at_least.eagle names arm 'eagle', "
        "which is not an arm; arms: baseline, eagle3")
    status = cli.main(["sweep", *EXP, "sweep_gate.crossover_at_least.eagle3=2,4", f"record.root={root}"])
    assert status == 4 and not root.exists()
    assert "sweep_gate cannot be swept" in capsys.readouterr().err


def test_a_speedup_whose_interval_holds_the_threshold_is_undecided_not_passed_or_failed():
    """A point measured 1.15x with a 95 % interval of 1.05-1.25 against a 1.1x floor: the data
    cannot tell (seen: a busy box read 0.80x where a quiet one reads 1.28x), so the sweep gate
    neither passes nor fails; the sweep exits 6, and more load per point would decide it."""
    gate = {"min_speedup_through": {"eagle3": {"concurrency": 4, "ratio": 1.1}}}
    (open_,) = verdicts_of(gate, [point(1, 1.3, interval=(1.2, 1.4)), point(4, 1.15, interval=(1.05, 1.25))])
    assert (open_["status"], open_["undecided"], open_["passed"]) == ("inconclusive", True, None)
    assert open_["interval"] == [1.05, 1.25] and open_["interval"][0] <= open_["value"] <= open_["interval"][1]
    assert "could not decide whether the speedup is >= 1.1x" in open_["detail"] and "1.15x at 4 (95% interval 1.05-1.25)" in open_["detail"]
    (low,) = verdicts_of(gate, [point(1, 1.3, interval=(1.2, 1.4)), point(4, 1.0, interval=(0.95, 1.05))])
    assert low["status"] == FAILED and low["interval"] == [0.95, 1.05]  # even its upper end misses 1.1x
    (high,) = verdicts_of(gate, [point(1, 1.3, interval=(1.2, 1.4)), point(4, 1.2, interval=(1.12, 1.3))])
    assert high["status"] == PASSED  # even its lower end meets it


def test_a_crossover_is_decided_on_the_crossings_of_the_interval_ends():
    tight = [point(1, 1.3, interval=(1.25, 1.35)), point(4, 1.2, interval=(1.15, 1.25)),
             point(16, 0.9, interval=(0.85, 0.95)), point(64, 0.6, interval=(0.55, 0.65))]
    (passed,) = verdicts_of({"crossover_at_least": {"eagle3": 8}}, tight)
    assert passed["status"] == PASSED and passed["interval"][0] >= 8
    (failed,) = verdicts_of({"crossover_at_least": {"eagle3": 16}}, tight)
    assert failed["status"] == FAILED and failed["interval"][1] < 16
    wide = [point(1, 1.3, interval=(1.1, 1.5)), point(4, 1.2, interval=(0.9, 1.5)), point(16, 0.9, interval=(0.7, 1.1))]
    (open_,) = verdicts_of({"crossover_at_least": {"eagle3": 8}}, wide)
    assert (open_["status"], open_["undecided"]) == ("inconclusive", True)
    assert "could not decide whether the crossover is >= 8" in open_["detail"]
    assert "crossings of the speedups' 95% interval ends: " in open_["detail"]


def test_an_undecided_sweep_gate_makes_the_sweep_exit_6_and_a_failed_one_1():
    from harness.sweep.finish import sweep_status

    assert sweep_status([0, 0], gate_failed=False, gate_undecided=True) == 6
    assert sweep_status([0, 0], gate_failed=True, gate_undecided=True) == 1
    assert sweep_status([0, 1], gate_failed=False, gate_undecided=True) == 1
    assert sweep_status([0, 0], gate_failed=False) == 0


def test_an_undecided_sweep_gate_is_no_passed_case_in_junit():
    from harness.sweep.junit import verdict_suite

    (open_,) = verdicts_of({"min_speedup_through": {"eagle3": {"concurrency": 4, "ratio": 1.1}}},
                           [point(4, 1.15, interval=(1.05, 1.25))])
    (case,) = verdict_suite([open_]).findall("testcase")
    assert case.find("skipped").get("message").startswith("inconclusive: eagle3: could not decide")


def test_the_sweep_page_heads_an_undecided_sweep_undecided_not_failed_or_passed():
    from harness.sweep.report import verdict

    finished = {"status": "finished"}
    six = [{**point(4, 1.15), "exit_status": 6}]
    assert verdict(finished, six, [])["text"] == "UNDECIDED: 1 point(s) left a change undecided"
    (open_,) = verdicts_of({"min_speedup_through": {"eagle3": {"concurrency": 4, "ratio": 1.1}}},
                           [point(4, 1.15, interval=(1.05, 1.25))])
    assert verdict(finished, [point(4, 1.15)], [open_]) == {"status": "skipped", "text": "UNDECIDED: 1 sweep gate(s) undecided"}
    assert verdict(finished, [{**point(4, 1.15), "exit_status": 1}], [open_])["text"].startswith("FAILED: 1 point(s)")
