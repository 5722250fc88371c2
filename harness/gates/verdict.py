"""A verdict: one gate's judgement of one arm of a run, one curve of a sweep or one arm's
capacity, as data; how every record writes it and reads it back (results.json's `gates`,
sweep.json's `sweep_gates`, capacity.json's `gates`), how every summary prints it, and the
small builders every gate uses (at least, at most, skipped)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.measure.metrics import ArmResult
from harness.measure.registry import resolve

Scope = Literal["arm", "sweep", "capacity", "ab"]  # what a gate judges: one arm of a run, a whole sweep, a capacity search, an A/B
SCOPES: tuple[str, ...] = ("arm", "sweep", "capacity", "ab")

# How a line names each status; a sweep's undecidable curve reads "NOT EVALUABLE", not "NOT_EVALUABLE".
STATUS_WORDS = {"not_evaluable": "NOT EVALUABLE"}


@dataclass
class Verdict:
    name: str  # the gate, e.g. "min_speedup" or "max_ttft_ms.p99"
    arm: str
    passed: bool | None  # None: skipped or not evaluable (see detail)
    value: float | None
    threshold: float | None
    detail: str  # the verdict in words
    baseline: float | None = None  # the reference run's value (gate.baseline); the key records keep
    unreliable: bool = False  # too noisy over the repeats to decide (then passed is None)
    inconclusive: bool = False  # the data cannot tell (passed follows gate.inconclusive: fail, warn, pass)
    interval: list[float] | None = None  # the relative change's interval, where one was computed
    not_evaluable: bool = False  # a sweep could not tell (e.g. no point at that concurrency): neither passes nor fails
    scope: Scope = "arm"
    others: list[str] = field(default_factory=list)  # a sweep's curve: its other swept `key=value`s (JSON "with")
    # why a run that cannot be trusted made this verdict inconclusive, in a few words
    # ("client-bound: event-loop lag p99 140 ms", "GPU 0 throttled", "load too short: 2 requests")
    cause: str = ""
    # an inconclusive comparison whose change is the size of a regression (worse than the allowed
    # change and than gate.undecided_above): the data lean to a regression they cannot prove, so
    # the run does not pass silently (gate.undecided: exit status 6, a warning, or a failure)
    undecided: bool = False

    @property
    def status(self) -> str:
        if self.unreliable:
            return "unreliable"
        if self.inconclusive:
            return "inconclusive"
        if self.not_evaluable:
            return "not_evaluable"
        return {True: "passed", False: "failed", None: "skipped"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        """The one shape every record keeps (sweep.json's `with` and `status` as before)."""
        data = asdict(self)
        return {**data, "with": data.pop("others"), "status": self.status}

    @classmethod
    def from_json(cls, data: dict[str, Any], scope: Scope = "arm") -> Verdict:
        """A verdict as any record kept it, today's or an older one: sweep.json's verdicts
        before this shape had only a `status` (passed, failed, not_evaluable) and `with`;
        `scope` is what the record's kind says when the verdict does not."""
        status = data.get("status")
        passed = data["passed"] if "passed" in data else {"passed": True, "failed": False}.get(status)
        return cls(name=str(data.get("name", "")), arm=str(data.get("arm", "")), passed=passed,
                   value=data.get("value"), threshold=data.get("threshold"), detail=str(data.get("detail", "")),
                   baseline=data.get("baseline"), unreliable=bool(data.get("unreliable", status == "unreliable")),
                   inconclusive=bool(data.get("inconclusive", status == "inconclusive")),
                   interval=data.get("interval"),
                   not_evaluable=bool(data.get("not_evaluable", status == "not_evaluable")),
                   scope=data.get("scope") or scope, others=list(data.get("with") or []),
                   cause=str(data.get("cause") or ""), undecided=bool(data.get("undecided", False)))

    def line(self) -> str:
        """One line, the same in every summary and on the terminal:
        `FAILED crossover_at_least eagle3 (with drafter.num_steps=2): ...`."""
        word = STATUS_WORDS.get(self.status, self.status.upper())
        others = f" (with {', '.join(self.others)})" if self.others else ""
        return f"{word} {self.name} {self.arm}{others}: {self.detail}"


def failed(verdicts: list[Verdict]) -> bool:
    """Whether any verdict fails what it judges (a skipped or not evaluable one does not)."""
    return any(v.passed is False for v in verdicts)


def skipped(name: str, arm: str, why: str) -> Verdict:
    return Verdict(name, arm, None, None, None, why)


def not_configured(name: str, arm: str) -> Verdict:
    return skipped(name, arm, f"no threshold configured for arm '{arm}' (gate.{name.split('.')[0]})")


def fmt(value: float | None, unit: str = "") -> str:
    return "not measured" if value is None else f"{value:.2f}{unit}"


def at_least(name: str, arm: str, value: float | None, floor: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, floor, f"{arm}: {what} was not measured (threshold ≥ {floor:g}{unit})")
    passed = value >= floor
    relation = "meets" if passed else "is below"
    return Verdict(name, arm, passed, value, floor, f"{arm}: {what} {value:.2f}{unit} {relation} the floor {floor:g}{unit}")


def at_most(name: str, arm: str, value: float | None, ceiling: float, what: str, unit: str = "") -> Verdict:
    if value is None:
        return Verdict(name, arm, False, None, ceiling, f"{arm}: {what} was not measured (threshold ≤ {ceiling:g}{unit})")
    passed = value <= ceiling
    relation = "is within" if passed else "exceeds"
    return Verdict(name, arm, passed, value, ceiling, f"{arm}: {what} {value:.2f}{unit} {relation} the limit {ceiling:g}{unit}")


def guard_noise(verdicts: list[Verdict], result: ArmResult, paths: list[str], gate) -> list[Verdict]:
    """A decision on a metric whose coefficient of variation over the repeats exceeds
    gate.max_cv is noise: the verdict says so instead of passing or failing."""
    noisy = [(p, result.noise[p]["cv"]) for p in paths
             if (result.noise.get(p) or {}).get("cv") is not None and result.noise[p]["cv"] > gate.max_cv]
    if not noisy:
        return verdicts
    why = ", ".join(f"{p} CV {cv:.1%}" for p, cv in noisy)
    for verdict in verdicts:
        if verdict.passed is not None:
            verdict.passed, verdict.unreliable = None, True
            verdict.detail = f"unreliable ({why} over {result.repeats} repeats > max_cv {gate.max_cv:.1%}): {verdict.detail}"
    return verdicts


# --- a verdict's interval ------------------------------------------------------------------------

COMPARISONS = ("baseline", "ab")  # verdicts of a value against a `baseline` (a reference run, side A)


def interval_point(verdict: Verdict) -> float | None:
    """The figure a verdict's interval bounds, as the verdict shows it: for a comparison
    (`baseline.<metric>`, `ab.<metric>`) the relative change of its value against its baseline
    in the metric's worse direction (> 0 worse, as judged: harness/gates/change.py); for any
    other verdict (a speedup) its value. Every gate's lies inside its interval (one estimator
    gives both: harness/measure/estimate.py)."""
    gate, _, metric = verdict.name.partition(".")
    if gate not in COMPARISONS or not metric:
        return verdict.value
    if verdict.value is None or not verdict.baseline:
        return None
    sign = -1.0 if resolve(metric).better == "higher" else 1.0
    return sign * (verdict.value / verdict.baseline - 1.0)


def outward(low: float, high: float, digits: int = 5) -> list[float]:
    """An interval rounded outwards to `digits` decimals, for the record: rounding must not
    leave a point outside its own interval."""
    scale = 10.0 ** digits
    return [min(low, math.floor(low * scale) / scale), max(high, math.ceil(high * scale) / scale)]


def untrusted(verdict: Verdict, cause: str, why: str, passes: bool | None) -> Verdict:
    """Make `verdict` inconclusive because the run cannot be trusted for it: `cause` in a few
    words (the summary's first line groups verdicts by it), `why` the sentence it starts with;
    `passes` is gate.inconclusive's (inconclusive_passes)."""
    verdict.inconclusive, verdict.passed = True, passes
    verdict.cause = verdict.cause or cause
    verdict.detail = f"inconclusive, {why}: {verdict.detail}"
    return verdict


def mark_undecided(verdicts: list[Verdict], gate) -> list[Verdict]:
    """Each inconclusive comparison (`baseline.<metric>`, `ab.<metric>`) whose change is the
    size of a regression is undecided: inside the run-to-run floor, too few rounds, a run that
    cannot be trusted, the data lean to a regression they cannot prove. The size: worse than
    its allowed change (the verdict's threshold) and than gate.undecided_above: between two
    runs a machine's own drift moves a figure by several % (on +drift=gpu_box identical runs'
    worst metric reached +5.1 % in 40; docs/verdicts.md), and an A/B of two rounds on a busy
    box moved an identical build's by 2-5 % (its interval -13 % to +16 %). gate.undecided
    says what an undecided verdict does: `exit` (the test passes; the run ends with exit
    status 6), `warn` (passes, said) or `fail`."""
    for verdict in verdicts:
        if not verdict.inconclusive or verdict.name.partition(".")[0] not in COMPARISONS:
            continue
        worse = interval_point(verdict)
        if worse is not None and worse > max(verdict.threshold or 0.0, gate.undecided_above):
            verdict.undecided = True
            if gate.undecided == "fail":
                verdict.passed = False
    return verdicts


def undecided(verdicts: list[Verdict]) -> list[Verdict]:
    """The undecided verdicts that are no failure (their run's exit status is 6 under gate.undecided=exit)."""
    return [v for v in verdicts if v.undecided and v.passed is not False]


# what decides a comparison one run against another cannot: said wherever one is undecided
DECIDES = ("an A/B decides it (specgate ab, ab.rounds=auto: the reference's config as side A, this run's as "
           "side B), or a noise profile of this machine (specgate calibrate) or a history to judge against")
# ... and what decides an A/B's: more of its own rounds
MORE_ROUNDS = "more rounds decide it (ab.rounds=auto, or a higher ab.max_rounds)"


def undecided_sentence(verdicts: list[Verdict], decides: str = DECIDES) -> str:
    """`Undecided: eagle3 output_tok_s 9.8% worse (inside the floor ...)`: the summary's first line."""
    found = undecided(verdicts)
    if not found:
        return ""
    said = "; ".join(f"{v.arm} {v.name.partition('.')[2]} {interval_point(v):+.1%} worse" for v in found)
    return (f"Undecided: {len(found)} change(s) the size of a regression that the data could not decide ({said}); "
            f"{decides}.")


def inconclusive_passes(gate) -> bool | None:
    """gate.inconclusive: fail -> a failed test; warn -> a passing test with a warning; pass -> passing."""
    return {"fail": False, "warn": True, "pass": True}[gate.inconclusive]
