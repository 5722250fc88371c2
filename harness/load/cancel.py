"""Cancellations (``workload.cancel``): which measured requests the client abandons, and where.

A user who stops a generation closes the stream: the browser drops the connection and the
server has to notice, abort the request and free its slot. ``workload.cancel: {fraction,
after_tokens | after_ms}`` makes the load do that to a share of its measured requests: the
request function (:mod:`harness.load.requests`) closes the connection once the request has
received ``after_tokens`` tokens, or ``after_ms`` after it was sent (a request that ends
before its cut is not cancelled, as a user's stop button does nothing once the answer is
whole).

Which requests: each measured request (entry ``index``, ``turn``) is drawn on its own, from a
generator seeded by ``workload.seed`` and the request's place, chosen with probability
``fraction``. The draw depends on nothing else, so every arm, every repeat and every replay
cancels the same requests, however the load is split over processes or paced (open or closed
loop). Warm-up requests are never cancelled. A cancelled turn ends its conversation, as a
failed one does (the next turn would have no answer in its history).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from harness.load.records import RequestRecord


@dataclass(frozen=True)
class CancelPlan:
    """A load's cancellations: the share of measured requests cut, and the cut."""

    fraction: float  # in [0, 1]: each measured request is cancelled with this probability
    after_tokens: int | None  # close the stream once this many tokens arrived ...
    after_ms: float | None  # ... or this many ms after the request was sent
    seed: int  # workload.seed

    @classmethod
    def of(cls, workload: Any) -> "CancelPlan | None":
        """The plan of a workload config's ``cancel`` block; None when it cancels nothing."""
        block = getattr(workload, "cancel", None)
        if block is None or not block.fraction:
            return None
        tokens, ms = block.after_tokens, block.after_ms
        if (tokens is None) == (ms is None):
            raise ValueError("workload.cancel needs exactly one of after_tokens and after_ms")
        return cls(float(block.fraction), None if tokens is None else int(tokens), None if ms is None else float(ms),
                   int(getattr(workload, "seed", 0) or 0))

    def chosen(self, index: int, turn: int = 0) -> bool:
        """Whether measured request (``index``, ``turn``) is cancelled: a draw of its own, seeded
        by the workload's seed and its place (a string seed is hashed by SHA-512, so the
        draw is the same in every process, whatever PYTHONHASHSEED says)."""
        return random.Random(f"specgate-cancel:{self.seed}:{index}:{turn}").random() < self.fraction

    def mark(self, rec: RequestRecord) -> None:
        """Give ``rec`` its cut when it is chosen (warm-ups never are)."""
        if not rec.warmup and self.chosen(rec.index, rec.turn):
            rec.cancel_after_tokens, rec.cancel_after_ms = self.after_tokens, self.after_ms

    def describe(self) -> dict:
        """What the record says of it (results.json's ``cancel`` block takes these keys)."""
        cut = {"after_tokens": self.after_tokens} if self.after_tokens is not None else {"after_ms": self.after_ms}
        return {"fraction": self.fraction, **cut}


def cancel_figures(plan: dict | None, measured: list[RequestRecord]) -> dict:
    """results.json's ``cancel`` block of one load: what was asked, how many requests were
    chosen and how many the client actually cut (one that ended first is not), and the tokens
    the cancelled ones had received. {} when the load cancelled nothing."""
    if not plan:
        return {}
    cancelled = [r for r in measured if r.cancelled]
    chosen = sum(1 for r in measured if r.cancel_after_tokens is not None or r.cancel_after_ms is not None)
    return {**plan, "chosen": chosen,
            "cancelled": len(cancelled), "tokens_before_cancel": sum(sum(r.chunk_tokens) for r in cancelled)}


def combine_cancel_figures(blocks: list[dict]) -> dict:
    """Repeats: the counts summed, what was asked kept."""
    blocks = [b for b in blocks if b]
    if not blocks:
        return {}
    counts = ("chosen", "cancelled", "tokens_before_cancel")
    return {**{k: v for k, v in blocks[0].items() if k not in counts}, **{k: sum(b[k] for b in blocks) for k in counts}}
