"""The choices as batch-size ranges, one k each: what an engine's schedule takes.

Each swept concurrency stands for the batch sizes nearer to it than to its neighbours on a
log scale (a sweep doubles its concurrency, so the boundary is their geometric mean): the
first range starts at 1, and the last ends at the highest concurrency swept (beyond it
nothing was measured; vLLM carries the last k on, SGLang's last tier covers every larger
batch). Neighbouring ranges with the same k are merged."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.schedule.choice import Choice


@dataclass
class Range:
    first: int  # batch sizes, inclusive
    last: int
    k: int  # 0: plain decoding

    def to_json(self) -> dict:
        return {"first": self.first, "last": self.last, "k": self.k}


def batch_ranges(choices: list[Choice]) -> list[Range]:
    ranges: list[Range] = []
    ordered = sorted(choices, key=lambda c: c.concurrency)
    for i, choice in enumerate(ordered):
        first = ranges[-1].last + 1 if ranges else 1
        last = boundary(choice.concurrency, ordered[i + 1].concurrency) if i + 1 < len(ordered) else choice.concurrency
        if ranges and ranges[-1].k == choice.best.k:
            ranges[-1].last = last
        elif last >= first:
            ranges.append(Range(first, last, choice.best.k))
    return ranges


def boundary(low: int, high: int) -> int:
    """The last batch size that belongs to `low`: below the geometric mean of the two."""
    return max(low, min(high - 1, math.floor(math.sqrt(low * high))))
