"""A sweep's folder written by hand, as `specgate sweep` writes one: sweep.json, and per point a
run record with results.json, each arm's config.yaml and the requests (requests.jsonl), whose
token rates give each arm the tok/s asked for, with Poisson noise between time windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

SPAN_MS = 4000.0  # each arm's measured load


def arm_lines(arm: str, tok_s: float, rng: np.random.Generator, per_request: int = 20) -> list[dict]:
    """Tokens at `tok_s` over SPAN_MS, at Poisson arrival times (given their count, uniform),
    cut into requests: the rows' own rate is `tok_s`, as a real record's rows reproduce its
    figures (harness/gates/reproduce.py), and its time windows' rates scatter around it."""
    times = np.sort(rng.uniform(0.0, SPAN_MS, int(round(tok_s * SPAN_MS / 1000.0))))
    lines = []
    for i, start in enumerate(range(0, times.size, per_request)):
        chunk = [round(float(t), 3) for t in times[start:start + per_request]]
        lines.append({"arm": arm, "index": i, "repeat": 0, "warmup": False, "ok": True, "status": 200,
                      "send_ms": 0.0 if i == 0 else chunk[0] - 1.0, "end_ms": chunk[-1], "ttft_ms": 1.0,
                      "chunk_ms": chunk, "chunk_tokens": [1] * len(chunk), "completion_tokens": len(chunk)})
    lines[-1]["end_ms"] = SPAN_MS
    return lines


def arm_config(engine: str, k: int | None, algorithm: str = "EAGLE3") -> dict:
    drafter = {"name": "none", "algorithm": None, "num_steps": None} if k is None else {
        "name": "eagle3_k25", "algorithm": algorithm, "model_path": "/shared/eagle3", "num_steps": k,
        "eagle_topk": 1, "num_draft_tokens": k + 1, "vllm_speculative_config": {}}
    return {"server": {"engine": engine}, "drafter": drafter}


def write_sweep(root: Path, tok_s: dict[tuple[int, int], tuple[float, float]], engine: str = "sim",
                seed: int = 0, plain_arm: str | None = "baseline", status: str = "finished") -> Path:
    """tok_s: (concurrency, k) -> (plain tok/s, speculative tok/s) of that point."""
    sweep, rng, points = root / "20261205T000000Z_sim_schedule_sweep", np.random.default_rng(seed), []
    for n, ((c, k), (plain, spec)) in enumerate(tok_s.items()):
        label = f"{n}_concurrency-{c}_num_steps-{k}"
        record = sweep / "points" / label / "20261205T000001Z_sim_schedule"
        arms = {"baseline": (plain, None), "eagle3": (spec, k)}
        lines = []
        for arm, (rate, arm_k) in arms.items():
            (record / "arms" / arm).mkdir(parents=True)
            (record / "arms" / arm / "config.yaml").write_text(yaml.safe_dump(arm_config(engine, arm_k)))
            lines += arm_lines(arm, rate, rng)
        (record / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        results = {"experiment": "sim_schedule", "status": "finished", "plain_arm": plain_arm,
                   "arms": {arm: {"status": "measured", "output_tok_s": rate} for arm, (rate, _) in arms.items()}}
        (record / "results.json").write_text(json.dumps(results))
        figures = {"baseline": {"status": "measured", "output_tok_s": plain, "speedup": None, "concurrency": c},
                   "eagle3": {"status": "measured", "output_tok_s": spec, "speedup": spec / plain, "concurrency": c}}
        points.append({"label": label, "swept": [f"workload.concurrency={c}", f"drafter.num_steps={k}"],
                       "overrides": [], "record": str(record.relative_to(sweep)), "exit_status": 0,
                       "status": "finished", "arms": figures})
    (sweep / "sweep.json").write_text(json.dumps({"experiment": "sim_schedule", "status": status,
                                                  "exit_status": 0, "points": points}))
    return sweep
