"""Whether a reference record's per-request rows reproduce its own figures.

A reference-run verdict shows the reference's figure from results.json and judges the
change and its interval from the reference's rows (requests.parquet). The two must be one
measurement: a record whose rows were doctored, repeated or cut (100,000 rows made by
repeating a real record's, timings and all, doubled its tokens in the same span) turned an
identical run into `<output rate> 249.33 -> 249.42 (+99.9% worse, 95% interval +99.9% to
+99.9% worse)` (issue 32). So each compared figure is recomputed from the rows with the
estimator that made it (each repeat's rows through the metric's samples, then combined over
repeats as results.json combines them: harness/measure/metrics.py combine_repeats) and
compared with results.json; the reference gate judges no metric whose rows disagree.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from harness.measure.registry import Metric, metric_value, number, resolve
from harness.measure.samples import measured
from harness.record.requests import RequestColumns

# How far a figure recomputed from the rows may sit from results.json's and still be the
# same measurement: results.json keeps 3-6 decimals and the rows keep times to the
# microsecond (a figure measured before from unrounded times moves by that much: an ITL of
# 0.2 ms by up to 0.5 %), and a record written before a figure's definition was tightened
# can differ by rounding-sized amounts. Doctored rows differ by whole factors.
RELATIVE_TOLERANCE = 0.005
MICROSECOND_MS = 0.001  # plus, for a figure in ms, one microsecond: one row's rounding


def per_repeat(requests: Any) -> list[Any]:
    """The measured, successful requests of each repeat, in the order the repeats appear."""
    if isinstance(requests, RequestColumns):
        rows = requests.measured()
        repeat = np.nan_to_num(rows.get("repeat"), nan=0.0)
        kinds, first = np.unique(repeat, return_index=True)
        return [rows.where(repeat == value) for value in kinds[np.argsort(first)]]
    by_repeat: dict[Any, list] = {}
    for line in measured(list(requests)):
        by_repeat.setdefault(line.get("repeat") or 0, []).append(line)
    return list(by_repeat.values())


def recomputed(entry: Metric, requests: Any) -> Optional[float]:
    """The figure from the rows as results.json got it: each repeat's value by the metric's
    samples, combined over repeats by its entry (median, sum, or its pooled value)."""
    if entry.samples is None:
        return None
    repeats = per_repeat(requests)
    if entry.combine == "pooled" or len(repeats) == 1:
        pooled = requests.measured() if isinstance(requests, RequestColumns) else measured(list(requests))
        return entry.samples.evidence(pooled).value()
    values = [v for v in (entry.samples.evidence(rows).value() for rows in repeats) if v is not None]
    if not values:
        return None
    return float(sum(values)) if entry.combine == "sum" else float(np.median(values))


def disagreement(metric: str, reference: dict, requests: Any) -> Optional[str]:
    """None when the reference's rows reproduce its results.json figure of `metric` (or
    there is nothing to recompute); else a sentence naming the metric and both values."""
    entry = resolve(metric)
    stated = number(metric_value(reference, metric))
    if stated is None or not len(requests):
        return None
    found = recomputed(entry, requests)
    if found is None:
        return None
    slack = RELATIVE_TOLERANCE * abs(stated) + (MICROSECOND_MS if entry.unit == "ms" else 0.0)
    if abs(found - stated) <= slack:
        return None
    return (f"the reference run's per-request rows do not reproduce its own {metric}: its results.json says "
            f"{stated:.4g}, its rows give {found:.4g} ({found / stated - 1.0:+.1%}; its rows were changed or are not "
            f"the run's, or the record predates how the figure is computed now), so no change is judged against them")
