"""Per-request records -> one arm's numbers (:class:`ArmResult`).

Only measured (non-warm-up) requests that succeeded enter the timing and token
metrics; failed ones are counted and their error messages tallied. Requests the client
cancelled on purpose (``workload.cancel``) are neither: they are not ``ok`` (their text
was cut short), so no figure holds them, and not failed; the ``cancel`` block counts them.

Each metric's definition is its entry in :mod:`harness.measure.registry` (its samples,
harness/measure/samples.py), written there once; this module computes them all from the
measured request lines, combines repeats and reads a result back from results.json.

Break-even: speculative decoding wins when accept_length > verify_cycle / plain_step
(:func:`harness.measure.registry.break_even_accept_length`).  No data gives None, never 0.
Which of these numbers are reported where is the metric registry's business
(:mod:`harness.measure.registry`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Optional

import numpy as np

from harness.measure import output_length, prompt_length, steady, trace_replay
from harness.measure.acceptance import acceptance_by, combine_acceptance_by
from harness.load import LoadResult, RequestRecord
from harness.load.cancel import cancel_figures, combine_cancel_figures
from harness.load.client_health import combine_client_blocks
from harness.measure.registry import (Metric, all_metrics, computed_figures, metric_value, noise_metrics, number, put,
                                      read, resolve)
from harness.measure.samples import PerRequest, accept_tokens


def _r(x: Optional[float], nd: int = 4) -> Optional[float]:
    return None if x is None else round(float(x), nd)


@dataclass
class Stat:
    mean: Optional[float] = None
    p50: Optional[float] = None
    p90: Optional[float] = None
    p99: Optional[float] = None
    n: int = 0

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat":
        a = np.asarray(list(values), dtype=float)
        if a.size == 0:
            return cls()
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99), n=int(a.size))

    def to_json(self) -> dict:
        return {"mean": _r(self.mean), "p50": _r(self.p50), "p90": _r(self.p90), "p99": _r(self.p99)}


# a distribution's statistics a result keeps of it (ttft_ms.mean ... ttft_ms.p99)
STATS = ("mean", "p50", "p90", "p99")
# the metric whose value may come from elsewhere than the run's requests; its source is written beside it
ACCEPT_LENGTH = "accept_length"
VERIFY_CYCLE = "verify_cycle_ms"  # set with it from the server's counters (apply_server_window)


@dataclass
class ArmResult:
    """One arm's numbers, in memory as in results.json (``arms.<arm>``): every registry metric
    by its path in ``figures``, what is not a metric (counts, errors, blocks) in fields.
    :meth:`to_json` writes it and :func:`read_result` reads it back into this type."""

    arm: str
    # every registry metric by its path (harness/measure/registry.py): those the requests give
    # (a distribution by statistic: ttft_ms.p50), and those the arm sets once its telemetry and
    # server counters are summarized (joules_per_token, prefix_cache_hit_rate)
    figures: dict[str, Optional[float]] = field(default_factory=dict)
    # a distribution's number of values, by family; kept in memory only (results.json never held it)
    counts: dict[str, int] = field(default_factory=dict)
    accept_length_source: Optional[str] = None  # "run" | "server_cumulative" | "server_metrics_window" | None
    requests_ok: int = 0
    requests_failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    completion_tokens: int = 0
    duration_s: float = 0.0
    repeats: int = 1  # workload runs combined into this result (medians, see combine_repeats)
    noise: dict[str, dict] = field(default_factory=dict)  # metric path -> spread over the repeats
    categories: dict[str, dict] = field(default_factory=dict)  # a dataset's category -> its figures (by_category)
    # accept length per input-length bucket and per turn (harness/measure/acceptance.py)
    acceptance_by: dict[str, dict[str, dict]] = field(default_factory=dict)
    # each speculative request's accept length, completion_tokens (or 1 + spec_accepted_drafts per cycle) / spec_verify_ct
    request_accept_lengths: list[float] = field(default_factory=list, repr=False)
    correct_drafts_histogram: list[int] = field(default_factory=list)  # Σ over requests: cycles by accepted drafts
    # what results.json says of the two above (a record read back keeps these, not the samples)
    accept_length_per_request: dict = field(default_factory=dict)
    acceptance_per_position: list[float] = field(default_factory=list)
    prompt_length: Optional[dict] = None  # sized prompts' server counts against input_len (harness/measure/prompt_length.py)
    output_length: Optional[dict] = None  # completion tokens against each request's max_tokens (harness/measure/output_length.py)
    # the client's own health over the load (harness/load/client_health.py) and, once judged, whether
    # its figures are the client's (harness/gates/client_bound.py); {}: not measured
    client: dict = field(default_factory=dict)
    # a trace replay's achieved against intended send times (harness/measure/trace_replay.py); {}: no trace
    trace: dict = field(default_factory=dict)
    # the figures over the load's steady window, or why it has none (harness/measure/steady.py)
    steady: dict = field(default_factory=dict)
    # workload.cancel: what was asked, requests chosen and cancelled, their tokens (harness/load/cancel.py); {}: off
    cancel: dict = field(default_factory=dict)
    # measured requests whose answer named another model than the one asked: that model -> requests
    other_models: dict[str, int] = field(default_factory=dict)
    # the measured request lines, kept only while a registered metric pools its repeats
    pooled_lines: list[dict] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, arm: str, **values: Any) -> "ArmResult":
        """A result made by hand (a test's, a benchmark's): fields by name, and metrics by path,
        a distribution as its Stat (``ttft_ms=Stat(...)``)."""
        names = {f.name for f in fields(cls)}
        result = cls(arm, **{k: v for k, v in values.items() if k in names})
        for key, value in values.items():
            if key not in names:
                result.set(key, value)
        return result

    def value(self, path: str) -> Optional[float]:
        """A registry metric's value at its path (``ttft_ms.p99``); None when not measured."""
        return self.figures.get(path)

    def stat(self, family: str) -> Stat:
        """A distribution's statistics (``ttft_ms``) as one Stat."""
        return Stat(**{s: self.figures.get(f"{family}.{s}") for s in STATS}, n=self.counts.get(family, 0))

    def set(self, path: str, value: Any) -> None:
        """Set a metric at its path; a Stat sets each statistic of its family."""
        if isinstance(value, Stat):
            self.figures.update({f"{path}.{s}": getattr(value, s) for s in STATS})
            self.counts[path] = value.n
        else:
            self.figures[path] = value

    @property
    def requests(self) -> dict[str, int]:
        """The request counts under the path results.json gives them (`requests.ok`)."""
        return {"ok": self.requests_ok, "failed": self.requests_failed}

    def to_json(self) -> dict:
        measured = set(measured_paths())
        return {
            "repeats": self.repeats,
            "noise": self.noise,
            **self.measured_json(),
            "requests": {"ok": self.requests_ok, "failed": self.requests_failed},
            "errors": dict(self.errors),
            "completion_tokens": self.completion_tokens,
            "duration_s": _r(self.duration_s, 4),
            **({"categories": {name: dict(block) for name, block in self.categories.items()}}
               if self.categories else {}),
            **({"acceptance_by": {dimension: {label: dict(block) for label, block in groups.items()}
                                  for dimension, groups in self.acceptance_by.items()}}
               if self.acceptance_by else {}),
            **({"accept_length_per_request": dict(self.accept_length_per_request)}
               if self.accept_length_per_request else {}),
            **({"acceptance_per_position": list(self.acceptance_per_position)} if self.acceptance_per_position else {}),
            **({"prompt_length": dict(self.prompt_length)} if self.prompt_length else {}),
            **({"output_length": dict(self.output_length)} if self.output_length else {}),
            **({"client": dict(self.client)} if self.client else {}),
            **({"trace": dict(self.trace)} if self.trace else {}),
            **({"steady": dict(self.steady)} if self.steady else {}),
            **({"cancel": dict(self.cancel)} if self.cancel else {}),
            **({"other_models": dict(self.other_models)} if self.other_models else {}),
            # the metrics the arm set, flat under their path, to the digits records have always kept
            **{path: _r(value, 6) for path, value in self.figures.items() if path not in measured},
        }

    def measured_json(self) -> dict:
        """The metrics the requests give, in the registry's order, each to its entry's digits;
        a distribution as a block of its statistics (``ttft_ms``: mean, p50, p90, p99)."""
        block: dict[str, Any] = {}
        for m in measured_metrics():
            if is_distribution(m):
                block.setdefault(m.family, {s: _r(self.figures.get(f"{m.family}.{s}"), m.digits) for s in STATS})
                continue
            put(block, m.path, _r(self.figures.get(m.path), m.digits))
            if m.path == ACCEPT_LENGTH:
                block[f"{ACCEPT_LENGTH}_source"] = self.accept_length_source
        return block


def measured_metrics() -> list[Metric]:
    """The registered metrics an arm's requests give, computed in summarize (not between arms,
    not a block of the result's own: its `steady` block, its `requests` counts)."""
    return computed_figures({f.name for f in fields(ArmResult)} | {"requests"})


def is_distribution(entry: Metric) -> bool:
    """A statistic of a per-request distribution (``ttft_ms.p50``): its family is a block of STATS."""
    return isinstance(entry.samples, PerRequest) and entry.path.partition(".")[2] in STATS


def measured_paths() -> list[str]:
    """The paths of the figures the requests give (a distribution's every statistic), in the registry's order."""
    return list(dict.fromkeys(path for m in measured_metrics()
                              for path in ([f"{m.family}.{s}" for s in STATS] if is_distribution(m) else [m.path])))


def read_result(arm: str, block: dict[str, Any]) -> Optional[ArmResult]:
    """An arm's block of results.json read back into an ArmResult (None: the arm has no
    figures, it was not measured). Each metric under its path or any spelling records written
    before used (registry.read); what is not a metric, by its key."""
    if not isinstance(block, dict) or not any(k in block for k in ("requests", "repeats", *measured_families())):
        return None
    result = ArmResult(arm)
    for m in measured_metrics():
        paths = [f"{m.family}.{s}" for s in STATS] if is_distribution(m) else [m.path]
        for path in paths:
            result.figures[path] = number(read(block, resolve(path)))
    written = {key: i for i, key in enumerate(block)}  # the arm set them in its order: kept, so the bytes round-trip
    for m in sorted(set_metrics(), key=lambda m: written.get(m.path, len(written))):
        value = number(read(block, m))
        if value is not None:
            result.figures[m.path] = value
    requests = block.get("requests") or {}
    result.requests_ok, result.requests_failed = int(requests.get("ok") or 0), int(requests.get("failed") or 0)
    for name in READ_AS_IS:
        if block.get(name) is not None:
            setattr(result, name, block[name])
    return result


# ArmResult's fields that results.json keeps under their own name, read back as they are
READ_AS_IS = ("repeats", "noise", "accept_length_source", "errors", "completion_tokens", "duration_s", "categories",
              "acceptance_by", "accept_length_per_request", "acceptance_per_position", "prompt_length",
              "output_length", "client", "trace", "steady", "cancel", "other_models")


def measured_families() -> list[str]:
    return [m.family for m in measured_metrics()]


def set_metrics() -> list[Metric]:
    """The registered metrics an arm sets on its result (J/token, the prefix cache's hit rate):
    not computed from its requests, not between arms, not a block of their own (steady, requests)."""
    own = {f.name for f in fields(ArmResult)} | {"requests"}
    return [m for m in all_metrics() if not (m.samples or m.compute or m.between_arms) and m.family not in own]


def _error_of(r: RequestRecord) -> str:
    if r.error:
        return r.error
    if r.status is not None and r.status != 200:
        return f"HTTP {r.status}"
    return "request did not complete"


def group_errors(counts: "Counter[str] | dict[str, int]") -> dict[str, int]:
    """Failure reasons once each, with a count: messages that differ only in their numbers
    ("... after 3 token chunks", "... after 17 token chunks") are one reason, shown with N
    for the numbers that differ."""
    shapes: dict[str, dict[str, int]] = {}
    for message, count in counts.items():
        shape = re.sub(r"\d+(?:\.\d+)?", "N", message)
        shapes.setdefault(shape, {})
        shapes[shape][message] = shapes[shape].get(message, 0) + count
    grouped = {}
    for shape, messages in shapes.items():
        text = next(iter(messages)) if len(messages) == 1 else shape
        grouped[text] = sum(messages.values())
    return dict(sorted(grouped.items(), key=lambda kv: -kv[1]))


def summarize(arm: str, load: LoadResult, server_accept_length: Optional[float] = None,
              steady_min_fraction: float = 0.25) -> ArmResult:
    measured = load.measured
    ok = [r for r in measured if r.ok and r.completion_tokens is not None]
    # a request the client cancelled (workload.cancel) is neither: counted in `cancel` only
    failed = [r for r in measured if not (r.ok and r.completion_tokens is not None) and not r.cancelled]
    window = load.end_time - load.start_time if measured else 0.0

    total_ct = sum(r.completion_tokens for r in ok)
    res = ArmResult(
        arm=arm,
        requests_ok=len(ok),
        requests_failed=len(failed),
        errors=group_errors(Counter(_error_of(r) for r in failed)),
        completion_tokens=total_ct,
        duration_s=max(0.0, window),
        cancel=cancel_figures(load.cancel, measured),
        other_models=other_models(measured, load.model),
    )
    # one time axis for every line (a record the runner did not stamp takes the load's t0)
    lines = [r.to_json(load.run_start if r.run_start is None else None) for r in ok]
    # every figure from the lines as the record keeps them (to the microsecond), so a reader of
    # the record's rows recomputes the same figures (harness/gates/reproduce.py checks that);
    # each is its registry samples' statistic, so it is the point its interval resamples
    fill_figures(res, lines)
    spec = [r for r in ok if r.spec_verify_ct]
    if sum(r.spec_verify_ct for r in spec) > 0:
        res.accept_length_source = "run"
    elif server_accept_length is not None:
        res.figures[ACCEPT_LENGTH] = float(server_accept_length)
        res.accept_length_source = "server_cumulative"
    res.request_accept_lengths = [accept_tokens(r.completion_tokens, r.spec_verify_ct, r.spec_accepted_drafts)
                                  / r.spec_verify_ct for r in spec]
    res.correct_drafts_histogram = summed_histograms(r.spec_correct_drafts_histogram for r in spec)
    describe_acceptance(res)
    res.categories = by_category(ok)
    res.acceptance_by = acceptance_by(ok)
    res.prompt_length = prompt_length.judge(measured, load.api, load.prompt_sizing)
    res.output_length = output_length.judge(measured)
    res.client = dict(load.client or {})
    res.trace = trace_replay.judge(measured, load.trace_content) or {}
    if measured:
        res.steady = steady.steady_figures([r.to_json(load.run_start if r.run_start is None else None) for r in measured],
                                           load.concurrency, load.request_rate,
                                           steady_min_fraction)
    return res


def other_models(measured: list[RequestRecord], asked: str) -> dict[str, int]:
    """The models the answers named instead of ``asked``, with how many requests each: a router
    that sent requests to another model's worker, or an alias, measures another model."""
    return dict(Counter(r.model for r in measured if r.model is not None and r.model != asked))


def fill_figures(result: ArmResult, lines: list[dict]) -> None:
    """The registry's metrics from the successful measured requests, as request lines (the
    shape requests.jsonl and a columnar reader give them in); a distribution's statistics
    from one reading of its values."""
    entries = measured_metrics()
    for m in entries:
        if is_distribution(m):
            if m.family not in result.counts:
                result.set(m.family, Stat.of(v for line in lines for v in m.samples.values_of(line)))
        else:
            result.figures[m.path] = m.value_from(lines)
    if any(m.combine == "pooled" for m in entries):
        result.pooled_lines = lines


def describe_acceptance(result: ArmResult) -> None:
    """What results.json says of the per-request accept lengths and the accepted positions."""
    lengths, histogram = result.request_accept_lengths, result.correct_drafts_histogram
    result.accept_length_per_request = accept_length_distribution(lengths) if lengths else {}
    result.acceptance_per_position = acceptance_per_position(histogram) if sum(histogram) else []


ACCEPT_LENGTH_BIN = 0.25  # histogram bin width: a quarter token per verify cycle


def accept_length_distribution(values: list[float]) -> dict:
    """Per-request accept lengths: percentiles, range and a histogram of [bin start, count]
    (a request with 2.1 counts in the 2.0 bin, which holds [2.0, 2.25))."""
    a = np.asarray(values, dtype=float)
    p10, p50, p90 = np.percentile(a, [10, 50, 90])
    # round before flooring: 2.25 stored as 2.2499999 still belongs to the 2.25 bin
    starts = np.floor(np.round(a / ACCEPT_LENGTH_BIN, 9)) * ACCEPT_LENGTH_BIN
    bins = Counter(round(float(x), 4) for x in starts)
    return {"n": int(a.size), "p10": _r(p10), "p50": _r(p50), "p90": _r(p90),
            "min": _r(a.min()), "max": _r(a.max()), "bin_width": ACCEPT_LENGTH_BIN,
            "histogram": [[start, bins[start]] for start in sorted(bins)]}


def summed_histograms(histograms: Iterable[list[int] | None]) -> list[int]:
    """Element-wise sum of per-request histograms (missing ones left out, shorter ones padded)."""
    total: list[int] = []
    for hist in histograms:
        for k, count in enumerate(hist or []):
            total += [0] * (k + 1 - len(total))
            total[k] += count
    return total


def acceptance_per_position(histogram: list[int]) -> list[float]:
    """From cycles by accepted drafts ([k]: cycles that accepted k), the fraction of
    cycles that accepted draft position i, for i = 1 .. the longest draft."""
    cycles = sum(histogram)
    return [_r(sum(histogram[i:]) / cycles) for i in range(1, len(histogram))]


def by_category(ok: list[RequestRecord]) -> dict[str, dict]:
    """Each category's figures when the prompts carry categories (a dataset's rows), from
    the category's successful requests alone. Throughput is shared by everything in
    flight, so a category's speed is its requests' own: `stream_tok_s` = Σ completion
    tokens ÷ Σ request durations (the rate one request sees, token-weighted). Accept
    length is token-weighted as for the arm (Σ tokens ÷ Σ verify cycles)."""
    groups: dict[str, list[RequestRecord]] = {}
    for r in ok:
        if r.category:
            groups.setdefault(r.category, []).append(r)
    return {name: category_figures(records) for name, records in sorted(groups.items())}


def category_figures(records: list[RequestRecord]) -> dict:
    """A category's figures; its latencies under their registry paths (records written
    before spelled them ttft_ms_p50, tpot_ms_p50: readers go through registry.read)."""
    tokens = sum(r.completion_tokens for r in records)
    seconds = sum(r.e2e_s for r in records if r.e2e_s is not None)
    verify = sum(r.spec_verify_ct or 0 for r in records)
    decoding = [r for r in records if r.completion_tokens > 1 and r.decode_s is not None]
    return {
        "requests": len(records),
        "completion_tokens": tokens,
        "accept_length": _r(sum(accept_tokens(r.completion_tokens, r.spec_verify_ct, r.spec_accepted_drafts)
                                for r in records if r.spec_verify_ct) / verify) if verify else None,
        "stream_tok_s": _r(tokens / seconds, 3) if seconds > 0 else None,
        "ttft_ms.p50": _r(Stat.of(r.ttft_s * 1000.0 for r in records if r.ttft_s is not None).p50),
        "tpot_ms.p50": _r(Stat.of(r.decode_s * 1000.0 / (r.completion_tokens - 1) for r in decoding).p50),
    }


def category_speedups(result: ArmResult, plain: ArmResult | None) -> dict[str, float]:
    """Per category: this arm's stream_tok_s over the plain arm's, for categories both have."""
    if plain is None:
        return {}
    out = {}
    for name, mine in result.categories.items():
        theirs = plain.categories.get(name) or {}
        if mine.get("stream_tok_s") and theirs.get("stream_tok_s"):
            out[name] = round(mine["stream_tok_s"] / theirs["stream_tok_s"], 4)
    return out


def combine_categories(results: list[ArmResult]) -> dict[str, dict]:
    """Repeats: each category's figures, each the median over the repeats that have it."""
    names = sorted({c for r in results for c in r.categories})
    combined = {}
    for name in names:
        blocks = [r.categories[name] for r in results if name in r.categories]
        combined[name] = {key: (sum(b[key] for b in blocks) if key in ("requests", "completion_tokens")
                                else _median([b.get(key) for b in blocks])) for key in blocks[0]}
    return combined


def apply_server_window(result: ArmResult, load: LoadResult, server: dict) -> ArmResult:
    """Engines that report speculation only as server counters (and fleets, whose router
    drops the request field asking for per-request details): the accept length of this
    run's measured window, and the cycle time from the client's decode spans over the
    window's verify cycles (vLLM's drafts, SGLang's verify calls)."""
    drafts = server.get("spec_drafts") or server.get("spec_verify_calls")
    if result.accept_length_source == "run" or not drafts:
        return result
    result.figures[ACCEPT_LENGTH] = server["accept_length"]
    result.accept_length_source = "server_metrics_window"
    ok = [r for r in load.measured if r.ok and r.decode_s is not None]
    result.figures[VERIFY_CYCLE] = sum(r.decode_s for r in ok) * 1000.0 / drafts if ok else None
    return result


def spread(values: list[Optional[float]]) -> Optional[dict]:
    """median, min, max, MAD (median absolute deviation) and CV (sample sd ÷ mean)."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    if a.size == 0:
        return None
    median = float(np.median(a))
    mean = float(a.mean())
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"median": _r(median), "min": _r(float(a.min())), "max": _r(float(a.max())),
            "mad": _r(float(np.median(np.abs(a - median)))), "cv": _r(sd / mean if mean else None), "n": int(a.size)}


def _median(values: list[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def combine_repeats(arm: str, results: list[ArmResult]) -> ArmResult:
    """N runs of the same workload on the same server -> one result whose metrics are the
    medians, with each metric's spread in `noise` (so gates can tell signal from noise)."""
    if len(results) == 1:
        return results[0]
    combined = ArmResult(arm=arm, repeats=len(results))
    combined.accept_length_source = next((r.accept_length_source for r in results if r.accept_length_source), None)
    combined.requests_ok = sum(r.requests_ok for r in results)
    combined.requests_failed = sum(r.requests_failed for r in results)
    combined.errors = group_errors(sum((Counter(r.errors) for r in results), Counter()))
    combined.completion_tokens = sum(r.completion_tokens for r in results)
    combined.categories = combine_categories(results)
    combined.acceptance_by = combine_acceptance_by([r.acceptance_by for r in results if r.acceptance_by])
    combined.request_accept_lengths = [x for r in results for x in r.request_accept_lengths]
    combined.correct_drafts_histogram = summed_histograms(r.correct_drafts_histogram for r in results)
    describe_acceptance(combined)
    combined.prompt_length = prompt_length.combine([r.prompt_length for r in results])
    combined.output_length = output_length.combine([r.output_length for r in results])
    combined.duration_s = sum(r.duration_s for r in results)
    combined.client = combine_client_blocks([r.client for r in results])
    combined.trace = trace_replay.combine([r.trace for r in results]) or {}
    combined.steady = steady.combine([r.steady for r in results])
    combined.cancel = combine_cancel_figures([r.cancel for r in results])
    combined.other_models = dict(sum((Counter(r.other_models) for r in results), Counter()))
    combined.figures = combine_figures(results)
    combined.counts = {family: sum(r.counts.get(family, 0) for r in results) for family in measured_families()
                       if any(family in r.counts for r in results)}
    combined.noise = {path: s for path in noise_metrics()
                      if (s := spread([metric_value(r, path) for r in results])) is not None}
    return combined


def combine_figures(results: list[ArmResult]) -> dict[str, Optional[float]]:
    """The registry's computed figures over repeats, each as its entry says: the median or
    sum of the repeats' values, or recomputed from all their requests pooled."""
    combined = {}
    pooled = [line for r in results for line in r.pooled_lines]
    for path in measured_paths():
        combined[path] = combine_values(resolve(path), [r.figures.get(path) for r in results], pooled)
    for path in dict.fromkeys(p for r in results for p in r.figures if p not in combined):  # set by the arm (J/token)
        combined[path] = _median([r.figures.get(path) for r in results])
    return combined


def combine_values(entry: Metric, values: list[Optional[float]], lines: list[dict]) -> Optional[float]:
    if entry.combine == "pooled":
        return entry.value_from(lines) if lines else None
    if entry.combine == "sum":
        present = [v for v in values if v is not None]
        return float(sum(present)) if present else None
    return _median(values)
