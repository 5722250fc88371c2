"""``workload.trace``: a request trace read once, and the part of it a load replays.

Two formats, told by the content (the first non-blank character):

* **Mooncake JSON Lines** (``{`` first): one object a line with ``timestamp`` (ms since the
  trace's start), ``input_length`` and ``output_length`` (tokens) and ``hash_ids`` (one
  id per block of ``workload.trace_block_size`` prompt tokens, the last block possibly
  partial; requests whose lists start alike share those blocks' tokens exactly), and,
  optionally, ``category`` (a label such as specmix's ``code``: with ``workload.trace_content``
  the request's text is drawn from that category's rows);
* **BurstGPT CSV** (anything else): a header naming at least ``Timestamp`` (seconds),
  ``Request tokens`` and ``Response tokens`` (BurstGPT's ``Model``, ``Total tokens`` and
  ``Log Type`` are read past); no shared prefixes.

What is replayed (:func:`select`): the requests whose timestamps fall in
``[trace_start_s, trace_end_s)``, the first ``num_prompts`` of them when it is set, sent at
their offsets from the window's first request divided by ``trace_speedup``.

Anything else stops the run before any server starts: :class:`TraceError` says in one
sentence which file and line, or which key.  Reads are cached by path, size and
modification time, since config validation and each arm's load read the same file.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import project_path
from harness.load.datasets import file_digest, workload_file
from harness.limits import MAX_LOAD_S, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")  # the ones read; the rest are passed over
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace that cannot be read or replayed as configured (one sentence)."""


@dataclass(frozen=True)
class TraceRequest:
    timestamp_s: float  # since the trace's start, as the file says (Mooncake's ms converted)
    input_length: int  # prompt tokens
    output_length: int  # tokens to generate (the request's max_tokens)
    hash_ids: tuple[int, ...]  # Mooncake's block hashes; () for BurstGPT
    line: int  # where it is in the file (1-based), for errors
    category: str | None = None  # Mooncake's optional label: with workload.trace_content, the corpus rows its text comes from


@dataclass(frozen=True)
class Replay:
    """The requests one load sends and when: ``offsets_s[i]`` after the load's first send."""

    requests: tuple[TraceRequest, ...]
    offsets_s: tuple[float, ...]
    block_size: int
    speedup: float

    @property
    def mean_rate(self) -> float:
        """Requests a second over the replay (the open loop's rate its steady window reads); 1 when all go at once."""
        span = self.offsets_s[-1]
        return len(self.offsets_s) / span if span > 0 else 1.0


def trace_path(value: str | os.PathLike) -> Path:
    """Where ``workload.trace`` points: a relative path is the project's."""
    return project_path(value)


def load_trace(value: str | os.PathLike) -> tuple[TraceRequest, ...]:
    """Every request of the trace ``value`` names, in file order (checked sorted)."""
    path, stat = workload_file("workload.trace", value, TraceError)
    return _load(path, stat.st_mtime_ns, stat.st_size)


def trace_digest(value: str | os.PathLike) -> str | None:
    """The sha256 of the trace file's bytes (None when it cannot be read): what identifies the
    requests a run replayed, so an edited trace at the same path is a different workload."""
    return file_digest(value)


@functools.lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int, size: int) -> tuple[TraceRequest, ...]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"workload.trace {path}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise TraceError(f"workload.trace {path} is empty")
    requests = _mooncake(path, text) if text.lstrip().startswith("{") else _burstgpt(path, text)
    if not requests:
        raise TraceError(f"workload.trace {path} has no requests")
    for before, after in zip(requests, requests[1:]):
        if after.timestamp_s < before.timestamp_s:
            raise TraceError(f"workload.trace {path}, line {after.line}: timestamp {after.timestamp_s:g} s is before "
                             f"line {before.line}'s {before.timestamp_s:g} s; a trace must be sorted by time")
    return tuple(requests)


# --- the two formats ------------------------------------------------------------------------


def _mooncake(path: Path, text: str) -> list[TraceRequest]:
    requests = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"workload.trace {path}, line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON at column {exc.colno}: {exc.msg.removesuffix(' at')}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: a Mooncake request must be a JSON object, got {type(obj).__name__}")
        missing = [name for name in MOONCAKE_FIELDS if name not in obj]
        if missing:
            raise TraceError(f"{where}: the request has no {', '.join(missing)}; a Mooncake line needs "
                             f"{', '.join(MOONCAKE_FIELDS)}")
        hash_ids = obj["hash_ids"]
        if not isinstance(hash_ids, list) or not all(_is_int(h) for h in hash_ids):
            raise TraceError(f"{where}: hash_ids must be a list of integers, got {json.dumps(hash_ids)[:60]}")
        category = obj.get("category")
        if category is not None and (not isinstance(category, str) or not category.strip()):
            raise TraceError(f"{where}: category must be a non-empty string (a corpus category such as 'code'), "
                             f"got {json.dumps(category)[:40]}")
        requests.append(TraceRequest(_time(obj["timestamp"], "timestamp", where) / 1000.0,
                                     _count(obj["input_length"], "input_length", where),
                                     _count(obj["output_length"], "output_length", where), tuple(hash_ids), number,
                                     category))
    return requests


def _burstgpt(path: Path, text: str) -> list[TraceRequest]:
    rows = csv.reader(io.StringIO(text, newline=""))
    header = next(rows, None)
    missing = [name for name in BURSTGPT_COLUMNS if name not in (header or [])]
    if missing:
        raise TraceError(f"workload.trace {path}, line 1: neither a Mooncake JSON line nor a BurstGPT CSV header "
                         f"(no column {', '.join(repr(m) for m in missing)}; a BurstGPT trace's header has "
                         f"{', '.join(BURSTGPT_COLUMNS)})")
    at = {name: header.index(name) for name in BURSTGPT_COLUMNS}
    requests = []
    for row in rows:
        number = rows.line_num
        if not any(cell.strip() for cell in row):
            continue
        where = f"workload.trace {path}, line {number}"
        if len(row) < len(header):
            raise TraceError(f"{where}: {len(row)} columns, the header has {len(header)}")
        values = {name: _number(row[at[name]], name, where) for name in BURSTGPT_COLUMNS}
        if values["Response tokens"] == 0:
            raise TraceError(f"{where}: 'Response tokens' is 0, a failed request in BurstGPT's log; replay the "
                             f"without_fails file, or leave such rows out")
        requests.append(TraceRequest(_time(values["Timestamp"], "Timestamp", where),
                                     _count(values["Request tokens"], "Request tokens", where),
                                     _count(values["Response tokens"], "Response tokens", where), (), number))
    return requests


def _number(cell: str, name: str, where: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise TraceError(f"{where}: '{name}' must be a number, got {cell[:40]!r}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: {name} must be a number, got {json.dumps(value)[:40]}")
    if value < 0:
        raise TraceError(f"{where}: {name} {value:g} is negative; a trace's times count from its start")
    return float(value)


def _count(value: Any, name: str, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a CSV's "512.0"
    if not _is_int(value) or value < 1:
        raise TraceError(f"{where}: {name} must be a positive integer, got {json.dumps(value)[:40]}")
    return value


# --- what a load replays --------------------------------------------------------------------


def select(requests: tuple[TraceRequest, ...], *, source: str, block_size: int, speedup: float,
           start_s: float | None = None, end_s: float | None = None, first: int | None = None) -> Replay:
    """The window ``[start_s, end_s)`` of ``requests`` (its first ``first``), timed by ``speedup``."""
    if not speedup > 0:
        raise TraceError(f"workload.trace_speedup must be > 0 (2: twice as fast), got {speedup:g}")
    if block_size < 1:
        raise TraceError(f"workload.trace_block_size must be at least 1 token, got {block_size}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise TraceError(f"workload.trace_end_s={end_s:g} is not after workload.trace_start_s={start_s:g}: "
                         f"the window is empty")
    chosen = [r for r in requests if (start_s is None or r.timestamp_s >= start_s)
              and (end_s is None or r.timestamp_s < end_s)][:first]
    if not chosen:
        span = f"{requests[0].timestamp_s:g}-{requests[-1].timestamp_s:g} s"
        raise TraceError(f"workload.trace {source}: the window [{start_s or 0:g}, "
                         f"{'end' if end_s is None else f'{end_s:g}'}) s holds no request (the trace spans {span})")
    for r in chosen:
        check_lengths(r, source)
        if len(r.hash_ids) > math.ceil(r.input_length / block_size):
            raise TraceError(f"workload.trace {source}, line {r.line}: {len(r.hash_ids)} hash_ids of "
                             f"{block_size} tokens (workload.trace_block_size) need more than its input_length "
                             f"{r.input_length}")
    first_at = chosen[0].timestamp_s
    replay = Replay(tuple(chosen), tuple((r.timestamp_s - first_at) / speedup for r in chosen), block_size, speedup)
    check_span(replay, source)
    return replay


WINDOW = "leave them out of the window (workload.trace_start_s, workload.trace_end_s, workload.num_prompts)"


def check_lengths(request: TraceRequest, source: str) -> None:
    """A request longer than any load holds (its prompt is sized and built here) is refused before anything starts."""
    for name, value, limit in (("input_length", request.input_length, MAX_PROMPT_TOKENS),
                               ("output_length", request.output_length, MAX_OUTPUT_TOKENS)):
        if value > limit:
            raise TraceError(f"workload.trace {source}, line {request.line}: {name} {value} tokens is more than one "
                             f"request may have ({limit}); {WINDOW}")


def check_span(replay: Replay, source: str) -> None:
    """A replay longer than a load may last (MAX_LOAD_S) would wait for ever: one sentence instead."""
    span = replay.offsets_s[-1]
    if span > MAX_LOAD_S:
        first, last = replay.requests[0].line, replay.requests[-1].line
        raise TraceError(f"workload.trace {source}: the replay (lines {first} to {last}) lasts {span:.3g} s at "
                         f"workload.trace_speedup={replay.speedup:g}, longer than a load may last "
                         f"({MAX_LOAD_S / 3600:g} h); replay a window (workload.trace_start_s, workload.trace_end_s), "
                         f"fewer requests (workload.num_prompts) or faster (a larger workload.trace_speedup)")


def replay_of(workload: Any) -> Replay:
    """The replay ``workload`` (a workload config with ``trace`` set) asks for."""
    return select(load_trace(workload.trace), source=str(trace_path(workload.trace)),
                  block_size=int(workload.trace_block_size), speedup=float(workload.trace_speedup),
                  start_s=_optional(workload.trace_start_s), end_s=_optional(workload.trace_end_s),
                  first=None if workload.num_prompts is None else int(workload.num_prompts))


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
