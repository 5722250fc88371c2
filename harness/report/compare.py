"""`specgate compare RUN RUN [...]`: the same arm x metric numbers of several run records
side by side, with each later run's change relative to the first.

A run is a record folder (`runs/<ts>_<exp>`), the `runs/latest` link, or a results.json;
a folder of records (a history, e.g. the last runs on main) stands for each of its runs,
oldest first, so `specgate compare history/ runs/latest` shows a metric's history with
the current run after it.
Missing keys read as "-" (an arm that failed, a metric a run did not measure, a record
written by an older harness), and extra keys are ignored, so records of different
harness versions compare. Each run's status says whether it finished: a record that still
says `running` (its run died) shows as incomplete, a stopped one as interrupted, so
neither passes for a whole run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from harness.gates.verdict import Verdict
from harness.measure.metrics import ArmResult, read_result
from harness.measure.registry import Metric, compare_metrics, metric_value, number
from harness.record.store import FINISHED, RUNNING, RunData, read_runs
from harness.report.tables import markdown_table


class CompareError(Exception):
    """A comparison that cannot be made (no record given): one sentence."""


def load_runs(paths: list[Path]) -> list[RunData]:
    """Every record (harness.record.store.RecordError for one that is not a record), labels kept apart."""
    if not paths:
        raise CompareError("give at least one run record to compare.")
    runs = [run for p in paths for run in read_runs(p)]  # a history folder gives each of its runs
    seen: dict[str, int] = {}
    for run in runs:  # the same record twice (e.g. a folder and runs/latest): keep columns apart
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run.label = f"{run.label} ({seen[run.label]})"
    return runs


def noise_cv(result: Optional[ArmResult | dict], key: str) -> Optional[float]:
    """The coefficient of variation over repeats (`noise` is keyed by the dotted metric path) of
    an ArmResult or an arm's block of results.json."""
    noise = None if result is None else metric_value(result, "noise")
    spread = noise.get(key) if isinstance(noise, dict) else None
    return number(spread.get("cv")) if isinstance(spread, dict) else None


def change(first: Optional[float], later: Optional[float], metric: Metric) -> Optional[float]:
    """Relative change later vs first (0.05 = +5%); for counts the signed difference."""
    if first is None or later is None:
        return None
    if metric.count:
        return later - first
    return None if first == 0 else (later - first) / abs(first)


def arm_names(runs: list[RunData]) -> list[str]:
    """Arms in the order they first appear, over all runs."""
    names: list[str] = []
    for run in runs:
        names += [a for a in run.arms if a not in names]
    return names


def compare_data(paths: list[Path]) -> dict[str, Any]:
    """The comparison as plain data: runs, and one row per arm x metric with each run's
    value (None where missing) and each later run's change vs the first."""
    runs = load_runs(paths)
    rows = []
    for arm in arm_names(runs):
        results = [read_result(arm, run.arms.get(arm) or {}) for run in runs]  # old spellings too
        for metric in compare_metrics():
            values = [None if r is None else number(metric_value(r, metric.path)) for r in results]
            rows.append({"arm": arm, "metric": metric.path, "values": values,
                         "cv": [noise_cv(r, metric.path) for r in results],
                         "changes": [change(values[0], v, metric) for v in values[1:]],
                         "change_kind": "difference" if metric.count else "relative"})
    return {"runs": [run_info(run) for run in runs], "metrics": [m.path for m in compare_metrics()], "rows": rows}


def run_info(run: RunData) -> dict[str, Any]:
    gates = run.data.get("gates") if isinstance(run.data.get("gates"), list) else []
    statuses = [gate_status(g) for g in gates if isinstance(g, dict)]
    return {"label": run.label, "path": str(run.path), "experiment": run.data.get("experiment"),
            "started_utc": run.data.get("started_utc"), "status": run.status, "incompleteness": run.incompleteness,
            "arm_status": {arm: (a.get("status") if isinstance(a, dict) else None) for arm, a in run.arms.items()},
            "gates": {s: statuses.count(s) for s in GATE_STATUSES}}


GATE_STATUSES = ("passed", "failed", "skipped", "unreliable", "inconclusive")


def gate_status(verdict: dict[str, Any]) -> str:
    """A recorded verdict's status; records written before verdicts carried one derive it (Verdict.from_json)."""
    if verdict.get("status") in GATE_STATUSES:
        return verdict["status"]
    return Verdict.from_json(verdict).status


def fmt_value(value: Optional[float], cv: Optional[float], metric: Metric) -> str:
    if value is None:
        return "-"
    text = metric.format(value)
    return text if cv is None else f"{text} ±{cv * 100:.1f}%"


def fmt_change(delta: Optional[float], metric: Metric) -> str:
    if delta is None:
        return "-"
    if metric.count:
        return f"{int(delta):+d}" if delta else "0"
    return f"{delta * 100:+.1f}%"


def compare_runs(paths: list[Path]) -> str:
    """The comparison as Markdown: the runs, then one arm x metric table with a column per
    run and a change column per later run (vs the first)."""
    data = compare_data(paths)
    return "\n".join(["# specgate compare", "", *runs_table(data["runs"]), "", *metrics_table(data), "",
                      *legend(data)]) + "\n"


def runs_table(runs: list[dict[str, Any]]) -> list[str]:
    def gates(g: dict[str, int]) -> str:
        noisy = f", {g['unreliable']} unreliable" if g["unreliable"] else ""
        return f"{g['passed']} passed, {g['failed']} failed, {g['skipped']} skipped{noisy}"

    def arms(status: dict[str, Any]) -> str:
        return ", ".join(f"{arm}: {s or '?'}" for arm, s in status.items()) or "-"

    rows = [[r["label"], status_word(r["status"]), str(r["experiment"] or "-"), str(r["started_utc"] or "-"),
             gates(r["gates"]), arms(r["arm_status"])] for r in runs]
    return markdown_table(["run", "status", "experiment", "started (UTC)", "gates", "arms"], rows)


def status_word(status: str) -> str:
    """A run's status as the table shows it, loud unless it finished: a record that still
    says `running` is a run that died."""
    if status == FINISHED:
        return status
    return "**INCOMPLETE**" if status == RUNNING else f"**{status.upper()}**"


def metrics_table(data: dict[str, Any]) -> list[str]:
    labels = [r["label"] for r in data["runs"]]
    header = ["arm", "metric", *labels, *(f"Δ {label}" for label in labels[1:])]
    by_key: dict[str, Metric] = {m.path: m for m in compare_metrics()}
    rows = []
    for row in data["rows"]:
        metric = by_key[row["metric"]]
        rows.append([row["arm"], metric.label,
                     *(fmt_value(v, cv, metric) for v, cv in zip(row["values"], row["cv"])),
                     *(fmt_change(d, metric) for d in row["changes"])])
    return markdown_table(header, rows)


def legend(data: dict[str, Any]) -> list[str]:
    lines = [f"{r['label']} is {r['incompleteness']}; its numbers are only what it had recorded."
             for r in data["runs"] if r["incompleteness"]]
    if len(data["runs"]) > 1:
        lines.append(f"Δ: change vs the first run ({data['runs'][0]['label']}), relative for rates and latencies, "
                     "the difference for request counts; \"-\" where either value is missing.")
    if any(cv is not None for row in data["rows"] for cv in row["cv"]):
        lines.append("±: coefficient of variation over the run's repeats.")
    return lines
