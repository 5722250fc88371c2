"""The accept length as the client's stream shows it, for engines whose responses carry no
verify counts (vLLM): an engine that streams one chunk per engine step sends, after the
prefill's first token, one chunk per draft-and-verify step holding 1 + the drafts accepted
in it. So tokens per decode chunk is tokens per decode step, the same quantity as vLLM's
1 + accepted ÷ drafts from /metrics, counted on the other side of the wire.

A request's first chunk is the prefill's token, and its last may be a step cut short
(max_tokens or a stop string ends the output inside a step whose drafts the server counted
as accepted): seen on vLLM with a draft that is the target itself, every step accepting 3 of
3 (server 4.0000), the chunks read 3.9167. :attr:`StreamSteps.accept_length` is the point
figure over the whole steps between each request's first and last chunk (the per-group
figures of harness/measure/acceptance.py).

Two things make the two sides differ honestly, and a caller must check for them: steps in
which the drafter proposed nothing (an n-gram drafter without a match: a 1-token chunk the
server counts no draft for) and steps the server merged into one chunk because the client
read late (fewer chunks than steps). Both show as decode chunks (every chunk after the first,
the last included) ≠ server drafts.

The whole steps are not every step, though: the server counts each request's last step too,
and a few steps in a short output can move the mean (vLLM's CPU build, EAGLE-3, 12 requests
of 32 tokens, the server over every step 1.3985: the whole steps read 1.3028 in one run and
1.3629 in another, whose chunks I checked were one per step exactly). So to stand beside the server's figure the stream gives every step as
bounds (:meth:`StreamSteps.every_step`): each request's last step held at least what it
streamed and at most a whole step, 1 + k tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

EVERY_STEP = ("the stream over every decode step (one chunk per engine step, each request's first chunk, "
              "the prefill's token, left out): each request's last step counted from what it streamed up to "
              "a whole step of {most} tokens, since max_tokens or a stop may have cut it")


@dataclass(frozen=True)
class StreamSteps:
    tokens: int         # tokens in whole-step chunks (between each request's first and last)
    chunks: int         # whole-step chunks
    decode_chunks: int  # every chunk after a request's first: one per server step, the last included
    decode_tokens: int = 0  # the tokens of every chunk after a request's first, the last included
    last_chunks: tuple[int, ...] = ()  # each request's last decode chunk's tokens (a step maybe cut short)
    longest_chunk: int = 0  # the most tokens one chunk held

    @property
    def accept_length(self) -> float:
        return self.tokens / self.chunks

    def every_step(self, most: int) -> tuple[float, float]:
        """The accept length over every decode step, the same steps the server counts, as
        (low, high): each request's last step as streamed, then as ``most`` tokens (1 + k,
        a whole step; never below what it streamed)."""
        low = self.decode_tokens / self.decode_chunks
        cut = sum(max(most - tokens, 0) for tokens in self.last_chunks)
        return low, (self.decode_tokens + cut) / self.decode_chunks


def steps_of(chunk_token_lists: Iterable[list[int]]) -> StreamSteps | None:
    """Over these requests' per-chunk token counts; None when no request has a whole step."""
    tokens = chunks = decode_chunks = decode_tokens = longest = 0
    last: list[int] = []
    for counts in chunk_token_lists:
        decode = list(counts[1:])
        decode_chunks += len(decode)
        decode_tokens += sum(decode)
        last += decode[-1:]
        longest = max([longest, *decode])
        whole = decode[:-1]
        tokens += sum(whole)
        chunks += len(whole)
    return StreamSteps(tokens, chunks, decode_chunks, decode_tokens, tuple(last), longest) if chunks else None


def stream_steps(lines: list[dict]) -> StreamSteps | None:
    """Over the successful requests of ``lines`` (record lines); None when none has a whole step."""
    return steps_of(line.get("chunk_tokens") or [] for line in lines if line.get("ok"))
