"""What reading a big run record costs: time and peak memory of every tool that reads one.

Makes synthetic run records of N requests (two arms, N/2 each) without running a server:
each request as the load's RequestRecord writes it under sim_smoke's lossless gate (200
output tokens, a chunk per 1 or ~2.3 tokens, text, token ids, tokens, 2 top logprobs per
token: ~12 KB a request as a JSONL line), written through the record writer
(harness.record.requests.append_requests, as RunRecord.add_requests calls it, without
its redaction) in batches as a run would. Then, each in a
fresh child process whose peak RSS is taken from os.wait4:

- ``report``:  ``specgate report REF`` (reads every arm's TTFT and chunk times);
- ``compare``: ``specgate compare REF NEW`` (results.json only);
- ``replay``:  what ``specgate replay REF`` reads before and after its run (the recorded
  configs, results.json, the drift table); the run itself needs a server and is left out;
- ``gate``:    the reference-run gate of both arms (harness.gates.registry.
  no_regression_against_reference, default compared metrics, 1000 bootstrap resamples),
  its samples read from REF and NEW.

    python benchmarks/record_scale.py                              # 10k and 100k (+ the JSONL layout at 10k)
    python benchmarks/record_scale.py --sizes 10000 100000 1000000

Writes benchmarks/results/record_scale.md and record_scale.json (unless --out ""). The
target (issue 20): each under 30 s and 1 GB at 100k requests, cost linear in N.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.run.compose import compose  # noqa: E402
from harness.load.records import LoadResult, RequestRecord  # noqa: E402
from harness.measure.metrics import summarize  # noqa: E402
from harness.record.recorder import Recorder  # noqa: E402
from harness.record.requests import append_requests  # noqa: E402

ARMS = {"baseline": 1.0, "eagle3": 2.3}  # tokens per chunk: plain decoding, EAGLE-3's accept length
OUTPUT_TOKENS, STEP_MS, CONCURRENCY, BATCH = 200, 4.0, 64, 5_000
COMMANDS = ("report", "compare", "replay", "gate")
TARGET_S, TARGET_MB = 30.0, 1024.0
GNU_TIME = "/usr/bin/time"  # GNU time: -f %M is the command's peak RSS in KB


@dataclass
class Measured:
    command: str
    layout: str  # "parquet" (today's) or "jsonl" (a record written before)
    requests: int
    seconds: float
    peak_mb: float
    returncode: int


# --- a synthetic record --------------------------------------------------------------------

def synthetic_records(arm: str, start: int, count: int, rng: np.random.Generator) -> list[RequestRecord]:
    """`count` requests of a closed loop at CONCURRENCY, as the load records them (seconds)."""
    per_chunk = ARMS[arm]
    records = []
    for i in range(start, start + count):
        send = (i // CONCURRENCY) * OUTPUT_TOKENS * STEP_MS / 1000.0 + (i % CONCURRENCY) * 1e-4
        chunks = max(1, round(OUTPUT_TOKENS / per_chunk))
        gaps = STEP_MS * per_chunk * rng.lognormal(0, 0.2, size=chunks) / 1000.0
        times = send + 0.015 * rng.lognormal(0, 0.1) + np.cumsum(gaps) - gaps[0]
        tokens = np.full(chunks, OUTPUT_TOKENS // chunks)
        tokens[: OUTPUT_TOKENS - tokens.sum()] += 1
        ids = rng.integers(1000, 33000, size=OUTPUT_TOKENS).tolist()
        words = [f" w{t}" for t in ids]
        records.append(RequestRecord(
            index=i, warmup=i == 0, send_time=send, chunk_times=times.tolist(), chunk_tokens=tokens.tolist(),
            status=200, prompt_tokens=12, completion_tokens=OUTPUT_TOKENS, finish_reason="length",
            spec_verify_ct=chunks if per_chunk > 1 else None, spec_accept_length=OUTPUT_TOKENS / chunks if per_chunk > 1 else None,
            spec_correct_drafts_histogram=[chunks // 4, chunks // 4, chunks - 2 * (chunks // 4)] if per_chunk > 1 else None,
            end_time=float(times[-1]) + 0.0002, text="".join(words), token_ids=ids, tokens=words,
            top_logprobs=[[[w, round(float(lp), 4)], [" alt", round(float(lp) - 3.0, 4)]]
                          for w, lp in zip(words, -rng.exponential(0.1, size=OUTPUT_TOKENS))],
            run_start=0.0))
    return records


def make_record(root: Path, requests: int, seed: int, layout: str) -> Path:
    """A finished run record of `requests` requests (half per arm), written in batches."""
    experiment = compose(["+exp=sim_smoke", f"record.root={root}"])
    recorder = Recorder(experiment)
    rng = np.random.default_rng(seed)
    arms = {}
    for arm in ARMS:
        count = requests // len(ARMS)
        for start in range(0, count, BATCH):
            batch = synthetic_records(arm, start, min(BATCH, count - start), rng)
            lines = [{**r.to_json(), "repeat": 0} for r in batch]
            # the record writer's own call, less its redaction (nothing secret here; it costs more
            # than the writing: harness/record/secrets.py)
            if layout == "parquet":
                append_requests(recorder.record.arm_dir(arm), arm, lines)
            else:  # as the writer before did: one line per request with its arm
                with open(recorder.path / "requests.jsonl", "a", encoding="utf-8") as handle:
                    handle.writelines(json.dumps({"arm": arm, **line}) + "\n" for line in lines)
            if start == 0:  # the arm's figures from its first batch: results.json is not what is measured here
                load = LoadResult(batch, batch[1].send_time, max(r.end_time for r in batch), "openai", "sim")
                arms[arm] = {"status": "measured", **summarize(arm, load).to_json()}
    recorder.write_data({"experiment": experiment.name, "status": "finished", "plain_arm": "baseline",
                            "arms": arms, "gates": []})
    return recorder.path


# --- what each command reads (run in a child process) -----------------------------------------

def child(command: str, paths: list[str]) -> None:
    if command == "replay":
        from harness.run.replay import drift_rows, read_replayed, replay_experiment
        experiment, _ = replay_experiment(Path(paths[0]), [], REPO / "conf")
        replayed, _ = read_replayed(Path(paths[0]))
        rows = drift_rows(replayed.data, replayed.data, experiment.base.gate)
        print(f"replay: {len(experiment.arms)} arms, {len(rows)} drift rows")
    elif command == "gate":
        print(" ".join(gate_statuses(Path(paths[0]), Path(paths[1]))))


def gate_statuses(reference_dir: Path, candidate_dir: Path) -> list[str]:
    """Every arm's reference-run verdicts, their samples read from both records."""
    from harness.gates.registry import GateContext
    from harness.gates.reference import no_regression_against_reference
    from harness.measure.samples import COLUMNS
    from harness.measure.metrics import read_result
    from harness.record.store import read_reference_runs, read_run

    (reference,), _ = read_reference_runs(reference_dir)
    candidate = read_run(candidate_dir)
    gate = OmegaConf.merge(compose(["+exp=sim_smoke"]).base.gate, {"baseline": str(reference_dir)})
    statuses = []
    for arm, block in candidate.arms.items():
        result = read_result(arm, block)
        ctx = GateContext(arm=arm, gate=gate, result=result, gpu=None, plain_arm=None, results={},
                          reference=reference.arms[arm], reference_label="the reference", telemetry_source="off",
                          requests=candidate.request_columns(arm, COLUMNS),
                          reference_requests=reference.request_columns(arm, COLUMNS))
        statuses += [f"{v.name}[{arm}]={v.status}" for v in no_regression_against_reference(ctx)]
    return statuses


def measure(command: str, layout: str, requests: int, reference: Path, candidate: Path, scratch: Path) -> Measured:
    """One command in a fresh process: its wall time and peak RSS, from GNU time, whose own
    small process forks it (a child forked from this big one would count our pages too)."""
    specgate = [sys.executable, "-m", "harness.cli"]
    argv = {"report": [*specgate, "report", str(reference), "-o", str(scratch / "report.html")],
            "compare": [*specgate, "compare", str(reference), str(candidate)],
            "replay": [sys.executable, __file__, "--child", "replay", str(reference)],
            "gate": [sys.executable, __file__, "--child", "gate", str(reference), str(candidate)]}[command]
    peak = scratch / "peak_kb"
    started = time.perf_counter()
    proc = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(peak), *argv], cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode:
        sys.stderr.write(f"{command} ({layout}, {requests}) exited {proc.returncode}: {proc.stderr[-2000:]}\n")
    peak_kb = float(peak.read_text().split()[-1])
    return Measured(command, layout, requests, round(seconds, 2), round(peak_kb / 1024.0, 1), proc.returncode)


def measure_size(requests: int, layout: str, work: Path, say, copy_candidate: bool = False) -> tuple[list[Measured], dict]:
    started = time.perf_counter()
    reference = make_record(work / f"{layout}-{requests}-ref", requests, 1, layout)
    write_s = time.perf_counter() - started
    if copy_candidate:  # the same reading cost in half the writing time (the gate then compares equal runs)
        candidate = work / f"{layout}-{requests}-new" / reference.name
        shutil.copytree(reference, candidate)
    else:
        candidate = make_record(work / f"{layout}-{requests}-new", requests, 2, layout)
    size = {"layout": layout, "requests": requests, "write_s": round(write_s, 1),
            "record_mb": round(folder_bytes(reference) / 2**20, 1),
            "timings_mb": round(sum(p.stat().st_size for p in reference.glob("arms/*/requests.parquet")) / 2**20, 1)}
    say(f"{layout} {requests}: records written ({size['record_mb']} MB each, {size['write_s']} s each)")
    found = [measure(c, layout, requests, reference, candidate, work) for c in COMMANDS]
    for m in found:
        say(f"  {m.command}: {m.seconds} s, {m.peak_mb} MB" + (f" (exit {m.returncode})" if m.returncode else ""))
    shutil.rmtree(reference.parent), shutil.rmtree(candidate.parent)
    return found, size


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# --- the report ------------------------------------------------------------------------------

def markdown(measured: list[Measured], sizes: list[dict], machine: dict) -> str:
    lines = ["# Record scale: reading a run record of N requests", "",
             "`python benchmarks/record_scale.py " + " ".join(machine["argv"]) + "` on " +
             f"{machine['cpus']} CPUs, load average {machine['load_before']} before and {machine['load_after']} after "
             f"(other sessions share the machine), {machine['python']}, {machine['when']}.", "",
             "Synthetic records (no server): two arms of N/2 requests, each request as sim_smoke's lossless gate "
             "records it (200 tokens, chunk times, text, token ids, tokens, 2 top logprobs per token). Each command "
             "runs in a fresh process; peak memory is its max RSS (os.wait4), which includes the interpreter and "
             f"its imports. Target at 100k: under {TARGET_S:.0f} s and {TARGET_MB:.0f} MB each.", "",
             "| layout | requests | command | seconds | peak MB | s per 10k | within target |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for m in measured:
        ok = "yes" if m.seconds < TARGET_S and m.peak_mb < TARGET_MB and not m.returncode else "no"
        lines.append(f"| {m.layout} | {m.requests:,} | {m.command} | {m.seconds} | {m.peak_mb} | "
                     f"{m.seconds / m.requests * 10_000:.2f} | {ok} |")
    lines += ["", "| layout | requests | record MB | of which timings (requests.parquet) MB | write s |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {s['layout']} | {s['requests']:,} | {s['record_mb']} | {s['timings_mb']} | {s['write_s']} |" for s in sizes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--jsonl-sizes", type=int, nargs="*", default=[10_000],
                        help="sizes also written in the layout before (requests.jsonl), to compare")
    parser.add_argument("--copy-candidate", action="store_true",
                        help="the second record a copy of the first (half the writing time)")
    parser.add_argument("--work", type=Path, default=None, help="where the records go (default a temp folder)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "record_scale"))
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1:])
        return 0
    work = Path(tempfile.mkdtemp(prefix="record-scale-", dir=args.work))
    machine = {"argv": (argv if argv is not None else sys.argv[1:]), "cpus": os.cpu_count(),
               "load_before": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
               "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    measured, sizes = [], []
    try:
        for layout, chosen in (("parquet", args.sizes), ("jsonl", args.jsonl_sizes)):
            for requests in chosen:
                found, size = measure_size(requests, layout, work, lambda text: print(text, flush=True),
                                           args.copy_candidate)
                measured += found
                sizes.append(size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    text = markdown(measured, sizes, machine)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.md").write_text(text)
        Path(f"{args.out}.json").write_text(json.dumps({"machine": machine, "sizes": sizes,
                                                        "measured": [asdict(m) for m in measured]}, indent=2) + "\n")
    return 1 if any(m.returncode for m in measured) else 0


if __name__ == "__main__":
    sys.exit(main())
