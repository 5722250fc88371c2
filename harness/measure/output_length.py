"""Did each request generate the length it asked for? The server's own ``completion_tokens``
against the request's ``max_tokens`` (workload.max_tokens or its dataset row's own).

A server may stop early (an end-of-sequence token, a stop string): fewer tokens than asked
is the workload doing what it says, unless the request asked to ignore EOS, when exactly
``max_tokens`` is what was configured. More tokens than asked is never: a server that
ignores ``max_tokens`` (4x the tokens) makes every figure of the run a measurement of
another workload, however green its gates.

Only measured requests that succeeded count (warm-ups stay out of every figure).
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.load.records import RequestRecord


def judge(records: Iterable[RequestRecord]) -> dict[str, Any] | None:
    """The check of one load's output lengths, or None when no answered request asked a length."""
    checked = [r for r in records if not r.warmup and r.ok and r.max_tokens and r.completion_tokens is not None]
    if not checked:
        return None
    over = [(r.completion_tokens, r.max_tokens) for r in checked if r.completion_tokens > r.max_tokens]
    short = [(r.completion_tokens, r.max_tokens) for r in checked if r.ignore_eos and r.completion_tokens < r.max_tokens]
    return {"checked": len(checked), "over": len(over), "over_example": list(max(over)) if over else None,
            "short_with_ignore_eos": len(short), "short_example": list(min(short)) if short else None}


def combine(blocks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The checks of several repeats as one: counts summed, the most telling example kept."""
    present = [b for b in blocks if b]
    if not present:
        return None
    overs = [b["over_example"] for b in present if b["over_example"]]
    shorts = [b["short_example"] for b in present if b["short_example"]]
    return {"checked": sum(b["checked"] for b in present), "over": sum(b["over"] for b in present),
            "over_example": max(overs) if overs else None,
            "short_with_ignore_eos": sum(b["short_with_ignore_eos"] for b in present),
            "short_example": min(shorts) if shorts else None}


def problem(arm: str, block: dict[str, Any] | None) -> str | None:
    """What the output lengths say is not the configured workload, in one sentence; None when all is as asked."""
    if not block:
        return None
    parts = []
    if block["over"]:
        got, asked = block["over_example"]
        parts.append(f"{block['over']} of {block['checked']} requests generated more tokens than max_tokens asked "
                     f"(up to {got} for {asked}): the server ignored max_tokens")
    if block["short_with_ignore_eos"]:
        got, asked = block["short_example"]
        parts.append(f"{block['short_with_ignore_eos']} of {block['checked']} requests stopped short of max_tokens "
                     f"although they asked to ignore EOS (down to {got} of {asked})")
    return f"{arm}: " + "; ".join(parts) if parts else None
