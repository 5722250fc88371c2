"""A new metric is one registry entry: registered in a fixture, computed from request
records, it appears in results and repeats (results.json read back into the same type),
the run summary, `specgate compare`, a reference-run gate (with its interval), sweep.json
and the sweep's summary and page, each capacity probe and the capacity summary and page, an
A/B's paired verdict (with its interval), ab.json, its summary and page, a history of runs
(table and page) and the run report: every place on small in-memory records, no server. Its entry naming the steady and timeslice windows,
it is found with its interval over the whole load, the steady window and each timeslice,
and drawn in the report's timeline (issue 32: windows are a parameter of the registry)."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.ab import record as ab_record
from harness.ab.driver import RoundPair, figures_of
from harness.ab.report import write_ab_report
from harness.capacity import record as capacity_record
from harness.capacity import report as capacity_report
from harness.capacity.driver import probe_figures
from harness.config.schema import GateConfig
from harness.gates import ab as ab_gate, reference, registry as gate_registry
from harness.history.folder import read_history
from harness.history.report import history_text, write_history_page
from harness.load import LoadResult, RequestRecord
from harness.measure import registry
from harness.measure.metrics import combine_repeats, read_result, summarize
from harness.measure.samples import PerRequest, field_value, measured
from harness.measure.steady import measured_window
from harness.measure.timeslices import timeslices_block
from harness.measure.window import WHOLE, Window
from harness.record.store import read_run
from harness.report.compare import compare_data, compare_runs
from harness.report.html import render_report
from harness.report.summary import format_summary
from harness.sweep import record as sweep_record
from harness.sweep import report as sweep_report
from tests.history.records import START, write_run

PATH, LABEL, COLUMN = "output_tokens.p50", "output tokens p50", "out tokens p50"


@pytest.fixture
def output_tokens_p50():
    """Each request's output tokens, their median: one entry, nothing else touched."""
    entry = registry.Metric(PATH, LABEL, "tokens", "{:.1f}", "higher", noise=True, column=COLUMN,
                            in_sweep=True, in_capacity=True, over=(registry.STEADY, registry.TIMESLICE),
                            in_timeline=True, samples=PerRequest(field_value("completion_tokens"), "p50"))
    with registry.registered(entry):
        yield entry


def load(seed: int, tokens_mean: float, n: int = 40) -> LoadResult:
    """A closed loop of `n` requests, one at a time, whose output lengths scatter around `tokens_mean`."""
    rng = np.random.default_rng(seed)
    records, clock = [], 1.0
    for i in range(n):
        tokens = max(2, int(rng.normal(tokens_mean, 4)))
        chunks = [clock + 0.02 + 0.004 * k for k in range(tokens)]
        r = RequestRecord(index=i, warmup=False, send_time=clock, chunk_times=chunks, chunk_tokens=[1] * tokens,
                          status=200, completion_tokens=tokens, prompt_tokens=5, end_time=chunks[-1] + 0.001,
                          run_start=1.0)
        records.append(r)
        clock = r.end_time
    return LoadResult(records=records, start_time=1.0, end_time=clock, api="chat", model="m")


def lines_of(loaded: LoadResult) -> list[dict]:
    return [r.to_json() for r in loaded.records]


def expected_median(loaded: LoadResult) -> float:
    return float(np.median([r.completion_tokens for r in loaded.records]))


def test_results_and_repeats_carry_it(output_tokens_p50):
    first, second = load(1, 60.0), load(2, 64.0)
    result = summarize("eagle3", first)
    assert result.figures[PATH] == pytest.approx(expected_median(first))
    written = result.to_json()
    assert written["output_tokens"]["p50"] == pytest.approx(expected_median(first))  # nested under its path
    assert registry.metric_value(result, PATH) == registry.metric_value(written, PATH)
    back = read_result("eagle3", json.loads(json.dumps(written)))  # results.json read back: the same type
    assert back.value(PATH) == pytest.approx(expected_median(first)) and back.to_json() == written
    both = combine_repeats("eagle3", [result, summarize("eagle3", second)])
    assert both.figures[PATH] == pytest.approx(np.median([expected_median(first), expected_median(second)]))
    assert PATH in both.noise  # repeats track its spread, as its entry says


def test_the_run_summary_and_compare_show_it(output_tokens_p50, tmp_path):
    old, new = summarize("eagle3", load(1, 60.0)), summarize("eagle3", load(2, 66.0))
    experiment = SimpleNamespace(name="x", description="d", arm_names=["eagle3"], plain_arm=None)
    text = format_summary(experiment, {"eagle3": new}, {}, [], {})
    header = next(line for line in text.splitlines() if line.startswith("| arm"))
    assert COLUMN in header
    assert f"{new.figures[PATH]:.1f}" in next(line for line in text.splitlines() if line.startswith("| eagle3"))
    for name, result in (("a", old), ("b", new)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"arms": {"eagle3": result.to_json()}}))
    data = compare_data([tmp_path / "a", tmp_path / "b"])
    [row] = [r for r in data["rows"] if r["metric"] == PATH]
    assert row["values"] == [pytest.approx(old.figures[PATH]), pytest.approx(new.figures[PATH])]
    assert row["changes"][0] == pytest.approx(new.figures[PATH] / old.figures[PATH] - 1.0)
    assert LABEL in compare_runs([tmp_path / "a", tmp_path / "b"])


def test_a_reference_gate_judges_it_with_an_interval(output_tokens_p50):
    old_load, new_load = load(1, 60.0, n=60), load(2, 45.0, n=60)  # a quarter fewer tokens per request
    new = summarize("eagle3", new_load)
    gate = OmegaConf.merge(OmegaConf.structured(GateConfig), {"baseline": "runs/old", "compare": {PATH: "5%"}})
    ctx = gate_registry.GateContext(arm="eagle3", gate=gate, result=new, gpu=None, plain_arm=None, results={},
                                    reference=summarize("eagle3", old_load).to_json(), reference_label="runs/old",
                                    telemetry_source="off", requests=lines_of(new_load),
                                    reference_requests=lines_of(old_load))
    [verdict] = reference.no_regression_against_reference(ctx)
    assert verdict.name == f"baseline.{PATH}" and verdict.status == "failed", verdict.detail
    assert verdict.interval is not None and verdict.interval[0] > 0.05  # worse by more than allowed, surely
    assert f"{PATH} regressed" in verdict.detail and "interval" in verdict.detail


def test_sweep_json_and_the_sweep_tables_and_page_show_it(output_tokens_p50, tmp_path):
    result = summarize("eagle3", load(1, 60.0))
    figures = sweep_record.headline({"plain_arm": None, "arms": {"eagle3": {"status": "measured", **result.to_json()}}})
    assert figures["eagle3"][PATH] == pytest.approx(result.figures[PATH])
    points = [{"label": "0_c1", "exit_status": 0, "swept": [], "arms": figures}]
    text = sweep_record.summary({"experiment": "x", "status": "finished", "exit_status": 0, "points": points})
    assert LABEL in text and f"{result.figures[PATH]:.1f}" in text
    assert LABEL in sweep_report.figure_table(points).header
    assert f"{result.figures[PATH]:.1f}" in sweep_report.table_rows(points)[0]["cells"]
    (tmp_path / sweep_report.SWEEP_FILE).write_text(json.dumps({"experiment": "x", "status": "finished", "exit_status": 0,
                                                  "points": points}))
    page = sweep_report.write_sweep_report(tmp_path).read_text()
    assert LABEL in page and f"{result.figures[PATH]:.1f}" in page


def test_capacity_probes_and_their_tables_and_page_show_it(output_tokens_p50, tmp_path):
    result = summarize("eagle3", load(1, 60.0))
    probe = {"probe": 0, "load": 4, "met": True, "misses": [], "failed_requests": 0, "requests_ok": 40,
             "good_requests": 40, "goodput_rps": 1.5, "duration_s": 2.0, **probe_figures(result)}
    assert probe[PATH] == pytest.approx(result.figures[PATH])
    data = {"experiment": "x", "description": "d", "status": "finished", "exit_status": 0, "dimension": "concurrency",
            "slos": [], "search": {"start": 1}, "gates": [], "command": ["specgate", "capacity"],
            "arms": {"eagle3": {"status": "finished", "capacity": 4, "reached_max": True, "first_miss": None,
                                "goodput_rps": 1.5, "probes": [probe]}}}
    text = capacity_record.summary(data)
    assert LABEL in text and f"{result.figures[PATH]:.1f}" in text
    table = capacity_report.context(data, "x")["probes"]
    assert LABEL in table.header and f"{result.figures[PATH]:.1f}" in table.rows[0]
    (tmp_path / "capacity.json").write_text(json.dumps(data))
    page = capacity_report.write_capacity_report(tmp_path).read_text()
    assert LABEL in page and f"{result.figures[PATH]:.1f}" in page


def test_an_ab_judges_it_with_an_interval_and_its_record_and_page_show_it(output_tokens_p50, tmp_path):
    """Side B's requests carry a quarter fewer tokens in every round: the paired change over
    the rounds fails gate.compare's 5 %, with its interval; ab.json, its summary and page show
    each side's figure per round."""
    gate = OmegaConf.merge(OmegaConf.structured(GateConfig), {"compare": {PATH: "5%"}})
    rounds, entries = [], []
    for k in range(3):
        loads = {"A": load(10 + k, 60.0), "B": load(20 + k, 45.0)}
        results = {side: summarize("eagle3", loaded) for side, loaded in loads.items()}
        rounds.append(RoundPair(k + 1, lines={side: lines_of(loaded) for side, loaded in loads.items()},
                                results=results))
        entries.append({"round": k + 1, "order": "AB", "counted": True,
                        **{side: {"status": "measured", **figures_of(result, gate)} for side, result in results.items()}})
    ctx = gate_registry.ABContext(gate, {"eagle3": rounds}, {"A": "a", "B": "b"})
    [verdict] = ab_gate.no_regression_between_sides(ctx)
    assert verdict.name == f"ab.{PATH}" and verdict.status == "failed", verdict.detail
    assert verdict.interval is not None and verdict.interval[0] > 0.05  # worse by more than allowed, surely
    shown = f"{rounds[0].results['B'].figures[PATH]:.2f}"
    assert entries[0]["B"]["figures"][PATH] == pytest.approx(rounds[0].results["B"].figures[PATH])
    data = {"experiment": "x", "description": "d", "command": ["specgate", "ab"], "status": "finished",
            "exit_status": 1, "rounds": 3, "order": "abba", "keep_up": False, "common_overrides": [],
            "sides": {"A": {"overrides": [], "what": "a"}, "B": {"overrides": [], "what": "b"}},
            "metrics": [PATH], "plain_arm": None, "arms": {"eagle3": entries}, "stopped": None,
            "gates": [verdict.to_json()]}
    text = ab_record.summary(data)
    assert PATH in text and shown in text
    (tmp_path / "ab.json").write_text(json.dumps(data))
    page = write_ab_report(tmp_path).read_text()
    assert PATH in page and shown in page and "interval" in page


def test_the_run_report_shows_it(output_tokens_p50, tmp_path):
    loaded = load(1, 60.0)
    result = summarize("eagle3", loaded)
    (tmp_path / "results.json").write_text(json.dumps({"experiment": "x", "status": "finished",
                                                       "arms": {"eagle3": {"status": "measured", **result.to_json()}}}))
    page = render_report(read_run(tmp_path))
    assert LABEL in page and f"{result.figures[PATH]:.1f}" in page


def test_a_history_of_runs_shows_it(output_tokens_p50, tmp_path):
    """`specgate history DIR --metric PATH`: each run's figure read back from its results.json,
    in the table and on the page."""
    results = [summarize("eagle3", load(seed, 60.0)) for seed in (1, 2, 3)]
    for hour, result in enumerate(results):
        write_run(tmp_path, START + timedelta(hours=hour), {"eagle3": {"status": "measured", **result.to_json()}})
    history = read_history(tmp_path, [PATH])
    assert [value for _, value in history.series("eagle3", PATH)] == \
        [pytest.approx(r.figures[PATH], abs=1e-4) for r in results]
    shown = [f"{r.figures[PATH]:.1f}" for r in results]
    text = history_text(history)
    assert LABEL in text and all(value in text for value in shown)
    page = write_history_page(history).read_text()
    assert LABEL in page and all(value in page for value in shown)


def ended_in(loaded: LoadResult, start_ms: float, end_ms: float) -> list[int]:
    """The output tokens of the requests that ended in [start, end) ms of the load's axis."""
    return [r.completion_tokens for r in loaded.records if start_ms <= r.to_json()["end_ms"] < end_ms]


def assert_point_of_its_interval(entry, lines: list[dict], window: Window, figure: float) -> None:
    found = entry.estimate(lines, window=window)
    assert found.point == pytest.approx(figure, abs=1e-4), (window.name, found, figure)  # a block keeps 4 decimals
    assert found.low is not None and found.low <= found.point <= found.high, (window.name, found)


def test_it_is_found_with_its_interval_over_the_whole_load(output_tokens_p50):
    loaded = load(1, 60.0)
    result = summarize("eagle3", loaded)
    assert_point_of_its_interval(output_tokens_p50, measured(lines_of(loaded)), WHOLE, expected_median(loaded))
    assert result.figures[PATH] == pytest.approx(expected_median(loaded))


def test_it_is_found_with_its_interval_over_the_steady_window(output_tokens_p50):
    loaded = load(1, 60.0)
    result = summarize("eagle3", loaded)
    block = result.to_json()["steady"]
    assert block["inconclusive"] is None, block
    figure = registry.metric_value(block, PATH)  # under its path, as in results.json
    # the steady window chose its stretches; the requests that ended inside them, by hand
    window = measured_window(lines_of(loaded), block)
    [(start, end)] = [window.extent(0)]
    by_hand = ended_in(loaded, start, end)
    assert 0 < len(by_hand) < len(loaded.records)  # the window leaves the ramp and the tail out
    assert figure == pytest.approx(float(np.median(by_hand)), abs=1e-4) and block["output_tokens"]["n"] == len(by_hand)
    assert_point_of_its_interval(output_tokens_p50, measured(lines_of(loaded)), window, figure)
    both = combine_repeats("eagle3", [result, summarize("eagle3", load(2, 64.0))])
    assert registry.metric_value(both.steady, PATH) is not None  # repeats combine it as every steady figure


def test_it_is_found_with_its_interval_in_each_timeslice_and_drawn_in_the_timeline(output_tokens_p50, tmp_path):
    loaded = load(1, 60.0, n=60)
    lines = lines_of(loaded)
    block = timeslices_block(lines, 2.0)
    slices = block["repeats"][0]["slices"]
    assert len(slices) >= 3
    for one in slices[:-1]:  # the last slice may be short and hold too few requests for an interval
        figure, by_hand = registry.metric_value(one, PATH), ended_in(loaded, one["start_ms"], one["end_ms"])
        assert figure == pytest.approx(float(np.median(by_hand))) and one["output_tokens"]["n"] == len(by_hand)
        window = Window.over(registry.TIMESLICE, [(one["start_ms"], one["end_ms"])])
        assert_point_of_its_interval(output_tokens_p50, measured(lines), window, figure)
    result = summarize("eagle3", loaded)
    arm = {"status": "measured", **result.to_json(), "timeslices": block}
    (tmp_path / "results.json").write_text(json.dumps({"experiment": "x", "status": "finished", "arms": {"eagle3": arm}}))
    page = render_report(read_run(tmp_path))
    assert f"{output_tokens_p50.short_label} (tokens)" in page  # its own panel, labelled by its entry


def test_gone_once_unregistered(tmp_path):
    assert PATH not in [m.path for m in registry.all_metrics()]
    written = summarize("eagle3", load(1, 60.0)).to_json()
    assert PATH not in written and "output_tokens" not in written
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.metric("output_tok_s"))


def test_records_written_before_read_under_their_old_spellings(tmp_path):
    """J/token lived only in the gpu block, category latencies were ttft_ms_p50/tpot_ms_p50:
    compare and the report still show them."""
    from harness.report.html import category_rows

    arm = {"status": "measured", "output_tok_s": 100.0, "gpu": {"energy": {"joules_per_token": 0.25}},
           "categories": {"code": {"requests": 3, "accept_length": 2.0, "stream_tok_s": 50.0,
                                   "ttft_ms_p50": 12.5, "tpot_ms_p50": 3.25}}}
    (tmp_path / "results.json").write_text(json.dumps({"arms": {"eagle3": arm}}))
    [row] = [r for r in compare_data([tmp_path])["rows"] if r["metric"] == "joules_per_token"]
    assert row["values"] == [0.25]
    assert category_rows({"eagle3": arm}, ["eagle3"], None) == [["eagle3", "code", "3", "2", "50", "-", "12.5", "3.25"]]
    page = render_report(read_run(tmp_path))
    assert "J/token" in page and "0.250" in page
