"""Service-level objectives (`slo.<metric>.<statistic>=<ms>`): which are set, whether one
probe's measured figures meet them all, and its goodput.

The figures are the ones harness/measure/metrics.py computes for any run (`ttft_ms`, `tpot_ms`,
`itl_ms`, `e2e_ms`, each mean/p50/p90/p99 over the load's successful measured requests), so
an SLO means here exactly what a gate on the same number means in a run record.

Goodput counts requests, not distributions: a request *meets the SLOs* when each of its
own figures is within its metric's limit (the highest one given, when several statistics
of a metric are limited: a tail limit is what one request may take). Its own figures are
its TTFT, TPOT (decode time over its tokens after the first), end-to-end time, and for ITL
its own gaps at the limited statistic. Goodput = requests that met them ÷ the probe's
measured window (first send to last end), in requests/s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.load import LoadResult, RequestRecord
from harness.measure.metrics import ArmResult
from harness.measure.registry import metric_value, resolve
from harness.measure.samples import statistic_named
from harness.config.schema import PercentileLimits, SloConfig

METRICS = tuple(f.name for f in dataclasses.fields(SloConfig))  # ttft_ms, tpot_ms, itl_ms, e2e_ms
STATISTICS = tuple(f.name for f in dataclasses.fields(PercentileLimits))  # mean, p50, p90, p99


@dataclass(frozen=True)
class Slo:
    metric: str  # one of METRICS
    statistic: str  # one of STATISTICS
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}.{self.statistic}"

    def measured(self, result: ArmResult) -> float | None:
        return metric_value(result, self.name)

    @property
    def unit(self) -> str:
        return resolve(self.name).unit

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "statistic": self.statistic, "limit_ms": self.limit_ms}


def slos_of(cfg: Any) -> list[Slo]:
    """The SLOs a composed config sets (`cfg.slo`), in METRICS x STATISTICS order."""
    return [Slo(metric, stat, float(cfg.slo[metric][stat]))
            for metric in METRICS for stat in STATISTICS if cfg.slo[metric][stat] is not None]


def misses(result: ArmResult, slos: list[Slo]) -> list[str]:
    """Each SLO the probe missed, in words; a figure that was not measured misses its SLO."""
    missed = []
    for slo in slos:
        value = slo.measured(result)
        if value is None:
            missed.append(f"{slo.name} not measured (limit {slo.limit_ms:g} {slo.unit})")
        elif value > slo.limit_ms:
            missed.append(f"{slo.name} {value:.2f} {slo.unit} > {slo.limit_ms:g} {slo.unit}")
    return missed


def per_request_limits(slos: list[Slo]) -> dict[str, tuple[str, float]]:
    """metric -> (statistic, limit) that one request is held to: the metric's highest limit."""
    limits: dict[str, tuple[str, float]] = {}
    for slo in slos:
        if slo.metric not in limits or slo.limit_ms > limits[slo.metric][1]:
            limits[slo.metric] = (slo.statistic, slo.limit_ms)
    return limits


def request_figure(record: RequestRecord, metric: str, statistic: str) -> float | None:
    """One request's own value of a metric (None: it has none, e.g. TPOT of one token): its
    registry entry's per-request samples (a TTFT, its decode time per token, its own
    inter-token gaps) at the limited statistic."""
    values = np.asarray(resolve(f"{metric}.{statistic}").samples.values_of(record.to_json()), dtype=float)
    return statistic_named(statistic)[0](values) if values.size else None


def meets_all(record: RequestRecord, limits: dict[str, tuple[str, float]]) -> bool:
    """A successful request within every limit; a figure it does not have (one token: no
    TPOT, no gaps) holds it to nothing."""
    if not (record.ok and record.completion_tokens is not None):
        return False
    for metric, (statistic, limit) in limits.items():
        value = request_figure(record, metric, statistic)
        if value is not None and value > limit:
            return False
    return True


def goodput(load: LoadResult, slos: list[Slo]) -> tuple[int, float | None]:
    """(requests that met every SLO, those per second of the measured window)."""
    limits = per_request_limits(slos)
    good = sum(meets_all(r, limits) for r in load.measured)
    window = load.duration_s
    return good, (good / window if window > 0 else None)
