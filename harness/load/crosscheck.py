"""The server's token count, checked against what it streamed rather than believed.

Throughput is computed from the server's own ``usage.completion_tokens``: a server that
over-counts would pass throughput gates it should fail.  While an OpenAI stream is read,
a :class:`StreamTally` keeps what actually arrived -- UTF-8 bytes of text, the number of
chunks that carried text, the chunk whose per-chunk usage claims most beyond its bytes,
and the text itself (which the request's record keeps too).  Once the stream has ended,
:func:`usage_problem` compares the server's count with it.  The rules, in this order (the
first one broken is the request's error):

1. **Self-consistency** (per-chunk usage from ``continuous_usage_stats``): the final usage
   may not count fewer tokens than the chunks already did, nor more than the largest
   chunk's worth more (the last step's tokens, e.g. an EOS with no text, may get no chunk
   of their own: the simulator does that).
2. **Bytes bound** (always): every token decodes to at least one UTF-8 byte, except
   special tokens that decode to nothing (EOS, format markers), allowed one per token
   chunk.  So ``completion_tokens <= text bytes + token chunks + SLACK_TOKENS``;
   :data:`SLACK_TOKENS` covers bytes held back in an unfinished UTF-8 character and a few
   format markers.  Catches a wild lie (10**6x), never a 3x lie on text of ~4 bytes a
   token.
3. **Chunks bound** (without per-chunk usage): each chunk that carried text carried at
   least one token, so ``completion_tokens >= text chunks``.  (No upper bound from the
   chunk count: a speculative server, a server behind on its stream, or SGLang's
   ``stream_interval`` put several tokens in one chunk, so "one token a chunk" would cry
   wolf.)  With per-chunk usage, the chunks' own counts say what each carried instead.
4. **Per chunk** (with per-chunk usage): no chunk may claim more tokens than its own
   bytes + 1 + SLACK_TOKENS.  Catches a lie piled onto one chunk (it skews ITL and the
   per-chunk token counts) that the totals would let through.
5. **Tokenizer** (only when the engine knows the server's tokenizer *exactly*, e.g. the
   simulator's word pieces; see ``Engine.token_counter``): the streamed text's token
   count may differ from the claim by at most the largest chunk (tokens with no text at
   the end) plus :data:`TOKENIZER_TOLERANCE` of the count.  This is what catches a 3x lie.
   Re-tokenizing a real model's output is not its generated count (a model may emit a
   word as pieces that re-tokenize as one; random-weight models do this all the time),
   so real engines get no counter and stop at rules 1-4.

Not caught: without a tokenizer, a lie within the bytes bound that per-chunk usage
repeats consistently (3x on English text); the native ``/generate`` route (its cumulative
text would have to be compared chunk by chunk) is not cross-checked.
"""

from __future__ import annotations

import math
from typing import Callable

CountTokens = Callable[[str], int]  # the server's token count of a piece of its output text

SLACK_TOKENS = 8  # held-back bytes of a partial UTF-8 character (<= 3 tokens) + a few format markers
TOKENIZER_TOLERANCE = 0.05  # re-tokenization vs the generated count, as a share of the count


class StreamTally:
    """What one stream carried, kept by the read loop: a few integers per chunk, and the
    chunks' text (appended; joined once, at the end)."""

    __slots__ = ("text_bytes", "text_chunks", "texts", "worst_chunk")

    def __init__(self):
        self.text_bytes = 0
        self.text_chunks = 0
        self.texts: list[str] = []
        self.worst_chunk: tuple[int, int, int] | None = None  # (token chunk number, tokens, bytes)

    def add_text(self, text: str) -> int:
        """Count one chunk's text; returns its UTF-8 bytes."""
        nbytes = len(text.encode())
        self.text_bytes += nbytes
        self.text_chunks += 1
        self.texts.append(text)
        return nbytes

    def add_chunk_usage(self, number: int, tokens: int, nbytes: int) -> None:
        """Per-chunk usage says token chunk ``number`` carried ``tokens`` in ``nbytes`` of text."""
        worst = self.worst_chunk
        if worst is None or tokens - nbytes > worst[1] - worst[2]:
            self.worst_chunk = (number, tokens, nbytes)

    @property
    def text(self) -> str:
        """All the text, joined once: the record and the tokenizer check both read it."""
        if len(self.texts) > 1:
            self.texts = ["".join(self.texts)]
        return self.texts[0] if self.texts else ""


def usage_problem(claimed: int, tally: StreamTally, chunk_tokens: list[int], per_chunk_total: int | None,
                  count_tokens: CountTokens | None = None) -> str | None:
    """What is wrong with the server's ``claimed`` completion tokens, in one sentence, or None.

    ``chunk_tokens``: the tokens of each token chunk as read (per-chunk usage, else 1 per
    chunk of text); ``per_chunk_total``: the last cumulative per-chunk count, None when
    the server sent no per-chunk usage."""
    largest = max(chunk_tokens, default=1)
    return (_no_output(claimed, tally)
            or _inconsistent(claimed, per_chunk_total, largest)
            or _over_bytes(claimed, tally, len(chunk_tokens))
            or _under_chunks(claimed, tally, per_chunk_total)
            or _chunk_over_bytes(tally)
            or _off_tokenizer(claimed, tally, count_tokens, largest))


def _no_output(claimed: int, tally: StreamTally) -> str | None:
    """Zero bytes of output is zero tokens, whatever the usage says: the bytes bound allows a
    token per chunk without text (a special token), which a stream of empty chunks fills."""
    if claimed <= 0 or tally.text_bytes > 0:
        return None
    return (f"the server claims {claimed} completion tokens but streamed no output at all (every chunk's "
            f"content, reasoning and tool calls empty or null): zero bytes of output is zero tokens")


def _inconsistent(claimed: int, per_chunk_total: int | None, largest: int) -> str | None:
    if per_chunk_total is None or per_chunk_total <= claimed <= per_chunk_total + largest:
        return None
    return (f"the server's final usage claims {claimed} completion tokens but its per-chunk usage "
            f"counted {per_chunk_total}")


def _over_bytes(claimed: int, tally: StreamTally, token_chunks: int) -> str | None:
    bound = tally.text_bytes + token_chunks + SLACK_TOKENS
    if claimed <= bound:
        return None
    return (f"the server claims {claimed} completion tokens but streamed {token_chunks} token chunks "
            f"carrying {tally.text_bytes} bytes of text, room for at most {bound} tokens")


def _under_chunks(claimed: int, tally: StreamTally, per_chunk_total: int | None) -> str | None:
    if per_chunk_total is not None or claimed >= tally.text_chunks:  # per-chunk usage says what each carried
        return None
    return (f"the server claims {claimed} completion tokens but streamed {tally.text_chunks} chunks of text, "
            f"each of which carried at least one token")


def _chunk_over_bytes(tally: StreamTally) -> str | None:
    if tally.worst_chunk is None:
        return None
    number, tokens, nbytes = tally.worst_chunk
    if tokens <= nbytes + 1 + SLACK_TOKENS:
        return None
    return (f"the server's per-chunk usage claims {tokens} tokens for token chunk {number}, which carried "
            f"{nbytes} bytes of text, room for at most {nbytes + 1 + SLACK_TOKENS} tokens")


def _off_tokenizer(claimed: int, tally: StreamTally, count_tokens: CountTokens | None, largest: int) -> str | None:
    if count_tokens is None:
        return None
    counted = count_tokens(tally.text)
    tolerance = largest + math.ceil(TOKENIZER_TOLERANCE * counted)
    if abs(claimed - counted) <= tolerance:
        return None
    return (f"the server claims {claimed} completion tokens but the text it streamed is {counted} tokens "
            f"by its tokenizer (tolerance {tolerance})")
