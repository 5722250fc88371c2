"""`specgate bisect`: the first value of an ordered list that regressed (harness/bisect/search.py),
each probe an A/B of that value against the good end (harness/ab/: the same rounds, record and
verdicts as `specgate ab`, `ab.rounds=auto` unless ab.rounds is given), its record whole under
the bisect's `steps/`.

A probe's outcome is its A/B's: **regressed** when a verdict failed (B worse than allowed),
**same** when every verdict passed, **undecided** otherwise, **skipped** when a side could not
be measured (its server did not start or died: an unbuildable value, as `git bisect skip`).
The ends are judged with the experiment's allowed changes; every probe between them against
half of each change the ends showed (the metrics that regressed there), so that each A/B
decides which end its value is nearer.

Exit status: 0 the first bad value was found (or the values it is among, where only skipped
ones were left); 1 the ends are no regression, the bad end could not be measured, or a probe
failed otherwise; 6 an A/B could not decide (the search stops there, saying the range left);
2 interrupted (what was decided is kept: the probes that ended, and the bracket they left);
4 a mistake on the command line, before anything starts (plan.py). Record: record.py; page:
report.py; docs/bisect.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from harness.ab.driver import ABRun, RoundFailed
from harness.ab.record import ABRecord
from harness.bisect.plan import BisectPlan
from harness.bisect.record import BisectRecord, verdict_line
from harness.bisect.search import REGRESSED, SAME, SKIPPED, UNDECIDED, Probe, Search
from harness.exit_status import FAILED, INTERRUPTED, PASSED, UNDECIDED as UNDECIDED_EXIT
from harness.gates.verdict import Verdict, failed, interval_point
from harness.interrupts import Interrupts
from harness.record.kinds import BISECT
from harness.record.secrets import Redactor
from harness.run.driver import Driver


def say(line: str) -> None:
    print(f"specgate bisect: {Redactor().text(line)}", flush=True)


def outcome_of(verdicts: list[Verdict]) -> tuple[str, str]:
    """An A/B's verdicts as a probe's outcome, and why in words."""
    if failed(verdicts):
        worst = [v for v in verdicts if v.passed is False]
        return REGRESSED, "; ".join(f"{v.arm} {v.name}: {v.detail.split(': ', 1)[-1]}" for v in worst[:2])
    open_ = [v for v in verdicts if v.status != "passed"]
    if verdicts and not open_:
        return SAME, f"every verdict passed ({len(verdicts)}): the same within the allowed change"
    if not verdicts:
        return UNDECIDED, "the A/B gave no verdict"
    return UNDECIDED, "; ".join(f"{v.arm} {v.name} {v.status}" for v in open_[:3])


def midway(verdicts: list[Verdict]) -> dict[str, float]:
    """Half the change of each compared metric that regressed between the ends (the same metric
    over several arms: the smallest, so every arm's regression stays beyond it)."""
    halves: dict[str, float] = {}
    for verdict in verdicts:
        worse = interval_point(verdict)
        if verdict.passed is False and worse is not None and worse > 0:
            metric = verdict.name.partition(".")[2]
            halves[metric] = min(halves.get(metric, worse / 2), worse / 2)
    return halves


class BisectRun:
    """The search, each probe an A/B, the record kept after each."""

    def __init__(self, plan: BisectPlan, record: BisectRecord, interrupts: Interrupts | None = None):
        self.plan, self.record = plan, record
        self.interrupts = interrupts or Interrupts()
        self.search = Search(plan.values, self.probe, self.probed)
        self.midway: dict[str, float] = {}  # metric -> half its change between the ends (once they are judged)
        record.search = self.search

    def run(self) -> None:
        self.search.run()

    def probe(self, index: int) -> Probe:
        """The A/B of value `index` against the good end, whole, in steps/."""
        plan = self.plan
        value = plan.values[index]
        ab_plan = plan.ab_plan(index, self.record.steps_root)
        ab = ABRun(ab_plan, ABRecord(ab_plan, ["specgate", "ab", *plan.ab_tokens(index, self.record.steps_root)]),
                   self.interrupts, self.probe_gate(ab_plan))
        say(f"probe {len(self.search.probes) + 1}: {plan.key}={value} against {plan.good} "
            f"({ab_plan.rounds_words}); A/B record {ab.record.path}")
        try:
            ab.run()
        except RoundFailed as exc:
            ab.record.stopped = f"{exc}; the A/B stopped there"
            ab.record.finish(ab.verdicts(), FAILED, interrupted=False)
            return Probe(index, value, SKIPPED, ab.record.scrub(str(exc)), str(ab.record.path), self.rounds(ab))
        except KeyboardInterrupt:
            ab.record.stopped = "interrupted (Ctrl-C or SIGTERM) during a bisect's probe"
            ab.record.finish(ab.verdicts(), INTERRUPTED, interrupted=True)
            raise
        verdicts = ab.verdicts()
        outcome, why = outcome_of(verdicts)
        if self.midway and outcome == SAME:
            why = f"every verdict passed ({len(verdicts)}): within half of each change the ends showed, nearer the good end"
        if not self.midway and outcome == REGRESSED:
            self.midway = midway(verdicts)
            why += "; the probes between are judged against half of each change: " + ", ".join(
                f"{metric} {allowed:.1%}" for metric, allowed in self.midway.items())
        ab.record.finish(verdicts, FAILED if outcome == REGRESSED else PASSED if outcome == SAME else UNDECIDED_EXIT,
                         interrupted=False)
        return Probe(index, value, outcome, ab.record.scrub(why), str(ab.record.path), self.rounds(ab))

    def probe_gate(self, ab_plan):
        """The ends are judged as any A/B is (gate.compare, gate.tolerance); a value between them
        against half of each change the ends showed, so that an A/B decides which end it is
        nearer: an equivalence within the 2 % tolerance would need many more rounds, and a
        value a little slower than the good end is not the regression being looked for."""
        gate = ab_plan.base.base.gate
        if not self.midway:
            return gate
        judged = OmegaConf.create(OmegaConf.to_container(gate, resolve=True))
        judged.compare = {metric: f"{allowed * 100:.4g}%" for metric, allowed in self.midway.items()}
        return judged

    @staticmethod
    def rounds(ab: ABRun) -> int:
        return max(ab.record.rounds_run().values(), default=0)

    def probed(self, probe: Probe) -> None:
        say(f"{self.plan.key}={probe.value}: {probe.outcome} ({probe.why})")
        self.record.save()


class BisectDriver(Driver):
    """Check every value, then the probes (see the module's docstring for the exit status)."""

    command, kind = "bisect", BISECT

    def compose(self, tokens: list[str], conf_dir: Path) -> BisectPlan:
        return BisectPlan.of(tokens, Path(conf_dir))

    def plan(self, plan: BisectPlan, command: list[str]) -> BisectRun:
        record = BisectRecord(plan, command)
        say(f"{plan.base.name}: {plan.key} over {len(plan.values)} values, {plan.good} (good) to {plan.bad} (bad); "
            f"record {record.path}")
        return BisectRun(plan, record)

    def measure(self, run: BisectRun, interrupts: Interrupts) -> None:
        run.interrupts = interrupts
        run.run()

    def interrupted(self, run: BisectRun) -> int:
        run.record.finish(INTERRUPTED, interrupted=True)
        print(f"specgate bisect: interrupted; what was decided is kept: {run.record.path}", file=sys.stderr)
        return INTERRUPTED

    def record(self, run: BisectRun) -> int:
        search = run.search
        if search.candidates:
            status = PASSED
        elif any(p.outcome == UNDECIDED for p in search.probes):
            status = UNDECIDED_EXIT
        else:
            status = FAILED
        run.record.finish(status, interrupted=False)
        say(verdict_line(run.record.data("finished")))
        say(f"exit status {status}; summary {run.record.path / 'summary.md'}")
        return status
