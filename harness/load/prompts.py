"""Prompt sources: the conversation of measured entry ``index`` (warm-ups use negative
indices).

A source is picked by the workload config; the same config and index always give the
same conversation, so two arms (and a replay) send the same text.  A fixed prompt and
random words are conversations of one turn (:class:`TextPrompt`); a dataset's rows may
have several (:class:`DatasetPrompts`, rows read by :mod:`harness.load.datasets`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

from harness.load.conversation import Conversation
from harness.load.datasets import load_dataset
from harness.load.sizing import PromptTokenizer, sized_words

# A fixed vocabulary of short, common English words (~1 token each with most
# tokenizers, leading space included), so "input_len words" ~ input_len tokens.
VOCAB = (
    "the of and to in is was for on that with as by at from his her are this be it an "
    "have had not they which one you were all we their but there been has when more will "
    "would who so no out up into do only time can about other new some could these two may "
    "first then any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three small city house water "
    "light green river stone cloud music table window paper garden morning night road field"
).split()


class PromptSource(ABC):
    @abstractmethod
    def conversation(self, index: int) -> Conversation:
        """What entry ``index`` of the load sends."""

    def requests_in(self, count: int) -> int:
        """How many requests the first ``count`` entries send (one per turn)."""
        return sum(len(self.conversation(index).turns) for index in range(count))

    @property
    def sizes_remotely(self) -> bool:
        """Making a prompt asks the server (its /tokenize): done ahead of the load, in a thread."""
        return False

    @property
    def sizes_ahead(self) -> bool:
        """Every prompt of a counted load is made before the warm-up, in a thread, off the clock."""
        return self.sizes_remotely


class TextPrompt(PromptSource):
    """A source of single prompts: each entry is one request."""

    @abstractmethod
    def prompt(self, index: int) -> str:
        """The prompt of request ``index``."""

    def conversation(self, index: int) -> Conversation:
        return Conversation(turns=(self.prompt(index),))

    def requests_in(self, count: int) -> int:
        return count


@dataclass(frozen=True)
class FixedPrompt(TextPrompt):
    """``workload.prompt``: every request sends the same text."""

    text: str

    def prompt(self, index: int) -> str:
        return self.text


@dataclass(frozen=True)
class RandomWords(TextPrompt):
    """Words drawn from :data:`VOCAB`, seeded by ``workload.seed`` and the request index
    (so each request differs and every run repeats them): ``workload.input_len`` tokens by
    ``tokenizer`` (:mod:`harness.load.sizing`), or that many words without one.  A sized
    prompt is kept per index: the warm-up, every turn and each repeat reuse it."""

    tokens: int
    seed: int = 0
    tokenizer: PromptTokenizer | None = None
    sized: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def prompt(self, index: int) -> str:
        if self.tokenizer is None:
            return " ".join(self.words(index, self.tokens))
        if index not in self.sized:
            self.sized[index] = sized_words(lambda n: self.words(index, n), self.tokens, self.tokenizer.count)
        return self.sized[index]

    def words(self, index: int, n: int) -> list[str]:
        """The first ``n`` words of request ``index``: a longer prompt extends a shorter one."""
        rng = random.Random((self.seed * 1_000_003) ^ (index & 0xFFFFFFFF))
        return rng.choices(VOCAB, k=n)  # one draw per word, in order: prefixes agree

    def conversation(self, index: int) -> Conversation:
        return Conversation(turns=(self.prompt(index),), intended_prompt_tokens=self.tokens)

    @property
    def sizes_remotely(self) -> bool:
        return self.tokenizer is not None and self.tokenizer.remote


@dataclass(frozen=True)
class DatasetPrompts(PromptSource):
    """``workload.dataset``: its rows in an order shuffled by ``seed``, cycled when the
    load asks for more entries than there are rows.  Warm-ups (negative indices) take
    rows from the end of that order, so a short load does not warm the rows it measures.
    ``max_turns`` keeps only the first turns of each row (1: single-turn)."""

    rows: tuple[Conversation, ...]
    seed: int = 0
    max_turns: int | None = None
    order: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        order = list(range(len(self.rows)))
        random.Random(self.seed).shuffle(order)
        object.__setattr__(self, "order", tuple(order))

    def conversation(self, index: int) -> Conversation:
        row = self.rows[self.order[index % len(self.order)]]
        if self.max_turns is not None and len(row.turns) > self.max_turns:
            row = replace(row, turns=row.turns[:self.max_turns])
        return row


def prompt_source(workload: Any, tokenizer: PromptTokenizer | None = None) -> PromptSource:
    """The source ``workload`` asks for: a dataset wins over a fixed prompt, which wins
    over random words (sized by ``tokenizer`` when given)."""
    seed = int(getattr(workload, "seed", 0) or 0)
    if getattr(workload, "dataset", None):
        return DatasetPrompts(load_dataset(workload.dataset), seed, getattr(workload, "max_turns", None))
    if getattr(workload, "prompt", None):
        return FixedPrompt(str(workload.prompt))
    n = getattr(workload, "input_len", None)
    if not n:
        raise ValueError("workload has no dataset, prompt or input_len: set workload.dataset, workload.prompt or "
                         "workload.input_len")
    return RandomWords(int(n), seed, tokenizer)
