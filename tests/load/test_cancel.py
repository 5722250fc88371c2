"""workload.cancel (harness/load/cancel.py): which requests are cancelled, how the client closes
them, how they are recorded and measured, and the check that the server keeps serving.
The streams are closed against the simulator, a real HTTP server that aborts on disconnect."""

from __future__ import annotations

import re
import time
from typing import Iterator

import pytest
import requests
from omegaconf import OmegaConf
from prometheus_client.parser import text_string_to_metric_families

from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.config.schema import CancelConfig, GateConfig, WorkloadConfig
from harness.gates import registry, throughput
from harness.gates.lossless import compare
from harness.load import LoadPlan, RequestRecord, run_load
from harness.load.cancel import CancelPlan, cancel_figures, combine_cancel_figures
from harness.load.progress import LoadCounter
from harness.load.records import LoadResult
from harness.measure.metrics import combine_repeats, summarize
from harness.sim.app import ABORT_FAULT_MESSAGE
from tests.support.sim_process import FAST, Sim

LONG = dict(prompt="count from 1 to 3000", max_tokens=300, ignore_eos=True)  # far longer than any cut (0.6 s)


def wl(**kw) -> WorkloadConfig:
    base = dict(name="t", api="chat", prompt="count to ten", max_tokens=10, concurrency=2, num_prompts=12,
                warmup_requests=1, timeout_s=20.0)
    base.update(kw)
    return WorkloadConfig(**base)


def cut(fraction: float, **where) -> CancelConfig:
    return CancelConfig(fraction=fraction, **where)


# --- the choice ---------------------------------------------------------------------------


def chosen(plan: CancelPlan, n: int = 200) -> set[tuple[int, int]]:
    return {(i, t) for i in range(n) for t in range(2) if plan.chosen(i, t)}


def test_the_choice_is_seeded_the_same_for_every_arm_and_process_and_near_the_fraction():
    plan = CancelPlan.of(wl(seed=3, cancel=cut(0.3, after_tokens=8)))
    again = CancelPlan.of(wl(seed=3, cancel=cut(0.3, after_tokens=8), client_processes=2, request_rate=5.0))
    assert chosen(plan) == chosen(again)  # another arm, another split or pacing: the same requests
    assert chosen(plan) != chosen(CancelPlan.of(wl(seed=4, cancel=cut(0.3, after_tokens=8))))
    assert 0.22 < len(chosen(plan)) / 400 < 0.38
    assert chosen(CancelPlan(1.0, 8, None, 0)) == {(i, t) for i in range(200) for t in range(2)}
    assert chosen(CancelPlan(1e-9, 8, None, 0)) == set()


def test_fraction_zero_is_off_and_warmups_are_never_cut():
    assert CancelPlan.of(wl()) is None and CancelPlan.of(wl(cancel=cut(0.0, after_tokens=4))) is None
    plan = CancelPlan.of(wl(cancel=cut(1.0, after_ms=50.0)))
    warm, measured = RequestRecord(index=0, warmup=True), RequestRecord(index=0, warmup=False, turn=1)
    plan.mark(warm)
    plan.mark(measured)
    assert (warm.cancel_after_tokens, warm.cancel_after_ms) == (None, None)
    assert (measured.cancel_after_tokens, measured.cancel_after_ms) == (None, 50.0)
    assert plan.describe() == {"fraction": 1.0, "after_ms": 50.0}


@pytest.mark.parametrize("override, words", [
    ("workload.cancel.fraction=1.5", "workload.cancel.fraction must be a finite number >= 0 and <= 1, got 1.5"),
    ("workload.cancel.fraction=-0.1", "workload.cancel.fraction must be a finite number >= 0 and <= 1, got -0.1"),
    ("workload.cancel.fraction=0.2", "workload.cancel needs exactly one of after_tokens and after_ms (where the client "
                                     "closes a cancelled request's stream), got neither"),
    ("workload.cancel={fraction:0.2,after_tokens:4,after_ms:10}", "got both"),
    ("workload.cancel={fraction:0.2,after_tokens:0}", "workload.cancel.after_tokens must be a finite number >= 1 and <= 1e+07, got 0"),
    ("workload.cancel={fraction:0.2,after_ms:0}", "workload.cancel.after_ms must be a finite number > 0 and <= 8.64e+07, got 0"),
    ("workload.cancel={fraction:0.2,after_tokens:500}", "workload.cancel.after_tokens=500 is not below "
                                                        "workload.max_tokens=500: every request would end before its cut"),
])
def test_bad_values_are_one_sentence(override, words):
    with pytest.raises(ConfigError) as err:
        compose(["+exp=sim_smoke", override])
    assert words in str(err.value) and "\n" not in str(err.value)


def test_good_values_compose():
    arm = compose(["+exp=sim_smoke", "workload.cancel={fraction:0.3,after_tokens:8}"]).base
    assert CancelPlan.of(arm.workload) == CancelPlan(0.3, 8, None, 0)


# --- recorded and measured --------------------------------------------------------------


def rec(index: int, *, cancelled: bool = False, error: str | None = None, tokens: int = 10,
        send: float = 0.0, end: float = 1.0) -> RequestRecord:
    r = RequestRecord(index=index, warmup=False, send_time=send, end_time=end, status=200, error=error,
                      chunk_times=[send + 0.1 * (k + 1) for k in range(tokens)], chunk_tokens=[1] * tokens)
    if cancelled:
        r.cancelled, r.cancel_after_tokens = True, 4
    else:
        r.completion_tokens = None if error else tokens
    return r


def test_a_cancelled_request_is_neither_ok_nor_failed_and_no_figure_holds_it():
    records = [rec(0, end=1.1), rec(1, cancelled=True, tokens=4, end=0.45), rec(2, error="HTTP 500: boom")]
    records[1].cancel_after_tokens = 4
    assert [(r.ok, r.failed, r.cancelled) for r in records] == [(True, False, False), (False, False, True),
                                                              (False, True, False)]
    line = records[1].to_json(0.0)
    assert (line["ok"], line["cancelled"], line["cancel_after_tokens"], line["error"]) == (False, True, 4, None)
    load = LoadResult(records, 0.0, 1.1, "chat", "m", cancel={"fraction": 0.3, "after_tokens": 4})
    res = summarize("a", load)
    assert (res.requests_ok, res.requests_failed, res.completion_tokens) == (1, 1, 10)
    assert res.stat("ttft_ms").n == 1 and res.value("e2e_ms.mean") == pytest.approx(1100.0)  # the ok request's alone
    assert res.cancel == {"fraction": 0.3, "after_tokens": 4, "chosen": 1, "cancelled": 1, "tokens_before_cancel": 4}
    assert res.to_json()["cancel"]["cancelled"] == 1 and "cancel" not in summarize("a", LoadResult(
        records[:1], 0.0, 1.1, "chat", "m")).to_json()
    both = combine_repeats("a", [res, res])
    assert (both.cancel["cancelled"], both.cancel["tokens_before_cancel"], both.cancel["fraction"]) == (2, 8, 0.3)
    assert combine_cancel_figures([{}, {}]) == {} and cancel_figures(None, records) == {}


def test_the_progress_line_counts_no_cancellation_as_an_error():
    counter = LoadCounter(3, None)
    for r in (rec(0), rec(1, cancelled=True), rec(2, error="boom")):
        counter.sent(r)
        counter.left(r)
        counter.finished(r)
    assert counter.errors == 1


def test_the_lossless_comparison_skips_cancelled_requests():
    lines = [{"index": 0, "ok": True, "text": "a b c"}, {"index": 1, "ok": True, "text": "d e f"}]
    cancelled = [dict(lines[0]), {"index": 1, "ok": False, "cancelled": True, "text": None}]
    found = compare("baseline", lines, "eagle3", cancelled)
    assert (found.identical, found.divergences, found.not_comparable) == (1, [], ["request 1 was cancelled in eagle3"])


# --- the check that the server keeps serving ----------------------------------------------


def line(index: int, send: float, end: float, *, ok: bool = True, cancelled: bool = False, error: str | None = None) -> dict:
    return {"index": index, "warmup": False, "send_ms": send, "end_ms": end, "ok": ok and not cancelled,
            "cancelled": cancelled, "error": error}


def gate_ctx(lines: list[dict], **gate) -> registry.GateContext:
    res = summarize("a", LoadResult([rec(0)], 0.0, 1.0, "chat", "m"))
    return registry.GateContext(arm="a", gate=OmegaConf.merge(OmegaConf.structured(GateConfig), gate), result=res,
                                gpu=None, plain_arm=None, results={}, reference=None, reference_label="",
                                telemetry_source="off", requests=lines)


def test_serves_after_cancel_passes_fails_and_skips_in_one_sentence():
    served = [line(0, 0, 50, cancelled=True), line(1, 10, 200), line(2, 60, 300), line(3, 70, 90, cancelled=True)]
    [v] = throughput.serves_after_cancel(gate_ctx(served))
    assert v.status == "passed" and "1 request(s) sent after a cancellation completed, none failed" in v.detail
    broken = served + [line(4, 95, 96, ok=False, error="HTTP 500: scheduler died")]
    [v] = throughput.serves_after_cancel(gate_ctx(broken))
    assert v.status == "failed" and v.value == 1 and "\n" not in v.detail
    assert v.detail == ("a: the server did not keep serving after cancelled requests: 1 request(s) sent after a "
                        "cancellation failed (request 4, sent 5 ms after request 3 was cancelled: HTTP 500: scheduler died)")
    [v] = throughput.serves_after_cancel(gate_ctx([line(0, 0, 50), line(1, 10, 60, ok=False, error="x")]))
    assert v.status == "skipped" and "no request was cancelled" in v.detail  # a failure with no cancel before it: not ours
    [v] = throughput.serves_after_cancel(gate_ctx([line(0, 0, 50), line(1, 10, 60, cancelled=True)]))
    assert v.status == "skipped" and "no request was sent after the first cancellation" in v.detail
    [v] = throughput.serves_after_cancel(gate_ctx(served, check_serving_after_cancel=False))
    assert v.status == "skipped" and "gate.check_serving_after_cancel=false" in v.detail


# --- against the simulator: the stream really closed, the slot freed ---------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with Sim(FAST) as s:
        yield s


def running(sim: Sim) -> float:
    fams = {f.name: f for f in text_string_to_metric_families(requests.get(sim.url + "/metrics", timeout=5).text)}
    return fams["sglang:num_running_reqs"].samples[0].value


def settled(sim: Sim, deadline_s: float = 3.0) -> float:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and running(sim) != 0:
        time.sleep(0.05)
    return running(sim)


def aborts(sim: Sim) -> int:
    return sim.output().count("Client disconnected; request aborted.")


@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
@pytest.mark.parametrize("where", [{"after_tokens": 6}, {"after_ms": 40.0}])
def test_the_client_closes_the_stream_and_the_server_frees_the_slot(sim, api, where):
    before = aborts(sim)
    res = run_load(LoadPlan.of(wl(api=api, num_prompts=4, cancel=cut(1.0, **where), **LONG), sim.url, "sim-model"))
    measured = res.measured
    assert [r.cancelled for r in measured] == [True] * 4 and not any(r.error for r in measured)
    assert all(not r.ok and not r.failed for r in measured) and res.records[0].ok  # the warm-up ran whole
    got = [sum(r.chunk_tokens) for r in measured]
    if "after_tokens" in where:
        # cut at the first chunk that brought the 6th token (a busy simulator may send several per chunk)
        assert all(sum(r.chunk_tokens) >= 6 > sum(r.chunk_tokens[:-1]) for r in measured), [r.chunk_tokens for r in measured]
        assert all(n < 100 for n in got), got
    else:
        # a 40 ms cut of a 300-token stream (2 ms steps): well short of the whole answer the
        # warm-up got, however busy the machine (its lag can only add tokens, never all of them)
        warm = res.records[0]
        assert all(n < 150 for n in got) and all(r.e2e_s < warm.e2e_s for r in measured), (got, warm.e2e_s)
    assert settled(sim) == 0  # every aborted request's slot is free again
    time.sleep(0.1)
    assert aborts(sim) - before == 4  # the server saw each client go
    assert res.cancel == {"fraction": 1.0, **where}


def test_split_and_open_loops_cancel_the_same_requests(sim):
    # 60 tokens, twelve times the cut: every request not chosen outlives it (LONG's 300 only made this take 5 s)
    base = dict(num_prompts=16, concurrency=4, seed=5, warmup_requests=0, cancel=cut(0.4, after_tokens=5),
                **{**LONG, "max_tokens": 60})
    loads = [wl(**base), wl(**base, client_processes=2), wl(**base, request_rate=50.0)]
    cut_sets = []
    for w in loads:
        res = run_load(LoadPlan.of(w, sim.url, "sim-model"))
        assert not any(r.failed for r in res.measured), [r.error for r in res.measured]
        cut_sets.append(sorted(r.index for r in res.measured if r.cancelled))
    plan = CancelPlan.of(loads[0])
    assert cut_sets[0] == cut_sets[1] == cut_sets[2] == [i for i in range(16) if plan.chosen(i)] != []
    assert settled(sim) == 0


def test_a_request_that_ends_before_its_cut_is_not_cancelled(sim):
    res = run_load(LoadPlan.of(wl(num_prompts=3, max_tokens=4, ignore_eos=True, cancel=cut(1.0, after_tokens=50)),
                               sim.url, "sim-model"))
    assert all(r.ok and not r.cancelled for r in res.measured)
    assert summarize("a", res).cancel == {"fraction": 1.0, "after_tokens": 50, "chosen": 3, "cancelled": 0,
                                          "tokens_before_cancel": 0}


def test_a_server_broken_by_an_abort_fails_the_keep_serving_check():
    broken = Sim(FAST + ["--sim-fail-after-abort"])
    try:
        res = run_load(LoadPlan.of(wl(num_prompts=8, concurrency=1, seed=1, cancel=cut(0.5, after_tokens=5), **LONG),
                                   broken.url, "sim-model"))
    finally:
        broken.kill()
    first = min(r.index for r in res.measured if r.cancelled)
    # the server breaks when it notices the first client gone (its next write), so the request
    # sent right after may still be served; every one after that fails
    failed = [r for r in res.measured if r.failed]
    assert failed and all(r.index > first and ABORT_FAULT_MESSAGE in r.error for r in failed)
    assert all(r.failed or r.cancelled for r in res.measured if r.index > first + 1)
    [v] = throughput.serves_after_cancel(gate_ctx([r.to_json() for r in res.measured]))
    assert v.status == "failed" and v.value == len(failed)
    assert re.search(r"request \d+, sent \d+ ms after request \d+ was cancelled: HTTP 500: Scheduler hit", v.detail)
