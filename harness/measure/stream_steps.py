"""The accept length as the client's stream shows it, for engines whose responses carry no
verify counts (vLLM): an engine that streams one chunk per engine step sends, after the
prefill's first token, one chunk per draft-and-verify step holding 1 + the drafts accepted
in it. So Σ tokens after each request's first chunk ÷ Σ chunks after it is tokens per decode
step, the same quantity as vLLM's 1 + accepted ÷ drafts from /metrics, counted on the other
side of the wire. Two things make them differ honestly, and a caller must check for them:
steps in which the drafter proposed nothing (an n-gram drafter without a match: a 1-token
chunk the server counts no draft for) and steps the server merged into one chunk because
the client read late (fewer chunks than steps). Both show as decode chunks ≠ server drafts.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFINITION = ("the stream's own count: Σ tokens after each request's first chunk ÷ Σ chunks after it "
              "(one chunk per engine step; the prefill token left out)")


@dataclass(frozen=True)
class StreamSteps:
    tokens: int  # tokens in decode chunks (every chunk after a request's first)
    chunks: int  # decode chunks

    @property
    def accept_length(self) -> float:
        return self.tokens / self.chunks


def stream_steps(lines: list[dict]) -> StreamSteps | None:
    """Over the successful requests of ``lines`` (record lines) with at least two token
    chunks; None when there are none."""
    tokens = chunks = 0
    for line in lines:
        counts = line.get("chunk_tokens") or []
        if line.get("ok") and len(counts) >= 2:
            tokens += sum(counts[1:])
            chunks += len(counts) - 1
    return StreamSteps(tokens, chunks) if chunks else None
