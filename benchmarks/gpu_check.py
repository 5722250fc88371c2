#!/usr/bin/env python
"""GPU clocks, power and throttling idle vs under a load that is *known* to run.

``python benchmarks/gpu_check.py [--server URL] [--out DIR] [...]`` (or
``bash benchmarks/gpu_check.sh``, which sets up a venv first).

The session this replaces read clocks "under load" after a request that had failed with
HTTP 400, i.e. idle clocks.  Here the sampler (10 Hz) runs from the start; the load is
marked as started only once it demonstrably runs -- the first matmul batch has finished
on every GPU (torch), or the first tokens have streamed back (``--server``) -- and the
first ``--ramp-in-s`` after that are left out of the load numbers.

Load:
* torch with CUDA present: bf16 matmuls on every visible GPU for ``--load-s`` seconds;
* ``--server URL``: streaming ``/generate`` requests (``ignore_eos``) to a running SGLang
  server (or the simulator, with ``--source sim``) at ``--concurrency``;
* neither: says how to point it at a server, and exits 2.

Prints the idle-vs-load table per GPU and writes ``summary.json``, ``telemetry.csv`` and
``telemetry.png`` to ``--out`` (default ``$OUT`` or ``benchmarks/results/gpu_check``).
Exit status: 0 measured; 1 telemetry unavailable (e.g. ``no NVIDIA driver``), or the load
never reached the GPU; 2 no way to make a load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.telemetry import (  # noqa: E402
    Sampler,
    TelemetryUnavailable,
    make_source,
    plot_png,
    resolve_uuids,
    summarize,
    write_csv,
)


class LoadFailed(Exception):
    """The load could not run (one sentence)."""


# ------------------------------------------------------------------ loads
def torch_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def torch_load(sampler: Sampler, seconds: float, size: int = 8192) -> str:
    """bf16 matmuls on every visible GPU (one thread each); the load is marked started once
    every GPU has finished its first batch of matmuls."""
    import torch

    n = torch.cuda.device_count()
    stop = threading.Event()
    started = threading.Barrier(n + 1)
    errors: list[str] = []
    counts = [0] * n

    def work(dev: int) -> None:
        try:
            torch.cuda.set_device(dev)
            a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
            b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
            first = True
            c = None
            while not stop.is_set():
                for _ in range(20):
                    c = a @ b
                torch.cuda.synchronize(dev)
                counts[dev] += 20
                if first:
                    first = False
                    started.wait(timeout=120)
            del c
        except Exception as exc:  # CUDA OOM, a busy GPU ...: reported, never silent
            errors.append(f"GPU {dev}: {type(exc).__name__}: {exc}")
            started.abort()

    threads = [threading.Thread(target=work, args=(d,), daemon=True) for d in range(n)]
    for t in threads:
        t.start()
    try:
        started.wait(timeout=120)
    except threading.BrokenBarrierError:
        stop.set()
        raise LoadFailed("the matmul load did not start on every GPU: " + "; ".join(errors or ["timed out"]))
    sampler.mark_load_start()
    time.sleep(seconds)
    sampler.mark_load_end()
    stop.set()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise LoadFailed("the matmul load failed: " + "; ".join(errors))
    tflop = sum(counts) * 2 * size**3 / 1e12
    return f"torch bf16 {size}x{size} matmuls on {n} GPU(s): {sum(counts)} matmuls, {tflop / seconds:.0f} TFLOP/s overall"


def server_load(sampler: Sampler, url: str, seconds: float, concurrency: int, max_tokens: int) -> str:
    """Streaming /generate requests; the load is marked started at the first streamed text."""
    import requests

    stop = threading.Event()
    errors: list[str] = []
    chunks = [0]
    lock = threading.Lock()
    body = {
        "text": "Count from 1 to 1000, one number per line.",
        "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }

    def worker() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                try:
                    with s.post(url.rstrip("/") + "/generate", json=body, stream=True, timeout=(5, 60)) as r:
                        if r.status_code != 200:
                            # The session's mistake: a load that is an error is no load.
                            errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                            stop.set()
                            return
                        for line in r.iter_lines():
                            if line.startswith(b"data: {"):
                                meta = json.loads(line[6:]).get("meta_info") or {}
                                if meta.get("completion_tokens", 0) > 0:  # tokens, not just an event
                                    with lock:
                                        chunks[0] += 1
                                    sampler.mark_load_start()  # the first call wins
                            if stop.is_set():
                                break
                except requests.RequestException as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    stop.set()
                    return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sampler.load_start is None and not stop.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    if sampler.load_start is None:
        stop.set()
        why = f"{errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "") if errors else "none within 60 s"
        raise LoadFailed(f"no tokens streamed from {url}: {why}")
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.is_set():
        time.sleep(0.05)
    sampler.mark_load_end()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    if errors:
        raise LoadFailed(f"the server load failed: {errors[0]}")
    return f"{concurrency} streaming /generate requests at a time to {url}: {chunks[0]} chunks"


# ------------------------------------------------------------------ report
def _fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(summary: dict) -> str:
    rows = [
        ("SM clock median (MHz)", "sm_clock_mhz", "median", 0),
        ("SM clock min (MHz)", "sm_clock_mhz", "min", 0),
        ("memory clock median (MHz)", "mem_clock_mhz", "median", 0),
        ("power median (W)", "power_w", "median", 1),
        ("temperature median (C)", "temperature_c", "median", 0),
        ("GPU utilization median (%)", "gpu_util_pct", "median", 0),
        ("memory utilization median (%)", "mem_util_pct", "median", 0),
    ]
    out = []
    for uuid, g in summary["gpus"].items():
        n = g["samples"]
        out.append(
            f"GPU {g['index']} {g['name']} {uuid}  (max SM clock {_fmt(g['sm_clock_max_mhz'])} MHz, "
            f"power limit {_fmt(g['power_limit_w'])} W; samples idle {n['idle']}, ramp-in {n['ramp_in']}, load {n['load']})"
        )
        out.append(f"  {'':32} {'idle':>10} {'load':>10}")
        for label, field, stat, digits in rows:
            out.append(f"  {label:32} {_fmt(g['idle'][field][stat], digits):>10} {_fmt(g['load'][field][stat], digits):>10}")
        out.append(f"  {'mean power from energy (W)':32} {'':>10} {_fmt(g['load']['mean_power_w_from_energy'], 1):>10}")
        out.append(f"  {'SM clock / max under load':32} {'':>10} {_fmt(g['sm_clock_ratio_under_load'], 3):>10}")
        active = {r: f for r, f in g["throttle_fraction_under_load"].items() if f > 0}
        out.append(
            "  clocks-event reasons under load: "
            + (", ".join(f"{r} {f:.0%}" for r, f in sorted(active.items(), key=lambda kv: -kv[1])) or "none")
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="nvml", choices=("nvml", "smi", "sim"))
    ap.add_argument("--server", default=None, help="load a running server at this URL instead of torch matmuls")
    ap.add_argument("--gpus", default=None, help="indices/UUIDs to sample (default: CUDA_VISIBLE_DEVICES, else all)")
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=20.0)
    ap.add_argument("--after-s", type=float, default=3.0)
    ap.add_argument("--interval-s", type=float, default=0.1)
    ap.add_argument("--ramp-in-s", type=float, default=2.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "benchmarks" / "results" / "gpu_check"))
    args = ap.parse_args(argv)

    if args.source == "sim" and not args.server:
        ap.error("--source sim reads the simulator's GPUs: give --server URL")
    try:
        source = make_source(args.source, base_url=args.server)
        assert source is not None
        wanted = args.gpus or os.environ.get("CUDA_VISIBLE_DEVICES") or "all"
        gpus = source.open(gpu_uuids=resolve_uuids(source, [wanted]))
    except TelemetryUnavailable as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 1
    if not args.server and not torch_available():
        source.close()
        print(
            "gpu_check: torch with CUDA is not available here, so there is no load to run; start a server "
            "and run `bash benchmarks/gpu_check.sh --server http://127.0.0.1:30000`",
            file=sys.stderr,
        )
        return 2
    print(f"sampling {len(gpus)} GPU(s) with {args.source} every {args.interval_s:g} s: "
          + ", ".join(f"{g.index}={g.uuid}" for g in gpus), flush=True)

    sampler = Sampler(source, interval_s=args.interval_s, ramp_in_s=args.ramp_in_s)
    sampler.start()
    error = None
    what = ""
    try:
        time.sleep(args.idle_s)
        if args.server:
            what = server_load(sampler, args.server, args.load_s, args.concurrency, args.max_tokens)
        else:
            what = torch_load(sampler, args.load_s)
        time.sleep(args.after_s)
    except LoadFailed as exc:
        error = str(exc)
    finally:
        tel = sampler.stop()
        source.close()

    summary = summarize(tel)
    summary["load"] = what or None
    summary["error"] = error
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_csv(out / "telemetry.csv", tel)
    plot_png(out / "telemetry.png", tel)

    if what:
        print(f"load: {what}")
    print(table(summary))
    for note in summary["notes"]:
        print(f"note: {note}")
    reads = max(1, round(tel.wall_s / tel.interval_s))
    print(f"sampler: {len(tel.samples)} samples in {tel.wall_s:.1f} s, {tel.sampler_cpu_s * 1000:.0f} ms CPU "
          f"({tel.sampler_cpu_s / tel.wall_s * 100 if tel.wall_s else 0:.2f} % of a core, "
          f"~{tel.sampler_cpu_s / reads * 1e3:.2f} ms per read)")
    print(f"wrote {out / 'summary.json'}, {out / 'telemetry.csv'}, {out / 'telemetry.png'}")
    if error:
        print(f"gpu_check: {error}", file=sys.stderr)
        return 1
    if not summary["load_measured"]:
        print("gpu_check: no samples under load: the load never reached the GPU, so this is a failed measurement",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
