"""The prompts of a trace replay: each request's ``input_length`` tokens, its shared blocks
rebuilt from the trace's ``hash_ids``.

A request's prompt is its blocks, then a tail of its own. Block ``k`` of a request whose
``hash_ids`` start ``h0 .. hk`` is words seeded by ``hk``, sized so that the prompt up to
it counts exactly ``(k + 1) * block_size`` tokens (the last block, when the request ends
inside it, up to ``input_length``); the tail is words seeded by the request's own index,
sized so that the whole prompt counts exactly ``input_length``. A block's text is kept
per prefix of hash ids, so two requests whose lists start alike send the same text, token
for token, for exactly those blocks, and differ after them. Counts come from the
:class:`~harness.load.sizing.PromptTokenizer` of random prompts (the BOS the first block's
count includes); without one a token is a word.

Each block is sized in the context of the text before it, rather than alone, so its count
is exact however the boundary tokenizes; that the earlier blocks' tokens stay as they were
once more words follow holds for a tokenizer that never merges across a space (the
tiny model's BPE tokenizer and the simulator's, tested; BPE and SentencePiece ones split
words there). Every prompt is sized before the load
starts (:attr:`TracePrompts.sizes_ahead`), so no send on the trace's clock waits for
a tokenizer. Warm-ups (negative indices) send a tail alone of a measured request's length,
so they share no block with the trace.

**Content.** A trace carries lengths and hashes, not text. Without ``workload.trace_content``
the words are filler (a fixed common-word vocabulary): right for what a trace is about (when
requests arrive, how long they are, which prefixes they share), meaningless for speculation,
since a drafter's acceptance depends on the content (the record says which content a replay
used, and marks accept lengths on filler as not representative). With a corpus (a dataset file
of ``workload.dataset``'s format, e.g. datasets/specmix.jsonl), each request's words come from
its rows instead, one category per request: that of the row its first block (or, without
blocks, its own index) draws, from the trace line's ``category`` when it has one (requests
sharing a first block share its row, and so its category, whatever a later line says). Its first
block starts at that row's first word, so the row's opening (an instruction such as "Continue
this Python code") is in every prompt; each later block and the tail draw a row of the same
category, seeded by the block's hash (the tail's by the request), from a seeded word on, its
words cycled to any length. The requests' sharing is the filler's: the same hash prefix, the
same text; two rows of one category may open alike (specmix's rows of a category share their
instruction), so requests the trace says share nothing may share those first few tokens, as real
prompts of one template do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.load.conversation import Conversation
from harness.load.datasets import load_dataset
from harness.load.prompts import VOCAB, PromptSource
from harness.load.sizing import PromptTokenizer, sized_words
from harness.load.trace import Replay, TraceError, TraceRequest


@dataclass(frozen=True)
class CorpusRow:
    category: str | None
    words: tuple[str, ...]  # its turns' (and context's) words, in order


@dataclass(frozen=True)
class Corpus:
    """``workload.trace_content``: a dataset's rows as words, the text a replay's prompts are drawn from."""

    source: str  # the file, as workload.trace_content names it
    rows: tuple[CorpusRow, ...]

    @classmethod
    def of(cls, value: str) -> "Corpus":
        """The corpus file ``value`` (a dataset: JSONL or JSON rows); a DatasetError naming this key, one sentence."""
        rows = []
        for conversation in load_dataset(value, key="workload.trace_content"):
            # the reader refuses empty and blank texts, so every row has words
            text = " ".join([m.content for m in conversation.context] + list(conversation.turns))
            rows.append(CorpusRow(conversation.category, tuple(text.split())))
        return cls(str(value), tuple(rows))

    def pool(self, category: str | None) -> tuple[CorpusRow, ...]:
        """The rows of ``category`` (every row when None)."""
        return self.rows if category is None else tuple(r for r in self.rows if r.category == category)

    def check(self, requests: tuple[TraceRequest, ...], trace: str) -> None:
        """Every category a trace line names must have rows here (one sentence naming the line)."""
        known = {r.category for r in self.rows}
        for request in requests:
            if request.category is not None and request.category not in known:
                have = ", ".join(sorted(c for c in known if c)) or "none"
                raise TraceError(f"workload.trace {trace}, line {request.line}: category {request.category!r} has no "
                                 f"row in workload.trace_content {self.source} (its categories: {have})")


@dataclass(frozen=True)
class TracePrompts(PromptSource):
    """``workload.trace``'s requests as prompts, request ``index`` of the replay each; made once and kept."""

    replay: Replay
    seed: int = 0
    tokenizer: PromptTokenizer | None = None
    corpus: Corpus | None = None  # workload.trace_content: None sends filler words
    blocks: dict[tuple[tuple[int, ...], int], str] = field(default_factory=dict, init=False, repr=False, compare=False)
    openers: dict[str, CorpusRow] = field(default_factory=dict, init=False, repr=False, compare=False)
    sized: dict[int, Conversation] = field(default_factory=dict, init=False, repr=False, compare=False)

    def conversation(self, index: int) -> Conversation:
        if index not in self.sized:
            requests = self.replay.requests
            request = requests[index] if index >= 0 else requests[(-1 - index) % len(requests)]
            hash_ids = request.hash_ids if index >= 0 else ()
            first = self.first_row(hash_ids, request.category if index >= 0 else None, index)
            text = self.prompt(hash_ids, request, index, first)
            self.sized[index] = Conversation(turns=(text,), max_tokens=request.output_length,
                                             intended_prompt_tokens=request.input_length,
                                             category=first.category if first is not None else None)
        return self.sized[index]

    def first_row(self, hash_ids: tuple[int, ...], category: str | None, index: int) -> CorpusRow | None:
        """The corpus row a request's text starts with, which sets its category (None: filler).
        Requests sharing a first block share its row, so a request's category is its content's:
        the trace line's ``category`` picks the row of a first block not sent before."""
        if self.corpus is None:
            return None
        seed = self.first_seed(hash_ids, index)
        if seed not in self.openers:
            self.openers[seed] = self.row(self.corpus.pool(category), seed)
        return self.openers[seed]

    def first_seed(self, hash_ids: tuple[int, ...], index: int) -> str:
        return f"block {hash_ids[0]}" if hash_ids else f"tail {self.seed} {index}"

    @staticmethod
    def row(pool: tuple[CorpusRow, ...], seed: str) -> CorpusRow:
        return pool[random.Random(seed).randrange(len(pool))]

    def requests_in(self, count: int) -> int:
        return count

    @property
    def sizes_ahead(self) -> bool:
        """Always: a send on the trace's clock must not wait for its prompt to be sized."""
        return True

    def prompt(self, hash_ids: tuple[int, ...], request: TraceRequest, index: int,
               first: CorpusRow | None = None) -> str:
        text = ""
        size = self.replay.block_size
        for k in range(len(hash_ids)):
            target = min((k + 1) * size, request.input_length)
            key = (hash_ids[:k + 1], target)  # a partial last block is its own (its words a prefix of the full one's)
            if key not in self.blocks:
                self.blocks[key] = self.grown(text, self.stream(f"block {hash_ids[k]}", first, k == 0), target)
            text = self.blocks[key]
        return self.grown(text, self.stream(f"tail {self.seed} {index}", first, not hash_ids), request.input_length)

    def stream(self, seed: str, first: CorpusRow | None, opens: bool):
        """The words of the piece seeded by ``seed``: filler without a corpus; with one, the
        request's first row from its first word when the piece ``opens`` the prompt, else a row
        of the first row's category from a seeded word on."""
        if first is None:
            return self.words_of(seed)
        row = first if opens else self.row(self.corpus.pool(first.category), seed)
        start = 0 if opens else random.Random(f"{seed} start").randrange(len(row.words))
        words = row.words

        def cycled(n: int) -> list[str]:
            return [words[(start + i) % len(words)] for i in range(n)]
        return cycled

    def grown(self, text: str, words, target: int) -> str:
        """``text`` followed by the prefix of ``words`` after which it counts ``target`` tokens.
        Sized by the tokens the words add to ``text`` (sizing scales a length by tokens per
        word, which the text before would skew)."""
        base = self.tokens(text)
        if target <= base:
            return text
        if self.tokenizer is None:
            return join(text, " ".join(words(target - base)))
        count = self.tokenizer.count
        return join(text, sized_words(words, target - base, lambda more: count(join(text, more)) - base))

    def tokens(self, text: str) -> int:
        if not text:
            return 0
        return self.tokenizer.count(text) if self.tokenizer is not None else len(text.split())

    @staticmethod
    def words_of(seed: str):
        """The first ``n`` words of the stream seeded by ``seed``: a longer run extends a shorter one.
        Seeds are strings ("block 7", "tail 0 3"), so no tail's stream is a block's (a string
        seeds through its sha512: the same on every machine and run)."""
        def words(n: int) -> list[str]:
            return random.Random(seed).choices(VOCAB, k=n)
        return words


def join(text: str, more: str) -> str:
    return f"{text} {more}" if text and more else text or more
