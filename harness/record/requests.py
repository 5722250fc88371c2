"""A record's per-request data, in columns: written in row groups, read column by column.

Layout (docs/record.md):
    arms/<arm>/requests.parquet   one row per request: timings, tokens, status, spec meta,
                                  repeat and any flag (probe, interrupted_load), chunk times
                                  and tokens as list columns; `row` numbers the arm's requests
    arms/<arm>/outputs.parquet    what each request generated (text, token ids, tokens, top
                                  logprobs) keyed by `row`; written only for requests that
                                  carry any, so no reader of timings ever pages texts in
    requests.jsonl                the layout before (one line per request, every field, with
                                  its arm): still read, never written

Analyses ask for the columns they need (`read_columns`) and get numpy arrays: floats with
NaN for a missing value (booleans as 1.0/0.0), list columns as one flat array plus offsets.
A 100,000-request record then costs its timing columns, not its texts.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REQUESTS_FILE, OUTPUTS_FILE, LEGACY_FILE = "requests.parquet", "outputs.parquet", "requests.jsonl"
ROW_GROUP_ROWS = 16_384  # rows per row group: a reader holds one group of its columns at a time
COMPRESSION = "zstd"

LOGPROB = pa.struct([("token", pa.string()), ("logprob", pa.float64())])
OUTPUT_TYPES: dict[str, pa.DataType] = {
    "text": pa.string(),
    "token_ids": pa.list_(pa.int64()),
    "tokens": pa.list_(pa.string()),
    "top_logprobs": pa.list_(pa.list_(LOGPROB)),  # per output token: its alternatives, best first
}
OUTPUT_FIELDS = tuple(OUTPUT_TYPES)

# The fields of harness.load.records.RequestRecord.to_json() and the arm runner's repeat; a
# field not listed here (a flag: probe, interrupted_load) gets a column of its values' type.
SCALAR_TYPES: dict[str, pa.DataType] = {
    "arm": pa.string(), "row": pa.int64(), "repeat": pa.int64(), "index": pa.int64(), "warmup": pa.bool_(), "turn": pa.int64(),
    "dataset_row": pa.int64(), "category": pa.string(), "ok": pa.bool_(), "status": pa.int64(),
    "error": pa.string(), "cancelled": pa.bool_(), "cancel_after_tokens": pa.int64(), "cancel_after_ms": pa.float64(),
    "send_ms": pa.float64(), "end_ms": pa.float64(), "send_gap_ms": pa.float64(),
    "intended_ms": pa.float64(),
    "ttft_ms": pa.float64(), "e2e_ms": pa.float64(), "decode_ms": pa.float64(), "prompt_tokens": pa.int64(),
    "intended_prompt_tokens": pa.int64(), "max_tokens": pa.int64(), "ignore_eos": pa.bool_(), "completion_tokens": pa.int64(), "spec_verify_ct": pa.int64(),
    "spec_accept_length": pa.float64(), "spec_accepted_drafts": pa.int64(), "spec_correct_drafts_histogram": pa.list_(pa.int64()),
    "finish_reason": pa.string(), "model": pa.string(), "chunk_ms": pa.list_(pa.float64()), "chunk_tokens": pa.list_(pa.int64()),
}


# --- writing ---------------------------------------------------------------------------------

def append_requests(arm_dir: Path, arm: str, lines: Sequence[dict[str, Any]]) -> None:
    """Add an arm's request lines (as RequestRecord.to_json() gives them, plus flags) to its
    files. Each file is rewritten atomically, its earlier row groups copied one at a time,
    so a crash leaves the files as they were and memory holds one row group."""
    start = parquet_rows(arm_dir / REQUESTS_FILE)
    batches = [lines[i:i + ROW_GROUP_ROWS] for i in range(0, len(lines), ROW_GROUP_ROWS)]
    append_tables(arm_dir / REQUESTS_FILE,
                  (scalar_table(arm, batch, start + i * ROW_GROUP_ROWS) for i, batch in enumerate(batches)))
    outputs = [table for i, batch in enumerate(batches)
               if (table := output_table(batch, start + i * ROW_GROUP_ROWS)).num_rows]
    if outputs:
        append_tables(arm_dir / OUTPUTS_FILE, iter(outputs))


def parquet_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows if path.is_file() else 0


def scalar_table(arm: str, lines: Sequence[dict[str, Any]], first_row: int) -> pa.Table:
    names = list(SCALAR_TYPES)
    names += sorted({key for line in lines for key in line} - set(names) - set(OUTPUT_FIELDS))
    columns = {"arm": [arm] * len(lines), "row": list(range(first_row, first_row + len(lines)))}
    arrays = [column_array(name, columns.get(name) or [line.get(name) for line in lines]) for name in names]
    return pa.table(arrays, names=names)


def column_array(name: str, values: list) -> pa.Array:
    """A column of the listed type; another field gets its values' own type, or JSON text
    when they have none in common (a value the record must not lose)."""
    if name in SCALAR_TYPES:
        return pa.array(values, type=SCALAR_TYPES[name])
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else json.dumps(v) for v in values], type=pa.string())


def output_table(lines: Sequence[dict[str, Any]], first_row: int) -> pa.Table:
    """What the requests generated, for those that carry any of it."""
    rows = [(first_row + i, line) for i, line in enumerate(lines)
            if any(line.get(name) is not None for name in OUTPUT_FIELDS)]
    arrays = [pa.array([row for row, _ in rows], type=pa.int64())]
    for name, kind in OUTPUT_TYPES.items():
        values = [line.get(name) for _, line in rows]
        if name == "top_logprobs":
            values = [None if v is None else [[{"token": t, "logprob": lp} for t, lp in alts] for alts in v]
                      for v in values]
        arrays.append(pa.array(values, type=kind))
    return pa.table(arrays, names=["row", *OUTPUT_FIELDS])


def append_tables(path: Path, tables: Iterator[pa.Table]) -> None:
    """`path`'s row groups, then `tables`, into a temp file that replaces it: the file is
    whole at every moment, and one schema (a column new in this batch is null before it)."""
    first = next(tables, None)
    if first is None:
        return
    old = pq.ParquetFile(path) if path.is_file() else None
    schema = pa.unify_schemas([old.schema_arrow, first.schema]) if old is not None else first.schema
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with pq.ParquetWriter(tmp, schema, compression=COMPRESSION) as writer:
            for i in range(old.num_row_groups if old is not None else 0):
                writer.write_table(conform(old.read_row_group(i), schema))
            for table in (first, *tables):
                writer.write_table(conform(table, schema), row_group_size=ROW_GROUP_ROWS)
        os.chmod(tmp, 0o600)  # like every record file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in its order; a column it lacks is all null."""
    arrays = [table.column(f.name).cast(f.type) if f.name in table.column_names
              else pa.nulls(table.num_rows, type=f.type) for f in schema]
    return pa.table(arrays, schema=schema)


# --- columns in memory -----------------------------------------------------------------------

@dataclass
class Ragged:
    """A list column: every row's values end to end, row i at values[offsets[i]:offsets[i+1]]."""

    values: np.ndarray
    offsets: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row_ids(self) -> np.ndarray:
        """The row each value belongs to (int32: half the memory of millions of chunk gaps)."""
        return np.repeat(np.arange(self.offsets.size - 1, dtype=np.int32), self.lengths)

    def select(self, mask: np.ndarray) -> Ragged:
        """The rows where `mask` is true, by a mask over the values (no index arrays)."""
        lengths = self.lengths[mask]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Ragged(self.values[np.repeat(mask, self.lengths)], offsets)

    def gaps(self) -> Ragged:
        """Each row's differences between consecutive values (a row of one value has none)."""
        diffs = np.diff(self.values)
        keep = np.ones(self.values.size, dtype=bool)
        keep[self.offsets[:-1][self.lengths > 0]] = False  # the first value of a row has no gap before it
        offsets = np.concatenate([[0], np.cumsum(np.maximum(self.lengths - 1, 0))]).astype(np.int64)
        return Ragged(diffs[keep[1:]], offsets)


@dataclass
class RequestColumns:
    """Some columns of one arm's requests. Scalars are floats (NaN: missing; booleans 1.0/0.0)."""

    size: int
    scalars: dict[str, np.ndarray] = field(default_factory=dict)
    lists: dict[str, Ragged] = field(default_factory=dict)
    # why the record's file could not be read (then no rows), so a reader says it instead of
    # taking it for a record that kept no requests; None: read, or none kept
    unreadable: str | None = None

    def __len__(self) -> int:
        return self.size

    def get(self, name: str) -> np.ndarray:
        """A scalar column; all NaN when the record has no such field."""
        found = self.scalars.get(name)
        return found if found is not None else np.full(self.size, np.nan)

    def ragged(self, name: str) -> Ragged:
        found = self.lists.get(name)
        return found if found is not None else Ragged(np.empty(0), np.zeros(self.size + 1, dtype=np.int64))

    def where(self, mask: np.ndarray) -> RequestColumns:
        if mask.all():
            return self  # every row: no copy of what may be millions of chunk times
        return RequestColumns(int(mask.sum()), {k: v[mask] for k, v in self.scalars.items()},
                              {k: v.select(mask) for k, v in self.lists.items()})

    def measured(self, missing_ok_counts: bool = False) -> RequestColumns:
        """The measured (not warm-up) requests that succeeded; `missing_ok_counts`: a line
        without `ok` (written before the field existed) counts as one that did."""
        ok = self.get("ok")
        good = (ok != 0.0) if missing_ok_counts else (ok == 1.0)
        return self.where(good & (self.get("warmup") != 1.0))

    def rows(self) -> list[ColumnRow]:
        """The requests one by one, each read like a line of the old requests.jsonl
        (`row.get("ttft_ms")`), over these columns without copying them: what a metric's
        samples (harness/measure/samples.py) read."""
        return [ColumnRow(self, i) for i in range(self.size)]

    @classmethod
    def from_lines(cls, lines: Iterable[dict[str, Any]], columns: Sequence[str]) -> RequestColumns:
        builder = ColumnBuilder(columns)
        for line in lines:
            builder.add(line)
        return builder.build()


class ColumnRow:
    """One request of a RequestColumns, read by field name as a request line is."""

    __slots__ = ("columns", "index")

    def __init__(self, columns: RequestColumns, index: int):
        self.columns, self.index = columns, index

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.columns.lists:
            ragged = self.columns.lists[name]
            return ragged.values[ragged.offsets[self.index]:ragged.offsets[self.index + 1]].tolist()
        column = self.columns.scalars.get(name)
        if column is None:
            return default
        value = column[self.index]
        return default if np.isnan(value) else float(value)

    def __getitem__(self, name: str) -> Any:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def as_columns(requests: RequestColumns | Iterable[dict[str, Any]], columns: Sequence[str]) -> RequestColumns:
    """Columns from either form: a record read as columns, or this run's lines in memory."""
    return requests if isinstance(requests, RequestColumns) else RequestColumns.from_lines(requests, columns)


def number(value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return math.nan


class ColumnBuilder:
    """Columns from request lines given one at a time (a JSONL record is streamed through it)."""

    def __init__(self, columns: Sequence[str]):
        self.names = list(columns)
        self.values: dict[str, list[float]] = {name: [] for name in self.names}
        self.lengths: dict[str, list[int]] = {name: [] for name in self.names}
        self.seen: set[str] = set()  # fields some line carries: the others get no column, as in a Parquet file
        self.size = 0

    def add(self, line: dict[str, Any]) -> None:
        self.size += 1
        for name in self.names:
            value = line.get(name)
            if name in line:
                self.seen.add(name)
            if isinstance(value, list):
                numbers = [number(v) for v in value]
                ok = not any(math.isnan(v) for v in numbers)  # a list with a hole is no series
                self.values[name] += numbers if ok else []
                self.lengths[name].append(len(numbers) if ok else 0)
            else:
                self.values[name].append(number(value))
                self.lengths[name].append(-1)

    def build(self) -> RequestColumns:
        columns = RequestColumns(self.size)
        for name in (name for name in self.names if name in self.seen):
            lengths = self.lengths[name]
            if any(n >= 0 for n in lengths):  # a list column (a scalar where a list belongs: an empty row)
                clean = [max(n, 0) for n in lengths]
                values = [v for v, n in zip(self.values[name], lengths) if n != -1] if -1 in lengths else self.values[name]
                offsets = np.concatenate([[0], np.cumsum(clean, dtype=np.int64)]).astype(np.int64)
                columns.lists[name] = Ragged(np.asarray(values, dtype=float), offsets)
            else:
                columns.scalars[name] = np.asarray(self.values[name], dtype=float)
        return columns


# --- reading ---------------------------------------------------------------------------------

def has_requests(record_dir: Path) -> bool:
    """Whether the record kept its requests, in either layout."""
    record_dir = Path(record_dir)
    return (record_dir / LEGACY_FILE).is_file() or any(record_dir.glob(f"arms/*/{REQUESTS_FILE}"))


def read_columns(parquet: Path, legacy: Path, arm: str, columns: Sequence[str]) -> RequestColumns:
    """The arm's requests (its `parquet` file, else its lines of a `legacy` requests.jsonl
    written before), only `columns` of them, streamed by row group or by line. A record
    that kept none, or a file that cannot be read, gives no rows: verdicts then fall back
    to the point values, and an unreadable file says why (`unreadable`). (RunData.request_columns
    knows where an arm's files are.)"""
    if parquet.is_file():
        try:
            return parquet_columns(parquet, columns)
        except (OSError, pa.ArrowException) as exc:  # torn (a run killed mid-write), or not Parquet at all
            where = "/".join(parquet.parts[-3:])  # arms/<arm>/requests.parquet
            return RequestColumns(0, unreadable=f"{where} cannot be read: {type(exc).__name__}: {exc}")
    return legacy_columns(legacy, arm, columns)


def parquet_columns(path: Path, columns: Sequence[str]) -> RequestColumns:
    source = pq.ParquetFile(path)
    present = [name for name in columns if name in source.schema_arrow.names]
    parts: dict[str, list] = {name: [] for name in present}  # numpy pieces, one per row group
    for batch in source.iter_batches(columns=present, batch_size=ROW_GROUP_ROWS) if present else ():
        for name in present:
            array = batch.column(name)
            parts[name].append(ragged(array) if pa.types.is_list(array.type) else floats(array))
    result = RequestColumns(source.metadata.num_rows)
    for name in present:
        pieces = parts.pop(name)
        if pa.types.is_list(source.schema_arrow.field(name).type):
            result.lists[name] = joined(pieces)
        else:
            result.scalars[name] = np.concatenate(pieces) if pieces else np.empty(0)
    pa.default_memory_pool().release_unused()  # the row groups' Arrow buffers: give them back now
    return result


def joined(pieces: list[Ragged]) -> Ragged:
    """Row groups' list columns end to end."""
    lengths = [piece.lengths for piece in pieces]
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths)) if lengths else []]).astype(np.int64)
    return Ragged(np.concatenate([piece.values for piece in pieces]) if pieces else np.empty(0), offsets)


def floats(array: pa.Array) -> np.ndarray:
    if pa.types.is_boolean(array.type) or pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False).astype(float, copy=False)
    return np.full(len(array), np.nan)  # text: no number to compute with


def ragged(array: pa.ListArray) -> Ragged:
    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(array)  # skips null rows, matching their length 0
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    return Ragged(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False).astype(float, copy=False), offsets)


def legacy_columns(path: Path, arm: str, columns: Sequence[str]) -> RequestColumns:
    """requests.jsonl, line by line: only this arm's lines, only `columns` of each kept.
    A torn last line (a run that died mid-write) is skipped, as the report always did."""
    builder = ColumnBuilder(columns)
    for line in legacy_lines(path):
        if line.get("arm") == arm:
            builder.add(line)
    return builder.build()


def legacy_lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for text in handle:
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:
                    continue
                if isinstance(line, dict):
                    yield line
    except OSError:
        return


def read_lines(record_dir: Path, arm: str | None = None) -> list[dict[str, Any]]:
    """Every request as one dict with every field (its outputs joined back), in the keys of
    a requests.jsonl line: for tests and small records; analyses use read_columns."""
    record_dir = Path(record_dir)
    if not any(record_dir.glob(f"arms/*/{REQUESTS_FILE}")):
        return [line for line in legacy_lines(record_dir / LEGACY_FILE) if arm is None or line.get("arm") == arm]
    lines = [line for file in sorted(record_dir.glob(f"arms/*/{REQUESTS_FILE}")) for line in arm_lines(file)]
    return [line for line in lines if arm is None or line["arm"] == arm]


def arm_lines(file: Path) -> list[dict[str, Any]]:
    lines = pq.read_table(file).to_pylist()
    outputs_file = file.with_name(OUTPUTS_FILE)
    outputs = {row["row"]: row for row in pq.read_table(outputs_file).to_pylist()} if outputs_file.is_file() else {}
    for line in lines:
        found = outputs.get(line["row"], {})
        for name in OUTPUT_FIELDS:
            line[name] = found.get(name)
        if line["top_logprobs"] is not None:
            line["top_logprobs"] = [[[alt["token"], alt["logprob"]] for alt in alts] for alts in line["top_logprobs"]]
    return lines
