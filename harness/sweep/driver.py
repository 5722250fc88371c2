"""`specgate sweep`: one whole experiment (every arm, every suite, its own run record and exit
status) per point of a Hydra sweep: run one after another on this machine, as Hydra's
`basic` launcher does (the default), or with `hydra/launcher=submitit_slurm|submitit_local`
as jobs of that engine, through Hydra's own launcher (harness/sweep/launch.py).

Every point is composed and checked before the first server starts, so a bad value in the
last point stops the sweep at once (exit 4). Each point then runs as its own pytest process:
nothing (a server, a signal handler, a cached config) leaks from one point into the next.
Record layout: harness/sweep/record.py and README "Sweeps".
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import PROJECT_ROOT, SUITES_DIR

from harness.config.compose import ConfigError, Experiment, SweepPoint, compose, is_sweep, override_key, sweep_points
from harness.gates.registry import judge
from harness.gates.verdict import failed
from harness.sweep.record import SweepRecord
from harness.run.preflight import load_baseline, preflight

INTERRUPTED_EXIT = 2  # pytest's status for a run stopped by Ctrl-C
STOP_GRACE_S = (120, 30)  # after SIGINT, then after SIGTERM: time for a point to stop its servers


def label(index: int, point: SweepPoint) -> str:
    """`1_concurrency-4_num_steps-2`: the point's number and what it picked, as a folder name
    (no `=` or `,`, which an override's value could not carry unquoted)."""
    picks = [f"{override_key(o).rsplit('.', 1)[-1]}-{o.split('=', 1)[1]}" for o in point.swept]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "_".join([str(index), *picks]))[:120]


def check_points(points: list[SweepPoint], conf_dir: Path, here: bool = True) -> list[Experiment]:
    """Compose every point, and check what pytest would check before starting a server. What
    a machine must have (a GPU, the model's files, an interpreter) is checked only when the
    points run `here`: on a cluster each point's own pytest checks its node."""
    if any(override_key(o) == "record.root" for point in points for o in point.swept):
        raise ConfigError("record.root cannot be swept: the sweep's own folder holds every point's record")
    if any(override_key(o).startswith("sweep_gate.") for point in points for o in point.swept):
        raise ConfigError("sweep_gate cannot be swept: its gates judge the whole sweep, once")
    experiments = []
    for index, point in enumerate(points):
        try:
            experiment = compose(point.overrides, conf_dir)
            load_baseline(experiment)
            if here:
                preflight(experiment)
        except ConfigError as exc:
            raise ConfigError(f"sweep point {index} ({' '.join(point.swept) or 'no sweep'}): {exc}") from None
        experiments.append(experiment)
    return experiments


def point_overrides(overrides: list[str], point_root: Path) -> list[str]:
    """The point's overrides as its pytest gets them: its record goes inside the sweep's."""
    kept = [o for o in overrides if override_key(o) != "record.root"]
    quoted = str(point_root).replace("'", "\\'")  # Hydra's quoted string: the path as it is
    return [*kept, f"record.root='{quoted}'"]


def point_command(overrides: list[str], conf_dir: Path, pytest_options: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SUITES_DIR), "-p", "harness.plugin", "--conf-dir", str(conf_dir),
            *pytest_options, *overrides]


def run_point(command: list[str]) -> tuple[int, bool]:
    """The point's pytest and whether a Ctrl-C (or SIGTERM) stopped it. Its own process group,
    so that one Ctrl-C reaches it once, from here: SIGINT (then SIGTERM), with time to stop
    its servers and close its record as interrupted."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return child.wait(), False
    except KeyboardInterrupt:
        return stop(child), True


def stop(child: subprocess.Popen) -> int:
    """SIGINT, then SIGTERM, then SIGKILL, each after a grace period. A second Ctrl-C while
    the point stops its servers is ignored, so it cannot cut that short and leave one behind."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return signal_until_gone(child)
    finally:
        signal.signal(signal.SIGINT, previous)


def signal_until_gone(child: subprocess.Popen) -> int:
    for sig, grace in zip((signal.SIGINT, signal.SIGTERM), STOP_GRACE_S):
        if child.poll() is not None:
            break
        child.send_signal(sig)
        try:
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    if child.poll() is None:
        child.kill()
    return child.wait()


def run_sweep(overrides: list[str], pytest_options: list[str], conf_dir: Path, command: list[str]) -> int:
    """Expand, check every point, then run them: one after another here (hydra/launcher=basic,
    the default), or as jobs of an engine through Hydra's launcher (harness/sweep/launch.py).
    Exit status: 0 only if every point exited 0 and no sweep gate failed, else 1; 2 when
    interrupted."""
    from harness.sweep.launch import engine_of, is_hydra_override, run_launched

    hydra_overrides = [o for o in overrides if is_hydra_override(o)]
    overrides = [o for o in overrides if not is_hydra_override(o)]
    if any(is_sweep(o) for o in hydra_overrides):
        raise ConfigError(f"{next(o for o in hydra_overrides if is_sweep(o))}: the launcher's settings cannot be swept")
    engine = engine_of(hydra_overrides, conf_dir)
    points = sweep_points(overrides)
    experiments = check_points(points, conf_dir, here=engine != "slurm")
    first = experiments[0]
    record = SweepRecord(first, command, pytest_options)
    labels = [label(n, p) for n, p in enumerate(points)]
    record.learn_secrets([*overrides, *pytest_options, *(o for p in points for o in p.overrides)])
    runs = [point_overrides(p.overrides, record.point_root(name)) for p, name in zip(points, labels)]
    entries = [record.add_point(name, overrides, p.swept) for p, name, overrides in zip(points, labels, runs)]
    record.save()
    print(f"specgate sweep: {len(points)} point(s) of {first.name} on {engine}; record {record.path}", flush=True)
    previous_sigterm = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        if engine == "basic":
            return run_here(record, runs, entries, conf_dir, pytest_options, first.base.sweep_gate)
        return run_launched(record, entries, overrides, hydra_overrides, engine, conf_dir, first.base.sweep_gate)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)


def run_here(record: SweepRecord, runs: list[list[str]], entries: list[dict], conf_dir: Path,
             pytest_options: list[str], gates: Any) -> int:
    """The basic launcher: each point's pytest in turn on this machine."""
    statuses: list[int] = []
    try:
        for overrides, entry in zip(runs, entries):
            print(f"specgate sweep: point {entry['label']}", flush=True)
            status, interrupted = run_point(point_command(overrides, conf_dir, pytest_options))
            statuses.append(status)
            record.point_ended(entry, status)
            if interrupted:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        status = statuses[-1] if statuses and statuses[-1] != 0 else INTERRUPTED_EXIT
        record.finish(status, interrupted=True)
        print(f"specgate sweep: interrupted; record {record.path}", file=sys.stderr)
        return status
    return finish_sweep(record, statuses, gates)


def finish_sweep(record: SweepRecord, statuses: list[int | None], gates: Any) -> int:
    """Every point ended: the sweep gates judged on them, the record closed; 0 only if every
    point exited 0 and no sweep gate failed, else 1."""
    verdicts = judge("sweep", record.gate_context(gates))  # the registry's sweep gates
    record.add_verdicts(verdicts)
    status = 0 if all(s == 0 for s in statuses) and not failed(verdicts) else 1
    record.finish(status, interrupted=False)
    for verdict in verdicts:
        print(f"specgate sweep gate: {verdict.line()}", flush=True)
    print(f"specgate sweep: {statuses.count(0)} of {len(statuses)} point(s) exited 0; "
          f"summary {record.path / 'summary.md'}", flush=True)
    return status


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
