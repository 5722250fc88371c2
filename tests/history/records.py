"""Run records for the history tests, written by the record writer's own folder class
(harness/record/store.py RunRecord: the `<UTC timestamp>_<exp>` name, atomic, redacted) with
arm blocks made by ArmOutcome.to_json, the code that writes a real run's results.json."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from harness.record.store import FINISHED, RUNNING, RunRecord
from harness.run.outcome import ArmOutcome
from harness.measure.metrics import Stat
from tests.support.arm_results import result

START = datetime(2026, 12, 2, 15, 0, tzinfo=timezone.utc)


def arm_block(arm: str, tok_s: float, itl_ms: float = 8.0, tpot_ms: float = 8.2) -> dict:
    measured = result(arm=arm, output_tok_s=tok_s, itl_ms=Stat(mean=itl_ms, p50=itl_ms, p90=itl_ms * 1.1, p99=itl_ms * 1.4),
                      tpot_ms=Stat(mean=tpot_ms, p50=tpot_ms, p90=tpot_ms * 1.1, p99=tpot_ms * 1.3))
    return ArmOutcome(arm, backend="process", status="measured", result=measured).to_json()


def write_run(root: Path, when: datetime, arms: dict[str, dict], experiment: str = "sim_smoke",
              status: str = FINISHED) -> Path:
    """One run record as the runner leaves it (results.json with its status fields)."""
    record = RunRecord(root, experiment, now=when)
    record.write_data({"experiment": experiment, "description": "history test", "status": status,
                       "started_utc": when.isoformat(timespec="seconds"),
                       "finished_utc": None if status == RUNNING else (when + timedelta(minutes=2)).isoformat(timespec="seconds"),
                       "interrupted": False, "plain_arm": "baseline", "arms": arms, "gates": []})
    return record.path


def stepped_history(root: Path, runs: int = 12, step_at: int = 6, step: float = -0.08, seed: int = 3) -> list[Path]:
    """`runs` hourly runs of two arms with 1 % noise on every figure; from run `step_at` on
    (0-based: the 7th run for 6), eagle3's output tok/s is `step` lower (a regression)."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(runs):
        noise = lambda: 1 + 0.01 * rng.standard_normal()  # noqa: E731
        eagle = 1800.0 * (1 + step if i >= step_at else 1.0) * noise()
        arms = {"baseline": arm_block("baseline", 1000.0 * noise(), 10.0 * noise(), 10.1 * noise()),
                "eagle3": arm_block("eagle3", eagle, 6.0 * noise(), 6.1 * noise())}
        paths.append(write_run(root, START + timedelta(hours=i), arms))
    return paths
