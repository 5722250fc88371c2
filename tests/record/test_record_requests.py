"""The record's per-request columns (harness/record/requests.py): what is written comes back,
texts stay apart, readers get only the columns they ask for, and a record written before
(requests.jsonl) reads the same in every analysis: compare, report, replay's reading and the
reference-run gate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from harness import cli
from harness.run.compose import compose
from harness.gates.registry import GateContext
from harness.gates.reference import no_regression_against_reference
from harness.gates.change import evidence
from harness.measure.samples import COLUMNS
from harness.measure.metrics import ArmResult, Stat
from harness.record import requests as columns_module
from harness.record.requests import OUTPUTS_FILE, REQUESTS_FILE, RequestColumns, read_lines
from harness.record.store import RunRecord, read_reference_runs, read_run
from harness.report.html import latency_samples
from harness.run.replay import drift_rows

ROOT = Path(__file__).resolve().parents[2]


def request_line(i: int, repeat: int = 0, step_ms: float = 4.0, texts: bool = True) -> dict:
    """A requests line as the arm runner makes it: timings, chunks, spec meta and outputs."""
    send = 100.0 * i
    chunks = [send + 20.0 + step_ms * k + 0.01 * (i % 7) for k in range(8)]
    line = {"index": i, "warmup": i == 0, "turn": 0, "dataset_row": None, "category": None, "ok": i != 3,
            "status": 200 if i != 3 else 500, "error": None if i != 3 else "boom", "send_ms": send,
            "end_ms": chunks[-1] + 0.2, "send_gap_ms": None, "ttft_ms": chunks[0] - send,
            "e2e_ms": chunks[-1] + 0.2 - send, "decode_ms": chunks[-1] - chunks[0], "prompt_tokens": 30,
            "intended_prompt_tokens": None, "completion_tokens": 16, "spec_verify_ct": 8, "spec_accept_length": 2.0,
            "spec_correct_drafts_histogram": [1, 3, 4], "finish_reason": "length", "chunk_ms": chunks,
            "chunk_tokens": [2] * 8, "repeat": repeat, "text": None, "token_ids": None, "tokens": None,
            "top_logprobs": None}
    if texts:
        line.update(text=f"count {i}", token_ids=list(range(16)), tokens=[str(k) for k in range(16)],
                    top_logprobs=[[["1", -0.1], ["2", -2.5]]] * 16)
    return line


def write_record(folder, lines_by_arm: dict[str, list[dict]], jsonl: bool) -> None:
    """A finished run record of these lines, in the layout of today (Parquet) or before (JSONL)."""
    folder.mkdir(parents=True)
    arms = {}
    for arm, lines in lines_by_arm.items():
        ok = [x for x in lines if x["ok"] and not x["warmup"]]
        ttft = Stat(*np.percentile([x["ttft_ms"] for x in ok], [50, 50, 90, 99]))
        # the rows' own figures: a reference gate judges no record whose rows do not reproduce them
        own = {f"{family}.{stat}": evidence(f"{family}.{stat}", lines).value()
               for family in ("itl_ms", "tpot_ms") for stat in ("mean", "p50", "p90", "p99")}
        arms[arm] = {"status": "measured", "requests": {"ok": len(ok), "failed": 0},
                     "output_tok_s": evidence("output_tok_s", lines).value(), "ttft_ms": ttft.to_json(),
                     **{family: {stat: own[f"{family}.{stat}"] for stat in ("mean", "p50", "p90", "p99")}
                        for family in ("itl_ms", "tpot_ms")}}
    (folder / "results.json").write_text(json.dumps({"status": "finished", "experiment": "x", "arms": arms,
                                                     "gates": []}))
    if jsonl:
        text = "".join(json.dumps({"arm": arm, **line}) + "\n" for arm, lines in lines_by_arm.items() for line in lines)
        (folder / "requests.jsonl").write_text(text)
    else:
        for arm, lines in lines_by_arm.items():
            columns_module.append_requests(folder / "arms" / arm, arm, lines)


def test_lines_come_back_whole_with_outputs_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(columns_module, "ROW_GROUP_ROWS", 4)  # several row groups and appends
    record = RunRecord(tmp_path, "x")
    first = [request_line(i) for i in range(6)]
    second = [{**request_line(i, repeat=1, texts=i % 2 == 0), "probe": 2} for i in range(5)]
    record.add_requests("eagle3", first)
    record.add_requests("eagle3", second)
    back = read_lines(record.path)
    assert [x["row"] for x in back] == list(range(11))
    for line, got in zip(first + second, back):
        assert {k: got[k] for k in line} == line and got["arm"] == "eagle3"
    assert [x["probe"] for x in back] == [None] * 6 + [2] * 5  # a flag new in a later batch: null before it
    folder = record.path / "arms" / "eagle3"
    timings, outputs = pq.ParquetFile(folder / REQUESTS_FILE), pq.ParquetFile(folder / OUTPUTS_FILE)
    assert timings.metadata.num_row_groups >= 3 and timings.metadata.num_rows == 11
    assert "text" not in timings.schema_arrow.names and "chunk_ms" in timings.schema_arrow.names
    assert outputs.metadata.num_rows == 9  # only the requests that carry outputs


def test_no_outputs_file_where_no_request_carries_outputs(tmp_path):
    record = RunRecord(tmp_path, "x")
    record.add_requests("baseline", [request_line(i, texts=False) for i in range(4)])
    assert (record.path / "arms" / "baseline" / REQUESTS_FILE).is_file()
    assert not (record.path / "arms" / "baseline" / OUTPUTS_FILE).exists()


@pytest.mark.parametrize("jsonl", [False, True], ids=["parquet", "jsonl"])
def test_columns_are_what_the_lines_say(tmp_path, jsonl):
    lines = [request_line(i) for i in range(12)]
    write_record(tmp_path / "run", {"eagle3": lines, "baseline": [request_line(i, step_ms=3.0) for i in range(5)]},
                 jsonl)
    got = read_run(tmp_path / "run").request_columns("eagle3", ["ttft_ms", "ok", "chunk_ms", "no_such_field"])
    want = RequestColumns.from_lines(lines, ["ttft_ms", "ok", "chunk_ms"])
    assert got.size == 12 and set(got.scalars) == {"ttft_ms", "ok"} and set(got.lists) == {"chunk_ms"}
    assert np.array_equal(got.get("ttft_ms"), want.get("ttft_ms")) and list(got.get("ok")).count(0.0) == 1
    assert np.array_equal(got.ragged("chunk_ms").values, want.ragged("chunk_ms").values)
    assert np.array_equal(got.ragged("chunk_ms").offsets, np.arange(13) * 8)
    assert np.isnan(got.get("no_such_field")).all()


def test_a_jsonl_record_reads_as_its_parquet_twin_in_every_analysis(tmp_path, capsys):
    """The same requests written before (JSONL) and today (Parquet): the same samples for the
    reference-run gate and the report, the same compare and replay drift."""
    lines = {"baseline": [request_line(i, step_ms=4.0 + 0.1 * (i % 3)) for i in range(40)],
             "eagle3": [request_line(i, step_ms=7.5) for i in range(40)]}
    write_record(tmp_path / "old", lines, jsonl=True)
    write_record(tmp_path / "new", lines, jsonl=False)
    (old,), _ = read_reference_runs(tmp_path / "old")
    (new,), _ = read_reference_runs(tmp_path / "new")
    for metric in ("itl_ms.p50", "ttft_ms.p99", "output_tok_s", "tpot_ms.p50", "accept_length"):
        a, b = evidence(metric, old.request_columns("eagle3", COLUMNS)), evidence(metric, new.request_columns("eagle3", COLUMNS))
        in_memory = evidence(metric, lines["eagle3"])
        assert a.count == b.count == in_memory.count > 0 and a.value() == b.value() == in_memory.value()
    for arm in lines:
        assert all(np.array_equal(latency_samples(old, arm)[k], latency_samples(new, arm)[k]) for k in ("ttft", "itl"))
    assert latency_samples(old, "eagle3")["itl"].size == 38 * 7  # measured, ok requests' chunk gaps
    assert drift_rows(old.data, new.data, OmegaConf.structured(compose(["+exp=sim_smoke"]).base.gate)) == \
        drift_rows(new.data, new.data, OmegaConf.structured(compose(["+exp=sim_smoke"]).base.gate))
    assert cli.main(["compare", str(tmp_path / "old"), str(tmp_path / "new")]) == 0
    assert cli.main(["report", str(tmp_path / "old")]) == 0 and cli.main(["report", str(tmp_path / "new")]) == 0
    verdicts = gate_against(old, new)
    assert verdicts and all("interval" in v.detail for v in verdicts if v.passed is not None), [v.detail for v in verdicts]
    assert [v.detail for v in verdicts] == [v.detail for v in gate_against(new, old)]  # either layout, one verdict


def gate_against(reference, candidate):
    """The reference-run gate for eagle3, its samples read from both records."""
    block = candidate.arms["eagle3"]
    result = ArmResult.of(arm="eagle3", requests_ok=38, output_tok_s=block["output_tok_s"], ttft_ms=Stat(**block["ttft_ms"]),
                          itl_ms=Stat(**block["itl_ms"]), tpot_ms=Stat(**block["tpot_ms"]), duration_s=1.0)
    gate = OmegaConf.merge(compose(["+exp=sim_smoke"]).base.gate, {"baseline": "reference"})
    ctx = GateContext(arm="eagle3", gate=gate, result=result, gpu=None, plain_arm=None, results={},
                      reference=reference.arms["eagle3"], reference_label="old", telemetry_source="off",
                      requests=candidate.request_columns("eagle3", COLUMNS),
                      reference_requests=reference.request_columns("eagle3", COLUMNS))
    return no_regression_against_reference(ctx)


def test_a_torn_requests_file_in_the_reference_is_said_by_the_report_and_the_baseline_verdict(tmp_path):
    """A reference run killed while its requests.parquet was written: the file is torn. It used
    to read as a record that kept no requests: the report was silent and the verdict said only
    that it judged the two values."""
    lines = {"eagle3": [request_line(i) for i in range(40)]}
    write_record(tmp_path / "old", lines, jsonl=False)
    write_record(tmp_path / "new", lines, jsonl=False)
    torn = tmp_path / "old" / "arms" / "eagle3" / REQUESTS_FILE
    torn.write_bytes(torn.read_bytes()[:-100])
    (old,), _ = read_reference_runs(tmp_path / "old")
    columns = old.request_columns("eagle3", COLUMNS)
    assert len(columns) == 0 and columns.unreadable.startswith("arms/eagle3/requests.parquet cannot be read: ")
    assert read_run(tmp_path / "new").request_columns("eagle3", COLUMNS).unreadable is None
    verdicts = gate_against(old, read_run(tmp_path / "new"))
    assert verdicts and all("the reference run's per-request data could not be read, so no interval: "
                            "arms/eagle3/requests.parquet cannot be read" in v.detail for v in verdicts), \
        [v.detail for v in verdicts]
    assert cli.main(["report", str(tmp_path / "old")]) == 0
    page = (tmp_path / "old" / "report.html").read_text()
    assert "The per-request data of eagle3: arms/eagle3/requests.parquet cannot be read" in page


def test_the_query_in_docs_record_md_runs_on_a_record(tmp_path, capsys):
    text = (ROOT / "docs" / "record.md").read_text()
    code = text.split("## Querying a record", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert 'record = "runs/latest"' in code
    write_record(tmp_path / "run", {"baseline": [request_line(i, step_ms=3.0) for i in range(6)],
                                    "eagle3": [request_line(i) for i in range(6)]}, jsonl=False)
    exec(code.replace('"runs/latest"', repr(str(tmp_path / "run"))), {})
    printed = capsys.readouterr().out
    assert "baseline" in printed and "eagle3" in printed and "ttft_ms_approximate_median" in printed
    assert "'text': 'count 0'" in printed and "'row': 2" in printed
