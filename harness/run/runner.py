"""Runs an experiment's arms, one at a time, and keeps what they produced: one
`ArmOutcome` per arm, every gate verdict, and the run record (through the recorder).
No pytest here (plugin.py drives it), so the same steps serve `specgate` and the suites.
"""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness import PROJECT_ROOT, __version__
from harness.secrets import key_id
from harness.gates.baseline_match import arm_identity
from harness.run.arm import ArmFailed, ArmRun, ArmSession
from harness.config.compose import Arm, Experiment
from harness.gates.verdict import Verdict, undecided
from harness.gates.registry import configured_gates
from harness.measure.registry import basis, cross_arm, speedup_missing
from harness.measure.metrics import ArmResult, category_speedups
from harness.run.outcome import ArmOutcome
from harness.record.recorder import Recorder
from harness.record.requests import RequestColumns
from harness.record.store import FINISHED, INTERRUPTED, RUNNING, RunData
from harness.run.reference import NoReference, Reference
from harness.run.replay import drift_rows, drift_table
from harness.servers import ServerError, Session, remove_dead_sessions_leftovers
from harness.servers.base import ImageError
from harness.report.summary import format_summary
from harness.telemetry.energy import joules_per_token_ratio

__all__ = ["ArmFailed", "ArmRun", "Runner", "harness_version"]


@functools.lru_cache(maxsize=1)
def harness_version() -> dict[str, Any]:
    """The package version and, from a git checkout, the commit and whether it was dirty."""
    root = PROJECT_ROOT
    info: dict[str, Any] = {"version": __version__, "git_commit": None, "git_dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return info
    if commit.returncode == 0:
        info.update(git_commit=commit.stdout.strip(), git_dirty=bool(status.stdout.strip()))
    return info


@dataclass
class Runner:
    experiment: Experiment
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    progress: Callable[[str, Any], None] | None = None  # (arm, ProgressSnapshot)
    notes: list[str] = field(default_factory=list)  # said at the start and in the summary (e.g. replay drift of conf/)
    reference: Reference = field(default_factory=NoReference)  # what gate.baseline resolved to (run/reference.py)
    replayed: RunData | None = None  # the record a replay re-runs, read before anything started
    outcomes: dict[str, ArmOutcome] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    evaluated: set = field(default_factory=set)  # (registered gate, arm) whose test ran
    open_sessions: dict[str, ArmSession] = field(default_factory=dict)
    session: Session = field(default_factory=Session)
    cleaned_engines: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.recorder = Recorder(self.experiment)

    @functools.cached_property
    def shown_command(self) -> list[str]:
        """The command line as results.json holds it (masked once: the record is saved after every test)."""
        return self.experiment.shown_command(self.command)

    # --- one arm -----------------------------------------------------------------------
    def open_arm(self, name: str) -> ArmRun:
        """Start the arm's server and measure its workload; the server stays up until close_arm."""
        arm = self.experiment.arm(name)
        outcome = self.outcomes[name] = ArmOutcome(name, backend=arm.cfg.backend.kind, choices=arm.choices,
                                                   identity=arm_identity(arm))
        record = self.start_record()
        self.session.run, self.session.record = record.name, str(record.resolve())
        arm_session = self.open_sessions[name] = ArmSession(arm, outcome, self.recorder, self.session, self.progress)
        try:
            self.remove_dead_sessions_leftovers(arm, arm_session)
            arm_session.start()
            self.save()  # says which arm was measuring, should the run die (kill -9) during its load
            arm_session.measure()
        except ArmFailed:
            self.close_arm(name)
            self.save()
            raise
        self.save()
        return ArmRun(arm=arm, server=arm_session.server, client=arm_session.client, model=arm_session.model,
                      outcome=outcome, plain=self.plain_result(name), reference=self.reference_arm(name),
                      reference_label=self.reference_label)

    def close_arm(self, name: str) -> None:
        arm_session = self.open_sessions.pop(name, None)
        if arm_session is not None:
            arm_session.stop()

    def remove_dead_sessions_leftovers(self, arm: Arm, arm_session: ArmSession) -> None:
        """Once per container engine (or SLURM cluster): what dead specgate sessions left behind goes first.
        An engine that does not answer fails the arm in one sentence (ArmFailed)."""
        engine = (arm.cfg.backend.kind, arm.cfg.backend.docker_host)
        if engine not in self.cleaned_engines:
            try:
                remove_dead_sessions_leftovers(arm.typed, self.session)
            except (ImageError, ServerError) as exc:  # an engine or squeue that does not answer
                arm_session.fail("server_failed", f"arm '{arm.name}': {exc}")
            self.cleaned_engines.add(engine)

    def note_environment(self, name: str, processes: list, keys: list[str]) -> None:
        """The configured variables as each server process really has them (record only)."""
        self.outcomes[name].environment = [
            {"pid": p.pid, "name": p.name, "cmdline": p.command[:300], "vars": {k: p.environ.get(k) for k in keys},
             **({"where": p.where} if p.where else {})}
            for p in processes]
        self.save()

    def ends_undecided(self) -> bool:
        """Whether a verdict of the size of a regression was left undecided under gate.undecided=exit
        (the run then ends with exit status 6 if nothing failed)."""
        return any(self.experiment.arm(v.arm).cfg.gate.undecided == "exit" for v in undecided(self.verdicts)
                   if v.arm in self.experiment.arm_names)

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        self.verdicts += verdicts
        if self.recorder.started:
            self.save()

    # --- what the arms produced ----------------------------------------------------------
    @property
    def results(self) -> dict[str, ArmResult]:
        """Every arm measured so far: its result."""
        return {name: o.result for name, o in self.outcomes.items() if o.result is not None}

    @property
    def gpu(self) -> dict[str, dict]:
        return {name: o.gpu for name, o in self.outcomes.items() if o.gpu is not None}

    def plain_result(self, name: str) -> ArmResult | None:
        plain = self.experiment.plain_arm
        return self.results.get(plain) if plain and plain != name else None

    def reference_arm(self, name: str) -> dict | None:
        return self.reference.arm(name)

    def history_arms(self, name: str) -> list[dict]:
        """The arm's block in every run of a history baseline, the reference run included."""
        return self.reference.history_arms(name)

    def reference_requests(self, name: str) -> RequestColumns | list:
        """The reference run's requests of this arm: only the columns its samples need."""
        return self.reference.requests(name)

    @property
    def reference_label(self) -> str:
        return str(self.experiment.base.gate.baseline)

    def comparison(self, name: str) -> dict[str, float | None]:
        """The registry's cross-arm metrics of an arm against the plain arm (none for the plain arm)."""
        plain = self.plain_result(name)
        return cross_arm(self.results[name], plain) if plain is not None else {}

    def gates_not_evaluated(self) -> list[dict[str, str]]:
        """Gates the config asks for whose tests never ran (a suite left out, an arm
        deselected or failed): a green run must not hide them."""
        arms = [(arm.name, arm.cfg.gate) for arm in self.experiment.arms]
        return [{"name": g.name, "arm": arm, "suite": f"suites/test_{g.suite}.py"}
                for g, arm in configured_gates(arms) if (g.name, arm) not in self.evaluated]

    # --- the record ----------------------------------------------------------------------
    def start_record(self) -> Path:
        """The record folder; made on first use with a results.json that says `running`,
        so a run killed before it ends (kill -9) leaves a record that says so."""
        if not self.recorder.started:
            self.save(RUNNING)
        return self.recorder.path

    def results_json(self, status: str = RUNNING) -> dict[str, Any]:
        plain = self.experiment.plain_arm
        arms = {}
        for arm in self.experiment.arms:
            outcome = self.outcomes.get(arm.name, ArmOutcome(arm.name))
            versus = ({f"{k}_vs_{plain}": v for k, v in self.comparison(arm.name).items()}
                      if outcome.result is not None else {})
            if versus:  # what speedup and break-even rest on: both arms' steady windows, or their whole loads
                versus[f"basis_vs_{plain}"] = basis(outcome.result, self.results[plain])
                missing = speedup_missing(arm.name, outcome.result, plain, self.results[plain])
                if missing:  # a zero or missing rate divides nothing: the speedup is missing, said why
                    versus[f"speedup_missing_vs_{plain}"] = missing
            arms[arm.name] = outcome.to_json(versus) if arm.name in self.outcomes else {"status": "not_run"}
            if arm.benchmark_only:  # its acceptance was forced: a speed figure, never a quality one
                arms[arm.name]["benchmark_only"] = arm.benchmark_only
            energy_ratio = joules_per_token_ratio(outcome.gpu, self.gpu.get(plain)) if arm.name != plain else None
            if energy_ratio is not None:  # a cross-arm figure, keyed as speedup_vs_<plain> is
                arms[arm.name][f"joules_per_token_vs_{plain}"] = energy_ratio
            if outcome.result is not None:
                for category, ratio in category_speedups(outcome.result, self.plain_result(arm.name)).items():
                    arms[arm.name]["categories"][category][f"speedup_vs_{plain}"] = ratio
        return {
            "experiment": self.experiment.name,
            "description": self.experiment.description,
            "harness_version": __version__,
            "host": socket.gethostname(),
            "command": self.shown_command,
            **self.recorder.status_fields(status),  # running, finished or interrupted (README "Reading a run record")
            "interrupted": status == INTERRUPTED,  # as records before `status` said it
            "harness": harness_version(),
            "fingerprint_key": key_id(),  # which key made this record's secret fingerprints (the key is not here)
            "replay_of": str(self.replayed.path.parent) if self.replayed else None,
            "baseline": self.experiment.base.gate.baseline,
            "notes": self.notes,
            "plain_arm": plain,
            "arms": arms,
            "gates": [v.to_json() for v in self.verdicts],
            "gates_not_evaluated": self.gates_not_evaluated(),
        }

    def save(self, status: str = RUNNING) -> None:
        self.recorder.write_data(self.results_json(status))

    def drift(self) -> list[dict[str, Any]]:
        if self.replayed is None:
            return []
        return drift_rows(self.replayed.data, self.results_json(), self.experiment.base.gate)

    def scrub(self, text: str) -> str:
        """Text through the record's redaction (what it learned from the command line even
        before a record exists)."""
        return self.recorder.redactor.text(text)

    def summary(self) -> str:
        status = {name: o.to_json() for name, o in self.outcomes.items()}
        text = format_summary(self.experiment, self.results, status, self.verdicts,
                              {name: self.comparison(name) for name in self.results}, self.gpu, self.notes,
                              self.gates_not_evaluated())
        if self.replayed is not None:
            text += "\n" + drift_table(self.drift(), self.replayed.label)
        return text

    def finish(self, interrupted: bool = False) -> Path | None:
        """Stop every server; write results.json (status finished or interrupted) and
        summary.md if anything was recorded, and only then point `latest` at the record."""
        for name in list(self.open_sessions):
            self.close_arm(name)
        if not self.recorder.started:
            return None
        for outcome in self.outcomes.values():
            if interrupted and outcome.status in ("starting", "measuring"):
                outcome.status = "interrupted"
        self.save(INTERRUPTED if interrupted else FINISHED)
        self.recorder.write_summary(self.summary())
        self.recorder.point_latest()
        return self.recorder.path
