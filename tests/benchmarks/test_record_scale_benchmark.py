"""The reduced record-scale benchmark (benchmarks/record_scale.py): report, compare, replay's
reading and the reference-run gate all run on a synthetic record (the report and the gate on
one written before too, as requests.jsonl), and what each costs in memory grows by far less
per request than the JSONL readers did (~125 KB a request for the report of 125,000). The full benchmark (10k and 100k requests) writes
benchmarks/results/record_scale.md. It judges peak memory (GNU time's %M of each reader's own
process) and exit statuses, never time, so it runs beside other tests (marked slow, not
benchmark_reduced: make test runs those alone after everything else)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("record_scale",
                                               Path(__file__).resolve().parents[2] / "benchmarks" / "record_scale.py")
record_scale = importlib.util.module_from_spec(_spec)
sys.modules["record_scale"] = record_scale  # dataclasses look their module up there
_spec.loader.exec_module(record_scale)

SMALL, LARGE = 500, 3_000
KB_PER_REQUEST = 40  # the bound on memory growth: a quarter of the JSONL readers', several times ours


def costs(tmp_path: Path, requests: int, layout: str, commands=record_scale.COMMANDS) -> dict[str, record_scale.Measured]:
    """Each command's cost on one synthetic record (compared with itself where two are read)."""
    record = record_scale.make_record(tmp_path / f"{layout}-{requests}", requests, 1, layout)
    return {c: record_scale.measure(c, layout, requests, record, record, tmp_path) for c in commands}


@pytest.mark.slow  # memory, not time: it shares the machine (module docstring)
def test_every_reader_runs_and_its_memory_grows_little_per_request(tmp_path):
    small, large = costs(tmp_path, SMALL, "parquet"), costs(tmp_path, LARGE, "parquet")
    for command in record_scale.COMMANDS:
        assert small[command].returncode == 0 and large[command].returncode == 0, command
        growth_kb = (large[command].peak_mb - small[command].peak_mb) * 1024 / (LARGE - SMALL)
        assert growth_kb < KB_PER_REQUEST, (command, small[command], large[command])


@pytest.mark.slow  # memory, not time: it shares the machine (module docstring)
def test_a_jsonl_record_runs_through_the_readers_of_requests(tmp_path):
    found = costs(tmp_path, SMALL, "jsonl", ("report", "gate"))
    assert all(m.returncode == 0 for m in found.values()), found
