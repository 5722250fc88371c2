"""Per-request records -> one arm's numbers (:class:`ArmResult`).

Only measured (non-warm-up) requests that succeeded enter the timing and token
metrics; failed ones are counted and their error messages tallied. Requests the client
cancelled on purpose (``workload.cancel``) are neither: they are not ``ok`` (their text
was cut short), so no figure holds them, and not failed; the ``cancel`` block counts them.

Definitions (all over this run's ok measured requests):

* ``output_tok_s``   = sum(completion_tokens) / the completed requests' span (first send -> last
  end), as the mean of its time windows' rates (harness/measure/samples.py WindowRate), so
  the figure is the point of its own interval; a failed request before or after them does
  not stretch it. ``request_per_s`` likewise.
* ``ttft_ms``        = first token chunk - send, per request.
* ``itl_ms``         = gaps between consecutive token chunks (per chunk; under
  speculative decoding one chunk usually carries several tokens).
* ``tpot_ms``        = decode_s / (completion_tokens - 1), per request (the first token
  comes from prefill, so a request with n tokens has n - 1 decoded after it).
* ``decode_step_ms`` = sum(decode_s) / sum(completion_tokens - 1): time per decoded token.
  For a plain-decoding arm this is the decode step.
* ``accept_length``  = sum(completion_tokens) / sum(spec_verify_ct): run-scoped and token
  weighted, which is how SGLang defines a request's ``spec_accept_length``
  (completion_tokens / verify_ct), summed over the run.  Note it counts the prefill token
  in the numerator, as SGLang does (a bias of 1/verify_ct per request).  It is not the
  mean of per-request ratios (that would over-weight short requests).  When no request
  carries verify counts, the server's cumulative average (/get_server_info) is used if
  given, labelled ``accept_length_source = "server_cumulative"``.
* ``verify_cycle_ms`` = sum(decode_s) / sum(spec_verify_ct): one draft+verify cycle (the
  decode span from first to last chunk holds exactly the verify cycles).
* ``accept_length_per_request``: the spread of each request's own completion_tokens /
  spec_verify_ct (p10/p50/p90, min, max, a histogram in ACCEPT_LENGTH_BIN-wide bins):
  the run's accept length is one number, this says whether every request got it or a few
  got far more than the rest.
* ``acceptance_per_position``: where the engine gives each request's verify cycles by
  accepted drafts (SGLang's ``spec_correct_drafts_histogram``), the fraction of cycles
  whose draft position i (1, 2, ...) was accepted: Σ cycles with ≥ i accepted ÷ Σ cycles.

Break-even: speculative decoding wins when accept_length > verify_cycle / plain_step
(:func:`harness.measure.registry.break_even_accept_length`).  No data gives None, never 0.
Which of these numbers are reported where is the metric registry's business
(:mod:`harness.measure.registry`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Iterable, Optional

import numpy as np

from harness.measure import output_length, prompt_length, steady, trace_replay
from harness.measure.acceptance import acceptance_by, combine_acceptance_by
from harness.load import LoadResult, RequestRecord
from harness.load.cancel import cancel_figures, combine_cancel_figures
from harness.load.client_health import combine_client_blocks
from harness.measure.registry import Metric, computed_figures, metric_value, noise_metrics, resolve


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


@dataclass
class ArmResult:
    arm: str
    output_tok_s: Optional[float] = None
    request_per_s: Optional[float] = None
    ttft_ms: Stat = field(default_factory=Stat)
    itl_ms: Stat = field(default_factory=Stat)
    tpot_ms: Stat = field(default_factory=Stat)
    e2e_ms: Stat = field(default_factory=Stat)
    decode_step_ms: Optional[float] = None
    accept_length: Optional[float] = None
    accept_length_source: Optional[str] = None  # "run" | "server_cumulative" | None
    verify_cycle_ms: Optional[float] = None
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
    # each speculative request's completion_tokens / spec_verify_ct (the distribution's samples)
    request_accept_lengths: list[float] = field(default_factory=list, repr=False)
    correct_drafts_histogram: list[int] = field(default_factory=list)  # Σ over requests: cycles by accepted drafts
    prompt_length: Optional[dict] = None  # sized prompts' server counts against input_len (harness/measure/prompt_length.py)
    output_length: Optional[dict] = None  # completion tokens against each request's max_tokens (harness/measure/output_length.py)
    # the client's own health over the load (harness/load/client_health.py) and, once judged, whether
    # its figures are the client's (harness/gates/client_bound.py); {}: not measured
    client: dict = field(default_factory=dict)
    # a trace replay's achieved against intended send times (harness/measure/trace_replay.py); {}: no trace
    trace: dict = field(default_factory=dict)
    # the registry's metrics that have no field here (harness/measure/registry.py computed_figures,
    # and the arm's joules_per_token once its telemetry is summarized): metric path -> value
    figures: dict[str, Optional[float]] = field(default_factory=dict)
    # the figures over the load's steady window, or why it has none (harness/measure/steady.py)
    steady: dict = field(default_factory=dict)
    # workload.cancel: what was asked, requests chosen and cancelled, their tokens (harness/load/cancel.py); {}: off
    cancel: dict = field(default_factory=dict)
    # measured requests whose answer named another model than the one asked: that model -> requests
    other_models: dict[str, int] = field(default_factory=dict)
    # the measured request lines, kept only while a registered metric pools its repeats
    pooled_lines: list[dict] = field(default_factory=list, repr=False)

    @property
    def requests(self) -> dict[str, int]:
        """The request counts under the path results.json gives them (`requests.ok`)."""
        return {"ok": self.requests_ok, "failed": self.requests_failed}

    def to_json(self) -> dict:
        return {
            "repeats": self.repeats,
            "noise": self.noise,
            "output_tok_s": _r(self.output_tok_s, 3),
            "request_per_s": _r(self.request_per_s, 4),
            "ttft_ms": self.ttft_ms.to_json(),
            "itl_ms": self.itl_ms.to_json(),
            "tpot_ms": self.tpot_ms.to_json(),
            "e2e_ms": self.e2e_ms.to_json(),
            "accept_length": _r(self.accept_length),
            "accept_length_source": self.accept_length_source,
            "verify_cycle_ms": _r(self.verify_cycle_ms),
            "decode_step_ms": _r(self.decode_step_ms),
            "requests": {"ok": self.requests_ok, "failed": self.requests_failed},
            "errors": dict(self.errors),
            "completion_tokens": self.completion_tokens,
            "duration_s": _r(self.duration_s, 4),
            **({"categories": {name: dict(block) for name, block in self.categories.items()}}
               if self.categories else {}),
            **({"acceptance_by": {dimension: {label: dict(block) for label, block in groups.items()}
                                  for dimension, groups in self.acceptance_by.items()}}
               if self.acceptance_by else {}),
            **({"accept_length_per_request": accept_length_distribution(self.request_accept_lengths)}
               if self.request_accept_lengths else {}),
            **({"acceptance_per_position": acceptance_per_position(self.correct_drafts_histogram)}
               if sum(self.correct_drafts_histogram) else {}),
            **({"prompt_length": dict(self.prompt_length)} if self.prompt_length else {}),
            **({"output_length": dict(self.output_length)} if self.output_length else {}),
            **({"client": dict(self.client)} if self.client else {}),
            **({"trace": dict(self.trace)} if self.trace else {}),
            **({"steady": dict(self.steady)} if self.steady else {}),
            **({"cancel": dict(self.cancel)} if self.cancel else {}),
            **({"other_models": dict(self.other_models)} if self.other_models else {}),
            **{path: _r(value, 6) for path, value in self.figures.items()},
        }


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
    # the rates are their registry samples' statistic (window rates over the completed
    # requests' span), so the figure is the point its interval resamples (measure/estimate.py)
    res.output_tok_s, res.request_per_s = (resolve(path).value_from(lines) for path in ("output_tok_s", "request_per_s"))

    # every figure from the lines as the record keeps them (to the microsecond), so a reader of
    # the record's rows recomputes the same figures (harness/gates/reproduce.py checks that)
    views = lines
    for name in DISTRIBUTIONS:
        setattr(res, name, distribution_of(name, views))

    res.decode_step_ms = ratio_of("decode_step_ms", views)

    spec = [r for r in ok if r.spec_verify_ct]
    if sum(r.spec_verify_ct for r in spec) > 0:
        res.accept_length = ratio_of("accept_length", views)
        res.accept_length_source = "run"
        res.verify_cycle_ms = ratio_of("verify_cycle_ms", views)
    elif server_accept_length is not None:
        res.accept_length = float(server_accept_length)
        res.accept_length_source = "server_cumulative"
    res.request_accept_lengths = [r.completion_tokens / r.spec_verify_ct for r in spec]
    res.correct_drafts_histogram = summed_histograms(r.spec_correct_drafts_histogram for r in spec)
    res.categories = by_category(ok)
    res.acceptance_by = acceptance_by(ok)
    res.prompt_length = prompt_length.judge(measured, load.api, load.prompt_sizing)
    res.output_length = output_length.judge(measured)
    res.client = dict(load.client or {})
    res.trace = trace_replay.judge(measured) or {}
    if measured:
        res.steady = steady.steady_figures([r.to_json(load.run_start if r.run_start is None else None) for r in measured],
                                           load.concurrency, load.request_rate,
                                           steady_min_fraction)
    fill_figures(res, lines)
    return res


def other_models(measured: list[RequestRecord], asked: str) -> dict[str, int]:
    """The models the answers named instead of ``asked``, with how many requests each: a router
    that sent requests to another model's worker, or an alias, measures another model."""
    return dict(Counter(r.model for r in measured if r.model is not None and r.model != asked))


def registry_figures() -> list[Metric]:
    """The registered metrics ArmResult has no field for (its `requests` property counts too)."""
    return computed_figures({f.name for f in fields(ArmResult)} | {"requests"})


def distribution_of(family: str, views: list[dict]) -> Stat:
    """A latency distribution from each request's own values, as its registry entry takes
    them (ttft_ms: a request's TTFT; itl_ms: its inter-chunk gaps; ...)."""
    values_of = resolve(f"{family}.p50").samples.values_of
    return Stat.of(value for view in views for value in values_of(view))


def ratio_of(path: str, views: list[dict]) -> Optional[float]:
    """A ratio-of-sums metric (accept length, verify cycle, decode step) by its registry entry."""
    return resolve(path).samples.evidence(views).value()


def fill_figures(result: ArmResult, lines: list[dict]) -> None:
    """The registry's computed metrics from the successful measured requests, as request
    lines (the shape requests.jsonl and a columnar reader give them in)."""
    entries = registry_figures()
    if not entries:
        return
    result.figures.update({m.path: m.value_from(lines) for m in entries})
    if any(m.combine == "pooled" for m in entries):
        result.pooled_lines = lines


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
        "accept_length": _r(sum(r.completion_tokens for r in records if r.spec_verify_ct) / verify) if verify else None,
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
    """Engines that report speculation only as server counters: the accept length
    of this run's measured window, and the cycle time from the client's decode spans."""
    drafts = server.get("spec_drafts")
    if result.accept_length_source == "run" or not drafts:
        return result
    result.accept_length = server["accept_length"]
    result.accept_length_source = "server_metrics_window"
    ok = [r for r in load.measured if r.ok and r.decode_s is not None]
    result.verify_cycle_ms = sum(r.decode_s for r in ok) * 1000.0 / drafts if ok else None
    return result


# ArmResult's fields that repeats combine by their median (its shape; which metrics are
# reported where is harness.measure.registry's business).
SCALARS = ("output_tok_s", "request_per_s", "decode_step_ms", "accept_length", "verify_cycle_ms")
DISTRIBUTIONS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")


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
    for name in SCALARS:
        setattr(combined, name, _median([getattr(r, name) for r in results]))
    for name in DISTRIBUTIONS:
        setattr(combined, name, Stat(**{s: _median([getattr(getattr(r, name), s) for r in results])
                                        for s in ("mean", "p50", "p90", "p99")},
                                     n=sum(getattr(r, name).n for r in results)))
    combined.accept_length_source = next((r.accept_length_source for r in results if r.accept_length_source), None)
    combined.requests_ok = sum(r.requests_ok for r in results)
    combined.requests_failed = sum(r.requests_failed for r in results)
    combined.errors = group_errors(sum((Counter(r.errors) for r in results), Counter()))
    combined.completion_tokens = sum(r.completion_tokens for r in results)
    combined.categories = combine_categories(results)
    combined.acceptance_by = combine_acceptance_by([r.acceptance_by for r in results if r.acceptance_by])
    combined.request_accept_lengths = [x for r in results for x in r.request_accept_lengths]
    combined.correct_drafts_histogram = summed_histograms(r.correct_drafts_histogram for r in results)
    combined.prompt_length = prompt_length.combine([r.prompt_length for r in results])
    combined.output_length = output_length.combine([r.output_length for r in results])
    combined.duration_s = sum(r.duration_s for r in results)
    combined.client = combine_client_blocks([r.client for r in results])
    combined.trace = trace_replay.combine([r.trace for r in results]) or {}
    combined.steady = steady.combine([r.steady for r in results])
    combined.cancel = combine_cancel_figures([r.cancel for r in results])
    combined.other_models = dict(sum((Counter(r.other_models) for r in results), Counter()))
    combined.figures = combine_figures(results)
    combined.noise = {path: s for path in noise_metrics()
                      if (s := spread([metric_value(r, path) for r in results])) is not None}
    return combined


def combine_figures(results: list[ArmResult]) -> dict[str, Optional[float]]:
    """The registry's computed figures over repeats, each as its entry says: the median or
    sum of the repeats' values, or recomputed from all their requests pooled."""
    combined = {}
    for m in registry_figures():
        values = [r.figures.get(m.path) for r in results]
        combined[m.path] = combine_values(m, values, [line for r in results for line in r.pooled_lines])
    for path in {p for r in results for p in r.figures} - set(combined):  # set by the arm (J/token)
        combined[path] = _median([r.figures.get(path) for r in results])
    return combined


def combine_values(entry: Metric, values: list[Optional[float]], lines: list[dict]) -> Optional[float]:
    if entry.combine == "pooled":
        return entry.value_from(lines) if lines else None
    if entry.combine == "sum":
        present = [v for v in values if v is not None]
        return float(sum(present)) if present else None
    return _median(values)
