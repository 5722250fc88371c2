"""A reference record whose per-request rows do not reproduce its own results.json figures is
said, never judged (harness/gates/reproduce.py). Issue 32: against a record made by
repeating a real record's rows, timings and all, an identical run failed with
`output_tok_s 249.33 -> 249.42 (+99.9% worse, 95% interval +99.9% to +99.9% worse)`."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from harness.config.schema import GateConfig
from harness.gates.change import evidence
from harness.gates.reference import no_regression_against_reference
from harness.gates.registry import GateContext
from harness.gates.reproduce import disagreement, recomputed
from harness.measure.metrics import ArmResult, Stat
from harness.measure.registry import resolve
from harness.measure.samples import COLUMNS
from harness.record import requests as columns_module
from harness.record.store import read_run
from tests.gates.test_change import lines

COMPARED = ("output_tok_s", "itl_ms.p50", "tpot_ms.p50")


def figures(rows: list[dict]) -> dict:
    """An arm block whose figures are its rows' own, as the arm runner writes them."""
    value = {m: evidence(m, rows).value() for m in COMPARED}
    return {"status": "measured", "requests": {"ok": len(rows), "failed": 0}, "output_tok_s": value["output_tok_s"],
            "itl_ms": {"p50": value["itl_ms.p50"]}, "tpot_ms": {"p50": value["tpot_ms.p50"]}}


def record(folder, block: dict, rows: list[dict]):
    """A finished run record: results.json with `block` for eagle3, and `rows` as its requests.parquet."""
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"status": "finished", "experiment": "x",
                                                     "arms": {"eagle3": block}, "gates": []}))
    columns_module.append_requests(folder / "arms" / "eagle3", "eagle3", rows)
    return read_run(folder)


def gate(reference, run_rows: list[dict]):
    block = figures(run_rows)
    result = ArmResult.of(arm="eagle3", requests_ok=len(run_rows), output_tok_s=block["output_tok_s"],
                          itl_ms=Stat(p50=block["itl_ms"]["p50"]), tpot_ms=Stat(p50=block["tpot_ms"]["p50"]),
                          duration_s=10.0)
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"baseline": "reference", "inconclusive": "fail"})
    ctx = GateContext(arm="eagle3", gate=cfg, result=result, gpu=None, plain_arm=None, results={},
                      reference=reference.arms["eagle3"], reference_label="old", telemetry_source="off",
                      requests=run_rows, reference_requests=reference.request_columns("eagle3", COLUMNS))
    return {v.name.removeprefix("baseline."): v for v in no_regression_against_reference(ctx)}


def test_an_intact_reference_reproduces_its_figures_and_an_identical_run_passes(tmp_path):
    rows = lines(400, 1, concurrency=8)
    reference = record(tmp_path / "old", figures(rows), rows)
    columns = reference.request_columns("eagle3", COLUMNS)
    assert all(disagreement(m, reference.arms["eagle3"], columns) is None for m in COMPARED)
    verdicts = gate(reference, rows)
    assert set(verdicts) == set(COMPARED)
    assert all(v.status == "passed" for v in verdicts.values()), [v.detail for v in verdicts.values()]


def test_a_reference_of_repeated_rows_is_said_and_not_judged(tmp_path):
    rows = lines(400, 1, concurrency=8)
    doubled = rows + [{**row, "index": row["index"] + len(rows)} for row in rows]  # the same timings twice
    reference = record(tmp_path / "old", figures(rows), doubled)
    verdicts = gate(reference, rows)
    tok = verdicts["output_tok_s"]
    # it was failed, "+50.0% worse" with an interval from rows that were not the figure's
    assert tok.status == "inconclusive" and tok.passed is False, tok.detail
    stated, found = figures(rows)["output_tok_s"], recomputed(resolve("output_tok_s"), doubled)
    assert found == pytest.approx(2 * stated)
    assert (f"the reference run's per-request rows do not reproduce its own output_tok_s: its results.json says "
            f"{stated:.4g}, its rows give {found:.4g} (+100.0%") in tok.detail
    assert "gate.inconclusive=fail" in tok.detail and "interval" not in tok.detail
    # the rows' latencies are the figures' own (each request twice): those are judged, and pass
    assert verdicts["itl_ms.p50"].status == verdicts["tpot_ms.p50"].status == "passed"


def test_repeats_are_recomputed_as_results_json_combines_them(tmp_path):
    runs = [lines(60, seed, concurrency=4, repeat=seed, step_ms=4.0 + seed) for seed in range(3)]
    block = figures(runs[1])  # the median repeat's figures: results.json's median over repeats
    reference = record(tmp_path / "old", block, [row for run in runs for row in run])
    columns = reference.request_columns("eagle3", COLUMNS)
    assert all(disagreement(m, reference.arms["eagle3"], columns) is None for m in COMPARED)
