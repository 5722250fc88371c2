"""`specgate schedule SWEEP_DIR --served RUN_DIR`: did the schedule hold when it was served back?

A schedule predicts, per concurrency, each k's speedup over plain decoding with its interval
(schedule.json's candidates). A run that serves it back (the engine's form: vLLM's
`num_speculative_tokens_per_batch_size`, SGLang's `--speculative-adaptive`), best beside the
same drafter at a static k and plain decoding, measures each speculative arm's speedup over its
own plain arm with the same estimator (harness/gates/arm_speedup.py). Each arm is checked
against the prediction for the k it drafts at the run's concurrency, as its engine reads its
recorded config (`Engine.served_k`: vLLM's per-batch-size table's k there, an adaptive SGLang
server's scheduled k, else its static k). The
served speedup lies within the predicted interval, or the difference is said in numbers; an arm
that cannot be checked (no interval on either side, a k the sweep did not measure) says why, and
never reads as held. The checks go into schedule.json's `served` (replaced by the next check of
the same run) and the exit status: 0 every arm held, 1 otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from harness.engines import ENGINES
from harness.gates.arm_speedup import estimate_speedup
from harness.record.atomic import atomic_write
from harness.record.store import RecordError, RunData, read_run
from harness.schedule.grid import ScheduleError
from harness.schedule.write import SCHEDULE_JSON


@dataclass(frozen=True)
class ServedCheck:
    arm: str
    concurrency: int
    k: int  # what the arm drafts at that concurrency
    how: str  # "per-batch-size table", "adaptive", "static"
    predicted: dict[str, Any]  # the sweep's candidate at k: speedup, interval
    speedup: float
    interval: Optional[list[float]]
    why: str = ""  # why it cannot be checked ("" when it can)

    @property
    def held(self) -> Optional[bool]:
        """Within the predicted interval; None when it cannot be checked."""
        if self.why:
            return None
        low, high = self.predicted["interval"]
        return low <= self.speedup <= high

    def words(self) -> str:
        served = f"{self.speedup:.3f}x over plain" + (f" [{self.interval[0]:.3f}, {self.interval[1]:.3f}]"
                                                      if self.interval else "")
        head = f"{self.arm} ({self.how}, k={self.k} at concurrency {self.concurrency}) served {served}"
        if self.why:
            return f"{head}; not checked: {self.why}"
        low, high = self.predicted["interval"]
        where = f"the sweep predicted {self.predicted['speedup']:.3f}x [{low:.3f}, {high:.3f}]"
        if self.held:
            return f"{head}; {where}: held"
        off = self.speedup / self.predicted["speedup"] - 1
        side = "below" if self.speedup < low else "above"
        return f"{head}; {where}: NOT held, {side} the interval ({off * 100:+.1f} % against the prediction)"

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "k": self.k, "how": self.how,
                "predicted": self.predicted, "speedup": round(self.speedup, 4), "interval": self.interval,
                "held": self.held, "why": self.why, "words": self.words()}


def check_served(sweep: Path, run_dir: Path) -> tuple[list[ServedCheck], Path]:
    """Every speculative arm of the served run against the sweep's schedule; schedule.json updated."""
    schedule_file = Path(sweep) / SCHEDULE_JSON
    try:
        schedule = json.loads(schedule_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ScheduleError(f"{schedule_file} cannot be read ({exc}); run `specgate schedule {sweep}` first") from None
    try:
        run = read_run(run_dir)
    except RecordError as exc:
        raise ScheduleError(str(exc)) from None
    plain = run.data.get("plain_arm")
    arms = [a for a, block in run.arms.items() if a != plain and (block or {}).get("status") == "measured"]
    if not plain or plain not in run.arms or not arms:
        raise ScheduleError(f"{run.path} has no measured plain arm and speculative arm beside it (plain_arm "
                            f"{plain!r}, arms {', '.join(run.arms) or 'none'}): a served schedule is checked by "
                            f"its speedup over plain decoding in the same run")
    checks = [check_arm(run, arm, plain, schedule) for arm in arms]
    served = [c.to_json() for c in checks]
    kept = [s for s in schedule.get("served") or [] if s.get("run") != str(run.path.parent)]
    schedule["served"] = kept + [{"run": str(run.path.parent), "checks": served}]
    atomic_write(schedule_file, json.dumps(schedule, indent=2) + "\n")
    return checks, schedule_file


def check_arm(run: RunData, arm: str, plain: str, schedule: dict[str, Any]) -> ServedCheck:
    block = run.arms[arm]
    cfg = run.arm_config(arm) or {}
    concurrency = int((cfg.get("workload") or {}).get("concurrency") or 0)
    choice = next((c for c in schedule["concurrencies"] if c["concurrency"] == concurrency), None)
    k, how = served_k(cfg, concurrency, choice)
    figure = block.get(f"speedup_vs_{plain}")
    found = estimate_speedup(run, arm, plain, 0, float(figure or 0.0), concurrency, float(schedule["confidence"]))
    predicted = next((c for c in (choice or {}).get("candidates") or [] if c["k"] == k), None)
    why = ""
    if k == 0:
        why = f"it drafts nothing at concurrency {concurrency} (k=0 there: plain decoding), so there is no speedup to check"
    elif choice is None:
        swept = ", ".join(str(c["concurrency"]) for c in schedule["concurrencies"])
        why = f"the sweep measured no concurrency {concurrency} (it swept {swept})"
    elif predicted is None:
        why = f"the sweep measured no k={k} at concurrency {concurrency}"
    elif not predicted.get("interval"):
        why = f"the sweep's k={k} has no interval ({predicted.get('why') or 'too few samples'})"
    elif figure is None or not found.interval:
        why = f"the served speedup has no interval ({found.why or 'no speedup recorded'})"
    return ServedCheck(arm, concurrency, k, how, predicted or {}, found.speedup, found.interval, why)


def served_k(cfg: dict[str, Any], concurrency: int, choice: Optional[dict[str, Any]]) -> tuple[int, str]:
    """The k an arm drafts at ``concurrency``, and how it was set: its engine's reading of its
    recorded config (``Engine.served_k``: a per-batch-size table, an adaptive server, a static
    k); ``choice`` is the schedule's at that concurrency (None: it swept none)."""
    name = (cfg.get("server") or {}).get("engine")
    if name not in ENGINES:
        raise ScheduleError(f"the served run's arm config names engine {name!r}, none this harness knows "
                            f"({', '.join(ENGINES)}): its k cannot be read (is its arms/<arm>/config.yaml there?)")
    return ENGINES[name].served_k(cfg, concurrency, int(choice["k"]) if choice else None)
