"""workload.shared_prefix: groups of prompts sharing an exact prefix, sized to exact token
lengths, the same text for every arm."""

from __future__ import annotations

from collections import Counter

import pytest

from harness.config.schema import SharedPrefixConfig, WorkloadConfig
from harness.load import LoadPlan
from harness.load.shared_prefix import WARMUP_GROUP, SharedPrefixPrompts
from harness.load.sizing import PromptTokenizer
from harness.sim.tokens import count_tokens, split_pieces

SIM = PromptTokenizer("the simulator's tokenizer", count_tokens)


def source(**kw) -> SharedPrefixPrompts:
    args = dict(groups=3, prompts_per_group=4, prefix_len=40, suffix_len=7, seed=0, tokenizer=SIM)
    args.update(kw)
    return SharedPrefixPrompts(**args)


def test_each_prompt_is_its_groups_prefix_then_its_own_suffix_in_exact_tokens():
    s = source()
    for index in range(12):
        text = s.prompt(index)
        prefix = s.prefix(s.group_of(index))
        assert count_tokens(prefix) == 40
        assert count_tokens(text) == 47
        assert split_pieces(text)[:40] == split_pieces(prefix)  # the prefix is a prefix in tokens, too
    texts = [s.prompt(i) for i in range(12)]
    assert len(set(texts)) == 12  # every measured prompt is its own text


def test_every_group_gets_prompts_per_group_slots_and_the_order_is_seeded():
    s = source()
    assert Counter(s.group_of(i) for i in range(12)) == {0: 4, 1: 4, 2: 4}
    assert [s.group_of(i) for i in range(12)] != sorted(s.group_of(i) for i in range(12))  # shuffled
    assert [source(ordered=True).group_of(i) for i in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert [s.group_of(i) for i in range(12, 24)] == [s.group_of(i) for i in range(12)]  # cycled past G x P
    assert source().prompt(5) == s.prompt(5)  # the same config: the same text (every arm)
    assert source(seed=1).prompt(5) != s.prompt(5)


def test_groups_differ_and_warmups_share_no_measured_prefix():
    s = source()
    prefixes = {s.prefix(g) for g in range(3)}
    assert len(prefixes) == 3
    assert s.group_of(-1) == WARMUP_GROUP
    warm = split_pieces(s.prompt(-1))
    for g in range(3):
        assert warm[:5] != split_pieces(s.prefix(g))[:5]


def test_without_a_tokenizer_lengths_are_words():
    s = source(tokenizer=None)
    assert len(s.prompt(0).split()) == 47 and len(s.prefix(s.group_of(0)).split()) == 40


def test_the_load_plan_picks_it_from_the_workload_config():
    w = WorkloadConfig(prompt=None, shared_prefix=SharedPrefixConfig(groups=2, prompts_per_group=2, prefix_len=16,
                                                                     suffix_len=4))
    plan = LoadPlan.of(w, "http://127.0.0.1:1", "m", prompt_tokenizer=SIM)
    assert isinstance(plan.prompts, SharedPrefixPrompts)
    assert plan.prompt_sizing == SIM.source
    assert count_tokens(plan.prompts.prompt(0)) == 20
    assert plan.prompts.conversation(0).intended_prompt_tokens == 20


@pytest.mark.parametrize("override, message", [
    (["workload=shared_prefix", "workload.input_len=64"], "workload.input_len is set too"),
    (["workload=shared_prefix", "workload.shared_prefix.groups=0"], "workload.shared_prefix.groups must be"),
    (["workload=shared_prefix", "workload.shared_prefix.prefix_len=-3"], "workload.shared_prefix.prefix_len must be"),
])
def test_bad_shared_prefix_configs_are_one_sentence(override, message):
    from harness.config.compose import ConfigError
    from harness.run.compose import compose

    with pytest.raises(ConfigError, match=message):
        compose(override)


def test_the_bundled_workload_composes():
    from harness.run.compose import compose

    experiment = compose(["workload=shared_prefix"])
    workload = experiment.arms[0].cfg.workload
    assert workload.shared_prefix.groups * workload.shared_prefix.prompts_per_group == workload.num_prompts
    assert workload.reset_prefix_cache is True
