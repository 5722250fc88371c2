"""The steady window (harness/measure/steady.py): closed loop while every slot is busy, open
loop between the ramp-in and the last send, too short a window inconclusive with its reason."""

from __future__ import annotations

import pytest

from harness.measure.steady import combine, steady_figures, steady_window
from harness.measure.window import tokens_arrived as tokens_in


def line(send: float, end: float, tokens: int = 10, chunks: bool = True, verify: int | None = None) -> dict:
    """A request from `send` to `end` ms streaming `tokens` one per chunk, evenly, the first at send + 1/10 of its life."""
    first = send + (end - send) / 10
    times = [first + k * (end - first) / (tokens - 1) for k in range(tokens)] if chunks else []
    return {"ok": True, "send_ms": send, "end_ms": end, "completion_tokens": tokens, "chunk_ms": times,
            "chunk_tokens": [1] * len(times), "spec_verify_ct": verify}


def closed_loop(concurrency: int, length_ms: float, per_slot: int, stagger_ms: float = 0.0) -> list[dict]:
    """Each slot sends `per_slot` requests back to back (the next 0.5 ms after one ends); slot i starts at i * stagger."""
    lines = []
    for slot in range(concurrency):
        t = slot * stagger_ms
        for _ in range(per_slot):
            lines.append(line(t, t + length_ms))
            t += length_ms + 0.5
    return lines


def test_closed_loop_window_is_while_every_slot_is_busy():
    # 4 slots starting 100 ms apart, 5 requests of 1 s each: all busy from the 4th send (300 ms)
    # to the first slot's last end (5 s + 4 x 0.5 ms); refills in between do not end it
    lines = closed_loop(4, 1000.0, 5, stagger_ms=100.0)
    window = steady_window(lines, 4, None, 0.25)
    assert window.inconclusive is None
    assert window.start_ms == 300.0
    assert window.end_ms == pytest.approx(5002.0)
    assert window.share == pytest.approx(4702.0 / 5302.0)


def test_closed_loop_throughput_counts_the_tokens_inside_the_window():
    lines = closed_loop(4, 1000.0, 5, stagger_ms=100.0)
    block = steady_figures(lines, 4, None, 0.25)
    # 4 streams of 10 tokens per second (9 decoded over 0.9 s) while all four decode: 40 tok/s;
    # the moments a slot is between requests (sent, not yet streaming) are left out
    assert block["output_tok_s"] == pytest.approx(40.0, rel=1e-3)
    assert 0.5 < block["measured_share"] < 0.95
    whole = sum(l["completion_tokens"] for l in lines) / 5.302
    assert whole < 0.95 * block["output_tok_s"]


def test_a_closed_loop_that_never_fills_its_slots_is_inconclusive():
    lines = closed_loop(3, 1000.0, 2)
    window = steady_window(lines, 4, None, 0.25)
    assert window.start_ms is None
    assert window.inconclusive == ("never were all 4 slots busy at once (at most 3 requests in flight), "
                                   "so the load has no steady state at concurrency 4")
    block = steady_figures(lines, 4, None, 0.25)
    assert block["output_tok_s"] is None and block["inconclusive"] == window.inconclusive


def test_a_window_under_the_minimum_share_is_inconclusive_not_a_number():
    # 4 slots, one request each, sent 300 ms apart, lengths 1 s: all busy only from 900 to 1000 ms
    lines = [line(300.0 * k, 300.0 * k + 1000.0) for k in range(4)]
    block = steady_figures(lines, 4, None, 0.25)
    assert block["output_tok_s"] is None and block["decode_step_ms"] is None
    assert block["inconclusive"] == ("the steady window (all 4 slots busy) is 0.10 s, 5% of the load's 1.90 s, "
                                     "under record.steady_min_fraction 25%: the load is too short to have a steady state")
    assert steady_figures(lines, 4, None, 0.05)["output_tok_s"] is not None  # the share is the config's


def test_open_loop_window_runs_from_the_ramp_in_to_the_last_send():
    # one arrival every 100 ms for 5 s, each request 1 s long
    lines = [line(100.0 * k, 100.0 * k + 1000.0) for k in range(50)]
    window = steady_window(lines, 64, 10.0, 0.25)
    assert window.rule == "open_loop" and window.inconclusive is None
    assert (window.start_ms, window.end_ms) == (1000.0, 4900.0)
    block = steady_figures(lines, 64, 10.0, 0.25)
    assert block["output_tok_s"] == pytest.approx(100.0, rel=0.05)  # 10 requests/s x 10 tokens


def test_an_open_loop_burst_has_no_steady_window():
    lines = [line(0.0, 1000.0) for _ in range(8)]
    block = steady_figures(lines, 8, 1e9, 0.25)
    assert block["output_tok_s"] is None
    assert block["inconclusive"] == ("the requests' median lifetime (1.00 s) is longer than the arrivals lasted "
                                     "(0.00 s), so they never came to balance the departures: the load is too short, "
                                     "or the server falls behind its arrivals")


def test_an_open_loop_window_under_the_minimum_share_is_inconclusive():
    # arrivals for 1.2 s of requests 1 s long: balanced from 1.0 s to 1.2 s of a 2.2 s load
    lines = [line(100.0 * k, 100.0 * k + 1000.0) for k in range(13)]
    block = steady_figures(lines, 64, 10.0, 0.25)
    assert block["output_tok_s"] is None
    assert block["inconclusive"] == ("the steady window (from one median request lifetime after the first send to "
                                     "the last send) is 0.20 s, 9% of the load's 2.20 s, under "
                                     "record.steady_min_fraction 25%: the load is too short to have a steady state")


def test_past_a_knee_a_slot_between_requests_speeds_up_the_others_and_is_left_out():
    """2 slots, 20 tokens a request at 100 ms a token while both decode; slot 1 waits 500 ms
    between its requests, and slot 0 alone runs at 50 ms a token then (a smaller batch, faster
    past a compute-bound knee). Throughput at the concurrency is 20 tok/s, whatever the gaps."""
    lines, t0, t1 = [], 0.0, 0.0
    for _ in range(3):  # slot 1: 1.9 s of decoding, then 0.5 s before its next first token
        times = [t1 + 100.0 * k for k in range(20)]
        lines.append({"ok": True, "send_ms": t1 - 1.0, "end_ms": times[-1], "completion_tokens": 20,
                      "chunk_ms": times, "chunk_tokens": [1] * 20})
        t1 = times[-1] + 500.0
    slot0, t = [], 0.0  # slot 0: 100 ms a token while slot 1 decodes, 50 ms while it waits
    while t < t1 - 500.0:
        slot0.append(t)
        t += 50.0 if any(l["chunk_ms"][-1] < t < l["chunk_ms"][-1] + 500.0 for l in lines) else 100.0
    for k in range(0, len(slot0) - 1, 20):
        times = slot0[k:k + 20]
        lines.append({"ok": True, "send_ms": times[0] - 1.0, "end_ms": times[-1], "completion_tokens": len(times),
                      "chunk_ms": times, "chunk_tokens": [1] * len(times)})
    block = steady_figures(lines, 2, None, 0.25)
    assert block["output_tok_s"] == pytest.approx(20.0, rel=0.03), block
    assert block["decode_step_ms"] == pytest.approx(100.0, rel=0.03)


def test_tokens_without_chunk_times_are_pro_rated_by_overlap():
    assert tokens_in(line(0.0, 1000.0, 10, chunks=False), 500.0, 2000.0) == pytest.approx(5.0)
    # chunks scaled to the usage count: 10 chunks of 1 token for a request the server says made 20
    twice = {**line(0.0, 1000.0, 10), "completion_tokens": 20}
    assert tokens_in(twice, 0.0, 1000.5) == pytest.approx(20.0)  # [start, end): the last chunk is at 1000


def test_decode_step_and_verify_cycle_come_from_chunk_gaps_inside_the_window():
    # 2 slots, 3 requests each of 1 s: 10 tokens from 100 ms to 1000 ms, gaps 100 ms, 4 verify cycles per request
    lines = []
    for slot in range(2):
        for k in range(3):
            lines.append(line(k * 1000.0, k * 1000.0 + 1000.0, 10, verify=4))
    block = steady_figures(lines, 2, None, 0.25)
    assert block["decode_step_ms"] == pytest.approx(100.0)
    assert block["verify_cycle_ms"] == pytest.approx(100.0 * 9 / 4)  # 9 decoded tokens in 4 cycles


def test_repeats_combine_their_conclusive_windows():
    good = steady_figures(closed_loop(2, 1000.0, 4), 2, None, 0.25)
    short = steady_figures([line(0.0, 1000.0), line(900.0, 1900.0)], 2, None, 0.25)
    assert short["inconclusive"]
    both = combine([short, good])
    assert both["inconclusive"] is None and both["repeats_conclusive"] == 1
    assert both["output_tok_s"] == good["output_tok_s"]
    assert combine([short, short])["inconclusive"] == short["inconclusive"]


def test_the_minimum_share_is_a_fraction_checked_before_anything_starts():
    from harness.config.compose import ConfigError
    from harness.run.compose import compose

    assert compose(["+exp=sim_smoke"]).base.record.steady_min_fraction == 0.25
    with pytest.raises(ConfigError, match=r"record.steady_min_fraction must be a finite number > 0 and <= 1 "
                                          r"\(e.g. 0.25: a quarter of the load\), got 1.5"):
        compose(["+exp=sim_smoke", "record.steady_min_fraction=1.5"])


def test_a_load_whose_every_request_was_cancelled_has_no_rate_and_says_why():
    """workload.cancel={fraction: 1.0, ...}: no request completed, so no throughput exists to
    divide by; the speedup is missing with its reason, never a ZeroDivisionError."""
    from omegaconf import OmegaConf

    from harness.config.schema import GateConfig
    from harness.gates import registry as gates
    from harness.gates.speculative import min_speedup
    from harness.load import LoadResult, RequestRecord
    from harness.measure.metrics import summarize
    from harness.measure.registry import cross_arm, speedup, speedup_missing

    def cancelled(index: int) -> RequestRecord:
        return RequestRecord(index=index, warmup=False, send_time=0.01 * index, end_time=0.5, status=200,
                             chunk_times=[0.1], chunk_tokens=[1], cancel_after_tokens=1, cancelled=True)

    lines = [dict(cancelled(i).to_json(0.0), cancelled=True) for i in range(4)]
    block = steady_figures(lines, 2, None, 0.25)
    assert block["output_tok_s"] is None
    assert block["inconclusive"] == ("no measured request completed (0 failed, 4 cancelled by the client), so the "
                                     "steady window has no output rate")
    results = {arm: summarize(arm, LoadResult([cancelled(i) for i in range(4)], 0.0, 0.5, "chat", "m",
                                              concurrency=2, cancel={"fraction": 1.0, "after_tokens": 1}))
               for arm in ("baseline", "eagle3")}
    assert cross_arm(results["eagle3"], results["baseline"])["speedup"] is None
    assert speedup_missing("eagle3", results["eagle3"], "baseline", results["baseline"]) == (
        "eagle3: no measured request completed (0 failed, 4 cancelled by the client), so it has no output tok/s; "
        "baseline: no measured request completed (0 failed, 4 cancelled by the client), so it has no output tok/s")
    # a record written before kept a steady rate of 0: still no division by it
    zero = {"steady": {"output_tok_s": 0.0}, "output_tok_s": 0.0}
    assert speedup({"steady": {"output_tok_s": 50.0}, "output_tok_s": 50.0}, zero) is None
    gate = OmegaConf.merge(OmegaConf.structured(GateConfig), {"min_speedup": {"eagle3": {"over": "baseline", "ratio": 1.1}}})
    ctx = gates.GateContext(arm="eagle3", gate=gate, result=results["eagle3"], gpu=None, plain_arm="baseline",
                            results=results, reference=None, reference_label="", telemetry_source="off")
    [verdict] = min_speedup(ctx)
    assert verdict.passed is False and "no measured request completed" in verdict.detail
