"""Prompt sources: the text of request ``index`` (warm-ups use negative indices).

A source is picked by the workload config; the same config and index always give the
same prompt, so two arms (and a replay) send the same text.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

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
    def prompt(self, index: int) -> str:
        """The prompt of request ``index``."""


@dataclass(frozen=True)
class FixedPrompt(PromptSource):
    """``workload.prompt``: every request sends the same text."""

    text: str

    def prompt(self, index: int) -> str:
        return self.text


@dataclass(frozen=True)
class RandomWords(PromptSource):
    """``workload.input_len`` words drawn from :data:`VOCAB`, seeded by ``workload.seed``
    and the request index (so each request differs and every run repeats them)."""

    words: int
    seed: int = 0

    def prompt(self, index: int) -> str:
        rng = random.Random((self.seed * 1_000_003) ^ (index & 0xFFFFFFFF))
        return " ".join(rng.choices(VOCAB, k=self.words))


def prompt_source(workload: Any) -> PromptSource:
    """The source ``workload`` asks for: a fixed prompt wins over random words."""
    if getattr(workload, "prompt", None):
        return FixedPrompt(str(workload.prompt))
    n = getattr(workload, "input_len", None)
    if not n:
        raise ValueError("workload has neither a prompt nor an input_len: set workload.prompt or workload.input_len")
    return RandomWords(int(n), int(getattr(workload, "seed", 0) or 0))
