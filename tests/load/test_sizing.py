"""workload.input_len in tokens: prompts sized by a tokenizer (harness/load/sizing.py), and
the check of the server's prompt_tokens against the length meant (harness/measure/prompt_length.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.engines import ENGINES
from harness.load import LoadPlan, RequestRecord, run_load
from harness.load.prompts import RandomWords
from harness.load.sizing import MAX_COUNTS, PromptTokenizer, SizingError, local_tokenizer, server_tokenizer, sized_words
from harness.measure.metrics import summarize
from harness.measure.prompt_length import combine, judge, sentence
from harness.config.schema import WorkloadConfig
from harness.sim.tokens import count_tokens


def pieces(text: str) -> int:
    """A tokenizer with a BOS whose words of more than four letters are two tokens."""
    return 1 + sum(1 if len(word) <= 4 else 2 for word in text.split())


class Counted:
    """A counting function that remembers how often it was asked."""

    def __init__(self, count):
        self.count, self.calls = count, 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return self.count(text)


# --- sizing --------------------------------------------------------------------------------


def test_the_simulators_tokenizer_sizes_exactly_and_repeatably():
    source = RandomWords(128, seed=5, tokenizer=PromptTokenizer("sim", count_tokens))
    prompts = [source.prompt(i) for i in range(-2, 6)]
    assert all(count_tokens(p) == 128 for p in prompts)
    assert len(set(prompts)) == len(prompts)  # each index its own prompt
    again = RandomWords(128, seed=5, tokenizer=PromptTokenizer("sim", count_tokens))
    assert [again.prompt(i) for i in range(-2, 6)] == prompts


@pytest.mark.parametrize("target", [2, 3, 17, 128, 513])
def test_sizing_lands_exactly_when_words_are_several_tokens(target):
    for index in range(20):
        count = Counted(pieces)
        text = sized_words(lambda n: RandomWords(0, 1).words(index, n), target, count)
        assert pieces(text) == target, (index, text)
        assert count.calls <= MAX_COUNTS


def test_a_gap_no_prefix_can_hit_is_filled_with_short_words():
    words = lambda n: ["window"] * n  # two tokens each: every prefix has an even count
    text = sized_words(words, 7, lambda t: sum(1 if len(w) <= 4 else 2 for w in t.split()))
    assert text == "window window window the"


def test_a_target_below_one_word_gets_the_shortest_prompt():
    assert sized_words(lambda n: ["window"] * n, 1, pieces) == "window"  # BOS + 2: the closest there is


def test_a_sized_prompt_is_counted_once_per_index():
    count = Counted(count_tokens)
    source = RandomWords(64, tokenizer=PromptTokenizer("sim", count))
    first = source.prompt(3)
    calls = count.calls
    assert source.prompt(3) == first and count.calls == calls


def test_without_a_tokenizer_prompts_stay_input_len_words():
    assert len(RandomWords(40, 2).prompt(0).split()) == 40


# --- the local tokenizer folder --------------------------------------------------------------


def test_a_missing_tokenizers_package_is_one_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails, whether or not it is installed
    with pytest.raises(SizingError) as info:
        local_tokenizer(".cache/tiny-models/target")
    message = str(info.value)
    assert "needs the `tokenizers` package, which is not installed" in message and message.count(". ") == 0


def test_a_folder_without_tokenizer_json_stops_the_config(tmp_path):
    with pytest.raises(ConfigError, match="no tokenizer.json at"):
        compose(["+exp=sim_smoke", "workload=random_io", f"+workload.tokenizer={tmp_path}"])


@pytest.mark.engine_setup  # make install's tiny model (scripts/ensure_vllm_cpu.sh)
def test_a_real_tokenizer_json_sizes_exactly():
    import tokenizers  # a dependency of the project (pyproject.toml)

    model = Path(__file__).resolve().parents[2] / ".cache" / "tiny-models" / "target"  # make install's
    tokenizer = local_tokenizer(str(model))
    source = RandomWords(100, tokenizer=tokenizer)
    exact = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    assert all(len(exact.encode(source.prompt(i)).ids) == 100 for i in range(5))


# --- the server's /tokenize ------------------------------------------------------------------


def completions(**kw) -> WorkloadConfig:
    base = dict(name="t", api="completions", prompt=None, input_len=40, max_tokens=4, concurrency=2,
                num_prompts=6, warmup_requests=2, timeout_s=10.0)
    return WorkloadConfig(**{**base, **kw})


def test_the_servers_tokenize_sizes_every_prompt_before_the_warm_up(fake_openai):
    fake = fake_openai(chars_per_token=4)  # words of 5+ letters are 2 tokens: words alone would miss
    load = run_load(LoadPlan.of(completions(), fake.url, fake.model,
                                prompt_tokenizer=server_tokenizer(fake.url, "/tokenize", fake.model)))
    generations = [i for i, path in enumerate(fake.posts) if path != "/tokenize"]
    assert fake.posts[:generations[0]].count("/tokenize") >= 8  # 2 warm-ups + 6 measured, sized first
    assert "/tokenize" not in fake.posts[generations[0]:]  # nothing sized on the clock
    assert [r.prompt_tokens for r in load.records] == [40] * 8
    assert all(r.intended_prompt_tokens == 40 for r in load.records)
    assert load.prompt_sizing == "the server's /tokenize"
    result = summarize("eagle3", load)
    assert result.prompt_length["mismatched"] == 0 and sentence("eagle3", result.prompt_length) is None


def test_prompts_sized_by_another_tokenizer_are_reported(fake_openai):
    fake = fake_openai(chars_per_token=4)
    words = PromptTokenizer("tokenizer /models/other/tokenizer.json", lambda text: len(text.split()))
    load = run_load(LoadPlan.of(completions(), fake.url, fake.model, prompt_tokenizer=words))
    line = sentence("eagle3", summarize("eagle3", load).prompt_length)
    assert line.startswith("eagle3: 6 of 6 requests had ")
    assert line.endswith("prompt tokens, not the 40 intended (the tokenizer used to size prompts, "
                         "tokenizer /models/other/tokenizer.json, is not the server's?)")


def test_a_failing_tokenize_route_is_one_sentence(fake_openai):
    fake = fake_openai()
    with pytest.raises(SizingError, match=r"sizing prompts by the server's /nope failed .*HTTP 404"):
        server_tokenizer(fake.url, "/nope", fake.model).count("the of and")


def test_which_engine_sizes_how():
    cfg = compose(["+exp=sim_smoke", "workload=random_io"]).arm("baseline").typed
    assert ENGINES["sim"].prompt_tokenizer(cfg, "http://x", "m").count("the of and") == 3
    assert ENGINES["vllm"].prompt_tokenizer(cfg, "http://x", "m").remote
    assert ENGINES["sglang"].tokenize_route == "/tokenize"


# --- the mismatch report -----------------------------------------------------------------------


def record(prompt_tokens: int, intended: int | None = 128, warmup: bool = False, ok: bool = True) -> RequestRecord:
    return RequestRecord(index=0, warmup=warmup, status=200, end_time=1.0, error=None if ok else "boom",
                         prompt_tokens=prompt_tokens, intended_prompt_tokens=intended)


def test_completions_prompts_off_their_length_are_counted_with_their_range():
    records = [record(128)] * 28 + [record(131 + i % 10) for i in range(12)]
    records += [record(500, warmup=True), record(600, ok=False), record(700, intended=None)]  # none of these count
    block = judge(records, "completions", "tokenizer /m/tokenizer.json")
    assert (block["checked"], block["mismatched"], block["mismatched_range"]) == (40, 12, [131, 140])
    assert sentence("eagle3", block) == ("eagle3: 12 of 40 requests had 131-140 prompt tokens, not the 128 intended "
                                         "(the tokenizer used to size prompts, tokenizer /m/tokenizer.json, is not "
                                         "the server's?)")


def test_chat_reports_the_templates_constant_not_a_mismatch():
    block = judge([record(135)] * 10, "chat", "the server's /tokenize")
    assert (block["template_tokens"], block["mismatched"]) == (7, 0)
    assert sentence("a", block) == "a: every prompt had its 128 tokens; the chat template added 7 to each"
    block = judge([record(135)] * 10 + [record(139), record(141)], "chat", "the server's /tokenize")
    assert (block["mismatched"], block["mismatched_range"]) == (2, [139, 141])
    assert "not the 128 intended + 7 of the chat template" in sentence("a", block)


def test_unsized_words_say_that_no_tokenizer_was_known():
    line = sentence("a", judge([record(150)], "completions", None))
    assert line.endswith("(no tokenizer was known to size them, so they were input_len words: set workload.tokenizer)")


def test_repeats_combine_counts_and_ranges():
    one = judge([record(128), record(130)], "completions", "x")
    two = judge([record(126), record(128)], "completions", "x")
    both = combine([one, None, two])
    assert (both["checked"], both["mismatched"], both["mismatched_range"]) == (4, 2, [126, 130])
    assert combine([None]) is None
