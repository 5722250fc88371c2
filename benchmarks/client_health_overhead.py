"""What does watching the client cost the load it watches? Side by side in one run: the
same load on the same simulator with the event-loop ticker at its 10 ms and practically
off (one tick an hour), alternated so drift hits both equally; reports the event loop's
CPU per 1000 streamed tokens and the output tok/s ratio, ticker on vs off, and the
ticker's cost on an idle loop (its worst case: every tick is a wake-up of its own).

    .venv/bin/python benchmarks/client_health_overhead.py [--rounds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness.load.runner as load_runner  # noqa: E402
from telemetry_overhead import free_port, start_sim  # noqa: E402
from harness.load import LoadPlan, run_load  # noqa: E402
from harness.load.client_health import LoopLagTicker  # noqa: E402
from harness.measure.metrics import summarize  # noqa: E402
from harness.config.schema import WorkloadConfig  # noqa: E402

HOUR_S = 3600.0


def one_load(url: str, concurrency: int, ticking: bool) -> tuple[float, float]:
    """(output tok/s, event-loop CPU ms per 1000 tokens) of one load."""
    load_runner.LoopLagTicker = LoopLagTicker if ticking else (lambda: LoopLagTicker(HOUR_S))
    workload = WorkloadConfig(prompt="Write about the sea.", max_tokens=200, ignore_eos=True,
                              concurrency=concurrency, num_prompts=concurrency * 3, warmup_requests=1)
    load = run_load(LoadPlan.of(workload, url, "bench"))
    result = summarize("x", load)
    return result.value("output_tok_s"), load.client["cpu"]["loop_thread_cpu_s"] * 1e6 / result.completion_tokens


def idle_cost(seconds: float = 3.0) -> float:
    """The ticker's own CPU share of one core on an otherwise idle loop."""
    async def watch() -> float:
        task = asyncio.create_task(LoopLagTicker().run())
        start = time.thread_time()
        await asyncio.sleep(seconds)
        task.cancel()
        return (time.thread_time() - start) / seconds

    return asyncio.run(watch())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    print(f"idle loop: the ticker alone uses {idle_cost():.2%} of one core")
    proc = start_sim(port := free_port())
    try:
        url = f"http://127.0.0.1:{port}"
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.rounds):
            for ticking in (False, True):
                runs[ticking].append(one_load(url, args.concurrency, ticking))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    for ticking, label in ((False, "ticker off"), (True, "ticker on ")):
        tok_s = statistics.median(r[0] for r in runs[ticking])
        cpu = statistics.median(r[1] for r in runs[ticking])
        print(f"{label}: {tok_s:.1f} tok/s, event loop {cpu:.1f} ms CPU per 1000 tokens (median of {args.rounds})")
    ratio = statistics.median(r[0] for r in runs[True]) / statistics.median(r[0] for r in runs[False])
    print(f"tok/s on / off: {ratio:.4f}")


if __name__ == "__main__":
    main()
