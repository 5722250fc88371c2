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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.load.conversation import Conversation
from harness.load.prompts import VOCAB, PromptSource
from harness.load.sizing import PromptTokenizer, sized_words
from harness.load.trace import Replay, TraceRequest


@dataclass(frozen=True)
class TracePrompts(PromptSource):
    """``workload.trace``'s requests as prompts, request ``index`` of the replay each; made once and kept."""

    replay: Replay
    seed: int = 0
    tokenizer: PromptTokenizer | None = None
    blocks: dict[tuple[tuple[int, ...], int], str] = field(default_factory=dict, init=False, repr=False, compare=False)
    sized: dict[int, Conversation] = field(default_factory=dict, init=False, repr=False, compare=False)

    def conversation(self, index: int) -> Conversation:
        if index not in self.sized:
            requests = self.replay.requests
            request = requests[index] if index >= 0 else requests[(-1 - index) % len(requests)]
            hash_ids = request.hash_ids if index >= 0 else ()
            text = self.prompt(hash_ids, request, index)
            self.sized[index] = Conversation(turns=(text,), max_tokens=request.output_length,
                                             intended_prompt_tokens=request.input_length)
        return self.sized[index]

    def requests_in(self, count: int) -> int:
        return count

    @property
    def sizes_ahead(self) -> bool:
        """Always: a send on the trace's clock must not wait for its prompt to be sized."""
        return True

    def prompt(self, hash_ids: tuple[int, ...], request: TraceRequest, index: int) -> str:
        text = ""
        size = self.replay.block_size
        for k in range(len(hash_ids)):
            target = min((k + 1) * size, request.input_length)
            key = (hash_ids[:k + 1], target)  # a partial last block is its own (its words a prefix of the full one's)
            if key not in self.blocks:
                self.blocks[key] = self.grown(text, self.words_of(f"block {hash_ids[k]}"), target)
            text = self.blocks[key]
        return self.grown(text, self.words_of(f"tail {self.seed} {index}"), request.input_length)

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
