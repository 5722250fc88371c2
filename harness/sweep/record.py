"""A sweep's record: `<record.root>/<UTC timestamp>_<exp>_sweep/`, made by the one record writer
(harness/record/recorder.py, kind "sweep": redacted, atomic).

    points/<n>_<label>/<UTC timestamp>_<exp>/   each point's own run record (its record.root
                                                is points/<n>_<label>, so `latest` is there too)
    sweep.json    the points: overrides, record, exit status, and per arm the headline figures
                  read from the point's results.json; `status` running, finished or interrupted
    summary.md    point x arm: the headline figures and the gate verdict counts, where
                  each speculative arm stops paying (its crossover, see `crossovers`), the
                  measured break-even accept length per concurrency (`break_even_accept_length`,
                  harness/sweep/break_even.py) and the sweep gates' verdicts (`sweep_gates`,
                  harness/gates/sweep.py)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.gates.arm_speedup import estimate_speedup
from harness.gates.registry import SweepContext
from harness.gates.sweep import bounds
from harness.gates.verdict import Verdict
from harness.config.compose import Experiment
from harness.measure.registry import in_scope, read
from harness.report.tables import Row, metric_table
from harness.record.store import RunData, arm_config_of
from harness.sweep.break_even import measured_break_even
from harness.sweep.runs import WholeRunsRecord



def headline(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per arm: its status, the registry's sweep figures (keyed by metric path, `ttft_ms.p50`,
    `speedup`: one spelling, read back by harness.measure.registry.read with the old ones)
    and how many of its gates passed and failed."""
    plain, gates = results.get("plain_arm"), results.get("gates") or []
    arms = {}
    for name, block in (results.get("arms") or {}).items():
        figures = {"status": block.get("status")}
        figures.update({m.path: read(block, m, plain) for m in in_scope("sweep")})
        if plain and name != plain:  # what its speedup and break-even rest on (steady | whole)
            figures["basis"] = block.get(f"basis_vs_{plain}")
        if block.get("benchmark_only"):  # its acceptance was forced: a speed figure, never a quality one
            figures["benchmark_only"] = block["benchmark_only"]
        verdicts = [g.get("status") for g in gates if g.get("arm") == name]
        figures.update(gates_passed=verdicts.count("passed"), gates_failed=verdicts.count("failed"))
        arms[name] = figures
    return arms


def failed_gates(results: dict[str, Any]) -> list[str]:
    """Each failed gate of a point's run, as `arm: gate (its detail)`: what a point that
    exited 1 failed on, said where the sweep says that it did."""
    failed = [g for g in results.get("gates") or [] if g.get("status") == "failed"]
    return [f"{g.get('arm') or 'run'}: {g.get('name')}" + (f" ({g['detail']})" if g.get("detail") else "")
            for g in failed]


def arm_config(record: Path, arm: str) -> dict[str, Any]:
    """The arm's composed config as its record wrote it ({} when it cannot be read)."""
    return arm_config_of(record, arm) or {}


def arm_concurrency(record: Path, arm: str) -> int | None:
    """The arm's workload.concurrency as its record's config says (None for an open loop)."""
    try:
        workload = arm_config(record, arm).get("workload") or {}
        return None if workload.get("request_rate") else int(workload.get("concurrency") or 1)
    except (ValueError, TypeError, AttributeError):
        return None


def arm_gpus(record: Path, arm: str) -> int | None:
    """How many GPUs the arm's one server holds: its listed `server.gpus`, else its tensor
    parallel size (what a throughput per GPU divides by; None when the config says neither)."""
    server = arm_config(record, arm).get("server") or {}
    try:
        if isinstance(server.get("gpus"), list) and server["gpus"]:
            return len(server["gpus"])
        return int(server["tp_size"]) if server.get("tp_size") else None
    except (ValueError, TypeError, AttributeError):
        return None


class SweepRecord(WholeRunsRecord):
    """The sweep's folder (the one record writer's kind "sweep") and its sweep.json, rewritten
    (atomically) after every point: the points' bookkeeping is harness/sweep/runs.py's."""

    kind, folder = "sweep", "points"

    def __init__(self, experiment: Experiment, command: list[str], pytest_options: list[str]):
        """`experiment`: the first point's, whose name and record.root the sweep's folder takes."""
        super().__init__(experiment, command, pytest_options=pytest_options)
        self.plain_arm = experiment.plain_arm  # what the sweep gates' speedups are against
        self.break_even_arms = list(experiment.base.break_even_arms)  # the measured break-even's curve

    def read_back(self, entry: dict[str, Any], record: Path, run: RunData) -> None:
        """Per arm its headline figures, concurrency and GPUs, and its speedup's interval; the
        run's failed gates."""
        entry["arms"] = headline(run.data)
        if failed_gates(run.data):
            entry["failed_gates"] = failed_gates(run.data)
        for arm, figures in entry["arms"].items():
            figures["concurrency"] = arm_concurrency(record, arm)
            figures["gpus"] = arm_gpus(record, arm)
            if self.plain_arm and arm != self.plain_arm and figures.get("speedup") is not None:
                figures["speedup_interval"], why = speedup_interval(run, arm, self.plain_arm, figures)
                if why:
                    figures["speedup_interval_why"] = why

    def point_failed(self, entry: dict[str, Any], reason: str, log: str | None) -> None:
        """A point whose job (SLURM, submitit) ended without the point's exit status: failed,
        with why and where its job's log is; whatever record the point began is read back."""
        self.run_ended(entry, None)
        entry.update(status="job_failed", error=reason, job_log=log)
        self.save()

    def gate_context(self, gates: Any) -> SweepContext:
        """What the sweep gates judge: the points run, their crossovers, the plain arm."""
        points = self.data["points"]
        return SweepContext(gates, points, crossovers(points), self.plain_arm)

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        """The sweep gates' verdicts, kept in sweep.json's `sweep_gates`."""
        self.data["sweep_gates"] = [v.to_json() for v in verdicts]

    def finish(self, exit_status: int, interrupted: bool) -> None:
        points = self.data["points"]
        self.close(exit_status, interrupted, crossovers=crossovers(points),
                   break_even_accept_length=measured_break_even(self.path, points, self.plain_arm,
                                                                        self.break_even_arms))
        self.save()
        self.recorder.write_summary(summary(self.redactor.data(self.data)))


def speedup_interval(run: RunData, arm: str, plain_arm: str, figures: dict[str, Any]) -> tuple[list[float] | None, str]:
    """The point's speedup's interval, the min_speedup gate's (the same estimator as the figure:
    harness/gates/arm_speedup.py), and why there is none (too few time windows, a torn file)."""
    try:
        got = estimate_speedup(run, arm, plain_arm, 0, float(figures["speedup"]), figures.get("concurrency"))
    except (OSError, ValueError) as exc:  # a torn Parquet file (pyarrow's errors are these)
        return None, f"its requests could not be read ({exc})"
    return got.interval, got.why


def crossovers(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where speculation stops paying: for each speculative arm (one with a speedup) and
    each setting of the other swept keys, its speedup over the plain arm against
    concurrency, and the highest concurrency at which it is still >= 1, interpolated
    linearly in log2(concurrency) between the last point that pays and the first that
    does not. `pays_through` is that concurrency; None when even the lowest point loses.
    `pays_through_interval`: the same crossing of the speedups' interval ends, [lower ends',
    upper ends'] (a point without an interval counts as its figure), which the sweep gate
    decides on."""
    series: dict[tuple[str, tuple[str, ...]], list[tuple[int, float, float, float]]] = {}
    for point in points:
        others = tuple(o for o in point.get("swept") or [] if not o.startswith("workload.concurrency="))
        for arm, figures in (point.get("arms") or {}).items():
            c, speedup = figures.get("concurrency"), figures.get("speedup")
            if c and speedup is not None:
                low, high = bounds(figures)
                series.setdefault((arm, others), []).append((int(c), float(speedup), low, high))
    found = []
    for (arm, others), curve in series.items():
        curve = sorted(set(curve))
        if len({c for c, *_ in curve}) < 2:
            continue  # one concurrency: no curve to cross
        lows, highs = crossing([(c, lo) for c, _, lo, _ in curve]), crossing([(c, hi) for c, _, _, hi in curve])
        found.append({"arm": arm, "with": list(others), "points": [[c, round(v, 4)] for c, v, *_ in curve],
                      **crossing([(c, v) for c, v, *_ in curve]),
                      "pays_through_interval": [lows["pays_through"], highs["pays_through"]],
                      "intervals": [[c, round(lo, 4), round(hi, 4)] for c, _, lo, hi in curve]})
    return found


def crossing(curve: list[tuple[int, float]]) -> dict[str, Any]:
    """The crossover of one speedup-vs-concurrency curve (sorted by concurrency)."""
    if curve[0][1] < 1.0:
        return {"pays_through": None, "words": f"does not pay even at concurrency {curve[0][0]} "
                                               f"(speedup {curve[0][1]:.2f}x)"}
    for (c0, s0), (c1, s1) in zip(curve, curve[1:]):
        if s1 < 1.0:  # crosses 1.0 between c0 and c1
            x0, x1 = math.log2(c0), math.log2(c1)
            at = 2 ** (x0 + (s0 - 1.0) / (s0 - s1) * (x1 - x0))
            return {"pays_through": round(at, 1), "words": f"pays up to concurrency ~{at:.1f} "
                                                           f"({s0:.2f}x at {c0}, {s1:.2f}x at {c1})"}
    last_c, last_s = curve[-1]
    return {"pays_through": last_c, "words": f"pays at every concurrency swept, up to {last_c} ({last_s:.2f}x there)"}


def break_even_label(entry: dict[str, Any]) -> str:
    """Which curve a measured break-even is of: `concurrency 4, k=2 with workload.input_len=64`."""
    k = f", k={entry['k']}" if entry.get("k") is not None else ""
    others = f" with {', '.join(entry['with'])}" if entry.get("with") else ""
    return f"concurrency {entry.get('concurrency')}{k}{others}"


def cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def points_table(points: list[dict[str, Any]]):
    """point x arm, one row each: the registry's sweep figures (harness/report/tables.py) and
    the gate verdicts passed/failed."""
    rows = [Row([str(point["label"]), cell(point.get("exit_status")), arm, cell(f.get("status"))], f,
                [f"{cell(f.get('gates_passed'))} / {cell(f.get('gates_failed'))}"])
            for point in points for arm, f in (point.get("arms") or {"–": {}}).items()]
    return metric_table("sweep", ["point", "exit", "arm", "arm status"], rows, ["gates passed / failed"])


def summary(data: dict[str, Any]) -> str:
    """point x arm, one row each: the headline figures and the gate verdicts passed/failed."""
    lines = [f"# specgate sweep: {data['experiment']}", "",
             f"status **{data['status']}**, exit status {data['exit_status']}, {len(data['points'])} point(s)", "",
             *points_table(data["points"]).markdown()]
    if data.get("crossovers"):
        lines += ["", "## Where speculation pays", ""]
        lines += [f"- {x['arm']}{' with ' + ', '.join(x['with']) if x['with'] else ''}: {x['words']}"
                  for x in data["crossovers"]]
    if data.get("break_even_accept_length"):
        lines += ["", "## Break-even accept length (measured)", ""]
        lines += [f"- {break_even_label(x)}: {x['words']}" for x in data["break_even_accept_length"]]
    if data.get("sweep_gates"):
        lines += ["", "## Sweep gates", ""]
        lines += [f"- {Verdict.from_json(v, 'sweep').line()}" for v in data["sweep_gates"]]
    failed = [p for p in data["points"] if p.get("error")]
    if failed:  # a launched sweep's jobs: why each ended as it did, and its log
        lines += ["", "## Why points failed", ""]
        lines += [f"- {p['label']}: {p['error']}" + (f" (log: {p['job_log']})" if p.get("job_log") else "")
                  for p in failed]
    lines += ["", "Each point's own record (summary.md, results.json) is under points/<point>/."]
    return "\n".join(lines) + "\n"
