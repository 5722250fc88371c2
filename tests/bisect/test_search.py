"""`specgate bisect`'s search (harness/bisect/search.py) over a table of outcomes, and its
record when a Ctrl-C stops it: the first bad value, skipped values, ends that are no
regression, an A/B that cannot decide, what an interrupt keeps."""

from __future__ import annotations

import json
import math

import pytest

from harness.bisect.driver import BisectDriver, BisectRun
from harness.bisect.plan import BisectPlan
from harness.bisect.record import BisectRecord
from harness.bisect.search import REGRESSED, SAME, SKIPPED, UNDECIDED, Probe, Search
from harness.config.compose import DEFAULT_CONF_DIR

VALUES = [f"4.{i}" for i in range(10)]  # 4.0 (good) ... 4.9 (bad)


def table(first_bad: int, skipped=(), undecided=()):
    """A judge: the values from `first_bad` on regressed, the rest the same; some unmeasurable."""
    def judge(index: int) -> Probe:
        if index in skipped:
            return Probe(index, VALUES[index], SKIPPED, "side B: the server exited with status 1 during start-up")
        if index in undecided:
            return Probe(index, VALUES[index], UNDECIDED, "default ab.output_tok_s inconclusive")
        return Probe(index, VALUES[index], REGRESSED if index >= first_bad else SAME, "as the table says")
    return judge


@pytest.mark.parametrize("first_bad", range(1, 10))
def test_the_first_bad_value_is_found_in_about_log2_probes(first_bad):
    search = Search(VALUES, table(first_bad))
    search.run()
    assert search.first_bad == VALUES[first_bad] and search.candidates == [VALUES[first_bad]] and not search.stopped
    assert search.probes[0].index == 9  # the ends first
    assert len(search.probes) <= 1 + math.ceil(math.log2(9))


def test_a_value_that_cannot_be_measured_is_skipped_and_the_next_nearest_the_middle_probed():
    search = Search(VALUES, table(6, skipped={4}))
    search.run()
    assert search.first_bad == "4.6"
    assert [(p.index, p.outcome) for p in search.probes[:3]] == [(9, REGRESSED), (4, SKIPPED), (5, SAME)]
    # when only skipped values are left before the bad one, the first bad is one of them or it
    only = Search(VALUES, table(5, skipped={3, 4}))
    only.run()
    assert only.first_bad is None and only.candidates == ["4.3", "4.4", "4.5"]


@pytest.mark.parametrize("judge, words", [
    (table(10), "the last value 4.9 is no worse than the first 4.0 (as the table says): there is no regression"),
    (table(3, skipped={9}), "the last value 4.9 could not be measured against the first 4.0: side B: the server exited"),
    (table(3, undecided={9}), "the A/B of the last value 4.9 against the first 4.0 could not decide"),
])
def test_ends_that_are_no_regression_stop_it_in_one_sentence(judge, words):
    search = Search(VALUES, judge)
    search.run()
    assert search.stopped.startswith(words) and search.candidates == [] and len(search.probes) == 1


def test_an_undecided_probe_stops_it_saying_the_range_left():
    search = Search(VALUES, table(7, undecided={4}))
    search.run()
    assert search.first_bad is None and search.candidates == []
    assert search.stopped == ("the A/B of 4.4 against 4.0 could not decide (default ab.output_tok_s inconclusive); "
                              "the first bad value lies after 4.0, at or before 4.9")


def test_ctrl_c_keeps_the_probes_that_ended_in_the_record(tmp_path):
    plan = BisectPlan.of(["+exp=sim_smoke", "backend=process", f"record.root={tmp_path}",
                          "server.sim.decode_step_ms=" + ",".join(VALUES)], DEFAULT_CONF_DIR)
    run = BisectRun(plan, BisectRecord(plan, ["specgate", "bisect"]))
    judged = table(6)

    def judge(index: int) -> Probe:
        if len(run.search.probes) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the third probe
        return judged(index)
    run.search.judge = judge
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert BisectDriver().interrupted(run) == 2
    data = json.loads((run.record.path / "bisect.json").read_text())
    assert data["status"] == "interrupted" and data["exit_status"] == 2
    assert [(p["value"], p["outcome"]) for p in data["probes"]] == [("4.9", REGRESSED), ("4.4", SAME)]
    summary = (run.record.path / "summary.md").read_text()
    assert ("interrupted before it found the first bad value; the probes that ended are kept: it lies after 4.4, "
            "at or before 4.9") in summary
