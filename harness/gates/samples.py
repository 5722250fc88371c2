"""The samples behind a compared metric, from request columns, and their bootstrap.

A run's requests come as columns (harness/record/requests.py: read from a record, or this
run's lines in memory turned into columns), so a 100,000-request run is a few numpy arrays,
not 100,000 dicts. Samples are rows end to end, cut into *groups* that are resampled
together (a request's inter-token gaps, a time window's rate):

- ``ttft_ms``, ``e2e_ms``, ``tpot_ms``: one value per measured request;
- ``itl_ms``: every gap between a request's chunks, resampled request by request;
- ``output_tok_s``, ``request_per_s``: rates in equal time windows of each repeat's
  measured span (tokens or completions per window), so one run gives many samples;
- ``accept_length``, ``verify_cycle_ms``, ``decode_step_ms``: ratios of sums over the
  resampled requests, as the metrics themselves are defined (harness/measure/metrics.py).

Each resample draws its groups with `rng.integers(0, n, size=n)`, one draw per resample in
order, and computes the statistic without concatenating group arrays: from per-group sums
(means, ratios), by gathering single values, or, for a percentile over many values, from
the values near the pooled percentile weighted by how often their group was drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np

from harness.record.requests import Ragged, RequestColumns, as_columns

WINDOWS_PER_REPEAT = 10  # time windows a repeat's measured span is cut into for rates
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
# the columns evidence() reads: what a reference run's record is asked for
COLUMNS = ("warmup", "ok", "repeat", "send_ms", "end_ms", "ttft_ms", "e2e_ms", "decode_ms", "completion_tokens",
           "spec_verify_ct", "chunk_ms", "chunk_tokens")
DIRECT_LIMIT = 20_000  # up to this many values a percentile's resample gathers them all
# else the values within this many standard deviations of a resample's rank (at least
# MIN_HALF_WINDOW values) either side of the pooled percentile are weighed
WINDOW_SIGMAS, MIN_HALF_WINDOW = 10.0, 2_000


@dataclass
class Evidence:
    """One run's samples for one metric: `rows` (values, or (numerator, denominator) pairs)
    with group i at rows[offsets[i]:offsets[i+1]]; `statistic` is "mean", "ratio" or a
    percentile's name ("p50")."""

    rows: np.ndarray
    offsets: np.ndarray
    statistic: str
    unit: str  # what one group is, in words: "requests", "windows"
    samples: int  # the values the statistic rests on (gaps for ITL; for tails, what counts)

    @property
    def count(self) -> int:
        """How many groups (the n of the bootstrap)."""
        return self.offsets.size - 1

    @property
    def groups(self) -> list[np.ndarray]:
        return np.split(self.rows, self.offsets[1:-1]) if self.count else []

    @property
    def single(self) -> bool:
        """Every group is one row: a resample is a gather."""
        return self.rows.shape[0] == self.count

    def value(self) -> Optional[float]:
        return statistic_of(self.statistic, self.rows) if self.count else None

    def resampled(self, rng: np.random.Generator, times: int) -> np.ndarray:
        """The statistic over `times` resamples of the groups, with replacement (NaN where
        a resample has none)."""
        if self.statistic in PERCENTILES and not self.single and self.rows.size > DIRECT_LIMIT:
            return WeightedPercentile(self).resampled(rng, times)
        n, values = self.count, np.empty(times)
        lengths = np.diff(self.offsets)
        sums = np.add.reduceat(self.rows, self.offsets[:-1], axis=0) if self.statistic in ("mean", "ratio") else None
        for i in range(times):
            picks = rng.integers(0, n, size=n)
            if self.single:
                values[i] = nan_for_none(statistic_of(self.statistic, self.rows[picks]))
            elif sums is not None:
                values[i] = ratio(sums[picks].sum(axis=0), lengths[picks].sum(), self.statistic)
            else:
                values[i] = nan_for_none(statistic_of(self.statistic, self.rows[gather(self.offsets, picks)]))
        return values


def statistic_of(statistic: str, rows: np.ndarray) -> Optional[float]:
    if not rows.size:
        return None
    if statistic == "mean":
        return float(rows.mean())
    if statistic == "ratio":
        total = rows[:, 1].sum()
        return float(rows[:, 0].sum() / total) if total else None
    return float(np.percentile(rows, PERCENTILES[statistic]))


def ratio(sums: np.ndarray, count: int, statistic: str) -> float:
    """A mean (sum ÷ count) or a ratio of sums from summed groups."""
    if statistic == "ratio":
        return float(sums[0] / sums[1]) if sums[1] else math.nan
    return float(sums / count) if count else math.nan


def nan_for_none(value: Optional[float]) -> float:
    return math.nan if value is None else value


def gather(offsets: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """The row indices of groups `picks`, end to end."""
    lengths = np.diff(offsets)[picks]
    ends = np.cumsum(lengths)
    return np.repeat(offsets[:-1][picks] - (ends - lengths), lengths) + np.arange(ends[-1] if ends.size else 0)


class WeightedPercentile:
    """A percentile's resamples over many values: a resample's sorted values are the pooled
    ones, each as often as its group was drawn. Only the values near the pooled percentile
    are weighed; a resample whose percentile falls outside them is gathered whole (exact)."""

    def __init__(self, ev: Evidence):
        self.ev, self.q = ev, PERCENTILES[ev.statistic]
        # partitions, not a sort: only the window's values need their order (ties may fall in
        # any order: equal values give the same percentile)
        ids = Ragged(ev.rows, ev.offsets).row_ids()
        total = ev.rows.size
        self.lengths = np.diff(ev.offsets)
        center = int(self.q / 100.0 * (total - 1))
        order = np.argpartition(ev.rows, center)
        half = self.half_window(np.bincount(ids[order[:center]], minlength=ev.count))
        self.low, high = max(0, center - half), min(total, center + half + 2)
        del order  # one partition of millions of indices at a time
        order = np.argpartition(ev.rows, [self.low, high - 1])
        self.below = np.bincount(ids[order[:self.low]], minlength=ev.count)  # per group, values under the window
        window = order[self.low:high]
        window = window[np.argsort(ev.rows[window])]
        self.values, self.ids = ev.rows[window], ids[window]

    def half_window(self, under_center: np.ndarray) -> int:
        """How far a resample's percentile rank strays from the pooled one: each group adds
        its values under the pooled percentile less its share q of its values; a resample
        sums n draws of that, so its spread is sqrt(n) times theirs."""
        stray = under_center - self.q / 100.0 * self.lengths
        return max(MIN_HALF_WINDOW, int(WINDOW_SIGMAS * math.sqrt(self.ev.count * float(stray.var()))))

    def resampled(self, rng: np.random.Generator, times: int) -> np.ndarray:
        n, out = self.ev.count, np.empty(times)
        for i in range(times):
            picks = rng.integers(0, n, size=n)
            drawn = np.bincount(picks, minlength=n)
            found = self.one(drawn)
            out[i] = found if found is not None else nan_for_none(
                statistic_of(self.ev.statistic, self.ev.rows[gather(self.ev.offsets, picks)]))
        return out

    def one(self, drawn: np.ndarray) -> Optional[float]:
        """The percentile of one resample (its groups drawn `drawn` times each), or None
        when it lies outside the weighed values."""
        total, below = int(self.lengths @ drawn), int(self.below @ drawn)
        if total == 0:
            return math.nan
        index = (total - 1) * (self.q / 100.0)  # numpy's linear method
        first = math.floor(index)
        ranks = np.cumsum(drawn[self.ids])
        wanted = np.asarray([first, min(first + 1, total - 1)]) - below
        if wanted[0] < 0 or wanted[1] >= (ranks[-1] if ranks.size else 0):
            return None
        a, b = self.values[np.searchsorted(ranks, wanted, side="right")]
        return lerp(float(a), float(b), index - first)


def lerp(a: float, b: float, t: float) -> float:
    """numpy.percentile's interpolation, to the last bit."""
    return float(b - (b - a) * (1 - t)) if t >= 0.5 else float(a + (b - a) * t)


# --- samples from request columns ------------------------------------------------------------

def evidence(metric: str, requests: RequestColumns | Iterable[dict[str, Any]]) -> Optional[Evidence]:
    """The samples behind `metric` in one run's requests (columns, or lines in memory);
    None for a metric that has no samples here (it is then judged on its point values)."""
    ok = as_columns(requests, COLUMNS).measured()
    base, _, stat = metric.partition(".")
    if base in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        if stat != "mean" and stat not in PERCENTILES:
            return None
        values = request_values(ok, base)
        return Evidence(values.values, values.offsets, stat, "requests", values.values.size)
    if metric in ("output_tok_s", "request_per_s"):
        rates = window_rates(ok, "tokens" if metric == "output_tok_s" else "requests") if len(ok) else np.empty(0)
        return Evidence(rates, np.arange(rates.size + 1), "mean", "windows", rates.size)
    if metric in ("accept_length", "verify_cycle_ms", "decode_step_ms"):
        rows = ratio_rows(ok, metric)
        return Evidence(rows, np.arange(rows.shape[0] + 1), "ratio", "requests", rows.shape[0])
    return None


def request_values(ok: RequestColumns, base: str) -> Ragged:
    """Per-request values of a latency distribution, grouped by request (requests without
    one left out)."""
    if base == "itl_ms":
        gaps = ok.ragged("chunk_ms").gaps()
        has = gaps.lengths > 0
        return gaps if has.all() else gaps.select(has)
    if base == "tpot_ms":
        tokens, decode = ok.get("completion_tokens"), ok.get("decode_ms")
        keep = (tokens > 1) & np.isfinite(decode)
        values = decode[keep] / (tokens[keep] - 1)
    else:
        values = ok.get(base)
        values = values[np.isfinite(values)]
    return Ragged(values, np.arange(values.size + 1))


def window_rates(ok: RequestColumns, what: str) -> np.ndarray:
    """Tokens (or completed requests) per second in equal windows of each repeat's span,
    repeats in the order they first appear."""
    repeat = np.nan_to_num(ok.get("repeat"), nan=0.0)
    kinds, first = np.unique(repeat, return_index=True)
    rates = []
    for value in kinds[np.argsort(first)]:
        mine = ok.where(repeat == value)
        start, end = np.nanmin(mine.get("send_ms")), np.nanmax(mine.get("end_ms"))
        if not end > start:
            continue
        edges = np.linspace(start, end, WINDOWS_PER_REPEAT + 1)
        if what == "tokens":
            times, weights = mine.ragged("chunk_ms").values, mine.ragged("chunk_tokens").values
        else:
            times = mine.get("end_ms")
            weights = np.ones(times.size)
        counts, _ = np.histogram(times, bins=edges, weights=weights)
        rates.append(counts * 1000.0 / (edges[1] - edges[0]))
    return np.concatenate(rates) if rates else np.empty(0)


def ratio_rows(ok: RequestColumns, metric: str) -> np.ndarray:
    """(numerator, denominator) per request for ratio-of-sums metrics."""
    tokens, verify, decode = ok.get("completion_tokens"), ok.get("spec_verify_ct"), ok.get("decode_ms")
    given = lambda x: np.isfinite(x) & (x != 0)  # noqa: E731  (a count the line carries, and not 0)
    if metric == "accept_length":
        keep, rows = given(tokens) & given(verify), (tokens, verify)
    elif metric == "verify_cycle_ms":
        keep, rows = given(verify) & np.isfinite(decode), (decode, verify)
    else:
        keep, rows = (tokens > 1) & np.isfinite(decode), (decode, tokens - 1)
    return np.stack([rows[0][keep], rows[1][keep]], axis=1) if keep.any() else np.empty((0, 2))
