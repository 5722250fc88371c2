"""Write the bundled synthetic traces (datasets/traces/README.md says what they are and are not).

    .venv/bin/python scripts/make_synthetic_traces.py     # writes datasets/traces/*

Seeded and deterministic: the same files every time, byte for byte, with no network.

* ``mooncake_synthetic.jsonl``: Mooncake's JSON Lines form (``timestamp`` ms,
  ``input_length``, ``output_length``, ``hash_ids`` at 64 tokens a block). Requests open
  with one of a few shared "system prompts" (2 to 4 blocks each), and some continue an
  earlier request's conversation (its whole list of blocks, then new ones), so prefixes are
  shared as in a chat service's trace; one integer hash id per distinct block, as in Mooncake's.
* ``burstgpt_synthetic.csv``: BurstGPT's columns (``Timestamp`` s, ``Model``, ``Request
  tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``), whole-second timestamps.

Both: 40 requests over about 10 s in bursts (gamma gaps, shape 0.5), short outputs
(8 to 32 tokens), so a replay on the simulator takes seconds.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "datasets" / "traces"
SEED = 24  # issue 24
REQUESTS = 40
SPAN_S = 10.0
BLOCK = 64  # tokens per hash id (Mooncake's own traces: 512; small here so prompts stay short)
SYSTEM_PROMPTS = 4


def arrival_times(rng: random.Random) -> list[float]:
    """Bursty arrivals (gamma gaps, shape 0.5) scaled to span SPAN_S seconds."""
    gaps = [0.0] + [rng.gammavariate(0.5, 1.0) for _ in range(REQUESTS - 1)]
    total = sum(gaps)
    times, t = [], 0.0
    for gap in gaps:
        t += gap * SPAN_S / total
        times.append(t)
    return times


def mooncake(rng: random.Random) -> list[dict]:
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    systems = [fresh(rng.randint(2, 4)) for _ in range(SYSTEM_PROMPTS)]
    rows, history = [], []
    for t in arrival_times(rng):
        if history and rng.random() < 0.3:  # a next turn: an earlier request's full blocks, then its own
            prefix = list(rng.choice(history))
        else:
            prefix = list(rng.choice(systems))
        hash_ids = prefix + fresh(rng.randint(1, 3))
        # the last block is partial, as in Mooncake's trace: input_length ends inside it
        input_length = (len(hash_ids) - 1) * BLOCK + rng.randint(1, BLOCK)
        # a later turn shares its full blocks only: the partial one's hash covers other tokens
        history.append(hash_ids if input_length == len(hash_ids) * BLOCK else hash_ids[:-1])
        rows.append({"timestamp": int(round(t * 1000)), "input_length": input_length,
                     "output_length": rng.randint(8, 32), "hash_ids": hash_ids})
    return rows


def burstgpt(rng: random.Random) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
    for t in arrival_times(rng):
        request, response = rng.randint(20, 600), rng.randint(8, 32)
        writer.writerow([math.floor(t), rng.choice(["ChatGPT", "GPT-4"]), request, response, request + response,
                         rng.choice(["Conversation log", "API log"])])
    return out.getvalue()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows = mooncake(random.Random(SEED))
    (OUT / "mooncake_synthetic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (OUT / "burstgpt_synthetic.csv").write_text(burstgpt(random.Random(SEED + 1)), encoding="utf-8")
    print(f"wrote {len(rows)} requests to {OUT / 'mooncake_synthetic.jsonl'} and {OUT / 'burstgpt_synthetic.csv'}")


if __name__ == "__main__":
    main()
