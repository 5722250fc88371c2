"""What does GPU sampling cost the measurement? Side by side in one run: the same load on
the same simulator with the sampler off and on (10 Hz, the sim source), alternated so
drift hits both equally; reports the sampler's CPU share and the tok/s ratio on vs off.

    .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 3] [--concurrency 16]

The nvml source cannot be measured here (no NVIDIA driver); benchmarks/gpu_check.sh
prints its per-read cost on a GPU machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.http_client import ServerClient  # noqa: E402
from harness.load import LoadPlan, run_load  # noqa: E402
from harness.measure.metrics import summarize  # noqa: E402
from harness.config.schema import WorkloadConfig  # noqa: E402
from harness.telemetry.base import make_source  # noqa: E402
from harness.telemetry.sampler import Sampler  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sim(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "harness.sim", "--model-path", "bench", "--port", str(port),
                             "--tp-size", "2", "--sim-decode-step-ms", "10", "--sim-startup-s", "0.2"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ServerClient(f"http://127.0.0.1:{port}").wait_healthy(30, is_alive=lambda: proc.poll() is None)
    return proc


def one_load(url: str, concurrency: int, sampled: bool) -> tuple[float, float, float]:
    """(output tok/s, sampler CPU s, wall s) of one load."""
    workload = WorkloadConfig(prompt="Write about the sea.", max_tokens=200, ignore_eos=True,
                              concurrency=concurrency, num_prompts=concurrency * 3, warmup_requests=1)
    sampler = None
    if sampled:
        source = make_source("sim", base_url=url)
        source.open(None, None)
        sampler = Sampler(source, interval_s=0.1, ramp_in_s=0.5)
        sampler.start()
    started = time.perf_counter()
    load = run_load(LoadPlan.of(workload, url, "bench"), on_tokens_flowing=sampler.mark_load_start if sampler else None)
    wall = time.perf_counter() - started
    cpu = 0.0
    if sampler is not None:
        sampler.mark_load_end()
        cpu = sampler.stop().sampler_cpu_s
        sampler.source.close()
    return summarize("bench", load).value("output_tok_s"), cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    port = free_port()
    proc = start_sim(port)
    url = f"http://127.0.0.1:{port}"
    off, on, cpu_share = [], [], []
    try:
        one_load(url, args.concurrency, False)  # warm the server
        for _ in range(args.rounds):
            off.append(one_load(url, args.concurrency, False)[0])
            tok_s, cpu, wall = one_load(url, args.concurrency, True)
            on.append(tok_s)
            cpu_share.append(cpu / wall)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    ratio = statistics.median(on) / statistics.median(off)
    print("| sampler | tok/s (median of {}) | sampler CPU (share of one core) |".format(args.rounds))
    print("|---|---|---|")
    print(f"| off | {statistics.median(off):.1f} | - |")
    print(f"| on, 10 Hz, sim source, 2 GPUs | {statistics.median(on):.1f} | {statistics.median(cpu_share):.2%} |")
    print(f"\ntok/s on ÷ off = {ratio:.4f} ({(ratio - 1):+.2%}); rounds off: {[round(x, 1) for x in off]}, "
          f"on: {[round(x, 1) for x in on]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
