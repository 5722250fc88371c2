"""workload.trace_content: a trace replay's prompts drawn from a corpus (harness/load/trace_prompts.py)
instead of filler words, one category a request, sized to the trace's lengths with its prefix
sharing kept; the record says which content a replay used, and marks accept lengths on filler as
not representative (results.json's trace block, the summary, the report); a replay with specmix's
text on the simulator gives specmix's acceptance where filler gives the simulator's default (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.config.compose import ConfigError
from harness.load.datasets import DatasetError, dataset_digest
from harness.load.plan import content_of, trace_corpus
from harness.load.sizing import PromptTokenizer
from harness.load.trace import Replay, TraceError, TraceRequest, load_trace, select
from harness.load.trace_prompts import Corpus, TracePrompts
from harness.measure import trace_replay
from harness.report.html import acceptance_on_filler
from harness.run.compose import compose
from harness.sim.tokens import count_tokens, split_pieces

from tests.support.runs import run_suites

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "datasets" / "traces" / "mooncake_synthetic.jsonl"
SPECMIX = "datasets/specmix.jsonl"
SIM = PromptTokenizer("sim", count_tokens)


def common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def openings(corpus: Corpus) -> dict[str, set[str]]:
    """Each category's rows' first three words: what a prompt of that category starts with."""
    found: dict[str, set[str]] = {}
    for row in corpus.rows:
        found.setdefault(row.category, set()).add(" ".join(row.words[:3]))
    return found


def bundled(corpus: Corpus | None) -> tuple[Replay, TracePrompts, list[str]]:
    replay = select(load_trace(MOONCAKE), source="m", block_size=64, speedup=1.0)
    prompts = TracePrompts(replay, tokenizer=SIM, corpus=corpus)
    return replay, prompts, [prompts.conversation(i).turns[0] for i in range(len(replay.requests))]


def test_corpus_prompts_keep_the_traces_lengths_and_sharing_and_open_with_their_categorys_row():
    corpus = Corpus.of(SPECMIX)
    replay, prompts, texts = bundled(corpus)
    assert [count_tokens(t) for t in texts] == [r.input_length for r in replay.requests]  # exact lengths
    words = [split_pieces(t) for t in texts]  # the simulator's tokens
    for i, a in enumerate(replay.requests):
        for j, b in enumerate(replay.requests[:i]):
            shared = common_prefix(list(a.hash_ids), list(b.hash_ids))
            reach = min(shared * 64, a.input_length, b.input_length)
            assert common_prefix(words[i], words[j]) >= reach, (i, j)  # shared blocks: the same words
            if shared < min(len(a.hash_ids), len(b.hash_ids)):
                # then a block of another hash: other words within it (two rows of one category may
                # open alike, as specmix's templates do, so not from its first token)
                assert common_prefix(words[i], words[j]) < (shared + 1) * 64, (i, j)
    starts = openings(corpus)
    categories = [prompts.conversation(i).category for i in range(len(texts))]
    for text, category in zip(texts, categories):
        assert " ".join(text.split()[:3]) in starts[category], (category, text[:80])
        own = set(" ".join(r.words) for r in corpus.pool(category))
        assert all(w in " ".join(own) for w in text.split()[:40])  # its words are its category's
    first_blocks = {}
    for request, category in zip(replay.requests, categories):  # a shared first block: one row, one category
        assert first_blocks.setdefault(request.hash_ids[0], category) == category
    assert len(set(categories)) >= 2  # the trace's groups of requests draw different rows
    assert TracePrompts(replay, tokenizer=SIM, corpus=corpus).conversation(7).turns[0] == texts[7]  # every arm the same


def test_a_trace_lines_category_picks_its_rows_and_filler_has_none(tmp_path):
    corpus = Corpus.of(SPECMIX)
    requests = tuple(TraceRequest(0.1 * i, 80, 8, (i,), i + 1, "code" if i % 2 else "math") for i in range(6))
    prompts = TracePrompts(Replay(requests, (0.0,) * 6, 32, 1.0), tokenizer=SIM, corpus=corpus)
    assert [prompts.conversation(i).category for i in range(6)] == ["math", "code"] * 3
    assert all(prompts.conversation(i).turns[0].startswith("Continue this Python code") for i in (1, 3, 5))
    filler = TracePrompts(Replay(requests, (0.0,) * 6, 32, 1.0), tokenizer=SIM)
    assert filler.conversation(1).category is None and count_tokens(filler.conversation(1).turns[0]) == 80
    warmup = prompts.conversation(-1)  # a warm-up draws a row too, sized as a measured request
    assert count_tokens(warmup.turns[0]) == 80 and warmup.category in {r.category for r in corpus.rows}


def test_a_mooncake_lines_category_is_read_and_a_bad_one_is_one_sentence(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [],
                                 "category": "prose"}) + "\n")
    assert load_trace(trace)[0].category == "prose"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [],
                                 "category": 3}) + "\n")
    with pytest.raises(TraceError, match=r"line 1: category must be a non-empty string"):
        load_trace(trace)


@pytest.mark.parametrize("overrides, says", [
    (["workload.trace_content=datasets/nope.jsonl"], "workload.trace_content=datasets/nope.jsonl: no such file"),
    (["workload.trace_content=null", "+exp=sim_smoke"], None),  # filler on a trace-less experiment: nothing to say
    (["+exp=sim_smoke", f"workload.trace_content={SPECMIX}"], "but workload.trace is not set"),
])
def test_a_bad_trace_content_is_one_sentence_before_any_server(overrides, says):
    base = [] if any(o.startswith("+exp=") for o in overrides) else ["+exp=sim_trace"]
    if says is None:
        compose(base + overrides)
        return
    with pytest.raises(ConfigError, match=re.escape(says)):
        compose(base + overrides)


def test_a_category_the_corpus_lacks_names_the_line(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 20, "output_length": 2, "hash_ids": [],
                                         **({"category": "poetry"} if i == 1 else {})}) + "\n" for i in range(2)))
    with pytest.raises(ConfigError, match=r"line 2: category 'poetry' has no row in workload.trace_content "
                                          r"datasets/specmix.jsonl \(its categories: code, extraction, math, prose"):
        compose(["+exp=sim_trace", f"workload.trace={trace}", f"workload.trace_content={SPECMIX}"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"prompt": "   "}) + "\n")
    with pytest.raises(DatasetError, match=r"^workload.trace_content .*empty.jsonl, line 1: \"prompt\" must be a non-empty"):
        Corpus.of(str(empty))  # the dataset reader's sentence, naming this key


def test_the_record_says_which_content_and_marks_filler_acceptance_not_representative():
    corpus = Corpus.of(SPECMIX)
    replay = select(load_trace(MOONCAKE), source="m", block_size=64, speedup=1.0)
    workload = compose(["+exp=sim_trace_specmix"]).arms[0].typed.workload
    assert trace_corpus(workload, replay).source == SPECMIX
    said = content_of(corpus)
    assert said == {"kind": "corpus", "file": SPECMIX, "sha256": dataset_digest(SPECMIX)}
    assert content_of(None) == {"kind": "filler"}
    assert trace_replay.content_block(said)["acceptance_representative"] is True
    filler = trace_replay.content_block(None)
    assert filler == {"content": {"kind": "filler"}, "acceptance_representative": False}
    block = {"requests": 2, "lateness_ms": {"p50": 1.0, "p99": 2.0, "max": 2.0}, "held_by_cap": 0,
             "intended_offset_ms": [0.0, 500.0], "achieved_offset_ms": [0.1, 500.2]}
    assert "not representative of real content" in trace_replay.sentence("eagle3", {**block, **filler})
    assert f"drawn from {SPECMIX}" in trace_replay.sentence("eagle3", {**block, **trace_replay.content_block(said)})
    assert acceptance_on_filler({"accept_length": 2.4, "trace": filler})
    assert not acceptance_on_filler({"accept_length": None, "trace": filler})  # plain decoding: no acceptance to doubt
    assert not acceptance_on_filler({"accept_length": 2.4, "trace": trace_replay.content_block(said)})


def test_a_changed_corpus_is_another_workload():
    identity = compose(["+exp=sim_trace_specmix"]).arms[1]
    from harness.gates.baseline_match import arm_identity
    assert arm_identity(identity)["workload.trace_content_sha256"] == dataset_digest(SPECMIX)


# --- end to end ----------------------------------------------------------------------------------


def truth(probs: list[float]) -> float:
    """The simulator's true accept length for a content's acceptance probabilities (1 + p1 + p1 p2 ...)."""
    total, run = 1.0, 1.0
    for p in probs:
        run *= p
        total += run
    return total


CATEGORIES = ("code", "prose", "extraction", "math", "repetition")


def category_trace(path: Path) -> Path:
    """40 requests over 4 s, 8 of each specmix category (the trace line's `category`), each
    category's sharing a first block of 64 tokens, then one of its own; 64 tokens out."""
    lines = []
    for i in range(40):
        c = i % len(CATEGORIES)
        lines.append({"timestamp": 100 * i, "input_length": 160, "output_length": 64, "hash_ids": [1000 + c, i],
                      "category": CATEGORIES[c]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.slow
def test_a_replay_with_specmix_text_gives_specmixs_acceptance_and_filler_the_default(tmp_path):
    """On the simulator, whose acceptance depends on the text (sim_specmix's markers): eagle3 on
    specmix's text reads each category's accept length, and the mix's, near the simulator's truth
    for that text; the same replay on filler reads the simulator's default (2.4), and the record
    says it is not representative."""
    trace = category_trace(tmp_path / "trace.jsonl")
    runs = tmp_path / "runs"
    proc = run_suites("+exp=sim_trace_specmix", "backend=process", f"workload.trace={trace}",
                      '+arms.eagle3_filler=["drafter=eagle3_k25","workload.trace_content=null"]',
                      "--arm", "eagle3", "--arm", "eagle3_filler", f"record.root={runs}",
                      path="suites/test_throughput.py", timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    record = (runs / "latest").resolve()
    results = json.loads((record / "results.json").read_text())
    markers = compose(["+exp=sim_trace_specmix"]).base.server.sim.accept_by_text
    opening = {"code": "Continue this Python code", "prose": ("Summarize this", "Continue this text", "Explain this"),
               "extraction": "Extract the name", "math": "Solve step by step", "repetition": ("Count ", "Repeat the word")}
    eagle3, filler = results["arms"]["eagle3"], results["arms"]["eagle3_filler"]
    assert eagle3["trace"]["content"] == {"kind": "corpus", "file": SPECMIX, "sha256": dataset_digest(SPECMIX)}
    assert eagle3["trace"]["acceptance_representative"] is True
    assert set(eagle3["categories"]) == set(CATEGORIES)
    cycles = 0.0
    for category, figures in eagle3["categories"].items():
        found = opening[category] if isinstance(opening[category], tuple) else (opening[category],)
        (expected,) = {round(truth(list(markers[m])), 6) for m in found}  # a category's markers agree
        assert figures["accept_length"] == pytest.approx(expected, rel=0.06), (category, figures)
        cycles += figures["completion_tokens"] / expected
    mix = sum(f["completion_tokens"] for f in eagle3["categories"].values()) / cycles
    assert eagle3["accept_length"] == pytest.approx(mix, rel=0.04)
    assert filler["trace"]["content"] == {"kind": "filler"} and filler["trace"]["acceptance_representative"] is False
    assert not filler.get("categories") and filler["accept_length"] == pytest.approx(truth([0.8, 0.75]), rel=0.05)
    summary = (record / "summary.md").read_text()
    assert "- eagle3: 40 requests replayed at 1x" in summary and f"drawn from {SPECMIX}" in summary
    assert re.search(r"eagle3_filler: 40 requests replayed .* filler words .* not representative", summary), summary
