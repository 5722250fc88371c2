#!/usr/bin/env python
"""A sweep's wall time by launcher, on this machine.

``python benchmarks/sweep_launchers.py [--points 1 2 4] [--out DIR]``

Runs ``specgate sweep +exp=sim_smoke backend=process workload.concurrency=1,..,n`` (n points,
each a whole experiment: both arms, every suite, the simulator as a local process) with
each launcher, as a user would, and times it from start to exit:

* ``basic``: the points one after another in this process (specgate's default);
* ``submitit_local``: submitit's local executor, every point at once as local jobs;
* ``slurm``: ``hydra/launcher=submitit_slurm`` on the single-node SLURM cluster of
  scripts/ensure_slurm.sh (run it first), each point a job with the node to itself
  (``--exclusive``), so the points queue one after another;
* ``slurm_shared``: the same without ``--exclusive``, so SLURM packs points on the node's
  cores (one CPU each), as a CPU-only cluster could.

Writes ``sweep_launchers.json`` and ``sweep_launchers.md`` into --out (benchmarks/results).
Every sweep must exit 0; a sweep that does not is reported and fails the script.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ["+exp=sim_smoke", "backend=process"]
LAUNCHERS = {
    "basic": [],
    "submitit_local": ["hydra/launcher=submitit_local"],
    "slurm": ["hydra/launcher=submitit_slurm"],
    "slurm_shared": ["hydra/launcher=submitit_slurm", "~hydra.launcher.additional_parameters.exclusive"],
}


def timed_sweep(points: int, launcher: list[str], runs: Path) -> dict:
    sweep = f"workload.concurrency={','.join(str(c) for c in range(1, points + 1))}"
    command = [sys.executable, "-m", "harness.cli", "sweep", *BASE, sweep, *launcher, f"record.root={runs}",
               "-p", "no:cacheprovider", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall_s = time.monotonic() - start
    (sweep_dir,) = runs.iterdir()
    data = json.loads((sweep_dir / "sweep.json").read_text())
    submissions = list((sweep_dir / "points" / ".submitit").glob("*/*_submission.sh"))
    return {"points": points, "exit_status": done.returncode, "wall_s": round(wall_s, 1),
            "sbatch_exclusive": any("#SBATCH --exclusive" in s.read_text() for s in submissions) if submissions else None,
            "per_point_s": round(wall_s / points, 1),
            "point_exit_statuses": [p["exit_status"] for p in data["points"]],
            "tail": "" if done.returncode == 0 else (done.stdout + done.stderr)[-2000:]}


def table(results: dict[str, list[dict]]) -> str:
    sizes = [r["points"] for r in next(iter(results.values()))]
    lines = ["| launcher | " + " | ".join(f"{n} point(s): wall s (per point)" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for name, rows in results.items():
        cells = [f"{r['wall_s']:.1f} ({r['per_point_s']:.1f})" + ("" if r["exit_status"] == 0 else " FAILED")
                 for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--launchers", nargs="+", default=list(LAUNCHERS), choices=list(LAUNCHERS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for name in args.launchers:
        for points in args.points:
            with tempfile.TemporaryDirectory() as scratch:
                row = timed_sweep(points, LAUNCHERS[name], Path(scratch) / "runs")
            print(f"{name:15s} {points} point(s): {row['wall_s']:6.1f} s, exit {row['exit_status']}", flush=True)
            results.setdefault(name, []).append(row)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep_launchers.json").write_text(json.dumps({"machine": machine, "command": BASE,
                                                               "results": results}, indent=2) + "\n")
    (args.out / "sweep_launchers.md").write_text(
        f"# Sweep wall time by launcher ({machine['cpus']} CPUs)\n\n`specgate sweep {' '.join(BASE)} "
        f"workload.concurrency=1,..,n` with each launcher; wall time from start to exit.\n\n" + table(results))
    failed = [f"{name} x{r['points']}" for name, rows in results.items() for r in rows if r["exit_status"] != 0]
    if failed:
        print(f"sweeps that did not exit 0: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
