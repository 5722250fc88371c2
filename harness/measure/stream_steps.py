"""The accept length as the client's stream shows it, for engines whose responses carry no
verify counts (vLLM): an engine that streams one chunk per engine step sends, after the
prefill's first token, one chunk per draft-and-verify step holding 1 + the drafts accepted
in it. So tokens per decode chunk is tokens per decode step, the same quantity as vLLM's
1 + accepted ÷ drafts from /metrics, counted on the other side of the wire.

Only whole steps count: a request's first chunk is the prefill's token and its last chunk
may be a step cut short (max_tokens or a stop string ends the output inside a step whose
drafts the server counted as accepted), so the accept length is Σ tokens ÷ Σ chunks over
the chunks between each request's first and last. Seen on vLLM with a draft that is the
target itself: every step accepts 3 of 3 (server 4.0000), yet counting the last chunks too
read 3.9167.

Two things make the two sides differ honestly, and a caller must check for them: steps in
which the drafter proposed nothing (an n-gram drafter without a match: a 1-token chunk the
server counts no draft for) and steps the server merged into one chunk because the client
read late (fewer chunks than steps). Both show as decode chunks (every chunk after the first,
the last included) ≠ server drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

DEFINITION = ("the stream's own count: Σ tokens ÷ Σ chunks over the whole decode steps (one chunk per "
              "engine step; each request's first chunk, the prefill's token, and its last, which max_tokens "
              "or a stop may cut short, left out)")


@dataclass(frozen=True)
class StreamSteps:
    tokens: int         # tokens in whole-step chunks (between each request's first and last)
    chunks: int         # whole-step chunks
    decode_chunks: int  # every chunk after a request's first: one per server step, the last included

    @property
    def accept_length(self) -> float:
        return self.tokens / self.chunks


def steps_of(chunk_token_lists: Iterable[list[int]]) -> StreamSteps | None:
    """Over these requests' per-chunk token counts; None when no request has a whole step."""
    tokens = chunks = decode_chunks = 0
    for counts in chunk_token_lists:
        decode_chunks += max(len(counts) - 1, 0)
        whole = counts[1:-1]
        tokens += sum(whole)
        chunks += len(whole)
    return StreamSteps(tokens, chunks, decode_chunks) if chunks else None


def stream_steps(lines: list[dict]) -> StreamSteps | None:
    """Over the successful requests of ``lines`` (record lines); None when none has a whole step."""
    return steps_of(line.get("chunk_tokens") or [] for line in lines if line.get("ok"))
