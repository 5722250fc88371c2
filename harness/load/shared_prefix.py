"""``workload.shared_prefix``: G groups of prompts, each group's prompts opening with the
same prefix (a "system prompt") and ending with a suffix of their own (a "question"), as
SGLang's ``bench_serving --dataset-name generated-shared-prefix`` builds them
(``gsp_num_groups`` x ``gsp_prompts_per_group`` prompts, ``gsp_system_prompt_len`` +
``gsp_question_len`` tokens, slot ``i`` in group ``i // prompts_per_group``, shuffled
unless ``--gsp-ordered``).

Where SGLang draws random token ids and decodes them, this source draws words from
:data:`harness.load.prompts.VOCAB`, seeded by ``workload.seed``, so every arm (and a
replay) sends the same text. With a tokenizer (:mod:`harness.load.sizing`) a group's
prefix counts exactly ``prefix_len`` tokens (its BOS included) and each whole prompt
exactly ``prefix_len + suffix_len``; without one they are that many words.

Measured entry ``index`` takes slot ``order[index % (groups x prompts_per_group)]`` of a
seeded shuffle of the slots (cycled when ``num_prompts`` asks for more), and a suffix of
its own index, so no two measured prompts are the same text. Warm-ups (negative indices)
use a prefix of no group: they never warm the groups the load measures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from harness.load.conversation import Conversation
from harness.load.prompts import VOCAB, PromptSource
from harness.load.sizing import PromptTokenizer, sized_words

WARMUP_GROUP = -1  # the warm-ups' own prefix: shared with no measured group
_PREFIX_STREAM, _SUFFIX_STREAM = 0x5EED_0001, 0x5EED_0002  # keep the prefix and suffix draws apart


def _words(seed: int, stream: int, key: int, n: int) -> list[str]:
    """The first ``n`` words of stream ``(seed, stream, key)``: a longer draw extends a shorter one."""
    rng = random.Random(f"{seed}:{stream}:{key}")
    return rng.choices(VOCAB, k=n)


@dataclass(frozen=True)
class SharedPrefixPrompts(PromptSource):
    """``groups`` x ``prompts_per_group`` slots; slot s belongs to group ``s // prompts_per_group``."""

    groups: int
    prompts_per_group: int
    prefix_len: int
    suffix_len: int
    seed: int = 0
    ordered: bool = False  # true: slots in order (group by group), as --gsp-ordered
    tokenizer: PromptTokenizer | None = None
    order: tuple[int, ...] = field(init=False, repr=False, compare=False)
    prefixes: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    sized: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        order = list(range(self.groups * self.prompts_per_group))
        if not self.ordered:
            random.Random(self.seed).shuffle(order)
        object.__setattr__(self, "order", tuple(order))

    def group_of(self, index: int) -> int:
        """The group whose prefix entry ``index`` opens with (WARMUP_GROUP for a warm-up)."""
        if index < 0:
            return WARMUP_GROUP
        return self.order[index % len(self.order)] // self.prompts_per_group

    def prefix(self, group: int) -> str:
        """Group ``group``'s prefix: ``prefix_len`` tokens (words without a tokenizer)."""
        if group not in self.prefixes:
            words = lambda n: _words(self.seed, _PREFIX_STREAM, group, n)  # noqa: E731
            self.prefixes[group] = (" ".join(words(self.prefix_len)) if self.tokenizer is None
                                    else sized_words(words, self.prefix_len, self.tokenizer.count))
        return self.prefixes[group]

    def prompt(self, index: int) -> str:
        """The prefix of the entry's group, then a suffix of its own: prefix_len + suffix_len tokens."""
        if index in self.sized:
            return self.sized[index]
        head = self.prefix(self.group_of(index)).split(" ")
        tail = lambda n: _words(self.seed, _SUFFIX_STREAM, index, n)  # noqa: E731
        if self.tokenizer is None:
            text = " ".join(head + tail(self.suffix_len))
        else:  # the whole prompt sized, its first words always the prefix's (sizing only adds words after them)
            text = sized_words(lambda n: head + tail(max(1, n - len(head))), self.prefix_len + self.suffix_len,
                               self.tokenizer.count)
        self.sized[index] = text
        return text

    def conversation(self, index: int) -> Conversation:
        return Conversation(turns=(self.prompt(index),), intended_prompt_tokens=self.prefix_len + self.suffix_len)

    def requests_in(self, count: int) -> int:
        return count

    @property
    def sizes_remotely(self) -> bool:
        return self.tokenizer is not None and self.tokenizer.remote


def shared_prefix_source(workload: Any, tokenizer: PromptTokenizer | None) -> SharedPrefixPrompts | None:
    """The source ``workload.shared_prefix`` asks for; None when it is not set."""
    spec = getattr(workload, "shared_prefix", None)
    if not spec:
        return None
    return SharedPrefixPrompts(int(spec.groups), int(spec.prompts_per_group), int(spec.prefix_len),
                               int(spec.suffix_len), int(getattr(workload, "seed", 0) or 0),
                               bool(getattr(spec, "ordered", False)), tokenizer)
