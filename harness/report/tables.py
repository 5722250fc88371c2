"""The one table renderer: rows are arms, sweep points or capacity probes; the metric
columns are the registry's entries in a scope (harness/measure/registry.py: summary,
compare, report, sweep, capacity), each headed and formatted by its entry. Every summary
(run, sweep, capacity summary.md) and every report's tables (harness/report/html.py,
harness/sweep/report.py, harness/capacity/report.py) are built here, so a newly
registered metric is a column everywhere its flags say, with its unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from harness.measure.registry import Metric, in_scope, number, read

MISSING = "-"


@dataclass
class Row:
    """One row: the cells before the metrics (arm, point, ...), where its figures are read
    from (an ArmResult, a results.json arm block, a flat sweep.json figures block or a
    capacity probe), and the cells after them."""

    lead: list[str]
    source: Any
    tail: list[str] = field(default_factory=list)
    given: dict[str, Any] = field(default_factory=dict)  # metric path -> value given outright (cross-arm figures)
    marks: dict[str, str] = field(default_factory=dict)  # metric path -> a mark after its value (client-bound `*`)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> list[str]:
        return markdown_table(self.header, self.rows)


def heading(entry: Metric, plain_arm: Optional[str] = None, style: str = "label") -> str:
    """A metric column's header: its summary column name, or its label (which carries the unit)."""
    if style == "column" and entry.column:
        return entry.column
    return entry.shown_label(plain_arm)


def value_cell(entry: Metric, value: Any, style: str = "label") -> str:
    """A value as its entry prints it; not a number (missing, null, text): MISSING."""
    value = number(value)
    if value is None:
        return MISSING
    value = int(value) if entry.count else value
    return entry.format_column(value) if style == "column" else entry.format(value)


def metric_table(scope: str, lead_header: list[str], rows: list[Row], tail_header: list[str] = (),
                 plain_arm: Optional[str] = None, style: str = "label",
                 keep: Callable[[Metric], bool] = lambda m: True) -> Table:
    """The table of `rows` x the registry's metrics in `scope` (those `keep` lets through)."""
    entries = [m for m in in_scope(scope) if keep(m)]
    header = [*lead_header, *(heading(m, plain_arm, style) for m in entries), *tail_header]
    body = [[*row.lead, *(value_cell(m, figure(row, m, plain_arm), style) + row.marks.get(m.path, "")
                          for m in entries), *row.tail] for row in rows]
    return Table(header, body)


def figure(row: Row, entry: Metric, plain_arm: Optional[str]) -> Any:
    return row.given[entry.path] if entry.path in row.given else read(row.source, entry, plain_arm)


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table whose columns are padded to their widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]


ACCEPTANCE_DIMENSIONS = {"input_length": "input tokens", "turn": "turn"}  # results.json acceptance_by keys


def acceptance_rows(blocks: dict[str, Any], arms: list[str], dimension: str) -> list[list[str]]:
    """One row per arm and group of results.json `acceptance_by[dimension]` (accept length per
    input-length bucket or per turn), for the speculative arms (an accept length of their
    own); empty unless some arm has two groups or more (one group says nothing the arm's
    figure does not)."""
    rows, varied = [], False
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        if block.get("accept_length") is None:
            continue  # a plain arm: its stream's one token per step is no acceptance
        groups = (block.get("acceptance_by") or {}).get(dimension) or {}
        if not any(isinstance(g, dict) and g.get("accept_length") is not None for g in groups.values()):
            continue
        varied = varied or len(groups) > 1
        for label, group in groups.items():
            length = group.get("accept_length")
            source = " (stream)" if group.get("accept_length_source") == "stream" else ""
            rows.append([arm, str(label), str(group.get("requests", MISSING)),
                         MISSING if group.get("prompt_tokens_mean") is None else f"{group['prompt_tokens_mean']:.0f}",
                         MISSING if length is None else f"{length:.2f}{source}"])
    return rows if varied else []


ACCEPTANCE_HEADER = ["requests", "mean prompt tokens", "accept length"]


FLEET_HEADER = ["arm", "worker", "requests", "prompt tokens", "prefix-cache hit", "generated tokens", "accept length"]
# a worker's block key -> how its cell reads (after the arm and worker columns of FLEET_HEADER)
FLEET_CELLS = (("requests_finished", "{:g}"), ("prefix_cache_queries", "{:g}"), ("prefix_cache_hit_rate", "{:.1%}"),
               ("generation_tokens", "{:g}"), ("accept_length", "{:.2f}"))


def fleet_rows(blocks: dict[str, Any], arms: list[str]) -> list[list[str]]:
    """Per fleet arm and worker (its block's `fleet`, harness/measure/fleet.py): the worker's
    share of the measured loads, summed over the repeats."""
    rows = []
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        for worker in (block.get("fleet") or {}).get("workers") or []:
            role = f" ({worker['role']})" if worker.get("role") else ""  # a split fleet's prefill or decode worker
            rows.append([arm, f"{worker.get('worker', '?')}{role}"] + [
                MISSING if number(worker.get(key)) is None else pattern.format(number(worker.get(key)))
                for key, pattern in FLEET_CELLS])
    return rows


def fleet_lines(blocks: dict[str, Any], arms: list[str]) -> list[str]:
    """Per fleet arm, its router's policy and the imbalance between its workers, in words."""
    lines = []
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        fleet = block.get("fleet") or {}
        if not fleet:
            continue
        imbalance = fleet.get("imbalance") or {}
        parts = [f"{what} max ÷ mean {number(imbalance.get(key)):.2f}" if number(imbalance.get(key)) is not None
                 else f"{what} max ÷ mean unknown" for what, key in (("requests", "requests_max_over_mean"),
                                                                     ("generated tokens", "generation_tokens_max_over_mean"))]
        workers = fleet.get("workers") or []
        if fleet.get("disaggregation"):
            roles = [w.get("role") for w in workers]
            lines.append(f"{arm}: {roles.count('prefill')} prefill and {roles.count('decode')} decode workers behind "
                         f"the router (--pd-disaggregation), policy {fleet.get('policy', '?')}; decode workers' "
                         f"{', '.join(parts)} (1.00: even)")
            lines.append(split_line(arm, fleet.get("ttft_split_ms") or {}))
            continue
        lines.append(f"{arm}: {len(workers)} workers behind the router, policy "
                     f"{fleet.get('policy', '?')}; {', '.join(parts)} (1.00: even)")
    return lines


# a split fleet's TTFT stages (harness/measure/fleet.py TTFT_STAGES) as the report names them
SPLIT_WORDS = (("bootstrap_ms", "bootstrap"), ("prefill_queue_ms", "prefill queue"), ("prefill_ms", "prefill"),
               ("transfer_ms", "KV transfer"), ("first_decode_ms", "first decode"))


def split_line(arm: str, split: dict[str, Any]) -> str:
    """A split fleet's TTFT in the stages its servers reported (means over the requests)."""
    parts = [f"{words} {number(split[key]):.1f} ms" for key, words in SPLIT_WORDS if number(split.get(key)) is not None]
    if not parts:
        return f"{arm}: TTFT split: no stage reported by the servers (their per-stage histogram)"
    return f"{arm}: TTFT split (the servers' means): {', '.join(parts)}"
