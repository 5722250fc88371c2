"""Did each prompt have the length it was sized to?  The server's own ``prompt_tokens``
(its usage) against the record's ``intended_prompt_tokens`` (``workload.input_len``).

* Text APIs (``completions``, ``generate``): the server tokenizes exactly the text that
  was sized, so any difference is a mismatch -- the tokenizer that sized the prompts is
  not the server's (a wrong ``workload.tokenizer``, or no tokenizer at all: words only).
* ``chat``: the server wraps the prompt in its chat template, which adds the same tokens
  to every single-message chat (role markers, the generation prompt; a BOS it writes as
  text instead of the one the sizing counted).  That constant, the most common offset, is
  reported as the template's; a request off by anything else is a mismatch.  A tokenizer
  that is wrong by the same amount on every prompt cannot be told from a template here:
  use the completions API to check sizing exactly.

Only measured requests that succeeded and were sized count (warm-ups are sized too, but
stay out of every figure, as everywhere else).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from harness.load.records import RequestRecord


def judge(records: Iterable[RequestRecord], api: str, sized_by: str | None) -> dict[str, Any] | None:
    """The check of one load's sized prompts, or None when none were sized and answered."""
    checked = [r for r in records if not r.warmup and r.ok and r.intended_prompt_tokens is not None
               and r.prompt_tokens is not None]
    if not checked:
        return None
    offsets = [r.prompt_tokens - r.intended_prompt_tokens for r in checked]
    template = Counter(offsets).most_common(1)[0][0] if api == "chat" else 0
    off = [r.prompt_tokens for r, offset in zip(checked, offsets) if offset != template]
    lengths = {r.intended_prompt_tokens for r in checked}  # a trace replay's differ request by request
    return {"api": api, "sized_by": sized_by, "intended": lengths.pop() if len(lengths) == 1 else None,
            "template_tokens": template if api == "chat" else None, "checked": len(checked),
            "mismatched": len(off), "mismatched_range": [min(off), max(off)] if off else None}


def combine(blocks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The checks of several repeats as one: counts summed, ranges joined."""
    present = [b for b in blocks if b]
    if not present:
        return None
    ranges = [b["mismatched_range"] for b in present if b["mismatched_range"]]
    return {**present[0], "checked": sum(b["checked"] for b in present),
            "mismatched": sum(b["mismatched"] for b in present),
            "mismatched_range": [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges else None}


def sentence(arm: str, block: dict[str, Any] | None) -> str | None:
    """The summary's line: the mismatch, or for chat the template's constant; None when all is as meant."""
    if not block:
        return None
    intended, template = block["intended"], block["template_tokens"]
    meant = (f"{intended} intended" if intended is not None else "lengths intended") + (
        f" + {template} of the chat template" if template else "")
    if block["mismatched"]:
        low, high = block["mismatched_range"]
        had = f"{low}" if low == high else f"{low}-{high}"
        return (f"{arm}: {block['mismatched']} of {block['checked']} requests had {had} prompt tokens, not the "
                f"{meant} ({_why(block['sized_by'])})")
    if template:
        had = f"its {intended} tokens" if intended is not None else "its intended length"
        return f"{arm}: every prompt had {had}; the chat template added {template} to each"
    return None


def _why(sized_by: str | None) -> str:
    if sized_by is None:
        return "no tokenizer was known to size them, so they were input_len words: set workload.tokenizer"
    return f"the tokenizer used to size prompts, {sized_by}, is not the server's?"
