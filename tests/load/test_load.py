"""harness.load against the fake SGLang server (real loopback HTTP)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import gc
import io
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.load import LoadInterrupted, LoadPlan, LoadResult, ProgressSnapshot, RequestRecord, print_progress, run_load
from harness.load.arrivals import ClosedLoop, GammaArrivals, PoissonArrivals, arrival_process
from harness.load.prompts import FixedPrompt, RandomWords, prompt_source
from harness.engines import ENGINES

SGLANG = ENGINES["sglang"]
sglang_request_extras, sglang_spec_details = SGLANG.request_extras, SGLANG.spec_details
from harness.load.loop import RequestBudget, run_loop
from harness.config.schema import WorkloadConfig

from tests.support.fake_sglang import FakeSGLang


PINNED_PROMPT = "for of did last me know"  # RandomWords(6, seed 3), request 0


@pytest.fixture(scope="module")
def fake():
    srv = FakeSGLang(step_s=0.005)
    yield srv
    srv.close()


def wl(**kw) -> WorkloadConfig:
    base = dict(name="t", api="chat", prompt="count to ten", max_tokens=10, concurrency=4, num_prompts=12,
                warmup_requests=2, timeout_s=10.0)
    base.update(kw)
    return WorkloadConfig(**base)


def test_closed_loop_counts_flags_and_concurrency(fake):
    fake.max_active = 0
    res = run_load(LoadPlan.of(wl(), fake.url, "fake-model"))
    assert isinstance(res, LoadResult)
    assert res.api == "chat" and res.model == "fake-model"
    assert len(res.records) == 14
    warm = [r for r in res.records if r.warmup]
    assert [r.index for r in warm] == [0, 1]
    assert sorted(r.index for r in res.measured) == list(range(12))
    assert all(r.ok for r in res.records), [r.error for r in res.records]
    assert all(r.completion_tokens == 10 for r in res.records)
    # warm-ups run first, one at a time, and are outside the measured window
    assert warm[0].end_time <= warm[1].send_time
    assert max(r.end_time for r in warm) <= res.start_time
    assert res.start_time == min(r.send_time for r in res.measured)
    assert res.end_time == max(r.end_time for r in res.measured)
    assert fake.max_active == 4
    assert fake.bodies[-1]["model"] == "fake-model"


def test_works_with_omegaconf_and_other_apis(fake):
    from omegaconf import OmegaConf

    for api in ("completions", "generate"):
        cfg = OmegaConf.structured(wl(api=api, num_prompts=3, warmup_requests=0))
        res = run_load(LoadPlan.of(cfg, fake.url, "fake-model", request_extras=sglang_request_extras,
                                   spec_details=sglang_spec_details))
        assert len(res.records) == 3 and all(r.ok for r in res.records), [r.error for r in res.records]
        assert all(r.spec_verify_ct == 4 for r in res.records)


def test_poisson_open_loop_rate_and_cap(fake):
    # High rate, cap 2: arrivals queue for a slot, never more than 2 in flight
    fake.max_active = 0
    res = run_load(LoadPlan.of(wl(request_rate=1000.0, concurrency=2, num_prompts=10, warmup_requests=0), fake.url, "m"))
    assert len(res.measured) == 10 and all(r.ok for r in res.records)
    assert fake.max_active <= 2

    # Modest rate, no cap in practice: the span of sends follows the seeded schedule
    rate, n = 40.0, 16
    rng = random.Random(7)
    expected_span = sum(rng.expovariate(rate) for _ in range(n - 1))
    res = run_load(LoadPlan.of(wl(request_rate=rate, concurrency=64, num_prompts=n, warmup_requests=0, seed=7), fake.url, "m"))
    sends = sorted(r.send_time for r in res.measured)
    span = sends[-1] - sends[0]
    assert expected_span * 0.9 - 0.01 <= span <= expected_span + 0.25


def test_duration_mode(fake):
    t = time.perf_counter()
    res = run_load(LoadPlan.of(wl(num_prompts=None, duration_s=0.4, concurrency=3, warmup_requests=1), fake.url, "m"))
    assert time.perf_counter() - t < 3
    m = res.measured
    assert len(m) >= 3
    assert all(r.send_time - res.start_time < 0.45 for r in m)  # claimed before the deadline, sent just after
    assert all(r.ok for r in m)


def prompt(w: WorkloadConfig, index: int) -> str:
    return prompt_source(w).prompt(index)


def test_random_prompts_are_seeded():
    w = wl(prompt=None, input_len=20, seed=3)
    p0, p1 = prompt(w, 0), prompt(w, 1)
    assert len(p0.split()) == 20 and p0 != p1
    assert prompt(wl(prompt=None, input_len=20, seed=3), 0) == p0
    assert prompt(wl(prompt=None, input_len=20, seed=4), 0) != p0
    assert prompt(wl(prompt="fixed"), 5) == "fixed"
    with pytest.raises(ValueError, match="input_len"):
        prompt_source(wl(prompt=None, input_len=None))


def test_prompt_sources_are_picked_by_config_and_stable():
    assert prompt_source(wl(prompt="fixed", input_len=20)) == FixedPrompt("fixed")
    assert prompt_source(wl(prompt=None, input_len=20, seed=3)) == RandomWords(20, 3)
    # pinned: the same seed and index give the same text in every version of the harness
    assert RandomWords(6, 3).prompt(0) == PINNED_PROMPT
    assert RandomWords(6, 3).prompt(-1) != RandomWords(6, 3).prompt(0)  # a warm-up differs from request 0


def test_sent_prompts_come_from_the_source(fake):
    w = wl(prompt=None, input_len=8, seed=5, num_prompts=3, warmup_requests=1, concurrency=1)
    fake.bodies.clear()
    run_load(LoadPlan.of(w, fake.url, "m"))
    source = prompt_source(w)
    sent = [b["messages"][0]["content"] for b in fake.bodies]
    assert sent == [source.prompt(-1), source.prompt(0), source.prompt(1), source.prompt(2)]


def test_failures_are_recorded_not_raised(fake):
    res = run_load(LoadPlan.of(wl(prompt="http400", num_prompts=3, warmup_requests=1), fake.url, "m"))
    assert len(res.records) == 4
    assert all(r.status == 400 and not r.ok for r in res.records)
    assert res.records[0].error == "HTTP 400: The prompt is too long for this model."


def test_progress_is_throttled_and_final(fake):
    snaps: list[ProgressSnapshot] = []
    t = time.perf_counter()
    res = run_load(LoadPlan.of(wl(num_prompts=None, duration_s=0.8, concurrency=2, warmup_requests=0), fake.url, "m"),
                   progress=snaps.append)
    elapsed = time.perf_counter() - t
    assert snaps[-1].final and snaps[-1].done == len(res.measured)
    assert snaps[-1].errors == 0 and snaps[-1].tokens == 10 * len(res.measured)
    assert len(snaps) <= elapsed * 4 + 2
    assert any(s.tokens > 0 and s.tok_s > 0 for s in snaps[:-1])

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    buf = Terminal()
    s = ProgressSnapshot(done=3, total=10, in_flight=2, errors=1, tokens=500, elapsed_s=2.0)
    print_progress(s, stream=buf)
    print_progress(s, stream=buf)  # within 0.25 s: dropped
    print_progress(dataclasses.replace(s, done=10, final=True), stream=buf)
    out = buf.getvalue()
    assert out.count("\r") == 2 and out.endswith("\n")
    assert "3/10 done" in out and "250.0 tok/s" in out and "1 errors" in out

    log = io.StringIO()  # not a terminal (CI logs): plain lines, no carriage returns
    print_progress(dataclasses.replace(s, done=10, final=True), stream=log, label="[arm] ")
    assert log.getvalue() == log.getvalue().lstrip("\r") and log.getvalue().startswith("[arm] 10/10 done")


def test_hundreds_of_concurrent_streams():
    # Each stream is held for about a second (20 tokens x 50 ms), long enough that the
    # client opens all 300 before the first ones end, even on a slow 2-core CI box.
    srv = FakeSGLang(step_s=0.05)
    try:
        t = time.perf_counter()
        res = run_load(LoadPlan.of(wl(concurrency=300, num_prompts=300, warmup_requests=0, max_tokens=20), srv.url, "m"))
        assert all(r.ok for r in res.records), {r.error for r in res.records}
        assert srv.max_active >= 250
        assert time.perf_counter() - t < 10
    finally:
        srv.close()


def test_request_lines_are_relative_ms(fake):
    res = run_load(LoadPlan.of(wl(num_prompts=2, warmup_requests=1, concurrency=1), fake.url, "m"))
    lines = [r.to_json(res.run_start) for r in res.records]
    assert lines == [r.to_json() for r in res.records]  # the runner stamps the run start on each record
    assert lines[1]["send_ms"] > lines[0]["send_ms"] > 0
    assert len(lines) == 3 and lines[0]["warmup"] is True
    first = lines[0]
    assert 0 <= first["send_ms"] < 1000 and first["ok"] is True
    assert first["ttft_ms"] > 0 and first["e2e_ms"] >= first["ttft_ms"]
    assert len(first["chunk_ms"]) == len(first["chunk_tokens"]) == 5
    assert first["chunk_ms"][0] == pytest.approx(first["send_ms"] + first["ttft_ms"], abs=0.01)
    import json

    json.dumps(lines)  # serializable


def test_record_properties_without_data():
    r = RequestRecord(index=0, warmup=False, send_time=1.0)
    assert not r.ok and r.ttft_s is None and r.decode_s is None and r.e2e_s is None
    r.chunk_times, r.chunk_tokens, r.status, r.end_time, r.completion_tokens = [1.5], [1], 200, 1.6, 1
    assert r.ok and r.ttft_s == pytest.approx(0.5) and r.decode_s == 0.0


def test_ctrl_c_propagates_and_closes_cleanly(fake, tmp_path):
    """SIGINT during a load: KeyboardInterrupt reaches the caller quickly, no leaked
    session or task warnings."""
    script = tmp_path / "load_sigint.py"
    script.write_text(textwrap.dedent(f"""
        import sys, warnings
        warnings.simplefilter("always")
        from harness.load import LoadPlan, run_load
        from harness.config.schema import WorkloadConfig
        w = WorkloadConfig(api="chat", prompt="slow", max_tokens=10, concurrency=4, num_prompts=8,
                           warmup_requests=0, timeout_s=60)
        print("started", flush=True)
        try:
            run_load(LoadPlan.of(w, "{fake.url}", "m"))
        except KeyboardInterrupt as exc:
            print("KeyboardInterrupt caught", type(exc).__name__, len(exc.partial.records), exc.in_flight, flush=True)
            sys.exit(3)
        print("finished without interrupt", flush=True)
    """))
    import signal

    env = dict(os.environ, PYTHONASYNCIODEBUG="0")
    p = subprocess.Popen([sys.executable, "-X", "dev", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, cwd=Path(__file__).resolve().parents[2])
    assert p.stdout.readline().strip() == b"started"
    time.sleep(0.7)  # requests are in flight (the fake holds "slow" for 5 s)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert time.perf_counter() - t < 3
    assert p.returncode == 3, (out, err)
    assert b"KeyboardInterrupt caught LoadInterrupted 0 4" in out  # nothing had finished, 4 were cut off
    for bad in (b"Unclosed client session", b"Unclosed connector", b"Task was destroyed", b"never awaited"):
        assert bad not in err, err.decode()


def test_an_interrupted_load_hands_over_the_requests_that_finished(fake):
    """A signal whose handler raises KeyboardInterrupt (the plugin's SIGTERM) mid-load: the
    caller gets LoadInterrupted, still a KeyboardInterrupt, with every finished request and
    the count of those cut off, which are left out."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt("signal")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.6)
    try:
        with pytest.raises(LoadInterrupted) as info:
            run_load(LoadPlan.of(wl(num_prompts=100_000, concurrency=4, warmup_requests=1), fake.url, "m"))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    partial = info.value.partial
    assert isinstance(info.value, KeyboardInterrupt)
    assert len(partial.measured) >= 4 and all(r.ok for r in partial.records), [r.error for r in partial.records]
    assert [r.index for r in partial.records if r.warmup] == [0]
    assert 1 <= info.value.in_flight <= 4
    assert partial.start_time == min(r.send_time for r in partial.measured)
    assert partial.end_time == max(r.end_time for r in partial.measured)


def test_a_signal_during_a_load_is_handled_between_the_loops_callbacks(fake):
    """A Python signal handler (the plugin's SIGTERM) is called by the event loop, not inside
    whatever callback the signal lands on: uvloop takes a KeyboardInterrupt raised in a
    transport's callback for that connection's fatal error, so the interrupt was lost and a
    request failed for nothing. The handler gets no frame when the loop calls it; it is the
    process's handler again once the load is over."""
    import signal

    frames: list[object] = []  # of the calls made while the load's loop ran

    def count(signum, frame):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # before or after the load
        frames.append(frame)

    previous = signal.signal(signal.SIGALRM, count)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    try:
        res = run_load(LoadPlan.of(wl(num_prompts=40, concurrency=4, warmup_requests=1), fake.url, "m"))
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert signal.getsignal(signal.SIGALRM) is count
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert all(r.ok for r in res.records) and len(res.measured) == 40
    assert frames, "the load ended before the timer fired"
    assert all(f is None for f in frames), frames


def test_tokens_flowing_is_signalled_once_at_the_first_measured_token(fake):
    seen: list[float] = []
    res = run_load(LoadPlan.of(wl(num_prompts=4, warmup_requests=1), fake.url, "m"), on_tokens_flowing=seen.append)
    assert len(seen) == 1
    first_measured = min(r.chunk_times[0] for r in res.measured)
    assert seen[0] == first_measured
    assert all(seen[0] > t for r in res.records if r.warmup for t in r.chunk_times)  # warm-up is not the load


def test_tokens_flowing_is_never_signalled_when_nothing_streams():
    seen: list[float] = []
    res = run_load(LoadPlan.of(wl(num_prompts=2, warmup_requests=0, timeout_s=2.0), "http://127.0.0.1:9", "m"),
                   on_tokens_flowing=seen.append)
    assert seen == [] and all(not r.ok for r in res.measured)


# --------------------------------------------------------------------------- the pieces


def test_engine_hooks_shape_bodies_and_read_spec_fields(fake):
    w = wl(num_prompts=2, warmup_requests=0, concurrency=1)
    fake.bodies.clear()
    plain = run_load(LoadPlan.of(w, fake.url, "m"))  # no hooks: a generic OpenAI request, nothing engine-specific read
    assert all("return_spec_tokens_details" not in b for b in fake.bodies)
    assert all(r.ok and r.spec_verify_ct is None and r.spec_accept_length is None for r in plain.records)

    unread = run_load(LoadPlan.of(w, fake.url, "m", request_extras=sglang_request_extras))  # fields sent, nobody reads them
    assert all(r.ok and r.spec_verify_ct is None for r in unread.records)

    fake.bodies.clear()
    seen: list[dict] = []

    def spec_details(event: dict) -> dict | None:
        seen.append(event)
        return sglang_spec_details(event)

    res = run_load(LoadPlan.of(w, fake.url, "m", request_extras=lambda api: {"return_spec_tokens_details": True, "x_api": api},
                               spec_details=spec_details))
    assert all(b["return_spec_tokens_details"] is True and b["x_api"] == "chat" for b in fake.bodies)
    assert all(r.spec_verify_ct == 4 and r.spec_accept_length == pytest.approx(2.5) for r in res.records)
    assert any("sglext" in e for e in seen) and any(e.get("choices") for e in seen)  # every event is offered


def test_sglang_hooks():
    assert sglang_request_extras("chat") == sglang_request_extras("completions") == {"return_spec_tokens_details": True}
    assert sglang_request_extras("generate") == {}
    details = {"spec_verify_ct": 3, "spec_accept_length": 2.0, "spec_accept_rate": 0.5,
               "spec_correct_drafts_histogram": [1, 0, 2]}
    want = {"spec_verify_ct": 3, "spec_accept_length": 2.0, "spec_correct_drafts_histogram": [1, 0, 2]}
    assert sglang_spec_details({"sglext": {"spec_tokens_details": details}}) == want
    assert sglang_spec_details({"sglext": {"spec_tokens_details": [details]}}) == want  # one per choice
    for event in ({"choices": []}, {"sglext": None}, {"sglext": {"spec_tokens_details": []}},
                  {"sglext": {"spec_tokens_details": "n/a"}}):
        assert sglang_spec_details(event) is None


def test_arrival_process_is_picked_by_config():
    assert arrival_process(wl(concurrency=3)) == ClosedLoop(3)
    assert arrival_process(wl(concurrency=None)) == ClosedLoop(1)
    assert arrival_process(wl(request_rate=5.0, concurrency=2, seed=9)) == PoissonArrivals(5.0, 2, 9)
    bursty = SimpleNamespace(concurrency=2, request_rate=5.0, seed=9, burstiness=0.5)
    assert arrival_process(bursty) == GammaArrivals(5.0, 2, 9, 0.5)
    assert arrival_process(SimpleNamespace(**{**vars(bursty), "burstiness": 1.0})) == PoissonArrivals(5.0, 2, 9)
    with pytest.raises(ValueError, match="request_rate must be > 0"):
        arrival_process(wl(request_rate=0.0))
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        GammaArrivals(5.0, 2, 9, 0.0)


def test_open_loop_gaps_are_seeded_with_the_rate_as_mean():
    rate = 20.0
    poisson, a, b = PoissonArrivals(rate, 1, 7), random.Random(7), random.Random(7)
    assert [poisson.gap(a) for _ in range(5)] == [b.expovariate(rate) for _ in range(5)]  # as before the split
    for burstiness in (0.25, 1.0, 4.0):
        gamma = GammaArrivals(rate, 1, 7, burstiness)
        a, b = random.Random(7), random.Random(7)
        gaps = [gamma.gap(a) for _ in range(20000)]
        assert gaps[:5] == [gamma.gap(b) for _ in range(5)]  # the seed fixes the schedule
        mean = sum(gaps) / len(gaps)
        cv2 = sum((g - mean) ** 2 for g in gaps) / len(gaps) / mean**2
        assert mean == pytest.approx(1 / rate, rel=0.05)
        assert cv2 == pytest.approx(1 / burstiness, rel=0.15)  # gamma: squared CV = 1 / shape


def test_gamma_arrivals_drive_sends_capped_by_concurrency():
    arrivals = GammaArrivals(1000.0, 2, 1, 0.5)
    budget = RequestBudget(8, None)
    sent: list[int] = []
    active = [0, 0]  # now, most

    async def send(i: int, scheduled: float) -> None:
        assert scheduled <= time.perf_counter()  # due already: an arrival is never sent early
        sent.append(i)
        active[0] += 1
        active[1] = max(active)
        await asyncio.sleep(0.005)
        active[0] -= 1

    asyncio.run(arrivals.drive(lambda: budget.claim(None), send))
    assert sorted(sent) == list(range(8)) and active == [0, 2]


def test_no_arrival_is_sent_before_its_time_on_the_loop_a_load_runs_on():
    # uvloop's timers count whole milliseconds: a sleep until an arrival returned early in
    # about 1 of 3 (up to 0.6 ms), and a trace's request went out before its intended time
    arrivals, budget, early = PoissonArrivals(400.0, 64, 3), RequestBudget(300, None), []

    async def send(i: int, scheduled: float) -> None:
        early.append(scheduled - time.perf_counter())

    run_loop(arrivals.drive(lambda: budget.claim(None), send))
    assert len(early) == 300 and max(early) <= 0, f"{sum(e > 0 for e in early)} sent early, by up to {max(early) * 1e3:.3f} ms"


def test_a_load_runs_with_the_heap_it_started_with_out_of_the_collectors_reach():
    # a full collection over a suite's heap stalled the client's loop ~90 ms inside a short
    # load (the first arm client-bound in each of three calibrate runs); frozen, it is not walked
    old_heap = [{"n": i} for i in range(50_000)]
    seen = {}

    async def load() -> None:
        seen["frozen"] = gc.get_freeze_count()
        gc.collect()  # what the collector may do mid-load: the old heap stays frozen
        seen["after_collect"] = gc.get_freeze_count()

    run_loop(load())
    assert seen["frozen"] >= len(old_heap) and seen["after_collect"] == seen["frozen"]
    assert gc.get_freeze_count() == 0  # back in the collector's reach after the load


def test_request_budget():
    with pytest.raises(ValueError, match="num_prompts or duration_s"):
        RequestBudget.of(wl(num_prompts=None))
    assert RequestBudget.of(wl(num_prompts=5, duration_s=2.0)) == RequestBudget(None, 2.0)  # a duration wins
    count = RequestBudget.of(wl(num_prompts=2))
    assert [count.claim(None) for _ in range(3)] == [0, 1, None]
    timed = RequestBudget(None, 0.5)
    assert timed.claim(None) == 0  # the clock starts at the first measured send
    assert timed.claim(time.perf_counter()) == 1
    assert timed.claim(time.perf_counter() - 0.6) is None


def test_records_import_nothing_from_the_harness():
    """records.py is shared by the request functions, the load runner and metrics: a
    harness import there would bring back the client <-> load cycle."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "harness" / "load" / "records.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("harness")], imported


def test_burstiness_from_config_picks_gamma_arrivals():
    from pathlib import Path

    from harness.run.compose import compose

    conf = Path(__file__).resolve().parents[2] / "conf"
    workload = compose(["workload.request_rate=5", "workload.burstiness=0.5"], conf).arms[0].cfg.workload
    assert isinstance(arrival_process(workload), GammaArrivals)
    plain = compose(["workload.request_rate=5"], conf).arms[0].cfg.workload
    assert isinstance(arrival_process(plain), PoissonArrivals)
