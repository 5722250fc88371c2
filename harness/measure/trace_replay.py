"""A trace replay's send times: each request's achieved send against the time the trace
meant (``RequestRecord.intended_time``: its timestamp, divided by the speed-up, after the
load's first send). Its lateness is the client's delay and any wait for a slot under
``workload.concurrency`` (those requests are counted as held back); the send gap
(:mod:`harness.load.client_health`) leaves the cap's wait out, this does not.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.load.client_health import WORST_OF, spread_ms, worst
from harness.load.records import RequestRecord

HELD_S = 1e-6  # scheduled later than intended by more than float noise: a slot freed first


def judge(records: Iterable[RequestRecord], content: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``trace`` block of one load (None when it replayed no trace), with what its prompts
    said (``content``: the load plan's, filler when not given)."""
    timed = sorted((r for r in records if not r.warmup and r.intended_time is not None and r.send_time),
                   key=lambda r: r.index)
    if not timed:
        return None
    first = min(r.intended_time for r in timed)
    return {"requests": len(timed),
            "lateness_ms": spread_ms(r.send_time - r.intended_time for r in timed),
            "held_by_cap": sum(1 for r in timed if r.scheduled_time is not None
                               and r.scheduled_time > r.intended_time + HELD_S),
            "intended_offset_ms": [round((r.intended_time - first) * 1000.0, 3) for r in timed],
            "achieved_offset_ms": [round((r.send_time - first) * 1000.0, 3) for r in timed],
            **content_block(content)}


def content_block(content: dict[str, Any] | None) -> dict[str, Any]:
    """What the prompts said, and whether a drafter's acceptance on them means anything: on
    filler words it does not (harness/load/trace_prompts.py)."""
    content = dict(content or {"kind": "filler"})
    return {"content": content, "acceptance_representative": content.get("kind") == "corpus"}


def combine(blocks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Repeats: the worst lateness of any repeat, the counts summed; the offsets the first's
    (every repeat replays the same schedule)."""
    present = [b for b in blocks if b]
    if len(present) <= 1:
        return dict(present[0]) if present else None
    parts = [b["lateness_ms"] for b in present]
    return {**present[0], "requests": sum(b["requests"] for b in present),
            "lateness_ms": {**{s: worst([p.get(s) for p in parts]) for s in WORST_OF}, "n": sum(p["n"] for p in parts)},
            "held_by_cap": sum(b["held_by_cap"] for b in present), "repeats": len(present)}


def sentence(arm: str, block: dict[str, Any] | None, speedup: float | None = None) -> str | None:
    """The summary's line: intended against achieved send times."""
    if not block:
        return None
    late = block["lateness_ms"]
    cells = "/".join("-" if late.get(s) is None else f"{late[s]:.1f}" for s in ("p50", "p99", "max"))
    span = block["intended_offset_ms"][-1] / 1000.0 if block["intended_offset_ms"] else 0.0
    pace = f" at {speedup:g}x" if speedup else ""
    return (f"{arm}: {block['requests']} requests replayed{pace} over {span:.1f} s of intended send times; achieved "
            f"sends were late by p50/p99/max {cells} ms; {block['held_by_cap']} held back by workload.concurrency; "
            f"{content_words(block)}")


def content_words(block: dict[str, Any]) -> str:
    content = block.get("content") or {}
    if content.get("kind") == "corpus":
        return f"its prompts were drawn from {content.get('file')} (workload.trace_content)"
    if "content" not in block:  # a record from before the content was recorded
        return "its prompts' content is not recorded"
    return (f"{FILLER_WORDS}, so its accept length and speedup are not representative of real content "
            f"(workload.trace_content draws the prompts from a corpus)")


FILLER_WORDS = "its prompts were filler words (a trace has lengths, not text)"
