"""The simulator's prefix cache: SGLang's radix cache reduced to what its timing and its
counters need.

A prompt is a sequence of tokens (:func:`prompt_tokens`: the word pieces of its text, the
chat template's marker tokens around each message, or the token ids it was sent as). The
cache keeps the chained hash of every prefix that ends on a page boundary
(``--page-size``, SGLang's flag, default 1: every token) of the prompts it has prefilled.
A new request's cached length is its longest such prefix, capped, as SGLang caps it, at its
length minus one: the last prompt token is always computed, since its logits give the first
output token. Only those uncached tokens cost prefill time (``SimModel.prefill_ms``).

Where SGLang inserts a prompt into the tree once its prefill has run, the scheduler here
matches every request of a prefill batch first and inserts the batch's prompts after it: a
request shares the prefixes of requests prefilled in *earlier* steps, never of one beside
it in the same batch. Prompts only (SGLang also caches each request's output, which a
later turn of the same chat would hit), and nothing is evicted: the simulator has no KV
memory to run out of. ``--disable-radix-cache`` turns it off (nothing ever hits), as in
SGLang. ``POST /flush_cache`` empties it.

Hashes are computed in the server's main process and sent to the scheduler as integers,
so no process needs the other's string hashing seed.
"""

from __future__ import annotations

from typing import Sequence

from harness.sim.tokens import CHAT_GENERATION_PROMPT_TOKENS, CHAT_TOKENS_PER_MESSAGE, split_pieces

Token = str | int
_MESSAGE_HEAD = ("<|im_start|>", "user", "\n")  # + content + _MESSAGE_END: CHAT_TOKENS_PER_MESSAGE markers
_MESSAGE_END = ("<|im_end|>",)
_GENERATION_PROMPT = ("<|im_start|>", "assistant", "\n")
assert len(_MESSAGE_HEAD) + len(_MESSAGE_END) == CHAT_TOKENS_PER_MESSAGE
assert len(_GENERATION_PROMPT) == CHAT_GENERATION_PROMPT_TOKENS
BOS = ("<s>",)  # an empty text prompt still counts one token (harness/sim/tokens.py)


def chat_tokens(contents: Sequence[str]) -> tuple[Token, ...]:
    """A chat's prompt as the simulated template lays it out: exactly chat_prompt_tokens() long."""
    tokens: list[Token] = []
    for content in contents:
        tokens += [*_MESSAGE_HEAD, *split_pieces(content), *_MESSAGE_END]
    return tuple(tokens + list(_GENERATION_PROMPT))


def text_tokens(text: str) -> tuple[Token, ...]:
    """A text prompt's tokens: exactly count_tokens() long."""
    return tuple(split_pieces(text)) or BOS


def page_hashes(tokens: Sequence[Token], page_size: int) -> tuple[int, ...]:
    """The chained hash of each prefix of ``tokens`` that ends on a page boundary (full pages only)."""
    hashes, chained = [], 0
    for start in range(0, len(tokens) - page_size + 1, page_size):
        chained = hash((chained, tuple(tokens[start:start + page_size])))
        hashes.append(chained)
    return tuple(hashes)


class PrefixCache:
    """The pages of every prefix prefilled since the last flush, by chained hash."""

    def __init__(self, page_size: int = 1, enabled: bool = True):
        self.page_size = max(1, int(page_size))
        self.enabled = enabled
        self.pages: set[int] = set()

    def match(self, hashes: Sequence[int], prompt_tokens: int) -> int:
        """How many leading tokens of a prompt (``prompt_tokens`` long, its ``hashes``) are
        cached: whole pages, and never its last token."""
        if not self.enabled:
            return 0
        usable = max(0, prompt_tokens - 1) // self.page_size
        pages = 0
        for h in hashes[:usable]:
            if h not in self.pages:
                break
            pages += 1
        return pages * self.page_size

    def insert(self, hashes: Sequence[int]) -> None:
        if self.enabled:
            self.pages.update(hashes)

    def reset(self) -> None:
        self.pages.clear()

    def __len__(self) -> int:
        return len(self.pages)
