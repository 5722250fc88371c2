"""Records on disk: a run's `<record.root>/<UTC timestamp>_<exp>/` (the other kinds' carry their
suffix, `_sweep`, `_capacity`, `_ab`, `_calibration`: harness/record/kinds.py), written atomically,
secrets redacted; and the one reader (a record's kind, a run's results.json, its history). An
arm's block of results.json is read into the type it was written from by
harness/measure/metrics.py's read_result (the measurement sits above the records).

Layout (see README "Reading a run record"):
    config.yaml          the composed experiment (before arm overrides)
    overrides.yaml       the command-line overrides
    arms/<arm>/config.yaml, arms/<arm>/server.log
    arms/<arm>/requests.parquet, outputs.parquet   the arm's requests in columns, and what
                         they generated (harness/record/requests.py, docs/record.md); a record
                         written before has requests.jsonl (one line per request) instead
    results.json         per-arm metrics and every gate verdict (rewritten after each arm);
                         its `status` is `running` from the moment the record is made, then
                         `finished` or `interrupted` when the run ends
    summary.md           the arm x metric table and the verdicts in words
`<record.root>/latest` is a symlink to the newest record of a run that ended (finished or
interrupted): a run that is still going, or died (kill -9), never moves it.
"""

from __future__ import annotations

import gc
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from harness.record.atomic import atomic_write
from harness.record.kinds import KINDS, RUN, RecordKind, kind_of
from harness.record.requests import LEGACY_FILE, REQUESTS_FILE, RequestColumns, append_requests, read_columns
from harness.record.secrets import REDACTED, Redactor  # noqa: F401  (REDACTED: what replay looks for)

# A record's `status` in results.json: `running` until the run ends, so a record that still
# says it after the run is gone tells of a run that died (kill -9, a lost machine).
RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"
RUN_STATUSES = (RUNNING, FINISHED, INTERRUPTED)


class RunRecord:
    """One record's folder (a run's, or another kind's: `kind`, harness/record/kinds.py), made now; every
    file in it written atomically through its redactor."""

    def __init__(self, root: Path, exp_name: str, redactor: Redactor | None = None, now: datetime | None = None,
                 kind: RecordKind = RUN):
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        self.root = Path(root)
        self.kind = kind
        self.path = unique_dir(self.root / f"{stamp}_{safe_name(exp_name)}{kind.suffix}")
        self.redactor = redactor or Redactor()

    def point_latest(self) -> None:
        """Swap `<root>/latest` atomically to this record (a relative link, so the tree can
        move). Called when the run ends, so `latest` never names a run still going or dead."""
        link = self.root / "latest"
        tmp = self.root / f".latest.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(self.path.name)
        os.replace(tmp, link)

    def arm_dir(self, arm: str) -> Path:
        path = self.path / "arms" / safe_name(arm)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_yaml(self, relative: str, data: Any) -> None:
        atomic_write(self.path / relative, yaml.safe_dump(self.redactor.data(data), sort_keys=False))

    def write_json(self, relative: str, data: Any) -> None:
        atomic_write(self.path / relative, json.dumps(self.redactor.data(data), indent=2, allow_nan=False) + "\n")

    def write_data(self, data: Any) -> None:
        """The record's JSON: results.json, sweep.json or capacity.json, by its kind."""
        self.write_json(self.kind.data_file, data)

    def add_requests(self, arm: str, lines: list[dict[str, Any]]) -> None:
        """Append an arm's requests to its columnar files (each rewritten atomically)."""
        append_requests(self.arm_dir(arm), arm, [self.redactor.data(line) for line in lines])
        gc.collect()  # the garbage of building the columns, collected here rather than mid-way through the next load

    def write_text(self, relative: str, text: str) -> None:
        atomic_write(self.path / relative, self.redactor.text(text))

    def scrub_file(self, relative: str) -> None:
        """Redact secrets from a file another process wrote (e.g. the server log)."""
        path = self.path / relative
        if path.is_file():
            text = path.read_text(errors="replace")
            atomic_write(path, self.redactor.text(text))


def unique_dir(path: Path) -> Path:
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "run"


# --- reading a record back -------------------------------------------------------------------


class RecordError(Exception):
    """A path that is not a run record, or a record that cannot be read: one sentence."""


def record_kind(path: Path) -> str | None:
    """What a record folder is (run, sweep, capacity, ab or calibration), by the JSON it holds; None for a path
    that is no record folder (each kind's reader then says why in its own words)."""
    kind = kind_of(Path(path))
    return None if kind is None else kind.name


@dataclass
class RunData:
    """A run record as read back: compare, report, replay and reference-run gates use it."""

    label: str  # the record's folder name
    path: Path  # the results.json that was read
    data: dict[str, Any]

    @property
    def arms(self) -> dict[str, Any]:
        arms = self.data.get("arms")
        return arms if isinstance(arms, dict) else {}

    @property
    def status(self) -> str:
        """`running`, `finished` or `interrupted`. Records written before the key existed
        were written at the end of the run: finished, unless they say they were interrupted."""
        status = self.data.get("status")
        if status in RUN_STATUSES:
            return status
        return INTERRUPTED if self.data.get("interrupted") else FINISHED

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    @property
    def incompleteness(self) -> str:
        """Why the record is not a whole run, in words ("" for a finished one)."""
        return {RUNNING: "incomplete: it still says running, so the run died before it finished (e.g. kill -9)",
                INTERRUPTED: "interrupted: the run was stopped (Ctrl-C or SIGTERM) before it finished"}.get(self.status, "")

    def arm_config(self, arm: str) -> dict[str, Any] | None:
        """The arm's composed config as the record wrote it (None when it kept none)."""
        return arm_config_of(self.path.parent, arm)

    def request_columns(self, arm: str, columns: list[str] | tuple[str, ...]) -> RequestColumns:
        """The arm's requests beside results.json, only `columns` of them (no rows when the
        record kept none: verdicts then fall back to the point values). Reads either layout."""
        folder = self.path.parent
        return read_columns(folder / "arms" / safe_name(arm) / REQUESTS_FILE, folder / LEGACY_FILE, arm, columns)


def arm_config_of(record: Path, arm: str) -> dict[str, Any] | None:
    """The arm's composed config as its run record wrote it (arms/<arm>/config.yaml,
    interpolations resolved then); None when the record kept none or it cannot be read."""
    try:
        cfg = yaml.safe_load((Path(record) / "arms" / safe_name(arm) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # UnicodeDecodeError is a ValueError
        return None
    return cfg if isinstance(cfg, dict) else None


def results_path(path: Path) -> Path:
    """The results.json of a record folder, a `latest` link or the file itself."""
    path = Path(path)
    candidate = path / "results.json" if path.is_dir() else path
    if not candidate.is_file():
        why = "has no results.json" if path.is_dir() else "does not exist"
        raise RecordError(f"{path} is not a run record: it {why} (give a runs/<timestamp>_<exp> folder, "
                          f"runs/latest or a results.json)")
    return candidate


def read_run(path: Path) -> RunData:
    """Read one record's results.json; a file that is not JSON, or JSON that is not a
    record, is a RecordError. Keys are not checked further: older and newer records read."""
    file = results_path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{file} is not a readable run record ({exc}).") from None
    if not isinstance(data, dict):
        raise RecordError(f"{file} is not a run record: it holds no JSON object.")
    why = not_a_run_record(file, data)
    if why:
        raise RecordError(f"{file} is not a run record: {why} (give a runs/<timestamp>_<exp> folder, "
                          f"runs/latest or its results.json)")
    return RunData(label=file.resolve().parent.name, path=file, data=data)


def not_a_run_record(file: Path, data: dict[str, Any]) -> str | None:
    """Why this JSON is not a run's results.json, or None. A record says its kind (`record_kind`);
    one written before it did must have a run's arms and not be another kind's file, so `{}`
    or a sweep's sweep.json is never taken for a run."""
    kind = data.get("record_kind")
    if kind is not None:
        return None if kind == "run" else f"it is a {kind} record's {file.name}"
    other = next((k.name for k in KINDS.values() if k.data_file == file.name and k.name != "run"), None)
    if other:
        return f"it is a {other} record's {file.name}"
    return None if isinstance(data.get("arms"), dict) else "it has no 'arms' mapping"


def is_history(path: Path) -> bool:
    """A folder of run records (e.g. the last runs on main) rather than one record."""
    path = Path(path)
    return path.is_dir() and not (path / "results.json").is_file() and any(history_members(path))


def record_in(root: Path) -> Path | None:
    """The run record a run wrote into `root` (a sweep's point, a calibration's run): the one
    its `latest` names, or (a run that died before naming it) the newest."""
    latest = Path(root) / "latest"
    if latest.is_dir():
        return latest.resolve()
    members = history_members(root) if Path(root).is_dir() else []
    return members[-1] if members else None


def history_members(folder: Path) -> list[Path]:
    """The records in a folder, oldest first (record names start with their UTC timestamp;
    the `latest` link is the newest again and is left out)."""
    return sorted(p for p in Path(folder).iterdir()
                  if p.is_dir() and not p.is_symlink() and (p / "results.json").is_file())


def read_runs(path: Path) -> list[RunData]:
    """One record, or every record of a history folder (oldest first)."""
    if is_history(path):
        return [read_run(p) for p in history_members(Path(path))]
    return [read_run(path)]


def read_reference_runs(path: Path) -> tuple[list[RunData], list[str]]:
    """What a gate may compare with (gate.baseline): one finished record, or the finished
    records of a history folder, plus notes on what was left out. Numbers from a run that
    died or was stopped are no reference: a single such record is a RecordError, and such
    members of a history folder are skipped."""
    runs = read_runs(path)
    if not is_history(path):
        if not runs[0].finished:
            raise RecordError(f"{path} is {runs[0].incompleteness}; a reference run must have finished.")
        return runs, []
    finished = [run for run in runs if run.finished]
    left_out = [run.label for run in runs if not run.finished]
    if not finished:
        raise RecordError(f"{path} holds no finished run record (all {len(runs)} died or were interrupted).")
    notes = [f"gate.baseline: left out {len(left_out)} unfinished record(s) of {path}: {', '.join(left_out)}"]
    return finished, notes if left_out else []


def load_results(path: Path) -> dict[str, Any]:
    """A record's results.json as data (given the record folder or the file itself)."""
    return read_run(path).data
