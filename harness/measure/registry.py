"""Every metric specgate reports, written once: where it lives in an arm's result, how it
is printed, which direction is better, and where it appears.

An arm's numbers exist in two shapes, an :class:`harness.measure.metrics.ArmResult` while the run
is going and its block in results.json (``arms.<arm>``) afterwards; a metric's ``path`` is
the same dotted path into both (``output_tok_s``, ``ttft_ms.p99``, ``requests.ok``), read
by :func:`metric_value`. Metrics that compare two arms of one run (speedup, break-even
accept length) are stored as ``<name>_vs_<plain arm>`` and computed by :func:`cross_arm`.

Who reads the registry: repeats (which spreads to track), reference-run gates (what they
compare by default), replay (what drift it prints), the summary table, ``specgate compare``
and the HTML report. A new metric is one entry in :data:`METRICS` (plus the field that
measures it in ArmResult).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

Better = Literal["higher", "lower", "neither"]


def speedup(arm: Any, plain: Any) -> Optional[float]:
    """Output tok/s of ``arm`` over the plain arm's; None when either is missing."""
    if arm.output_tok_s is None or not plain.output_tok_s:
        return None
    return arm.output_tok_s / plain.output_tok_s


def break_even_accept_length(verify_cycle_ms: float, plain_step_ms: float) -> float:
    """Accept length at which a draft+verify cycle pays for itself: cycle / plain step."""
    if not plain_step_ms or plain_step_ms <= 0:
        raise ValueError(f"plain decode step must be > 0 ms (got {plain_step_ms})")
    return verify_cycle_ms / plain_step_ms


def break_even(arm: Any, plain: Any) -> Optional[float]:
    """``arm``'s verify cycle over the plain arm's decode step; None when either is missing."""
    if arm.verify_cycle_ms is None or not plain.decode_step_ms:
        return None
    return break_even_accept_length(arm.verify_cycle_ms, plain.decode_step_ms)


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
    column: Optional[str] = None  # its column in the summary table (None: not there)
    column_pattern: Optional[str] = None  # the summary's pattern, when it differs from `pattern`
    in_compare: bool = True  # a row of `specgate compare`
    in_report: bool = True  # a column of the report's results table
    count: bool = False  # a count: printed as an integer, its change is the difference
    between_arms: Optional[Callable[[Any, Any], Optional[float]]] = None  # (arm, plain) -> value

    def key(self, plain_arm: Optional[str] = None) -> str:
        """Its key in results.json: cross-arm metrics carry the plain arm's name."""
        return f"{self.path}_vs_{plain_arm}" if self.between_arms else self.path

    def shown_label(self, plain_arm: Optional[str] = None) -> str:
        return self.label.format(plain=plain_arm)

    def format(self, value: Any) -> str:
        return "-" if value is None else self.pattern.format(int(value) if self.count else value)

    def format_column(self, value: Any) -> str:
        return "-" if value is None else (self.column_pattern or self.pattern).format(value)


METRICS: tuple[Metric, ...] = (
    Metric("output_tok_s", "output tok/s", "tok/s", "{:.1f}", "higher", noise=True, compared=True, column="tok/s"),
    Metric("request_per_s", "requests/s", "req/s", "{:.3f}", "higher", noise=True, column="req/s",
           column_pattern="{:.2f}"),
    Metric("ttft_ms.p50", "TTFT p50 ms", "ms", "{:.1f}", "lower", noise=True, column="TTFT p50"),
    Metric("ttft_ms.p99", "TTFT p99 ms", "ms", "{:.1f}", "lower", noise=True, column="TTFT p99"),
    Metric("itl_ms.p50", "ITL p50 ms", "ms", "{:.2f}", "lower", noise=True, compared=True, column="ITL p50"),
    Metric("itl_ms.p99", "ITL p99 ms", "ms", "{:.2f}", "lower", noise=True, column="ITL p99"),
    Metric("tpot_ms.p50", "TPOT p50 ms", "ms", "{:.2f}", "lower", noise=True, compared=True, column="TPOT p50"),
    Metric("e2e_ms.p50", "E2E p50 ms", "ms", "{:.0f}", "lower", noise=True, column="E2E p50"),
    Metric("accept_length", "accept length", "tokens/cycle", "{:.2f}", "higher", noise=True, column="accept len"),
    Metric("verify_cycle_ms", "verify cycle ms", "ms", "{:.2f}", "lower", noise=True, column="cycle ms",
           column_pattern="{:.1f}"),
    Metric("decode_step_ms", "decode step ms", "ms", "{:.2f}", "lower", noise=True,
           in_compare=False, in_report=False),
    # Cross-arm metrics: one run's plain arm is the reference, so runs with different
    # plain arms would not line up in `specgate compare`.
    Metric("speedup", "speedup vs {plain}", "x", "{:.2f}x", "higher", column="speedup",
           in_compare=False, between_arms=speedup),
    Metric("break_even_accept_length", "break-even accept length", "tokens/cycle", "{:.2f}", "lower",
           column="break-even", in_compare=False, between_arms=break_even),
    Metric("requests.ok", "requests ok", "requests", "{:d}", "higher", count=True),
    Metric("requests.failed", "requests failed", "requests", "{:d}", "lower", count=True),
)

BY_PATH: dict[str, Metric] = {m.path: m for m in METRICS}


def metric(path: str) -> Metric:
    """The registered metric at ``path``; a KeyError names the valid ones."""
    try:
        return BY_PATH[path]
    except KeyError:
        raise KeyError(f"'{path}' is not a registered metric; valid: {', '.join(BY_PATH)}") from None


def noise_metrics() -> list[str]:
    return [m.path for m in METRICS if m.noise]


def compared_by_default() -> list[Metric]:
    return [m for m in METRICS if m.compared]


def summary_columns() -> list[Metric]:
    return [m for m in METRICS if m.column]


def compare_metrics() -> list[Metric]:
    return [m for m in METRICS if m.in_compare]


def report_metrics(plain_arm: Optional[str]) -> list[Metric]:
    """The report's columns; cross-arm metrics only when the run has a plain arm."""
    return [m for m in METRICS if m.in_report and (plain_arm or not m.between_arms)]


def metric_value(source: Any, path: str) -> Any:
    """The value at a dotted path in an ArmResult (attributes) or an arm block of
    results.json (keys): ``ttft_ms.p99``, ``requests.ok``. Missing anywhere: None."""
    value = source
    for part in path.split("."):
        if value is None:
            return None
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


def number(value: Any) -> Optional[float]:
    """A metric value, or None for anything that is not a finite number (missing, null, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def cross_arm(arm: Any, plain: Any) -> dict[str, Optional[float]]:
    """Every cross-arm metric of ``arm`` against the plain arm, keyed by its path."""
    return {m.path: m.between_arms(arm, plain) for m in METRICS if m.between_arms}
