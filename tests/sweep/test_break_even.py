"""The measured break-even accept length (harness/sweep/break_even.py) on made-up observations:
the crossing and its interval by arithmetic that can be checked by hand, the words when the
speedups do not cross, and how a sweep's points and arms are grouped into curves (a sweep folder
written by hand, as tests/schedule/fake_sweep.py writes one). No server starts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.gates.change import BOOTSTRAP_RESAMPLES
from harness.sweep.break_even import Observation, analysed, crossing, measured_break_even
from harness.sweep.record import headline, summary
from tests.schedule.fake_sweep import arm_config, arm_lines

LENGTHS = [1.5, 2.25, 3.0]


def line_of(slope: float, lengths=LENGTHS, replicas=None, formula=None, forced="drafter.forced_accept_length"):
    """Observations on the line speedup = slope x accept length (the simulator's shape), whose
    crossing is 1 / slope exactly."""
    return [Observation(f"acc_{n}", length, slope * length, formula, forced,
                        None if replicas is None else replicas[n], None) for n, length in enumerate(lengths)]


def entry_of(found, confidence=0.95, concurrency=1, k=2):
    return analysed((concurrency, k, ()), found, [], confidence)


# --- the crossing ----------------------------------------------------------------------------

def test_a_straight_line_crosses_one_where_it_is_exactly_one():
    found = line_of(1 / 1.875)  # sim_crossover's truth at concurrency 1: 7.5 ms / 4 ms
    entry = entry_of(found)
    assert entry["measured"] == pytest.approx(1.875, abs=1e-4)
    assert entry["points"] == [[1.5, 0.8, None], [2.25, 1.2, None], [3.0, 1.6, None]]
    assert entry["words"].startswith("break-even accept length 1.88 (no interval: acc_0's speedup has no interval")
    assert "between 1.50 (0.80x) and 2.25 (1.20x)" in entry["words"]


def test_the_crossing_interpolates_between_the_two_observations_around_it_only():
    """Not a fit through every point: a far point off the line does not move the crossing."""
    assert crossing([1.0, 2.0, 3.0], [0.5, 1.5, 9.0]) == pytest.approx(1.5)
    assert crossing([1.0, 2.0, 3.0], [0.5, 0.75, 1.25]) == pytest.approx(2.5)
    assert crossing([1.0, 2.0], [0.9, 1.0]) == pytest.approx(2.0)  # exactly 1 pays


def test_the_measured_accept_length_is_the_x_coordinate_not_the_forced_one():
    """Observations sorted by what they measured: a forced 1.5 that measured 1.66 sits there."""
    found = [Observation("acc_3", 2.62, 1.05, forced="3"), Observation("acc_1_5", 1.66, 0.66, forced="1.5")]
    entry = entry_of(found)
    assert [p[0] for p in entry["points"]] == [1.66, 2.62]
    assert entry["measured"] == pytest.approx(1.66 + (1 - 0.66) / (1.05 - 0.66) * (2.62 - 1.66), abs=1e-4)


def test_every_replica_curve_crossing_gives_the_interval_and_it_holds_the_point():
    """Replica j scales the whole line by e_j, so it crosses at 1 / (slope e_j): the interval is
    those crossings' percentiles, the point inside."""
    rng, slope = np.random.default_rng(3), 1 / 2.0
    scale = np.exp(rng.normal(0.0, 0.03, BOOTSTRAP_RESAMPLES))
    replicas = [slope * length * scale for length in LENGTHS]
    entry = entry_of(line_of(slope, replicas=replicas))
    crossings = 1.0 / (slope * scale)
    low, high = np.percentile(crossings, [5.0, 95.0])
    assert entry["measured"] == pytest.approx(2.0)
    assert entry["interval"][0] == pytest.approx(low, abs=2e-4) and entry["interval"][1] == pytest.approx(high, abs=2e-4)
    assert entry["interval"][0] < 2.0 < entry["interval"][1]
    assert f"interval {entry['interval'][0]:.2f} to {entry['interval'][1]:.2f}" in entry["words"]


def test_a_narrower_confidence_gives_a_narrower_interval():
    rng, slope = np.random.default_rng(4), 1 / 2.0
    scale = np.exp(rng.normal(0.0, 0.03, BOOTSTRAP_RESAMPLES))
    found = line_of(slope, replicas=[slope * length * scale for length in LENGTHS])
    wide, narrow = entry_of(found, 0.95)["interval"], entry_of(found, 0.75)["interval"]
    assert wide[0] < narrow[0] < 2.0 < narrow[1] < wide[1]


def test_an_interval_end_is_open_when_more_than_its_tail_of_replicas_cross_off_that_end():
    """A break-even just above the lowest length swept: the replicas that pay there too cross
    below the range. 10 % of them (more than the 5 % tail) opens the low end; 3 % does not."""
    slope = 1 / 1.6
    for share, open_ in ((0.10, True), (0.03, False)):
        scale = np.ones(BOOTSTRAP_RESAMPLES)
        scale[: int(share * BOOTSTRAP_RESAMPLES)] = 1.2  # 1.5 x 1.2 / 1.6 = 1.125x: pays at every length
        entry = entry_of(line_of(slope, replicas=[slope * length * scale for length in LENGTHS]))
        assert entry["measured"] == pytest.approx(1.6)
        assert (entry["interval"][0] is None) == open_, (share, entry["interval"])
        assert entry["interval"][1] == pytest.approx(1.6, abs=1e-4)  # the rest cross at 1.6 exactly
        assert ("beyond the swept accept lengths (below 1.50)" in entry["words"]) == open_


def test_the_high_end_opens_when_replicas_pay_nowhere():
    slope = 1 / 2.9
    scale = np.ones(BOOTSTRAP_RESAMPLES)
    scale[:200] = 0.9  # 3.0 x 0.9 / 2.9 < 1: no crossing inside the range
    entry = entry_of(line_of(slope, replicas=[slope * length * scale for length in LENGTHS]))
    assert entry["interval"][0] == pytest.approx(2.9, abs=1e-4) and entry["interval"][1] is None
    assert "to beyond the swept accept lengths (above 3.00)" in entry["words"]


def test_no_crossing_says_whether_it_pays_everywhere_or_nowhere():
    pays = entry_of([Observation("a", 1.5, 1.12), Observation("b", 3.0, 2.2)])
    assert pays["measured"] is None and pays["interval"] is None
    # the line through the origin: slope (1.5 x 1.12 + 3 x 2.2) / (1.5^2 + 3^2) = 0.736, so 1.0x at 1.36
    assert pays["extrapolated"] == pytest.approx(1 / ((1.5 * 1.12 + 3.0 * 2.2) / (1.5 ** 2 + 3.0 ** 2)), abs=1e-4)
    assert pays["words"] == ("pays at every accept length swept, down to 1.50 (1.12x); about 1.36 on the line through "
                             "the origin its speedups follow (extrapolated, not measured)")
    loses = entry_of([Observation("a", 1.5, 0.5, 2.6), Observation("b", 3.0, 0.87, 2.4)])
    assert loses["measured"] is None  # slope (1.5 x 0.5 + 3 x 0.87) / 11.25
    assert loses["extrapolated"] == pytest.approx(11.25 / (1.5 * 0.5 + 3.0 * 0.87), abs=1e-4)
    assert loses["words"] == ("does not pay at any accept length swept, up to 3.00 (0.87x): break-even above it; "
                              "formula 2.50; about 3.35 on the line through the origin its speedups follow "
                              "(extrapolated, not measured), past 3, the most a cycle of k=2 yields: no acceptance "
                              "pays at this drafter's cost")
    falls = entry_of([Observation("a", 1.5, 1.1), Observation("b", 3.0, 0.9)])
    assert falls["measured"] is None and falls["words"].startswith("no break-even: the speedup does not rise")


def test_the_formula_is_the_median_of_the_arms_figures():
    found = line_of(0.5)
    for o, formula in zip(found, (1.9, 2.1, 2.6)):
        o.formula = formula
    assert entry_of(found)["formula"] == 2.1


# --- grouping a sweep's arms and points into curves -------------------------------------------

def write_point(sweep: Path, n: int, swept: list[str], arms: dict[str, tuple[float, float | None, int | None, str | None]],
                concurrency: int, rng: np.random.Generator) -> dict:
    """One point's record: arms name -> (tok/s, accept length, k, benchmark_only); the plain
    arm is `baseline` (k None)."""
    label = f"{n}_point"
    record = sweep / "points" / label / "20261206T000000Z_sim_break_even"
    lines, blocks, figures = [], {}, {}
    plain = arms["baseline"][0]
    for arm, (rate, length, k, forced) in arms.items():
        (record / "arms" / arm).mkdir(parents=True)
        (record / "arms" / arm / "config.yaml").write_text(yaml.safe_dump(arm_config("sim", k)))
        lines += arm_lines(arm, rate, rng)
        blocks[arm] = {"status": "measured", "output_tok_s": rate, **({"benchmark_only": forced} if forced else {})}
        figures[arm] = {"status": "measured", "concurrency": concurrency, "accept_length": length,
                        "speedup": None if arm == "baseline" else rate / plain,
                        "break_even_accept_length": None if arm == "baseline" else 2.0,
                        **({"benchmark_only": forced} if forced else {})}
    (record / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (record / "results.json").write_text(json.dumps({"experiment": "sim_break_even", "status": "finished",
                                                     "plain_arm": "baseline", "arms": blocks}))
    return {"label": label, "swept": swept, "overrides": swept, "record": str(record.relative_to(sweep)),
            "exit_status": 0, "status": "finished", "arms": figures}


FORCED = "drafter.forced_accept_length"


def test_arms_of_a_point_group_by_concurrency_and_k_and_the_real_drafter_is_overlaid(tmp_path):
    rng = np.random.default_rng(0)
    points = [write_point(tmp_path, n, [f"workload.concurrency={c}"], {
        "baseline": (1000.0, None, None, None),
        "acc_lo": (800.0, 1.5, 2, f"{FORCED}=1.5"),
        "acc_hi": (1400.0, 3.0, 2, f"{FORCED}=3"),
        "eagle3": (1200.0, 2.4, 2, None),
        "k3": (1100.0, 2.9, 3, None),  # alone at its k: no curve, but a real drafter's arm at c
    }, c, rng) for n, c in enumerate((1, 6))]
    found = measured_break_even(tmp_path, points, "baseline")  # unasked, the curve is the forced arms
    assert [(e["concurrency"], e["k"], e["with"]) for e in found] == [(1, 2, []), (6, 2, [])]
    for entry in found:
        assert entry["arms"] == ["acc_lo", "acc_hi"]
        assert [r["arm"] for r in entry["real"]] == ["eagle3", "k3"]
        assert 1.5 < entry["measured"] < 3.0
    asked = measured_break_even(tmp_path, points, "baseline", ["acc_hi", "eagle3", "acc_lo"])  # break_even_arms
    assert [(e["concurrency"], e["k"], e["with"]) for e in asked] == [(1, 2, []), (6, 2, [])]
    for entry in asked:
        assert entry["arms"] == ["acc_lo", "eagle3", "acc_hi"]  # by measured accept length
        assert [p[0] for p in entry["points"]] == [1.5, 2.4, 3.0]
        assert all(p[2] is not None and p[2][0] <= p[1] <= p[2][1] for p in entry["points"])
        assert [r["arm"] for r in entry["real"]] == ["k3"]
        assert entry["formula"] == 2.0
        assert 1.5 < entry["measured"] < 2.4 and entry["interval"][0] <= entry["measured"] <= entry["interval"][1]
    assert measured_break_even(tmp_path, points, None) == []  # no plain arm: no speedup


def test_other_swept_keys_are_curves_of_their_own(tmp_path):
    rng = np.random.default_rng(1)
    arms = {"baseline": (1000.0, None, None, None), "a": (800.0, 1.5, 2, "x"), "b": (1300.0, 3.0, 2, "y")}
    points = [write_point(tmp_path, n, ["workload.concurrency=4", f"workload.input_len={n_len}"], arms, 4, rng)
              for n, n_len in enumerate((64, 128))]
    found = measured_break_even(tmp_path, points, "baseline")
    assert [e["with"] for e in found] == [["workload.input_len=128"], ["workload.input_len=64"]]
    assert all(e["arms"] == ["a", "b"] and e["real"] == [] for e in found)


def test_points_that_differ_only_by_a_swept_acceptance_key_are_one_curve(tmp_path):
    """`specgate sweep ... drafter.forced_accept_length=1.5,2.25,3`: each point's eagle3 arm is one
    observation of the same curve, named by its point's setting."""
    rng = np.random.default_rng(2)
    points = []
    for n, (length, rate) in enumerate(((1.5, 800.0), (2.25, 1200.0), (3.0, 1600.0))):
        points.append(write_point(tmp_path, n, ["workload.concurrency=1", f"{FORCED}={length}"], {
            "baseline": (1000.0, None, None, None), "eagle3": (rate, length, 2, f"{FORCED}={length}")}, 1, rng))
    (entry,) = measured_break_even(tmp_path, points, "baseline")
    assert entry["arms"] == [f"eagle3 ({FORCED}={v})" for v in (1.5, 2.25, 3.0)]
    assert entry["with"] == [] and entry["real"] == []
    assert entry["measured"] == pytest.approx(1.875, rel=0.08)  # Poisson-noisy rates around 0.8x and 1.2x


def test_a_drafter_choice_swept_is_one_curve_per_k(tmp_path):
    rng = np.random.default_rng(5)
    points = [write_point(tmp_path, n, ["workload.concurrency=2", f"drafter={name}"], {
        "baseline": (1000.0, None, None, None), "spec": (rate, length, 3, None)}, 2, rng)
        for n, (name, length, rate) in enumerate((("draft_random", 1.1, 600.0), ("draft_self", 3.9, 1900.0)))]
    # drafters of their own acceptance: one curve only when asked (break_even_arms), since two
    # drafters may cost differently per cycle
    assert measured_break_even(tmp_path, points, "baseline") == []
    (entry,) = measured_break_even(tmp_path, points, "baseline", ["spec"])
    assert (entry["k"], entry["arms"]) == (3, ["spec (drafter=draft_random)", "spec (drafter=draft_self)"])
    assert entry["real"] == []


def test_one_speculative_arm_per_curve_makes_no_entry(tmp_path):
    rng = np.random.default_rng(6)
    points = [write_point(tmp_path, n, [f"workload.concurrency={c}"], {
        "baseline": (1000.0, None, None, None), "eagle3": (1200.0, 2.4, 2, None)}, c, rng) for n, c in enumerate((1, 4))]
    assert measured_break_even(tmp_path, points, "baseline") == []


def test_an_unfinished_point_is_left_out(tmp_path):
    rng = np.random.default_rng(7)
    arms = {"baseline": (1000.0, None, None, None), "a": (800.0, 1.5, 2, "x"), "b": (1300.0, 3.0, 2, "y")}
    point = write_point(tmp_path, 0, ["workload.concurrency=1"], arms, 1, rng)
    assert len(measured_break_even(tmp_path, [point], "baseline")) == 1
    assert measured_break_even(tmp_path, [{**point, "status": "interrupted"}], "baseline") == []


# --- sweep.json and summary.md ----------------------------------------------------------------

def test_a_forced_arm_is_benchmark_only_in_sweep_json_and_the_summary_has_the_section():
    results = {"plain_arm": "baseline", "arms": {
        "baseline": {"status": "measured"}, "acc_2": {"status": "measured", "benchmark_only": f"{FORCED}=2"},
        "eagle3": {"status": "measured"}}}
    arms = headline(results)
    assert arms["acc_2"]["benchmark_only"] == f"{FORCED}=2"
    assert "benchmark_only" not in arms["eagle3"] and "benchmark_only" not in arms["baseline"]
    entry = {"concurrency": 6, "k": 2, "with": ["workload.input_len=64"], "words": "break-even accept length 2.56 (...)"}
    text = summary({"experiment": "x", "status": "finished", "exit_status": 0, "points": [],
                    "break_even_accept_length": [entry]})
    assert ("## Break-even accept length (measured)\n\n- concurrency 6, k=2 with workload.input_len=64: "
            "break-even accept length 2.56 (...)") in text


def test_the_rounded_interval_still_holds_the_point():
    """Ends rounded outwards (4 decimals), as the schedule's speedup intervals are."""
    rng, slope = np.random.default_rng(8), 1 / 2.123456
    scale = np.exp(rng.normal(0.0, 0.01, BOOTSTRAP_RESAMPLES))
    entry = entry_of(line_of(slope, replicas=[slope * length * scale for length in LENGTHS]))
    low, high = entry["interval"]
    assert low <= entry["measured"] <= high and math.isclose(entry["measured"], 2.1235, abs_tol=1e-4)


def test_the_report_draws_both_charts_with_open_ends_and_no_crossings():
    """The map from sweep.json alone: an entry with an open end, one that pays everywhere, one
    that pays nowhere, a real drafter's arm; each line said in words."""
    from harness.sweep.report import sweep_context

    def entry(c, measured, interval, speedups, words):
        return {"concurrency": c, "k": 2, "arms": ["a", "b"], "with": [], "measured": measured, "interval": interval,
                "formula": 2.0, "points": [[1.5, speedups[0], [speedups[0] - 0.05, speedups[0] + 0.05]],
                                           [3.0, speedups[1], None]],
                "real": [{"arm": "eagle3", "accept_length": 2.4, "speedup": 1.1}], "words": words}

    data = {"experiment": "sim_break_even", "status": "finished", "exit_status": 0, "points": [],
            "break_even_accept_length": [entry(1, 1.9, [None, 2.1], (0.8, 1.6), "one"),
                                         entry(2, None, None, (1.1, 1.9), "two"),
                                         entry(4, None, None, (0.5, 0.9), "three")]}
    context = sweep_context(data, "x")
    assert context["break_even"] == ["concurrency 1, k=2: one", "concurrency 2, k=2: two", "concurrency 4, k=2: three"]
    assert context["break_even_speedup_chart"].startswith("data:image/png;base64,")
    assert context["break_even_map_chart"].startswith("data:image/png;base64,")
    assert sweep_context({**data, "break_even_accept_length": []}, "x")["break_even_map_chart"] is None


@pytest.mark.parametrize("overrides, said", [
    (["break_even_arms=[acc_2_25,nope]"], "break_even_arms names 'nope', not an arm"),
    (["break_even_arms=[baseline]"], "break_even_arms names 'baseline', the plain arm"),
    (["break_even_arms=[acc_3]", "plain_arm=null"], "break_even_arms needs plain_arm"),
])
def test_break_even_arms_name_speculative_arms_of_an_experiment_with_a_plain_arm(overrides, said):
    from harness.config.compose import ConfigError
    from harness.run.compose import compose

    with pytest.raises(ConfigError, match=said):
        compose(["+exp=sim_break_even", *overrides])
    assert compose(["+exp=sim_break_even", "break_even_arms=[acc_3,eagle3]"]).base.break_even_arms == ["acc_3", "eagle3"]


def test_a_curve_whose_speedup_falls_beyond_its_intervals_gives_no_break_even():
    """Seen on vLLM's CPU build beside other work: 0.79x at 2.51, 2.41x at 3.52, 0.29x at 4.00:
    arms that share a cycle's cost cannot fall like that; their speeds were not measured alike."""
    found = [Observation("a", 2.51, 0.79, interval=[0.44, 1.34]), Observation("b", 3.52, 2.41, interval=[1.05, 4.45]),
             Observation("c", 4.0, 0.29, interval=[0.10, 0.63])]
    entry = entry_of(found)
    assert entry["measured"] is None and entry["interval"] is None and entry["extrapolated"] is None
    assert entry["words"].startswith("no break-even: the speedup falls from 2.41x at 3.52 to 0.29x at 4.00, beyond both")
    overlapping = [Observation("a", 2.0, 0.9, interval=[0.8, 1.0]), Observation("b", 3.0, 0.85, interval=[0.7, 1.3]),
                   Observation("c", 3.5, 1.2, interval=[1.1, 1.3])]
    assert entry_of(overlapping)["measured"] is not None  # a dip within the noise: still read
