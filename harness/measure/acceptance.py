"""Acceptance where it changes: the accept length per input-length bucket and per turn of
a conversation, beside the per-category figures (harness/measure/metrics.py by_category).
A drafter accepts less as the context grows (its features drift from what it was trained
on, and a long prompt holds more that an n-gram could match or miss), so one run-wide
accept length can hide a head that is good on short prompts and useless on long ones.

Buckets are powers of two of the server's prompt token count (``prompt_tokens``):
``0-127``, ``128-255``, ``256-511``, ... — fixed edges, so two arms and two runs group
their requests alike. Turns are 1-based (``turn 1`` is a conversation's first request).

Each group's accept length is token-weighted like the arm's: Σ completion tokens ÷ Σ verify
cycles where the requests carry verify counts (SGLang, the simulator); otherwise, for an
engine that streams one chunk per engine step (vLLM), the stream's tokens per whole decode
step (harness/measure/stream_steps.py), labelled ``stream``.
"""

from __future__ import annotations

from typing import Callable, Iterable

from harness.load import RequestRecord
from harness.measure.samples import accept_tokens
from harness.measure.stream_steps import steps_of

SMALLEST_BUCKET = 128  # tokens: prompts shorter than this share the first bucket


def input_length_bucket(prompt_tokens: int | None) -> str | None:
    """``0-127`` for up to 127 tokens, then ``128-255``, ``256-511``, ... (None: not counted)."""
    if prompt_tokens is None:
        return None
    if prompt_tokens < SMALLEST_BUCKET:
        return f"0-{SMALLEST_BUCKET - 1}"
    low = SMALLEST_BUCKET
    while prompt_tokens >= 2 * low:
        low *= 2
    return f"{low}-{2 * low - 1}"


def bucket_start(label: str) -> int:
    return int(label.split("-", 1)[0])


def turn_label(record: RequestRecord) -> str:
    return str(record.turn + 1)


def group_figures(records: list[RequestRecord]) -> dict:
    """A group's request and token counts, its mean prompt, and its accept length with the source."""
    tokens = sum(r.completion_tokens or 0 for r in records)
    verify = sum(r.spec_verify_ct or 0 for r in records)
    prompts = [r.prompt_tokens for r in records if r.prompt_tokens is not None]
    block = {"requests": len(records), "completion_tokens": tokens,
             "prompt_tokens_mean": round(sum(prompts) / len(prompts), 1) if prompts else None,
             "accept_length": None, "accept_length_source": None}
    if verify:
        counted = sum(accept_tokens(r.completion_tokens, r.spec_verify_ct, r.spec_accepted_drafts)
                      for r in records if r.spec_verify_ct)
        block.update(accept_length=round(counted / verify, 4), accept_length_source="requests")
        return block
    steps = steps_of(r.chunk_tokens for r in records)
    if steps is not None:
        block.update(accept_length=round(steps.accept_length, 4), accept_length_source="stream")
    return block


def grouped(ok: Iterable[RequestRecord], key: Callable[[RequestRecord], str | None],
            order: Callable[[str], int]) -> dict[str, dict]:
    groups: dict[str, list[RequestRecord]] = {}
    for record in ok:
        label = key(record)
        if label is not None:
            groups.setdefault(label, []).append(record)
    return {label: group_figures(groups[label]) for label in sorted(groups, key=order)}


def acceptance_by(ok: list[RequestRecord]) -> dict[str, dict[str, dict]]:
    """{"input_length": {bucket: figures}, "turn": {turn: figures}} over successful requests."""
    return {"input_length": grouped(ok, lambda r: input_length_bucket(r.prompt_tokens), bucket_start),
            "turn": grouped(ok, turn_label, int)}


def combine_acceptance_by(blocks: list[dict[str, dict[str, dict]]]) -> dict[str, dict[str, dict]]:
    """Repeats: requests and tokens summed per group, the accept length and mean prompt the
    median over the repeats that have the group."""
    combined: dict[str, dict[str, dict]] = {}
    for dimension in ("input_length", "turn"):
        labels: list[str] = []
        for block in blocks:
            labels += [label for label in (block.get(dimension) or {}) if label not in labels]
        order = bucket_start if dimension == "input_length" else int
        combined[dimension] = {label: combine_group([b[dimension][label] for b in blocks if label in (b.get(dimension) or {})])
                               for label in sorted(labels, key=order)}
    return combined


def combine_group(groups: list[dict]) -> dict:
    def median(key: str) -> float | None:
        values = sorted(g[key] for g in groups if g.get(key) is not None)
        if not values:
            return None
        middle = len(values) // 2
        return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    return {"requests": sum(g["requests"] for g in groups),
            "completion_tokens": sum(g["completion_tokens"] for g in groups),
            "prompt_tokens_mean": median("prompt_tokens_mean"), "accept_length": median("accept_length"),
            "accept_length_source": next((g["accept_length_source"] for g in groups if g.get("accept_length_source")), None)}
