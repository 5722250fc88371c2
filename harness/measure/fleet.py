"""A fleet's figures per worker: each worker's /metrics differenced over the same window as
the whole, the router's own per-worker counters beside them, and how unevenly the load
was spread.

The fleet's own server-side window is the workers' counters summed (a counter of the
fleet is the sum of its workers'), so every figure a single server's window has, the
fleet's has too, with one definition (harness/measure/server_metrics.py). Per worker:
requests finished, prompt and generated tokens, prefix-cache hit rate and accept length,
each from that worker's counters alone.

A split fleet (prefill/decode disaggregation) is read by role: a request passes through one
prefill and one decode worker, and both count it, so summing all of them would count it
twice. Its window is the decode workers' counters summed (they hold each request from its
arrival to its last token: TTFT, decode time, tokens, verify cycles), with the prefix-cache
figures of the prefill workers (where prompts are looked up), and the TTFT split into the
stages the servers report in SGLang's per-stage histogram (`ttft_split_ms`: the decode side's
bootstrap, the prefill side's queue, prefill forward and KV transfer, the decode side's
first decode, KV in to first token out; means over the window's requests; a stage no worker
reported is absent). Its imbalance is over the decode workers, `prefill_imbalance` over the
prefill workers.

Imbalance: max ÷ mean over the workers (1.0: even; N: one worker of N took everything), of
requests and of generated tokens. A router that routes for its cache (cache_aware) trades
some balance for hits; round robin is even by construction on requests, not on tokens.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.engines.base import Engine
from harness.measure.server_metrics import Snapshot, stage_key, window

# a split request's stages (SGLang's RequestStage values) in the order they add up to its TTFT:
# figure -> (the role whose workers report it, the stage)
TTFT_STAGES = {"bootstrap_ms": ("decode", "decode_bootstrap"), "prefill_queue_ms": ("prefill", "prefill_waiting"),
               "prefill_ms": ("prefill", "prefill_forward"),
               "transfer_ms": ("prefill", "prefill_transfer_kv_cache"), "first_decode_ms": ("decode", "decode_waiting")}

# the per-worker figures a worker's window gives, summed over repeats in the arm's fleet block
COUNTED = ("requests_finished", "prefix_cache_queries", "prefix_cache_hits", "generation_tokens", "spec_verify_calls")


def summed(snapshots: list[Snapshot | None]) -> Snapshot | None:
    """The fleet's counters: its workers' summed; None when any worker gave none (a sum
    missing a worker would be a smaller fleet's)."""
    if not snapshots or any(s is None for s in snapshots):
        return None
    total = Snapshot(values=defaultdict(float))
    for snapshot in snapshots:
        for name, value in snapshot.values.items():
            total.values[name] += value
        for position, value in snapshot.per_position.items():
            total.per_position[position] = total.per_position.get(position, 0.0) + value
        total.non_finite |= snapshot.non_finite
    total.values = dict(total.values)
    return total


def counter_names(engine: Engine) -> dict[str, str]:
    """COUNTED figure -> the engine's counter for it (those it exports)."""
    names = engine.prometheus
    found = {"requests_finished": names.requests_finished, "generation_tokens": names.generation_tokens,
             "prefix_cache_queries": names.prefix_cache_queries, "prefix_cache_hits": names.prefix_cache_hits,
             "spec_verify_calls": names.spec_verify_calls}
    return {key: name for key, name in found.items() if name}


def worker_counts(counters: dict[str, str], exported: set[str], before: Snapshot, after: Snapshot) -> dict[str, float]:
    """A worker's counts over the window. A counter it does not show yet counts 0 when another
    worker of the fleet exports it (SGLang's appear with their first observation: a worker the
    router sent nothing has none); a counter no worker exports is unknown, not 0."""
    return {key: after.values.get(name, 0.0) - before.values.get(name, 0.0)
            for key, name in counters.items() if name in exported}


def with_ratios(block: dict[str, Any]) -> dict[str, Any]:
    """A worker's hit rate and accept length from its counts (None where nothing was counted)."""
    queries, hits = block.get("prefix_cache_queries"), block.get("prefix_cache_hits")
    tokens, cycles = block.get("generation_tokens"), block.get("spec_verify_calls")
    block["prefix_cache_hit_rate"] = hits / queries if queries and hits is not None else None
    block["accept_length"] = tokens / cycles if tokens and cycles else None
    return block


def worker_windows(engine: Engine, members: list[tuple[str, str]], before: list[Snapshot | None],
                   after: list[Snapshot | None], roles: list[str] | None = None) -> list[dict[str, Any]]:
    """One block per worker: its name, url (a split fleet's: its role), counts and ratios over the window."""
    counters = counter_names(engine)
    exported = {name for snapshot in after if snapshot is not None for name in snapshot.values}
    blocks = []
    for index, ((name, url), first, last) in enumerate(zip(members, before, after)):
        role = roles[index] if roles else "server"
        block: dict[str, Any] = {"worker": name, "url": url, **({"role": role} if role != "server" else {})}
        if first is None or last is None:
            block["note"] = "the worker's /metrics did not answer at one end of the window: no figures"
        else:
            own = window(engine, first, last)
            if own.get("counter_reset_note"):
                block["note"] = own["counter_reset_note"]
            else:
                block.update(with_ratios(worker_counts(counters, exported, first, last)))
                block.update({k: own[k] for k in ("ttft_mean_ms", "itl_mean_ms") if own.get(k) is not None})
        blocks.append({k: v for k, v in block.items() if v is not None})
    return blocks


def imbalance(values: list[float | None]) -> float | None:
    """max ÷ mean (1.0: even); None when a worker's value is unknown or nothing was counted."""
    if not values or any(v is None for v in values):
        return None
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else None


def imbalances(workers: list[dict[str, Any]]) -> dict[str, float | None]:
    """Over the workers that serve whole requests, or a split fleet's decode workers (its
    prefill workers': prefill_imbalances)."""
    serving = [w for w in workers if w.get("role", "server") in ("server", "decode")]
    return {"requests_max_over_mean": imbalance([w.get("requests_finished") for w in serving]),
            "generation_tokens_max_over_mean": imbalance([w.get("generation_tokens") for w in serving])}


def prefill_imbalances(workers: list[dict[str, Any]]) -> dict[str, float | None]:
    prefill = [w for w in workers if w.get("role") == "prefill"]
    return {"requests_max_over_mean": imbalance([w.get("requests_finished") for w in prefill]),
            "prompt_tokens_max_over_mean": imbalance([w.get("prefix_cache_queries") for w in prefill])}


def of_role(roles: list[str], items: list, role: str) -> list:
    return [item for item, r in zip(items, roles) if r == role]


def whole_window(engine: Engine, roles: list[str], before: list[Snapshot | None],
                 after: list[Snapshot | None]) -> dict[str, Any]:
    """The server's window over all its members (one: the server itself): their counters
    summed, or a split fleet's read by role; {} when a member's /metrics did not answer."""
    if "prefill" in roles:  # each request counted by a prefill and a decode worker
        return split_window(engine, roles, before, after)
    first, last = summed(before), summed(after)
    return window(engine, first, last) if first is not None and last is not None else {}


def split_window(engine: Engine, roles: list[str], before: list[Snapshot | None],
                 after: list[Snapshot | None]) -> dict[str, Any]:
    """A split fleet's server window: the decode workers' counters summed, the prefill workers'
    prefix-cache figures, and the TTFT split ({} when a worker's /metrics did not answer)."""
    decode_before, decode_after = summed(of_role(roles, before, "decode")), summed(of_role(roles, after, "decode"))
    prefill_before, prefill_after = summed(of_role(roles, before, "prefill")), summed(of_role(roles, after, "prefill"))
    if None in (decode_before, decode_after, prefill_before, prefill_after):
        return {}
    block = window(engine, decode_before, decode_after)
    prefill = window(engine, prefill_before, prefill_after)
    for reset in (block, prefill):
        if reset.get("counter_reset_note"):
            return reset
    cache_keys = ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "prefix_cache_note")
    block = {k: v for k, v in block.items() if k not in cache_keys}
    block.update({k: prefill[k] for k in cache_keys if k in prefill})
    split = ttft_split(engine, {"prefill": (prefill_before, prefill_after), "decode": (decode_before, decode_after)})
    if split:
        block["ttft_split_ms"] = split
    return block


def ttft_split(engine: Engine, by_role: dict[str, tuple[Snapshot, Snapshot]]) -> dict[str, float]:
    """Each TTFT stage's mean over the window's requests, in ms, from the role's summed
    per-stage histogram; a stage none of its workers reported is left out."""
    base = engine.prometheus.stage_histogram
    if not base:
        return {}
    split = {}
    for figure, (role, stage) in TTFT_STAGES.items():
        first, last = by_role[role]
        total_key, count_key = stage_key(base + "_sum", stage), stage_key(base + "_count", stage)
        if count_key not in last.values:
            continue
        count = last.values[count_key] - first.values.get(count_key, 0.0)
        if count > 0:
            split[figure] = (last.values[total_key] - first.values.get(total_key, 0.0)) / count * 1000.0
    return split


def router_counters(text: str) -> dict[str, float]:
    """The router's counters as 'name{worker=URL}' (per worker) or 'name' (its totals,
    summed over other labels): what it saw itself, beside what the workers counted."""
    found: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.type != "counter":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total") or not math.isfinite(sample.value):
                continue
            worker = sample.labels.get("worker")
            found[f"{sample.name}{{worker={worker}}}" if worker else sample.name] += sample.value
    return dict(found)


def router_window(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """What grew between two readings of the router's counters (nothing when one is missing)."""
    if before is None or after is None:
        return {}
    return {name: value - before.get(name, 0.0) for name, value in sorted(after.items())
            if value - before.get(name, 0.0)}


def fleet_summary(policy: str, repeats: list[list[dict[str, Any]]],
                  splits: list[dict[str, float]] | None = None) -> dict[str, Any]:
    """The arm's fleet block: each worker's counts summed over the repeats, its hit rate and
    accept length from those sums, and the imbalance between workers; a split fleet's TTFT
    split (`splits`: each repeat's) averaged over the repeats that report each stage."""
    if not repeats:
        return {}
    workers = []
    for index, first in enumerate(repeats[0]):
        blocks = [repeat[index] for repeat in repeats if index < len(repeat)]
        worker: dict[str, Any] = {"worker": first["worker"], "url": first["url"],
                                  **({"role": first["role"]} if first.get("role") else {})}
        for key in COUNTED:
            values = [b.get(key) for b in blocks]
            worker[key] = None if any(v is None for v in values) else sum(values)
        workers.append({k: v for k, v in with_ratios(worker).items() if v is not None})
    summary = {"policy": policy, "workers": workers, "imbalance": imbalances(workers)}
    if any(w.get("role") == "prefill" for w in workers):
        summary["disaggregation"] = "prefill/decode"
        summary["prefill_imbalance"] = prefill_imbalances(workers)
        summary["ttft_split_ms"] = mean_split(splits or [])
    return summary


def mean_split(splits: list[dict[str, float]]) -> dict[str, float]:
    """Each stage's mean over the repeats that report it, in TTFT_STAGES order."""
    return {figure: sum(values) / len(values) for figure in TTFT_STAGES
            if (values := [split[figure] for split in splits if figure in split])}
