#!/usr/bin/env python
"""GPU energy on a real GPU, by both of specgate's methods side by side.

Samples NVML (the harness's own ``NvmlSource`` and ``Sampler``) for a moment idle, then
under a matmul load (when torch with CUDA is installed; otherwise whatever the GPU is
doing), and prints per GPU the energy over the load window from the total-energy counter
and from integrating the power samples (trapezoid), with the mean power each implies:

    .venv/bin/python scripts/check_nvml_energy.py --seconds 8 --record /tmp/h200.json

``--record`` writes every reading in the format tests/telemetry/test_energy.py replays (drop the file
into tests/data/ as nvml_energy_<name>.json and the NVML path is tested against it).
Exit status: 0 measured, 1 nothing measured under load, 2 no NVIDIA driver.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.telemetry import Sampler, TelemetryUnavailable  # noqa: E402
from harness.telemetry.energy import COUNTER, trapezoid_j, window_energy  # noqa: E402
from harness.telemetry.nvml import NvmlSource  # noqa: E402


def matmul_load(stop: threading.Event, started: threading.Event, device_count: int) -> str:
    """Square matmuls on every visible GPU until ``stop``; what ran, in words."""
    try:
        import torch
    except ImportError:
        started.set()
        return "no load (torch is not installed)"
    if not torch.cuda.is_available():
        started.set()
        return "no load (torch sees no CUDA device)"
    devices = [torch.device("cuda", i) for i in range(min(device_count, torch.cuda.device_count()))]
    mats = [(torch.randn(8192, 8192, device=d, dtype=torch.bfloat16),) * 2 for d in devices]
    for a, b in mats:
        a @ b
    for d in devices:
        torch.cuda.synchronize(d)
    started.set()
    n = 0
    while not stop.is_set():
        for a, b in mats:
            a @ b
        n += 1
        if n % 20 == 0:
            for d in devices:
                torch.cuda.synchronize(d)
    for d in devices:
        torch.cuda.synchronize(d)
    return f"8192x8192 bf16 matmuls on {len(devices)} GPU(s), {n} rounds"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="load window length")
    ap.add_argument("--idle-s", type=float, default=1.0)
    ap.add_argument("--ramp-in-s", type=float, default=2.0, help="left out after the load starts, as the harness does")
    ap.add_argument("--interval-s", type=float, default=0.1)
    ap.add_argument("--gpus", default="", help="comma-separated NVML indices (default: all)")
    ap.add_argument("--record", type=Path, help="write every reading here (tests/telemetry/test_energy.py's replay format)")
    args = ap.parse_args()

    source = NvmlSource(pcie_interval_s=None)
    try:
        indices = [int(i) for i in args.gpus.split(",") if i.strip()] or None
        gpus = source.open(None, indices)
    except TelemetryUnavailable as exc:
        print(f"check_nvml_energy: {exc}", file=sys.stderr)
        return 2
    sampler = Sampler(source, interval_s=args.interval_s, ramp_in_s=args.ramp_in_s)
    stop, started = threading.Event(), threading.Event()
    what: list[str] = []
    sampler.start()
    try:
        time.sleep(args.idle_s)
        sampler.mark_idle_end()
        worker = threading.Thread(target=lambda: what.append(matmul_load(stop, started, len(gpus))), daemon=True)
        worker.start()
        started.wait()
        sampler.mark_load_start()
        time.sleep(args.seconds)
        sampler.mark_load_end()
        stop.set()
        worker.join()
        time.sleep(0.5)
    finally:
        stop.set()
        tel = sampler.stop()
        source.close()

    print(f"load: {what[0] if what else '?'}; {len(tel.samples)} samples; notes: {tel.notes or 'none'}")
    measured = False
    for info in tel.gpus:
        load = [s for s in tel.samples if s.uuid == info.uuid and s.phase == "load"]
        notes: list[str] = []
        by_counter = window_energy(load, notes, f"GPU {info.index}")
        if by_counter is not None and by_counter[1] != COUNTER:  # fewer than two counter readings
            by_counter = None
        by_power = trapezoid_j(load)
        span = load[-1].t - load[0].t if len(load) > 1 else 0.0
        print(f"GPU {info.index} {info.name} ({info.driver}), {len(load)} load samples over {span:.2f} s")
        if by_counter is not None:
            print(f"  energy counter     {by_counter[0]:10.1f} J   mean {by_counter[0] / span:7.1f} W")
        else:
            print("  energy counter     not read (" + ", ".join(n for n in tel.notes if "energy" in n) + ")")
        if by_power is not None:
            print(f"  power integration  {by_power:10.1f} J   mean {by_power / span:7.1f} W")
        if by_counter is not None and by_power:
            print(f"  power integration is {by_power / by_counter[0] - 1:+.1%} off the counter")
        for n in notes:
            print(f"  note: {n}")
        measured = measured or by_counter is not None or by_power is not None
    if args.record:
        write_recording(args.record, tel, what[0] if what else "")
        print(f"recorded to {args.record}")
    return 0 if measured else 1


def write_recording(path: Path, tel, load: str) -> None:
    t0 = min((s.t for s in tel.samples), default=0.0)
    data = {
        "description": f"recorded by scripts/check_nvml_energy.py: {load}",
        "synthetic": False,
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "driver": g.driver} for g in tel.gpus],
        "interval_s": tel.interval_s,
        "ramp_in_s": tel.ramp_in_s,
        "idle_end": None,
        "windows": [[a - t0, (b - t0) if b is not None else None] for a, b in tel.windows],
        "reads": [{"t": round(s.t - t0, 6), "uuid": s.uuid, "energy_mj": s.energy_mj,
                   "power_mw": None if s.power_w is None else round(s.power_w * 1000)} for s in tel.samples],
    }
    path.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    sys.exit(main())
