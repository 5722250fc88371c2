"""Every metric specgate reports, written once: where it lives in an arm's result, how it
is computed from the request records and resampled for an interval, how repeats combine
it, its unit, which direction is better, and where it appears.

An arm's numbers have one shape, :class:`harness.measure.metrics.ArmResult`, in memory and
read back from results.json (``arms.<arm>``, :func:`harness.measure.metrics.read_result`); a
metric's ``path`` is the same dotted path into both (``output_tok_s``, ``ttft_ms.p99``,
``requests.ok``), read by :func:`metric_value`. The result keeps every metric by its path in
``ArmResult.figures``: those its requests give, computed by their entry (``compute``, else its
``samples``' statistic) from the measured request lines, and those the arm sets (J/token).
Metrics that compare two arms of one run (speedup, break-even accept length) are stored as
``<name>_vs_<plain arm>`` and computed by :func:`cross_arm`.

The built-in metrics' definitions (all over a run's ok measured requests):

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

Who reads the registry: results and repeats (harness/measure/metrics.py), change verdicts
and reference-run gates (harness/gates/change.py, reference.py: interval and unit),
client-bound rules (harness/gates/client_bound.py), SLOs (harness/capacity/slo.py), replay,
sweep.json's headline figures, capacity probes, the one table renderer
(harness/report/tables.py) behind every summary and report, and ``specgate compare``.
A new metric is one :func:`register` call.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Optional, Union

from harness.measure import samples as s
from harness.measure.estimate import CONFIDENCE, Estimate, estimate
from harness.measure.samples import PerRequest, RatioOfSums, WindowRate
from harness.measure.window import WHOLE as WHOLE_LOAD, Window

Better = Literal["higher", "lower", "neither"]
Resampling = Union[PerRequest, RatioOfSums, WindowRate]
Combine = Literal["median", "sum", "pooled"]
SCOPES = ("summary", "compare", "report", "sweep", "capacity")


OUTPUT_RATE = "output_tok_s"  # the output rate's path: other modules name it through this
TIMESLICE = "timeslice"  # the window of one slice of a load (harness/measure/timeslices.py)

# the basis of a cross-arm figure: the steady window, or the whole load (the windows' names)
STEADY, WHOLE = "steady", WHOLE_LOAD.name


def steady_figure(result: Any, name: str) -> Optional[float]:
    """A figure over the arm's steady window (harness/measure/steady.py), None when the
    window was inconclusive or not measured (an ArmResult or a results.json arm block)."""
    steady = result.get("steady") if isinstance(result, dict) else getattr(result, "steady", None)
    return number((steady or {}).get(name))


def basis(arm: Any, plain: Any) -> str:
    """What the cross-arm figures of ``arm`` against the plain arm rest on: both arms' steady
    windows when both have one, else the whole load of each (never one of each)."""
    both = steady_figure(arm, OUTPUT_RATE) is not None and steady_figure(plain, OUTPUT_RATE) is not None
    return STEADY if both else WHOLE


def whole_speedup(arm: Any, plain: Any) -> Optional[float]:
    """Output tok/s over the whole load of ``arm`` over the plain arm's; None when either is missing."""
    mine, theirs = metric_value(arm, OUTPUT_RATE), metric_value(plain, OUTPUT_RATE)
    return None if mine is None or not theirs else mine / theirs


def throughputs(arm: Any, plain: Any) -> tuple[Optional[float], Optional[float], str]:
    """(``arm``'s output tok/s, the plain arm's, the basis they are on)."""
    if basis(arm, plain) == STEADY:
        return steady_figure(arm, OUTPUT_RATE), steady_figure(plain, OUTPUT_RATE), STEADY
    return metric_value(arm, OUTPUT_RATE), metric_value(plain, OUTPUT_RATE), WHOLE


def speedup(arm: Any, plain: Any) -> Optional[float]:
    """Output tok/s of ``arm`` over the plain arm's, on the steady basis where both arms have
    one (:func:`basis`), else over the whole load; None when either is missing."""
    mine, theirs, _ = throughputs(arm, plain)
    return mine / theirs if mine is not None and theirs else None  # a zero or missing rate: no speedup


def rate_missing(result: Any) -> str:
    """Why an arm (an ArmResult) has no output rate to divide by, in words."""
    if not result.requests_ok:
        cancelled = (result.cancel or {}).get("cancelled", 0)
        return (f"no measured request completed ({result.requests_failed} failed, {cancelled} cancelled by the "
                f"client), so it has no output tok/s")
    return "its measured requests span no time, so it has no output tok/s"


def speedup_missing(arm_name: str, arm: Any, plain_name: str, plain: Any) -> Optional[str]:
    """Why :func:`speedup` is None, naming the arm(s) without a rate; None when it has a value."""
    mine, theirs, _ = throughputs(arm, plain)
    if mine is not None and theirs:
        return None
    return "; ".join(f"{name}: {rate_missing(result)}" for name, result, rate
                     in ((arm_name, arm, mine), (plain_name, plain, theirs)) if not rate)


def break_even_accept_length(verify_cycle_ms: float, plain_step_ms: float) -> float:
    """Accept length at which a draft+verify cycle pays for itself: cycle / plain step."""
    if not plain_step_ms or plain_step_ms <= 0:
        raise ValueError(f"plain decode step must be > 0 ms (got {plain_step_ms})")
    return verify_cycle_ms / plain_step_ms


def cycle_and_step(arm: Any, plain: Any) -> tuple[Optional[float], Optional[float]]:
    """``arm``'s verify cycle and the plain arm's decode step (ms), on the basis of :func:`basis`."""
    if basis(arm, plain) == STEADY:
        cycle, step = steady_figure(arm, "verify_cycle_ms"), steady_figure(plain, "decode_step_ms")
        if cycle is not None and step:
            return cycle, step
    return metric_value(arm, "verify_cycle_ms"), metric_value(plain, "decode_step_ms")


def break_even(arm: Any, plain: Any) -> Optional[float]:
    """``arm``'s verify cycle over the plain arm's decode step (steady basis where both arms
    have one); None when either is missing."""
    cycle, step = cycle_and_step(arm, plain)
    return None if cycle is None or not step else break_even_accept_length(cycle, step)


def whole_break_even(arm: Any, plain: Any) -> Optional[float]:
    """Break-even from the whole load's verify cycle and plain decode step."""
    cycle, step = metric_value(arm, "verify_cycle_ms"), metric_value(plain, "decode_step_ms")
    return None if cycle is None or not step else break_even_accept_length(cycle, step)


@dataclass(frozen=True)
class Metric:
    path: str  # dotted path into an ArmResult and into results.json's arms.<arm>
    label: str  # row label in compare and column header in the report
    unit: str
    pattern: str  # how compare and the report print a value
    better: Better
    noise: bool = False  # repeats record its spread (ArmResult.noise); replay prints its drift
    # reference-run gates compare it when gate.compare lists nothing: the decode-speed figures,
    # whose run-to-run spread is small. TTFT and tail latencies move with how a closed loop's
    # requests fall into phase in each run, so one run against one run cannot tell a
    # regression from that: list them in gate.compare, with gate.repeats or a history of runs.
    compared: bool = False
    column: Optional[str] = None  # its column in the run summary's table (None: not there)
    column_pattern: Optional[str] = None  # the summary's pattern, when it differs from `pattern`
    in_compare: bool = True  # a row of `specgate compare`
    in_report: bool = True  # a column of the report's results table
    in_sweep: bool = False  # a headline figure of each sweep point (sweep.json, sweep tables)
    in_capacity: bool = False  # a figure of each capacity probe (capacity.json, capacity tables)
    count: bool = False  # a count: printed as an integer, its change is the difference
    between_arms: Optional[Callable[[Any, Any], Optional[float]]] = None  # (arm, plain) -> value
    # how a bootstrap resamples it (harness/measure/samples.py); None: it has no per-request
    # samples, and a reference-run gate compares its two values and says so
    samples: Optional[Resampling] = None
    # its value from the measured, successful request lines, for a metric ArmResult has no
    # field for (None: its samples' statistic); harness/measure/metrics.py fills ArmResult.figures
    compute: Optional[Callable[[list[dict]], Optional[float]]] = None
    combine: Combine = "median"  # repeats: median of each repeat's value, their sum, or recomputed pooled
    # a stalled client distorts it: "latency" (late stamps), "decode" (a request's first-to-last
    # chunk span: a stall at either end shortens or stretches it) or "throughput" (late sends)
    client: Optional[str] = None
    one_sided: bool = False  # client lag can only make it worse, so a pass despite the lag stands
    aliases: tuple[str, ...] = ()  # keys records written before wrote it under (read, never written)
    # the windows besides the whole load whose blocks carry it, by name: "steady" (an arm's
    # steady block, harness/measure/steady.py), "timeslice" (each slice, harness/measure/timeslices.py)
    over: tuple[str, ...] = ()
    digits: int = 4  # decimals a window's block keeps of it
    in_timeline: bool = False  # a panel of the report's timeline (its timeslices, harness/report/timeline.py)

    def key(self, plain_arm: Optional[str] = None) -> str:
        """Its key in results.json: cross-arm metrics carry the plain arm's name."""
        return f"{self.path}_vs_{plain_arm}" if self.between_arms else self.path

    def shown_label(self, plain_arm: Optional[str] = None) -> str:
        return self.label.format(plain=plain_arm or "plain")

    def format(self, value: Any) -> str:
        return "-" if value is None else self.pattern.format(int(value) if self.count else value)

    @property
    def short_label(self) -> str:
        """Its label without its unit, for where the unit is shown beside it (a timeline's panel)."""
        return self.label.removesuffix(f" {self.unit}")

    def format_column(self, value: Any) -> str:
        return "-" if value is None else (self.column_pattern or self.pattern).format(value)

    @property
    def family(self) -> str:
        """The distribution a statistic belongs to (``ttft_ms`` of ``ttft_ms.p99``), else the path."""
        return self.path.split(".")[0]

    def value_from(self, lines: list[dict], window: Window = WHOLE_LOAD) -> Optional[float]:
        """Its value from one arm's measured, successful request lines over a window (the
        whole load, a steady window, a timeslice: harness/measure/window.py): its samples'
        statistic, else a registered computation, which knows the whole load only."""
        if self.samples is not None and (self.compute is None or not window.whole):
            return self.samples.evidence(lines, window).value()
        return self.compute(lines) if self.compute is not None and window.whole else None

    def estimate(self, lines: Any, confidence: float = CONFIDENCE, window: Window = WHOLE_LOAD) -> Estimate:
        """Its value over a window of one arm's measured, successful requests with the interval
        around it: one estimator for both (harness/measure/estimate.py), so the value is
        value_from's and lies inside the interval. No samples: the value alone."""
        if self.samples is None:
            return Estimate(self.value_from(lines, window))
        return estimate(self.samples.evidence(lines, window), confidence)

    def in_scope(self, scope: str) -> bool:
        return {"summary": self.column is not None, "compare": self.in_compare, "report": self.in_report,
                "sweep": self.in_sweep, "capacity": self.in_capacity}[scope]


def distribution(path: str, label: str, pattern: str, values_of, client: Optional[str] = "latency",
                 one_sided: bool = True, **flags) -> Metric:
    """A statistic of a per-request latency distribution (``ttft_ms.p50``): milliseconds,
    lower is better, resampled request by request."""
    stat = path.partition(".")[2]
    return Metric(path, label, "ms", pattern, "lower", samples=PerRequest(values_of, stat), client=client,
                  one_sided=one_sided, **flags)


_REGISTRY: dict[str, Metric] = {}


def register(entry: Metric) -> Metric:
    """Add a metric: it then appears in results, repeats, compare, reference gates, sweep
    and capacity records and every table its flags name. A ValueError for a path taken."""
    if entry.path in _REGISTRY:
        raise ValueError(f"metric '{entry.path}' is registered already")
    _REGISTRY[entry.path] = entry
    return entry


def unregister(path: str) -> None:
    _REGISTRY.pop(path, None)


@contextmanager
def registered(*entries: Metric) -> Iterator[tuple[Metric, ...]]:
    """Metrics registered for the duration of a block (a test's extra metric)."""
    for entry in entries:
        register(entry)
    try:
        yield entries
    finally:
        for entry in entries:
            unregister(entry.path)


# a window holds a TTFT where its first token arrived, an E2E where its request ended
TTFT, E2E = s.field_value("ttft_ms", at="first_chunk"), s.field_value("e2e_ms")
for _entry in (
    Metric("output_tok_s", "output tok/s", "tok/s", "{:.1f}", "higher", noise=True, compared=True, column="tok/s",
           in_sweep=True, in_capacity=True, samples=WindowRate("tokens"), client="throughput", one_sided=True,
           over=(STEADY, TIMESLICE), digits=3, in_timeline=True),
    Metric("request_per_s", "requests/s", "req/s", "{:.3f}", "higher", noise=True, column="req/s",
           column_pattern="{:.2f}", in_capacity=True, samples=WindowRate("requests"), client="throughput",
           one_sided=True),
    distribution("ttft_ms.p50", "TTFT p50 ms", "{:.1f}", TTFT, noise=True, column="TTFT p50", in_sweep=True,
                 in_capacity=True, aliases=("ttft_ms_p50",), over=(TIMESLICE,), in_timeline=True),
    distribution("ttft_ms.p99", "TTFT p99 ms", "{:.1f}", TTFT, noise=True, column="TTFT p99", in_sweep=True,
                 in_capacity=True, aliases=("ttft_ms_p99",), over=(TIMESLICE,)),
    distribution("itl_ms.p50", "ITL p50 ms", "{:.2f}", s.itl_values, one_sided=False, noise=True, compared=True,
                 column="ITL p50", over=(TIMESLICE,), in_timeline=True),
    distribution("itl_ms.p99", "ITL p99 ms", "{:.2f}", s.itl_values, one_sided=False, noise=True, column="ITL p99",
                 in_capacity=True, over=(TIMESLICE,)),
    distribution("tpot_ms.p50", "TPOT p50 ms", "{:.2f}", s.tpot_values, client="decode", one_sided=False, noise=True,
                 compared=True, column="TPOT p50", in_sweep=True, in_capacity=True, aliases=("tpot_ms_p50",)),
    distribution("tpot_ms.p99", "TPOT p99 ms", "{:.2f}", s.tpot_values, client="decode", one_sided=False,
                 in_compare=False, in_report=False, in_sweep=True, in_capacity=True, aliases=("tpot_ms_p99",)),
    distribution("e2e_ms.p50", "E2E p50 ms", "{:.0f}", E2E, noise=True, column="E2E p50"),
    distribution("e2e_ms.p99", "E2E p99 ms", "{:.0f}", E2E, in_compare=False, in_report=False, in_capacity=True),
    Metric("accept_length", "accept length", "tokens/cycle", "{:.2f}", "higher", noise=True, column="accept len",
           in_sweep=True, in_capacity=True, samples=RatioOfSums(s.accept_length_row), over=(TIMESLICE,),
           in_timeline=True),
    Metric("verify_cycle_ms", "verify cycle ms", "ms", "{:.2f}", "lower", noise=True, column="cycle ms",
           column_pattern="{:.1f}", in_sweep=True, samples=RatioOfSums(s.verify_cycle_row), client="decode",
           over=(STEADY,)),
    Metric("decode_step_ms", "decode step ms", "ms", "{:.2f}", "lower", noise=True,
           in_compare=False, in_report=False, in_sweep=True, samples=RatioOfSums(s.decode_step_row), client="decode",
           over=(STEADY,)),
    # Cross-arm metrics: one run's plain arm is the reference, so runs with different
    # plain arms would not line up in `specgate compare`.
    # Their basis is each arm's steady window where both arms have one (basis_vs_<plain>: steady),
    # else the whole load (whole); the whole-load figures are kept beside, for comparison.
    Metric("speedup", "speedup vs {plain}", "x", "{:.2f}x", "higher", column="speedup",
           in_compare=False, in_sweep=True, between_arms=speedup),
    Metric("break_even_accept_length", "break-even accept length", "tokens/cycle", "{:.2f}", "lower",
           column="break-even", in_compare=False, in_sweep=True, between_arms=break_even, aliases=("break_even",)),
    Metric("speedup_whole", "speedup vs {plain} (whole load)", "x", "{:.2f}x", "higher", in_compare=False,
           in_report=False, in_sweep=True, between_arms=whole_speedup),
    Metric("break_even_accept_length_whole", "break-even accept length (whole load)", "tokens/cycle", "{:.2f}",
           "lower", in_compare=False, in_report=False, in_sweep=True, between_arms=whole_break_even),
    # output tok/s over the arm's steady window (harness/measure/steady.py); None when inconclusive
    Metric("steady.output_tok_s", "steady output tok/s", "tok/s", "{:.1f}", "higher", noise=True, in_sweep=True,
           client="throughput", one_sided=True),
    # GPU energy over the load window (harness/telemetry/energy.py), set on the result once the
    # arm's telemetry is summarized; records written before kept it only in the gpu block
    Metric("joules_per_token", "J/token", "J/token", "{:.3f}", "lower", in_sweep=True,
           aliases=("gpu.energy.joules_per_token",)),
    # the share of the measured prompt tokens the server's prefix cache held, from its own
    # counters over the load window (harness/measure/server_metrics.py, each engine's pair of
    # counters), set on the result by the arm: how warm the cache was, beside the accept length
    Metric("prefix_cache_hit_rate", "prefix cache hit rate", "share", "{:.1%}", "neither", column="cache hit",
           in_sweep=True),
    # a fleet's: requests per worker, max ÷ mean over the window (a split fleet's decode workers;
    # harness/measure/fleet.py), set on the result by the arm; 1.0 is even
    Metric("worker_imbalance", "worker imbalance (requests max ÷ mean)", "ratio", "{:.2f}", "lower", in_report=False),
    # a split fleet's KV transfer per request (SGLang's prefill_transfer_kv_cache stage), from the
    # prefill workers' own histogram over the window, set on the result by the arm
    Metric("kv_transfer_ms", "KV transfer (prefill to decode)", "ms", "{:.1f}", "lower", in_report=False),
    Metric("requests.ok", "requests ok", "requests", "{:d}", "higher", count=True, combine="sum"),
    Metric("requests.failed", "requests failed", "requests", "{:d}", "lower", count=True, combine="sum"),
):
    register(_entry)


def all_metrics() -> tuple[Metric, ...]:
    """Every registered metric, in registration order."""
    return tuple(_REGISTRY.values())


def metric(path: str) -> Metric:
    """The registered metric at ``path``; a KeyError names the valid ones."""
    try:
        return _REGISTRY[path]
    except KeyError:
        raise KeyError(f"'{path}' is not a registered metric; valid: {', '.join(_REGISTRY)}") from None


def resolve(path: str) -> Metric:
    """The metric at ``path``, or another statistic (mean, p90, ...) of a registered
    distribution (``ttft_ms.p90`` from ``ttft_ms.p50``'s entry): unit, direction and samples
    from the family. A KeyError for anything else."""
    if path in _REGISTRY:
        return _REGISTRY[path]
    family, _, stat = path.partition(".")
    kin = next((m for m in _REGISTRY.values() if m.family == family and isinstance(m.samples, PerRequest)), None)
    if kin is None or stat not in ("mean", *s.PERCENTILES):
        raise KeyError(f"'{path}' is not a registered metric; valid: {', '.join(_REGISTRY)}")
    return dataclasses.replace(kin, path=path, label=f"{kin.label.split(' ')[0]} {stat} {kin.unit}",
                               samples=kin.samples.at(stat), column=None, compared=False, in_sweep=False,
                               in_capacity=False, aliases=())


def over_window(name: str) -> list[Metric]:
    """The metrics a window's block carries (``steady``, ``timeslice``): those whose entry names it."""
    return [m for m in _REGISTRY.values() if name in m.over]


def figures_over(lines: list[dict], window: Window, name: str) -> dict[str, Any]:
    """Every figure a window's block carries, computed over that window of the measured,
    successful lines, at its dotted path (``ttft_ms.p50`` nests as in results.json) and kept to
    its entry's decimals; a distribution's block also says how many values it rests on (n)."""
    block: dict[str, Any] = {}
    found: dict[int, s.Evidence] = {}  # one distribution's samples, read once for all its statistics
    counts: dict[str, int] = {}
    for m in over_window(name):
        if isinstance(m.samples, PerRequest):
            key = id(m.samples.values_of)
            ev = found[key] = found[key] if key in found else m.samples.evidence(lines, window)
            value = s.statistic_of(m.samples.stat, ev.rows) if ev.groups_count else None
        else:
            value = m.value_from(lines, window)
        put(block, m.path, None if value is None else round(float(value), m.digits))
        if isinstance(m.samples, PerRequest) and "." in m.path:
            counts[m.family] = ev.samples
    for family, n in counts.items():  # after its statistics, as records have always listed it
        block[family]["n"] = n
    return block


def put(block: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in nested dicts."""
    *parents, last = path.split(".")
    for part in parents:
        block = block.setdefault(part, {})
    block[last] = value


def timeline_metrics() -> list[Metric]:
    """The metrics the report's timeline draws, one panel each, from its slices (each over a timeslice)."""
    return [m for m in over_window(TIMESLICE) if m.in_timeline]


def in_scope(scope: str) -> list[Metric]:
    """The metrics one table or record shows: summary, compare, report, sweep, capacity."""
    if scope not in SCOPES:
        raise KeyError(f"'{scope}' is not a metric scope; valid: {', '.join(SCOPES)}")
    return [m for m in _REGISTRY.values() if m.in_scope(scope)]


def noise_metrics() -> list[str]:
    return [m.path for m in _REGISTRY.values() if m.noise]


def compared_by_default() -> list[Metric]:
    return [m for m in _REGISTRY.values() if m.compared]


def summary_columns() -> list[Metric]:
    return in_scope("summary")


def compare_metrics() -> list[Metric]:
    return in_scope("compare")


def report_metrics(plain_arm: Optional[str]) -> list[Metric]:
    """The report's columns; cross-arm metrics only when the run has a plain arm."""
    return [m for m in in_scope("report") if plain_arm or not m.between_arms]


def computed_figures(result_fields: set[str]) -> list[Metric]:
    """Metrics whose value the registry computes from request lines: those whose family is
    none of the result type's own fields (`result_fields`, ArmResult's)."""
    return [m for m in _REGISTRY.values()
            if m.family not in result_fields and not m.between_arms and (m.compute or m.samples)]


def metric_value(source: Any, path: str) -> Any:
    """The value at a dotted path in an ArmResult (attributes, then its registry-computed
    ``figures``) or an arm block of results.json (keys): ``ttft_ms.p99``, ``requests.ok``.
    Missing anywhere: None."""
    value = source
    for part in path.split("."):
        if value is None:
            break
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    if value is None and not isinstance(source, dict):
        figures = getattr(source, "figures", None)
        if isinstance(figures, dict):
            return figures.get(path)
    if value is None and isinstance(source, dict) and path in source:
        return source[path]  # a figure stored flat under its dotted path
    return value


def read(source: Any, entry: Metric, plain_arm: Optional[str] = None) -> Any:
    """A metric's value in a result, a results.json arm block or a flat figures block
    (sweep.json's), under its key or any spelling records written before used."""
    key = entry.key(plain_arm)
    value = metric_value(source, key)
    if value is None and isinstance(source, dict):
        for alias in (key, entry.path, *entry.aliases):
            value = source.get(alias) if alias in source else metric_value(source, alias)
            if value is not None:
                break
    return value


def number(value: Any) -> Optional[float]:
    """A metric value, or None for anything that is not a finite number (missing, null, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def cross_arm(arm: Any, plain: Any) -> dict[str, Optional[float]]:
    """Every cross-arm metric of ``arm`` against the plain arm, keyed by its path."""
    return {m.path: m.between_arms(arm, plain) for m in _REGISTRY.values() if m.between_arms}
