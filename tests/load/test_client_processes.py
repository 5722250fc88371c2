"""workload.client_processes: the load split over processes (concurrency, budget, an arrival
schedule dealt out), merged back into one LoadResult; a real split load on the simulator
against a single-process one; Ctrl-C keeps the finished requests and leaves no process.
Also workload.prewarm_connections and the send time stamped at the socket."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.http_client import ServerClient
from harness.load import LoadPlan, LoadResult, RequestRecord, run_load
from harness.load.arrivals import DealtArrivals, PoissonArrivals
from harness.load.client_health import merge_process_blocks
from harness.load.processes import DealtBudget, SharedBudget, merge_results, split_concurrency
from harness.measure.metrics import summarize
from harness.config.schema import WorkloadConfig

ROOT = Path(__file__).resolve().parents[2]


# --- the split ---------------------------------------------------------------------------------


def test_concurrency_splits_as_evenly_as_integers_allow():
    assert split_concurrency(8, 3) == [3, 3, 2]
    assert split_concurrency(256, 2) == [128, 128]
    assert split_concurrency(4, 4) == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="client_processes=5 needs 1 to workload.concurrency=4"):
        split_concurrency(4, 5)


def test_a_shared_budget_hands_every_index_out_once_to_whoever_asks():
    counter = mp.get_context("fork").Value("q", 0)
    a, b = SharedBudget(5, None, counter=counter), SharedBudget(5, None, counter=counter)
    got = [a.claim(None), a.claim(None), b.claim(None), a.claim(None), b.claim(None), b.claim(None), a.claim(None)]
    assert got == [0, 1, 2, 3, 4, None, None]


def test_a_dealt_budget_takes_every_nth_index():
    budget = DealtBudget(8, None, slot=1, of=3)
    assert [budget.claim(None) for _ in range(4)] == [1, 4, 7, None]


def test_a_dealt_schedule_is_the_single_schedule_shared_out():
    """Two processes' shares of one seeded Poisson schedule send, together, every arrival at
    the single schedule's times (each process's clock starts at the barrier)."""

    async def sends(slots: list[int], of: int) -> dict[int, float]:
        seen: dict[int, float] = {}
        t0 = time.perf_counter()

        async def send(i: int, scheduled: float) -> None:
            seen[i] = scheduled - t0

        budgets = {s: DealtBudget(12, None, slot=s, of=of) for s in slots}
        schedule = PoissonArrivals(200.0, 16, seed=3)
        await asyncio.gather(*(DealtArrivals(schedule, s, of).drive(lambda s=s: budgets[s].claim(None), send)
                               for s in slots))
        return seen

    single = asyncio.run(sends([0], 1))
    dealt = asyncio.run(sends([0, 1], 2))
    assert sorted(single) == sorted(dealt) == list(range(12))
    for i in range(12):
        assert dealt[i] == pytest.approx(single[i], abs=0.005), i


# --- the merge ---------------------------------------------------------------------------------


def record(index: int, send: float, warmup: bool = False, run_start: float = 0.0) -> RequestRecord:
    return RequestRecord(index=index, warmup=warmup, send_time=send, scheduled_time=send - 0.001,
                         chunk_times=[send + 0.1, send + 0.2], chunk_tokens=[1, 1], status=200,
                         completion_tokens=2, end_time=send + 0.25, run_start=run_start)


def block(lag_p99: float, cpu_s: float, wall_s: float, loop_share: float) -> dict:
    return {"tick_ms": 10.0, "loop_lag_ms": {"p50": 1.0, "p99": lag_p99, "max": lag_p99 + 1, "n": 100},
            "send_gap_ms": {"p50": 1.0, "p99": 1.0, "max": 1.0, "n": 2},
            "cpu": {"wall_s": wall_s, "process_cpu_s": cpu_s, "loop_thread_cpu_s": cpu_s, "cores": 2,
                    "process_share_of_one_core": cpu_s / wall_s, "process_share_of_all_cores": cpu_s / wall_s / 2,
                    "loop_thread_share_of_one_core": loop_share}}


def test_merged_results_read_like_one_load():
    first = LoadResult([record(0, 1.0, warmup=True, run_start=0.9), record(0, 1.5, run_start=0.9),
                        record(2, 1.7, run_start=0.9)], 1.5, 1.95, "chat", "m", run_start=0.9,
                       client=block(5.0, 1.0, 2.0, 0.5))
    second = LoadResult([record(1, 1.6, run_start=0.95), record(3, 1.8, run_start=0.95)], 1.6, 2.05, "chat", "m",
                        run_start=0.95, client=block(30.0, 0.6, 2.2, 0.3))
    merged = merge_results([first, second], "chat", "m")
    assert [(r.index, r.warmup) for r in merged.records] == [(0, True), (0, False), (1, False), (2, False), (3, False)]
    assert merged.run_start == 0.9 and all(r.run_start == 0.9 for r in merged.records)  # one t0 in requests.jsonl
    assert (merged.start_time, merged.end_time) == (1.5, pytest.approx(2.05))
    client = merged.client
    assert client["processes"] == 2
    assert client["loop_lag_ms"]["p99"] == 30.0 and client["loop_lag_ms"]["n"] == 200  # the worst loop
    assert client["cpu"]["process_cpu_s"] == pytest.approx(1.6) and client["cpu"]["wall_s"] == 2.2  # summed CPU
    assert client["cpu"]["process_share_of_one_core"] == pytest.approx(1.6 / 2.2, abs=1e-4)
    assert client["cpu"]["loop_thread_share_of_one_core"] == 0.5  # the busiest loop
    assert client["send_gap_ms"]["n"] == 4 and client["send_gap_ms"]["p50"] == pytest.approx(1.0)


def test_an_interrupted_process_leaves_no_client_block():
    assert merge_process_blocks([block(1.0, 1.0, 1.0, 0.1), None], []) is None


# --- real loads on the simulator ---------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "harness.sim", "--model-path", "procs", "--port", str(port),
                             "--sim-startup-s", "0.2", "--sim-decode-step-ms", "10", "--sim-prefill-base-ms", "20",
                             "--sim-prefill-ms-per-token", "0", "--sim-record-emissions"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        ServerClient(url).wait_healthy(30, is_alive=lambda: proc.poll() is None)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def workload(**kw) -> WorkloadConfig:
    base = dict(api="completions", prompt="Tell me about the river.", max_tokens=60, ignore_eos=True, concurrency=8,
                num_prompts=16, warmup_requests=1)
    return WorkloadConfig(**{**base, **kw})


@pytest.mark.serial  # one vs two processes' ITL within 5 %: another test's load beside it moved it 8 %
def test_two_processes_measure_what_one_does(sim_url):
    one = run_load(LoadPlan.of(workload(), sim_url, "procs"))
    two = run_load(LoadPlan.of(workload(client_processes=2, prewarm_connections=True), sim_url, "procs"))
    assert sorted(r.index for r in two.measured) == list(range(16))  # every request once, from either process
    assert [r.index for r in two.records if r.warmup] == [0] and two.records[0].warmup  # one warm-up, first
    assert all(r.ok for r in two.records), [r.error for r in two.records]
    a, b = summarize("one", one), summarize("two", two)
    print("one:", a.value("itl_ms.p50"), a.value("ttft_ms.p50"), a.value("output_tok_s"), "two:", b.value("itl_ms.p50"), b.value("ttft_ms.p50"), b.value("output_tok_s"))
    assert b.value("itl_ms.p50") == pytest.approx(a.value("itl_ms.p50"), rel=0.05)  # one decode step either way
    # tok/s and TTFT: loose, since another job on the 2 shared cores stalls either run now and
    # then (seen: 609 against 707 tok/s, TTFT p50 95 against 54 ms); the bounds still catch a
    # merge that loses requests or a send time taken from the wrong clock
    assert b.value("output_tok_s") == pytest.approx(a.value("output_tok_s"), rel=0.25)
    assert 20.0 <= b.value("ttft_ms.p50") < a.value("ttft_ms.p50") + 100.0  # at least the 20 ms prefill
    client = two.client
    assert client["processes"] == 2 and client["loop_lag_ms"]["n"] > 10 and client["send_gap_ms"]["n"] == 16
    assert client["cpu"]["process_cpu_s"] > 0 and client["cpu"]["wall_s"] > 0
    lines = [r.to_json() for r in two.records]
    assert lines[0]["send_ms"] >= 0 and all(line["send_ms"] >= 0 for line in lines)  # one t0


def test_an_open_loop_is_dealt_out_whole(sim_url):
    two = run_load(LoadPlan.of(workload(request_rate=40.0, client_processes=2, warmup_requests=0), sim_url, "procs"))
    assert sorted(r.index for r in two.measured) == list(range(16)) and all(r.ok for r in two.measured)
    gaps = sorted(r.send_gap_s for r in two.measured)
    assert gaps[len(gaps) // 2] < 0.01  # sent on the one schedule's times, not late


def test_the_send_time_is_taken_at_the_socket(sim_url):
    """The simulator's own arrival stamps (GET /sim/emissions, the same monotonic clock) come
    after each request's send time and close to it: no client queueing sits between them."""
    import requests

    requests.delete(sim_url + "/sim/emissions", timeout=10)
    load = run_load(LoadPlan.of(workload(concurrency=16, warmup_requests=0), sim_url, "procs"))
    server = sorted(r["arrival"] for r in requests.get(sim_url + "/sim/emissions", timeout=10).json()["requests"])
    sends = sorted(r.send_time for r in load.measured)
    assert len(server) == len(sends) == 16
    for send, arrival in zip(sends, server):
        assert 0 < arrival - send < 0.05, (send, arrival)


def test_ctrl_c_keeps_the_finished_requests_and_leaves_no_process(sim_url, tmp_path):
    script = tmp_path / "split_sigint.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        from harness.load import LoadPlan, run_load
        from harness.config.schema import WorkloadConfig
        w = WorkloadConfig(api="completions", prompt="x", max_tokens=30, ignore_eos=True, concurrency=4,
                           num_prompts=100000, warmup_requests=0, client_processes=2)
        print("started", os.getpid(), flush=True)
        try:
            run_load(LoadPlan.of(w, "{sim_url}", "procs"))
        except KeyboardInterrupt as exc:
            print("caught", type(exc).__name__, len(exc.partial.measured), exc.in_flight, flush=True)
            sys.exit(3)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.readline().split()[0] == b"started"
    time.sleep(2.5)  # past the start barrier: requests (0.3 s each) finish and others are in flight
    children = _children_of(p.pid)
    assert len(children) >= 2, children
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 3, (out, err[-3000:])
    _, name, finished, in_flight = out.split()
    assert name == b"LoadInterrupted" and int(finished) >= 4 and 1 <= int(in_flight) <= 4, out
    time.sleep(0.2)
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")], "a load process outlived the load"


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found
