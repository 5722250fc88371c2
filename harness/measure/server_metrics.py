"""The server's own Prometheus counters, differenced over the measured window.

Some engines report speculative decoding only as cumulative /metrics counters (drafts,
draft tokens, accepted tokens, accepted per position); most keep TTFT and inter-token
latency histograms. Which names an engine uses is its own (`Engine.prometheus`). A snapshot before the first measured request and one after the load
give this run's numbers, warm-up and earlier traffic excluded, to set beside what the
client measured.

What the histogram figures mean, over the window:

- ``ttft_mean_ms``: the mean over requests of the server's time to first token, from
  when it received the request (where its clock starts is the engine's: see its class) to
  its first output. The client's TTFT holds it, plus the HTTP paths outside it.
- ``itl_sum_s``: the requests' decode time, first output to last, whatever the engine
  counts per observation.
- ``itl_count`` and ``itl_mean_ms`` = sum ÷ count: depend on ``itl_observed_per``. Per
  token (SGLang: each output adds its interval to the sum and its number of new tokens to
  the count), the mean is the decode time per token, the client's TPOT pooled over tokens
  (``decode_step_ms``), not its ITL (the gap between chunks, several tokens apart under
  speculation). Per step (vLLM), the count is engine steps and the mean the time per step.

harness/measure/agreement.py sets each figure beside the client's of the same meaning.

The window's ``accept_length``, where the engine's counters give one, is the engine's own
formula (``Engine.window_spec_stats``: engines count differently), with its definition in
words (``accept_length_definition``).

``prefix_cache_hit_rate``: Δ hits ÷ Δ queries of the engine's prefix-cache counters
(``PrometheusNames.prefix_cache_hits`` / ``prefix_cache_queries``, both in prompt tokens):
the share of the window's prompt tokens the cache already held.

Every counter the window reads must only grow between the two snapshots. One that went
backwards was reset inside the window (the server restarted behind an attached URL, a
worker behind a router was replaced, or an engine zeroed it); a difference across a reset is
garbage, so :func:`window` computes no figure over such a window: it says which counters went
backwards and why its figures are missing (``counter_reset_note``). That is the server's
account failing, not the load: the client's figures over the same requests never read a
counter, so they stand and the arm is measured. The run empties the prefix cache before the
first snapshot, never inside the window (harness/run/arm.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.engines.base import Engine, PrometheusNames

PER_POSITION = "num_accepted_tokens_per_pos"


@dataclass
class Snapshot:
    """Summed counter values by sample name, and per-position accepted counts. A sample the
    server reported as NaN or ±Inf (valid Prometheus text) is no value: its name is kept in
    ``non_finite`` and every figure read from it is missing, with that reason."""

    values: dict[str, float] = field(default_factory=dict)
    per_position: dict[int, float] = field(default_factory=dict)
    non_finite: set[str] = field(default_factory=set)


def stage_key(name: str, stage: str) -> str:
    """A per-stage histogram's sample kept per stage (its plain name sums every stage)."""
    return f"{name}{{stage={stage}}}"


def parse(text: str, names: PrometheusNames) -> Snapshot:
    snapshot = Snapshot(values=defaultdict(float))
    per_position = f"{names.spec_prefix}{PER_POSITION}" if names.spec_prefix else None
    staged = {names.stage_histogram + "_sum", names.stage_histogram + "_count"} if names.stage_histogram else set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isfinite(sample.value):
                snapshot.non_finite.add(sample.name)
            elif sample.name in staged and "stage" in sample.labels:
                snapshot.values[stage_key(sample.name, sample.labels["stage"])] += sample.value
            elif per_position and "position" in sample.labels and sample.name.startswith(per_position):
                position = int(sample.labels["position"])
                snapshot.per_position[position] = snapshot.per_position.get(position, 0.0) + sample.value
            elif not sample.name.endswith("_bucket"):
                snapshot.values[sample.name] += sample.value  # summed over labels (model, engine index)
    snapshot.values = {name: value for name, value in snapshot.values.items() if name not in snapshot.non_finite}
    return snapshot


def delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    if name not in after.values or name in before.non_finite:
        return None
    return after.values[name] - before.values.get(name, 0.0)


def histogram_mean_ms(before: Snapshot, after: Snapshot, base: str | None) -> float | None:
    if not base:
        return None
    total, count = delta(before, after, base + "_sum"), delta(before, after, base + "_count")
    return total / count * 1000.0 if total is not None and count else None


@dataclass
class Window:
    """Two snapshots of one server's counters: what grew between them (an engine's
    ``CounterWindow``)."""

    before: Snapshot
    after: Snapshot

    def delta(self, name: str) -> float | None:
        return delta(self.before, self.after, name)

    def per_position(self) -> list[float]:
        return [self.after.per_position.get(p, 0.0) - self.before.per_position.get(p, 0.0)
                for p in sorted(self.after.per_position)]


def counters_read(names: PrometheusNames) -> set[str]:
    """The sample names a window differences (spec counters under ``spec_prefix`` besides)."""
    read = {n for n in (names.generation_tokens, names.spec_verify_calls, names.prefix_cache_queries,
                        names.prefix_cache_hits, names.requests_finished) if n}
    read |= {base + suffix for base in (names.ttft_histogram, names.itl_histogram) if base for suffix in ("_sum", "_count")}
    return read


def went_backwards(names: PrometheusNames, before: Snapshot, after: Snapshot) -> list[str]:
    """'name: before -> after' for each counter the window reads that is lower after than before."""
    read = counters_read(names)
    found = [f"{name}: {before.values[name]:g} -> {value:g}" for name, value in sorted(after.values.items())
             if name in before.values and value < before.values[name]
             and (name in read or (names.spec_prefix and name.startswith(names.spec_prefix)))]
    found += [f"{names.spec_prefix}{PER_POSITION}{{position={p}}}: {before.per_position[p]:g} -> {value:g}"
              for p, value in sorted(after.per_position.items()) if value < before.per_position.get(p, 0.0)]
    return found


def cache_stats(names: PrometheusNames, counters: Window) -> dict[str, Any]:
    """The window's prefix-cache hit rate from the engine's counters; {} where it has none
    or no prompt was looked up."""
    if not (names.prefix_cache_queries and names.prefix_cache_hits):
        return {}
    queries = counters.delta(names.prefix_cache_queries)
    if not queries:
        return {}
    hits = counters.delta(names.prefix_cache_hits)
    block: dict[str, Any] = {"prefix_cache_queries": queries, "prefix_cache_hits": hits,
                             "prefix_cache_hit_rate": None if hits is None else hits / queries}
    if hits is None:
        block["prefix_cache_note"] = (f"the server exported no {names.prefix_cache_hits} (no hit since it started, "
                                      f"or a release without that counter): no hit rate")
    return block


def reset_window(backwards: list[str]) -> dict[str, Any]:
    """A window across which counters went backwards: no figure, the counters, and why."""
    return {"counters_went_backwards": backwards,
            "counter_reset_note": (f"the server's counters went backwards inside the measured window "
                                   f"({'; '.join(backwards[:6])}): the server restarted, or a worker behind its "
                                   f"address was replaced, between the two /metrics snapshots, so the server's "
                                   f"figures over this load are missing; the client's figures stand")}


def missing_note(block: dict[str, Any]) -> str | None:
    """Why a window's figures are missing (a counter reset) or some are (a NaN sample); None: whole."""
    return block.get("counter_reset_note") or block.get("non_finite_note")


def window(engine: Engine, before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """This run's server-side numbers (None where the server doesn't report them); none at
    all, with the reason, when a counter it reads went backwards inside the window."""
    names = engine.prometheus
    backwards = went_backwards(names, before, after)
    if backwards:  # a difference across a reset is garbage
        return reset_window(backwards)
    itl = names.itl_histogram
    block: dict[str, Any] = {
        "ttft_mean_ms": histogram_mean_ms(before, after, names.ttft_histogram),
        "itl_mean_ms": histogram_mean_ms(before, after, itl),
        # The sum over a request is its decode time however the engine counts; the count
        # (and so the mean) is per token or per engine step: the record says which.
        "itl_sum_s": delta(before, after, itl + "_sum") if itl else None,
        "itl_count": delta(before, after, itl + "_count") if itl else None,
        "itl_observed_per": names.itl_observed_per if itl else None,
        # every token the server generated, set beside what the client received (harness/measure/agreement.py)
        "generation_tokens": delta(before, after, names.generation_tokens) if names.generation_tokens else None,
        "requests_finished": delta(before, after, names.requests_finished) if names.requests_finished else None,
    }
    block.update(engine.window_spec_stats(Window(before, after)))
    block.update(cache_stats(names, Window(before, after)))
    non_finite = sorted(before.non_finite | after.non_finite)
    if non_finite:  # the figures read from them are None above; say why
        block["non_finite_samples"] = non_finite
        block["non_finite_note"] = (f"the server reported {', '.join(non_finite)} as NaN or infinite: "
                                    f"the figures read from them are missing")
    return block
