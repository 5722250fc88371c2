"""A noise profile: how far each compared metric moves between identical whole runs on one
machine, and the reference-run gate's judgement of one run against it.

One run against one reference run sees only the noise inside each run (the bootstrap of
harness/gates/change.py); what the machine did between the two runs (a GPU settling at
another clock, a neighbour's job) is invisible to it, so identical runs on a drifting box
fail it now and then. A profile is K identical runs of the experiment (`specgate
calibrate`, harness/calibrate/; or, later, a history folder's runs since its last change
point): per arm and metric the K values, their median and their **between-run spread**,
the sample standard deviation of the natural logs of the values. Logs, because every
comparison here is relative (a 2 % slower run is the same noise at 100 tok/s as at
2,000), a log spread is the same for a metric and its inverse (tok/s and ms per token),
and for spreads of a few percent it equals the coefficient of variation.

A run's value x of a metric is then judged by its log ratio to the profile's median m,
with a one-sided predictive interval at gate.confidence:

    ln(x / m) ± t(K-1, confidence) · s · sqrt(1 + π / (2K))

s is the between-run spread; t the Student quantile for K-1 degrees of freedom (s is
estimated from K values); 1 is the new run's own scatter, π/(2K) the scatter of the
profile's median (the variance of a median of K normal values is about π/2 · s²/K; the
median rather than the mean, so that one odd calibration run moves the centre little).
The interval's ends, as relative changes in the worse direction, decide as every
reference verdict does: failed when even its better end is beyond the allowed change,
passed when its worse end is within it, else inconclusive.

The public API (NoiseProfile.from_results is what a history folder uses too):

    NoiseProfile.from_results(results_list, label, ...)   results.json dicts -> profile
    NoiseProfile.read(path)                                a calibration folder or noise_profile.json
    profile.to_json(), profile.arm(name), profile.judge(arm, metric, value, allowed, higher_is_better, confidence)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from harness.gates.change import Change, decide, t_cdf, t_quantile  # noqa: F401  (t_cdf, t_quantile: re-exported)
from harness.gates.client_bound import bound_figures
from harness.measure.registry import metric_value
from harness.record.kinds import kind_of
from harness.record.store import RecordError

PROFILE_FILE = "noise_profile.json"
PROFILE_VERSION = 1
MIN_RUNS = 3  # fewer measured runs of an arm: no profile (two values give a spread with one degree of freedom)
MEASURED = "measured"  # an arm block's status when its load ran (harness/run/outcome.py)
SPREAD = "sd of ln(value) between runs (sample sd, ddof 1)"


# Student's t (harness/gates/change.py), re-exported for the profile's readers

# --- the profile ----------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricNoise:
    """One metric of one arm over the profile's runs."""

    metric: str
    values: tuple[float, ...]  # one per run that measured it, in run order

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def spread(self) -> float:
        """The between-run spread: the sample sd of ln(value) (≈ the relative sd)."""
        return float(np.std(np.log(self.values), ddof=1)) if self.n >= 2 else math.nan

    def half_width(self, confidence: float) -> float:
        """Half the predictive interval of a new run's ln(value / median) (module docstring)."""
        return t_quantile(self.n - 1, confidence) * self.spread * math.sqrt(1.0 + math.pi / (2 * self.n))

    def to_json(self) -> dict[str, Any]:
        return {"values": [round(v, 6) for v in self.values], "n": self.n, "median": round(self.median, 6),
                "spread": round(self.spread, 6)}


@dataclass(frozen=True)
class ArmNoise:
    """One arm's profile: the runs that measured it, and each metric over them."""

    arm: str
    runs: tuple[str, ...]  # labels of the runs that counted
    metrics: dict[str, MetricNoise]
    identity: dict[str, Any] = field(default_factory=dict)  # what it measured (baseline_match.identity)
    notes: tuple[str, ...] = ()  # values left out, and why

    def to_json(self) -> dict[str, Any]:
        return {"runs_counted": list(self.runs), "identity": self.identity, "notes": list(self.notes),
                "metrics": {name: m.to_json() for name, m in self.metrics.items()}}


@dataclass(frozen=True)
class NoiseProfile:
    """Per arm and compared metric, its values over identical runs and their between-run spread."""

    label: str  # how verdicts name it: the calibration folder, or a history folder
    experiment: Optional[str]
    runs: tuple[str, ...]  # every run offered, counted or not
    arms: dict[str, ArmNoise]
    uncovered: dict[str, str] = field(default_factory=dict)  # arm -> why it has no profile
    about: dict[str, Any] = field(default_factory=dict)  # what was measured where and when (host, times, ...)

    @classmethod
    def from_results(cls, results_list: Sequence[Mapping[str, Any]], label: str, metrics: Sequence[str] = (),
                     run_labels: Sequence[str] = (), identities: Mapping[str, Mapping[str, Any]] | None = None,
                     about: Mapping[str, Any] | None = None) -> "NoiseProfile":
        """A profile from whole runs' results.json dicts (oldest first): `metrics` the
        compared metric paths (default: the registry's compared_by_default()), `run_labels`
        one name per run (default `run 1`, `run 2`, ...), `identities` per arm what it
        measured (harness/gates/baseline_match.py's identity; a history folder's runs read
        theirs from each record). An arm measured in fewer than MIN_RUNS runs, or with no
        metric measured that often, has no profile: `uncovered` says why. A value that was
        the client's own lag in its run (gates/client_bound.py) is left out, with a note."""
        from harness.measure.registry import compared_by_default

        paths = list(metrics) or [m.path for m in compared_by_default()]
        labels = list(run_labels) or [f"run {i + 1}" for i in range(len(results_list))]
        if len(labels) != len(results_list):
            raise ValueError(f"{len(results_list)} results but {len(labels)} run labels")
        arms, uncovered = {}, {}
        for arm in arm_names(results_list):
            found = arm_noise(arm, results_list, labels, paths, dict((identities or {}).get(arm) or {}))
            if isinstance(found, str):
                uncovered[arm] = found
            else:
                arms[arm] = found
        experiment = next((r.get("experiment") for r in results_list if r.get("experiment")), None)
        return cls(label, experiment, tuple(labels), arms, uncovered, dict(about or {}))

    @classmethod
    def read(cls, path: Path) -> "NoiseProfile":
        """A calibration folder (its noise_profile.json) or the file itself; anything torn,
        missing or not a profile is a RecordError of one sentence."""
        path = Path(path)
        file = path / PROFILE_FILE if path.is_dir() else path
        if not file.is_file():
            why = (f"has no {PROFILE_FILE} (a calibration that was interrupted, failed or is still running writes none)"
                   if path.is_dir() else "does not exist")
            raise RecordError(f"{path} is not a noise profile: it {why}; make one with specgate calibrate +exp=NAME.")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            return cls.from_json(data, label=str(path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"{file} is not a readable noise profile ({type(exc).__name__}: {exc}).") from None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], label: str) -> "NoiseProfile":
        if data.get("kind") != "noise_profile":
            raise ValueError("its kind is not noise_profile")
        arms = {}
        for name, block in data["arms"].items():
            metrics = {path: MetricNoise(path, tuple(float(v) for v in m["values"]))
                       for path, m in block["metrics"].items()}
            if any(m.n < MIN_RUNS or min(m.values) <= 0 for m in metrics.values()):
                raise ValueError(f"arm '{name}' has a metric with fewer than {MIN_RUNS} positive values")
            arms[name] = ArmNoise(name, tuple(block["runs_counted"]), metrics, dict(block.get("identity") or {}),
                                  tuple(block.get("notes") or ()))
        return cls(label, data.get("experiment"), tuple(data.get("runs") or ()), arms,
                   dict(data.get("uncovered") or {}), dict(data.get("about") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "noise_profile", "version": PROFILE_VERSION, "experiment": self.experiment,
                "spread": SPREAD, "runs": list(self.runs), "about": self.about,
                "arms": {name: arm.to_json() for name, arm in self.arms.items()}, "uncovered": self.uncovered}

    def arm(self, name: str) -> Optional[ArmNoise]:
        return self.arms.get(name)

    def describe(self, arm: str, metric: str) -> str:
        """`the noise profile of 5 runs of sim_smoke (runs/..._calibration), between-run sd 1.2%`."""
        noise = self.arms[arm].metrics[metric]
        return (f"the noise profile of {noise.n} runs of {self.experiment or 'the experiment'} ({self.label}), "
                f"between-run sd {noise.spread:.1%}")

    def judge(self, arm: str, metric: str, value: Optional[float], allowed: float, higher_is_better: bool,
              confidence: float) -> Change:
        """This run's `value` of `metric` against the profile (the module docstring's
        interval), as a Change: `worse` the relative change from the median in the worse
        direction, `low`/`high` its predictive interval, the outcome and, when inconclusive,
        why and what would decide it."""
        noise = self.arms[arm].metrics[metric]
        old = noise.median
        change = Change(metric, old, value, None, None, None, allowed, "inconclusive")
        if value is None or value <= 0 or not math.isfinite(value):
            change.why = "not measured in this run"
            return change
        sign = -1.0 if higher_is_better else 1.0
        ratio, half = math.log(value / old), noise.half_width(confidence)
        change.worse = sign * (value / old - 1.0)
        low, high = sorted(sign * (math.exp(ratio + d) - 1.0) for d in (-half, half))
        change.low, change.high = min(low, change.worse), max(high, change.worse)  # exp(log) rounds: hold the point
        return decide(change, "the predictive interval straddles the allowed change",
                      lambda: needed(change, noise, confidence))


def needed(change: Change, noise: MetricNoise, confidence: float) -> str:
    """What would decide a straddling verdict: a profile with more runs narrows the
    interval only down to the new run's own scatter (z · s), so past that a quieter machine
    or an interleaved A/B run is the way."""
    distance = abs(change.worse - change.allowed)
    z = t_quantile(10_000, confidence)
    if distance <= z * noise.spread:
        return (f"a quieter machine (between-run sd below {distance / z:.1%}: more calibration runs cannot narrow "
                f"the interval below ±{z * noise.spread:.1%}) or an A/B run (specgate ab)")
    return "a profile of more runs (calibrate.runs) or an A/B run (specgate ab)"


def arm_names(results_list: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every arm of any run, in order of first appearance."""
    names: list[str] = []
    for results in results_list:
        names += [a for a in (results.get("arms") or {}) if a not in names]
    return names


def arm_noise(arm: str, results_list: Sequence[Mapping[str, Any]], labels: list[str], paths: list[str],
              identity: dict[str, Any]) -> ArmNoise | str:
    """The arm's profile over the runs that measured it, or why it has none."""
    blocks = [(label, (r.get("arms") or {}).get(arm)) for label, r in zip(labels, results_list)]
    measured = [(label, b) for label, b in blocks if isinstance(b, dict) and b.get("status") == MEASURED]
    if len(measured) < MIN_RUNS:
        return (f"measured in {len(measured)} of {len(results_list)} runs; a profile needs at least {MIN_RUNS}")
    metrics, notes = {}, []
    for path in paths:
        values, left_out = [], []
        for label, block in measured:
            value = metric_value(block, path)
            if path in bound_figures(block):
                left_out.append(f"{label} (client-bound)")
            elif isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                values.append(float(value))
            else:
                left_out.append(f"{label} (not measured)")
        if left_out:
            notes.append(f"{path}: left out {', '.join(left_out)}")
        if len(values) >= MIN_RUNS:
            metrics[path] = MetricNoise(path, tuple(values))
        else:
            notes.append(f"{path}: {len(values)} value(s), fewer than the {MIN_RUNS} a spread needs: not profiled")
    if not metrics:
        return f"no compared metric was measured in {MIN_RUNS} runs ({'; '.join(notes)})"
    return ArmNoise(arm, tuple(label for label, _ in measured), metrics, identity, tuple(notes))


def is_profile(path: Any) -> bool:
    """Whether gate.baseline names a noise profile: a noise_profile.json, or a folder holding
    one or a calibration record (calibration.json), which then must hold one."""
    if not path:
        return False
    path = Path(str(path))
    if path.name == PROFILE_FILE or (path.is_dir() and (path / PROFILE_FILE).is_file()):
        return True
    kind = kind_of(path) if path.is_dir() else None
    return kind is not None and kind.name == "calibration"
