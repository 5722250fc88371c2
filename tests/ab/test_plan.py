"""What `specgate ab` compares, checked before any server starts: each mistake one sentence,
exit status 4, nothing written."""

from __future__ import annotations

import pytest

from harness import cli
from harness.ab.plan import ABPlan, split_sides
from harness.config.compose import ConfigError
from harness.config.compose import DEFAULT_CONF_DIR


def test_prefixed_overrides_are_a_sides_own_and_win_over_the_common_ones():
    plan = ABPlan.of(["+exp=sim_smoke", "server.sim.decode_step_ms=4.0", "b:server.sim.decode_step_ms=4.4",
                      "a:nccl=default", "ab.rounds=4"], DEFAULT_CONF_DIR)
    step = lambda side: plan.arm(side, "baseline").cfg.server.sim.decode_step_ms
    assert (step("A"), step("B")) == (4.0, 4.4)
    assert plan.own == {"A": ["nccl=default"], "B": ["server.sim.decode_step_ms=4.4"]}
    assert plan.arm_names == ["baseline", "eagle3"]  # the plain arm first, as a run measures them
    assert [plan.order_of(r) for r in range(4)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]  # ABBA
    assert plan.describe("A") == "nccl=default" and plan.rounds == 4 and not plan.keep_up


@pytest.mark.parametrize("tokens, sentence", [
    (["+exp=sim_smoke"], "an A/B needs what differs: give side A or B its own overrides"),
    (["+exp=sim_smoke", "b:"], "'b:' gives side B no override; write it as b:group.option=value"),
    (["+exp=sim_smoke", "b:workload.max_tokens=50"],
     "arm 'baseline' measures something else on side B than on side A (workload.max_tokens: 500 on A, 50 on B); "
     "an A/B compares how one workload is served"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.rounds=1"],
     "ab.rounds must be a finite number >= 2 and <= 100 (e.g. 3, or auto), got 1"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.rounds=some"],
     "ab.rounds is 'some'; a whole number of rounds (at least 2), or auto to run rounds until every verdict is "
     "decided (at most ab.max_rounds=10)"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.rounds=2.5"], "ab.rounds is '2.5'; a whole number"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.rounds=auto", "ab.max_rounds=2"],
     "ab.max_rounds must be a finite number >= 3 and <= 100 (e.g. 10), got 2"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.order=random"], "ab.order is 'random'; one of abba, alternate"),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "b:ab.rounds=5"], "ab.* differs between the sides"),
    (["+exp=sim_smoke", "b:server.sim.decode_stepms=4.4"], "side B: "),
    (["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "-k", "eagle3"], "specgate ab takes Hydra overrides only"),
    (["+exp=sim_smoke", "b:+exp=sim_crossover"], "measures something else on side B than on side A"),
])
def test_each_mistake_is_one_sentence_before_any_server(tokens, sentence, tmp_path, capsys):
    assert cli.main(["ab", *tokens, f"record.root={tmp_path / 'runs'}"]) == 4
    err = capsys.readouterr().err
    assert sentence in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()  # nothing written


def test_split_sides_keeps_the_command_lines_order():
    common, own = split_sides(["+exp=x", "B:a=1", "k=v", "a:b=2", "b:c=3"])
    assert common == ["+exp=x", "k=v"] and own == {"A": ["b=2"], "B": ["a=1", "c=3"]}
    with pytest.raises(ConfigError):
        split_sides(["+exp=x", "k=v"])


def test_rounds_auto_plans_up_to_max_rounds_and_says_so():
    plan = ABPlan.of(["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4", "ab.rounds=auto", "ab.max_rounds=6"],
                     DEFAULT_CONF_DIR)
    assert plan.sequential and plan.rounds == 6 and plan.rounds_words == "up to 6 rounds, until decided"
    fixed = ABPlan.of(["+exp=sim_smoke", "b:server.sim.decode_step_ms=4.4"], DEFAULT_CONF_DIR)
    assert not fixed.sequential and fixed.rounds == 3 and fixed.rounds_words == "3 rounds"
