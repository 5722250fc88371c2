"""`specgate compare RUN RUN [...]`: the same arm x metric numbers of several run records
side by side, with each later run's change relative to the first.

A run is a record folder (`runs/<ts>_<exp>`), the `runs/latest` link, or a results.json.
Missing keys read as "-" (an arm that failed, a metric a run did not measure, a record
written by an older harness), and extra keys are ignored, so records of different
harness versions compare.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from harness.summary import markdown_table


class CompareError(Exception):
    """A path that is not a run record, or a record that cannot be read: one sentence."""


@dataclass(frozen=True)
class Metric:
    key: str  # dotted path into results.json's arms.<arm>: "ttft_ms.p99", "requests.ok"
    label: str
    pattern: str  # how a value is printed
    count: bool = False  # a count: its change is the signed difference, not a ratio


METRICS = (
    Metric("output_tok_s", "output tok/s", "{:.1f}"),
    Metric("request_per_s", "requests/s", "{:.3f}"),
    Metric("ttft_ms.p50", "TTFT p50 ms", "{:.1f}"),
    Metric("ttft_ms.p99", "TTFT p99 ms", "{:.1f}"),
    Metric("itl_ms.p50", "ITL p50 ms", "{:.2f}"),
    Metric("itl_ms.p99", "ITL p99 ms", "{:.2f}"),
    Metric("tpot_ms.p50", "TPOT p50 ms", "{:.2f}"),
    Metric("e2e_ms.p50", "E2E p50 ms", "{:.0f}"),
    Metric("accept_length", "accept length", "{:.2f}"),
    Metric("verify_cycle_ms", "verify cycle ms", "{:.2f}"),
    Metric("requests.ok", "requests ok", "{:d}", count=True),
    Metric("requests.failed", "requests failed", "{:d}", count=True),
)


@dataclass
class Run:
    label: str  # the record's folder name
    path: Path  # the results.json that was read
    data: dict[str, Any]

    @property
    def arms(self) -> dict[str, Any]:
        arms = self.data.get("arms")
        return arms if isinstance(arms, dict) else {}


def results_path(path: Path) -> Path:
    """The results.json of a record folder, `latest` link or the file itself."""
    path = Path(path)
    candidate = path / "results.json" if path.is_dir() else path
    if not candidate.is_file():
        why = "has no results.json" if path.is_dir() else "does not exist"
        raise CompareError(f"{path} is not a run record: it {why} (give a runs/<timestamp>_<exp> folder, "
                           f"runs/latest or a results.json)")
    return candidate


def load_run(path: Path) -> Run:
    """Read one record; a file that is not JSON, or JSON that is not a record, is a CompareError."""
    file = results_path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{file} is not a readable run record ({exc}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("arms", {}), dict):
        raise CompareError(f"{file} is not a run record: it has no 'arms' mapping.")
    return Run(label=file.resolve().parent.name, path=file, data=data)


def load_runs(paths: list[Path]) -> list[Run]:
    if not paths:
        raise CompareError("give at least one run record to compare.")
    runs = [load_run(p) for p in paths]
    seen: dict[str, int] = {}
    for run in runs:  # the same record twice (e.g. a folder and runs/latest): keep columns apart
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run.label = f"{run.label} ({seen[run.label]})"
    return runs


def lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def number(value: Any) -> Optional[float]:
    """A metric value, or None for anything that is not a finite number (missing, null, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def noise_cv(arm: Any, key: str) -> Optional[float]:
    """The coefficient of variation over repeats (`noise` is keyed by the dotted metric path)."""
    noise = arm.get("noise") if isinstance(arm, dict) else None
    spread = noise.get(key) if isinstance(noise, dict) else None
    return number(spread.get("cv")) if isinstance(spread, dict) else None


def change(first: Optional[float], later: Optional[float], metric: Metric) -> Optional[float]:
    """Relative change later vs first (0.05 = +5%); for counts the signed difference."""
    if first is None or later is None:
        return None
    if metric.count:
        return later - first
    return None if first == 0 else (later - first) / abs(first)


def arm_names(runs: list[Run]) -> list[str]:
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
        for metric in METRICS:
            values = [number(lookup(run.arms.get(arm), metric.key)) for run in runs]
            rows.append({"arm": arm, "metric": metric.key, "values": values,
                         "cv": [noise_cv(run.arms.get(arm), metric.key) for run in runs],
                         "changes": [change(values[0], v, metric) for v in values[1:]],
                         "change_kind": "difference" if metric.count else "relative"})
    return {"runs": [run_info(run) for run in runs], "metrics": [m.key for m in METRICS], "rows": rows}


def run_info(run: Run) -> dict[str, Any]:
    gates = run.data.get("gates") if isinstance(run.data.get("gates"), list) else []
    verdicts = [g.get("passed") for g in gates if isinstance(g, dict)]
    return {"label": run.label, "path": str(run.path), "experiment": run.data.get("experiment"),
            "started_utc": run.data.get("started_utc"), "interrupted": run.data.get("interrupted"),
            "arm_status": {arm: (a.get("status") if isinstance(a, dict) else None) for arm, a in run.arms.items()},
            "gates": {"passed": verdicts.count(True), "failed": verdicts.count(False),
                      "skipped": sum(v is None for v in verdicts)}}


def fmt_value(value: Optional[float], cv: Optional[float], metric: Metric) -> str:
    if value is None:
        return "-"
    text = metric.pattern.format(int(value) if metric.count else value)
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
        return f"{g['passed']} passed, {g['failed']} failed, {g['skipped']} skipped"

    def arms(status: dict[str, Any]) -> str:
        return ", ".join(f"{arm}: {s or '?'}" for arm, s in status.items()) or "-"

    rows = [[r["label"], str(r["experiment"] or "-"), str(r["started_utc"] or "-"), gates(r["gates"]),
             arms(r["arm_status"]) + (" (interrupted)" if r["interrupted"] else "")] for r in runs]
    return markdown_table(["run", "experiment", "started (UTC)", "gates", "arms"], rows)


def metrics_table(data: dict[str, Any]) -> list[str]:
    labels = [r["label"] for r in data["runs"]]
    header = ["arm", "metric", *labels, *(f"Δ {label}" for label in labels[1:])]
    by_key: dict[str, Metric] = {m.key: m for m in METRICS}
    rows = []
    for row in data["rows"]:
        metric = by_key[row["metric"]]
        rows.append([row["arm"], metric.label,
                     *(fmt_value(v, cv, metric) for v, cv in zip(row["values"], row["cv"])),
                     *(fmt_change(d, metric) for d in row["changes"])])
    return markdown_table(header, rows)


def legend(data: dict[str, Any]) -> list[str]:
    lines = []
    if len(data["runs"]) > 1:
        lines.append(f"Δ: change vs the first run ({data['runs'][0]['label']}), relative for rates and latencies, "
                     "the difference for request counts; \"-\" where either value is missing.")
    if any(cv is not None for row in data["rows"] for cv in row["cv"]):
        lines.append("±: coefficient of variation over the run's repeats.")
    return lines
