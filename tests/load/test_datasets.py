"""workload.dataset: the formats read, the seeded order, a bad file's one sentence (in the
loader and as a whole run's exit status 4), multi-turn conversations against a local fake
server, the record fields, and the bundled datasets/specmix.jsonl."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.load import LoadPlan, run_load
from harness.load.conversation import Conversation, Message
from harness.load.datasets import DatasetError, load_dataset
from harness.load.prompts import DatasetPrompts, prompt_source
from harness.config.schema import WorkloadConfig
from harness.record.requests import read_lines

from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_sglang import FakeSGLang
from tests.support.runs import run_suites

ROOT = Path(__file__).resolve().parents[2]
SPECMIX = ROOT / "datasets" / "specmix.jsonl"
CATEGORIES = {"code", "prose", "extraction", "repetition", "math"}
FAKE_ANSWER = "the quick brown fox jumps"  # FakeOpenAI's first five tokens


def write(path: Path, *lines: object) -> Path:
    """A JSONL file: each line a JSON value, or a string written as it is."""
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def wl(dataset: Path, **kw) -> WorkloadConfig:
    base = dict(name="t", api="chat", dataset=str(dataset), max_tokens=5, concurrency=1, num_prompts=2,
                warmup_requests=0, timeout_s=10.0)
    return WorkloadConfig(**{**base, **kw})


# --- formats ----------------------------------------------------------------------------------


def test_jsonl_rows_give_prompt_turns_and_messages(tmp_path):
    path = write(tmp_path / "d.jsonl",
                 {"prompt": "Count from 1 to 5", "category": "repetition", "max_tokens": 12},
                 "",  # a blank line is skipped, not a row
                 {"turns": ["Write a haiku.", "Now another."], "category": "prose"},
                 {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Why?"},
                               {"role": "assistant", "content": "a reference answer"}]})
    prompt, turns, messages = load_dataset(path)
    assert prompt == Conversation(turns=("Count from 1 to 5",), category="repetition", max_tokens=12, row=0)
    assert turns == Conversation(turns=("Write a haiku.", "Now another."), category="prose", row=1)
    # messages: sent as written up to the last user message; the trailing reference answer is not sent
    assert messages.turns == ("Why?",) and messages.category is None and messages.row == 2
    assert messages.context == (Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello"))
    assert messages.messages(0, []) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Why?"}]


def test_sharegpt_array_sends_the_human_turns(tmp_path):
    records = [
        {"id": "a", "conversations": [{"from": "system", "value": "You are terse."},
                                      {"from": "human", "value": "Name a river."},
                                      {"from": "gpt", "value": "The Nile."},
                                      {"from": "human", "value": "A longer one?"},
                                      {"from": "gpt", "value": "The Amazon."}]},
        {"id": "b", "category": "chat", "conversations": [{"from": "human", "value": "Hello"}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records, indent=2))
    first, second = load_dataset(path)
    assert first.turns == ("Name a river.", "A longer one?") and first.context == (Message("system", "You are terse."),)
    assert second == Conversation(turns=("Hello",), category="chat", row=1)


def test_json_array_of_row_shapes(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"prompt": "a", "category": "x"}, {"turns": ["b", "c"], "max_tokens": 3}]))
    assert load_dataset(path) == (Conversation(turns=("a",), category="x", row=0),
                                  Conversation(turns=("b", "c"), max_tokens=3, row=1))


def test_a_relative_path_is_the_projects():
    assert load_dataset("datasets/specmix.jsonl") == load_dataset(SPECMIX)


# --- sampling ---------------------------------------------------------------------------------


def test_rows_are_drawn_in_a_seeded_order_that_cycles(tmp_path):
    path = write(tmp_path / "d.jsonl", *({"prompt": f"row {i}"} for i in range(10)))

    def rows_sent(seed: int, count: int = 10) -> list[int]:
        source = prompt_source(wl(path, seed=seed))
        return [source.conversation(i).row for i in range(count)]

    first = rows_sent(0)
    assert first == rows_sent(0)  # every arm and a replay send the same rows in the same order
    assert sorted(first) == list(range(10)) and first != list(range(10))  # every row once, shuffled
    assert rows_sent(1) != first
    assert rows_sent(0, 25) == first + first + first[:5]  # more prompts than rows: round again
    source = prompt_source(wl(path, seed=0))
    assert source.conversation(-1).row == first[-1]  # a warm-up takes a row from the end of the order


def test_max_turns_keeps_the_first_turns(tmp_path):
    path = write(tmp_path / "d.jsonl", {"turns": ["one", "two", "three"]})
    assert prompt_source(wl(path, max_turns=1)).conversation(0).turns == ("one",)
    assert prompt_source(wl(path)).conversation(0).turns == ("one", "two", "three")
    assert prompt_source(wl(path)).requests_in(4) == 12


def test_a_dataset_wins_over_a_prompt(tmp_path):
    path = write(tmp_path / "d.jsonl", {"prompt": "from the file"})
    assert isinstance(prompt_source(wl(path, prompt="fixed")), DatasetPrompts)


# --- a bad file: one sentence naming the file and the line ------------------------------------

BAD_FILES = {
    "bad JSON": (['{"prompt": "ok"}', '{"prompt": "missing brace"'], r"line 2: not valid JSON"),
    "no prompt field": (['{"prompt": "ok"}', '{"text": "what field is this?"}'],
                        r'line 2: the row has no usable prompt field; give "prompt" \(a string\)'),
    "empty category": (['{"prompt": "ok", "category": ""}'], r'line 1: "category" must be a non-empty string'),
    "bad max_tokens": (['{"prompt": "ok"}', '', '{"prompt": "ok", "max_tokens": 0}'],
                       r'line 3: "max_tokens" must be a positive integer, got 0'),
    "max_tokens past int64": (['{"prompt": "ok", "max_tokens": 99999999999999999999}'],  # crashed writing Parquet
                              r'line 1: "max_tokens" 99999999999999999999 is more than one request may have \(10000000\)'),
    "empty prompt": (['{"prompt": "  "}'], r'line 1: "prompt" must be a non-empty string'),
    "empty file": (['', ''], r"has no rows"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_file_is_one_sentence_naming_file_and_line(tmp_path, case):
    lines, sentence = BAD_FILES[case]
    path = write(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(DatasetError, match=sentence) as caught:
        load_dataset(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message


def test_a_missing_file_says_where_it_was_looked_for():
    with pytest.raises(DatasetError, match=r"workload.dataset=nope.jsonl: no such file \(.*/nope.jsonl\)"):
        load_dataset("nope.jsonl")


def test_a_bad_item_of_a_json_array_names_its_line(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "ok"}]},
                                {"conversations": [{"from": "gpt", "value": "no question"}]}], indent=2))
    with pytest.raises(DatasetError, match=r"line 10: \"conversations\" has no human turn"):
        load_dataset(path)


def test_a_bad_dataset_stops_the_run_with_exit_4_before_any_server(tmp_path):
    path = write(tmp_path / "bad.jsonl", {"prompt": "ok"}, '{"prompt": oops}')
    proc = run_suites("+exp=sim_smoke", f"workload.dataset={path}", f"record.root={tmp_path / 'runs'}",
                      "--collect-only", "-q", timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"ERROR: specgate: workload.dataset {path}, line 2: not valid JSON" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


# --- conversations against a server -----------------------------------------------------------


def test_turn_two_carries_turn_ones_answer_over_chat(tmp_path):
    path = write(tmp_path / "d.jsonl",
                 {"turns": ["first question", "second question"], "category": "math"},
                 {"prompt": "single", "category": "code", "max_tokens": 3})
    with FakeOpenAI("ok") as fake:
        res = run_load(LoadPlan.of(wl(path, num_prompts=2), fake.url, fake.model))
    assert all(r.ok for r in res.records), [r.error for r in res.records]
    second = next(b for b in fake.bodies if b["messages"][-1]["content"] == "second question")
    assert second["messages"] == [{"role": "user", "content": "first question"},
                                  {"role": "assistant", "content": FAKE_ANSWER},
                                  {"role": "user", "content": "second question"}]
    single = next(b for b in fake.bodies if b["messages"][-1]["content"] == "single")
    assert single["max_tokens"] == 3 and second["max_tokens"] == 5  # a row's max_tokens, else the workload's
    lines = sorted((r.to_json() for r in res.records), key=lambda line: (line["index"], line["turn"]))
    by_row = {(line["dataset_row"], line["turn"]): line for line in lines}
    assert set(by_row) == {(0, 0), (0, 1), (1, 0)}  # each turn is its own request record
    assert by_row[(0, 0)]["category"] == by_row[(0, 1)]["category"] == "math"
    assert by_row[(0, 0)]["index"] == by_row[(0, 1)]["index"]  # one conversation
    assert by_row[(1, 0)]["category"] == "code"
    assert by_row[(0, 1)]["send_ms"] >= by_row[(0, 0)]["end_ms"]  # turn 2 waits for turn 1's answer
    assert "answer" not in lines[0]  # the text is for the next turn, not for requests.jsonl


def test_completions_get_the_earlier_turns_and_answers_as_text(tmp_path):
    path = write(tmp_path / "d.jsonl", {"turns": ["first question", "second question"]})
    with FakeOpenAI("ok") as fake:
        res = run_load(LoadPlan.of(wl(path, api="completions", num_prompts=1), fake.url, fake.model))
    assert [r.ok for r in res.records] == [True, True], [r.error for r in res.records]
    assert [b["prompt"] for b in fake.bodies] == [
        "first question", f"first question\n\n{FAKE_ANSWER}\n\nsecond question"]


def test_generate_gets_the_cumulative_answer_of_turn_one(tmp_path):
    path = write(tmp_path / "d.jsonl", {"turns": ["first question", "second question"]})
    fake = FakeSGLang()
    try:
        res = run_load(LoadPlan.of(wl(path, api="generate", num_prompts=1), fake.url, "m"))
    finally:
        fake.close()
    assert [r.ok for r in res.records] == [True, True], [r.error for r in res.records]
    first_answer = res.records[0].answer
    assert first_answer and len(first_answer.split()) >= 2  # the whole answer, not its last chunk
    assert fake.bodies[1]["text"] == f"first question\n\n{first_answer}\n\nsecond question"
    assert res.records[1].answer is None  # the last turn's text is not kept


def test_a_failed_turn_ends_its_conversation(tmp_path):
    path = write(tmp_path / "d.jsonl", {"turns": ["first", "second"]})
    with FakeOpenAI("http500") as fake:
        res = run_load(LoadPlan.of(wl(path, num_prompts=1), fake.url, fake.model))
    assert [(r.turn, r.status) for r in res.records] == [(0, 500)] and len(fake.bodies) == 1


@pytest.mark.slow
def test_a_run_writes_category_and_row_into_requests_jsonl(tmp_path):
    path = write(tmp_path / "d.jsonl", {"turns": ["Count from 1 to 3", "Again"], "category": "repetition"},
                 {"prompt": "Describe the sea.", "category": "prose"})
    proc = run_suites("+exp=sim_smoke", "backend=process", "telemetry=off", "--arm", "baseline", f"workload.dataset={path}",
                      "workload.num_prompts=2", "workload.warmup_requests=0", "workload.max_tokens=8",
                      f"record.root={tmp_path / 'runs'}", path="suites/test_throughput.py", timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = read_lines(tmp_path / "runs" / "latest")
    assert sorted((line["dataset_row"], line["turn"], line["category"]) for line in lines) == [
        (0, 0, "repetition"), (0, 1, "repetition"), (1, 0, "prose")]


# --- the bundled dataset ----------------------------------------------------------------------


def test_specmix_has_five_categories_of_valid_rows():
    rows = load_dataset(SPECMIX)  # every row valid, or this raises naming it
    counts = collections.Counter(row.category for row in rows)
    assert set(counts) == CATEGORIES
    assert all(24 <= n <= 40 for n in counts.values()), counts
    assert any(len(row.turns) > 1 for row in rows)  # multi-turn rows, as Spec-Bench / MT-Bench have
    assert any(row.max_tokens for row in rows if row.category == "repetition")


def test_make_specmix_rebuilds_the_committed_file(tmp_path):
    """The generated categories are seeded: byte for byte the committed rows on any Python.
    code and prose read this Python's standard library, which differs a little between
    versions: their shape is what must hold."""
    builds = []
    for name in ("a.jsonl", "b.jsonl"):
        out = tmp_path / name
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_specmix.py"), str(out)], check=True,
                       capture_output=True, timeout=60)
        builds.append(out.read_text())
    assert builds[0] == builds[1]  # twice the same file

    def by_category(text: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = collections.defaultdict(list)
        for line in text.splitlines():
            found[json.loads(line)["category"]].append(line)
        return found

    rebuilt, committed = by_category(builds[0]), by_category(SPECMIX.read_text())
    for category in ("extraction", "repetition", "math"):
        assert rebuilt[category] == committed[category], category
    assert {c: len(v) for c, v in rebuilt.items()} == {c: len(v) for c, v in committed.items()}


def test_json_lines_split_rows_at_newlines_only(tmp_path):
    # U+2028, U+0085 and a form feed are valid unescaped inside a JSON string; str.splitlines()
    # used to cut the row there and refuse the file
    path = tmp_path / "odd.jsonl"
    rows = ["a\u2028b", "c\u0085d", "e\x0cf", "g\u2029h"]
    path.write_text("\r\n".join(json.dumps({"prompt": r}, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert [c.turns[0] for c in load_dataset(str(path))] == rows


def test_a_bad_row_names_its_line_and_column_in_one_sentence(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": "never closed\n')
    with pytest.raises(DatasetError) as caught:
        load_dataset(str(path))
    message = str(caught.value)
    assert message.endswith("line 2: not valid JSON at column 12: Unterminated string starting"), message
    assert " at at " not in message
