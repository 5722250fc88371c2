"""How often each merge gate cries wolf, and how often it catches a real slowdown, on a
machine that drifts as a GPU box does.

Measured on the simulator (process backend, the gating workload the README recommends: 64
requests of 64 tokens at concurrency 8, sim_smoke's plain arm) with the default drift model
(`+drift=gpu_box`, docs/simulator.md: a start 1 % off the next, the box wandering 3 % over two
minutes, 1 % wander of its own, 3 % step jitter), each run a fresh server, judged by the
gates the suites and `specgate ab` run, with their defaults. Four modes:

- **single**: one run against the run before it (CI against the last run on main);
- **profile**: one run against a noise profile of `--profile-runs` identical runs (the ones
  before it: each comparison its own calibration, so that a lucky or unlucky profile is one
  of many, not the whole result);
- **history**: one run against the last `--history` runs (a history folder);
- **ab**: an A/B of 3 rounds (`--ab-rounds`) in ABBA order, a fresh server per side and round.

For each: `--identical` comparisons of identical builds (how many *failed*: false alarms;
inconclusive is allowed and counted) and `--regressed` comparisons per slowdown of the
decode step (3, 5, 10 %: how many *failed*: detections).

Every run is kept in a cache folder (`--cache`), so the judging can be re-done without
measuring again (`--judge-only`), and the measuring can be split over processes
(`--part stream` and `--part ab` at once, then `--judge-only`).

    python benchmarks/verdicts.py                               # everything: ~70 min on 2 cores
    python benchmarks/verdicts.py --part ab &  python benchmarks/verdicts.py --part stream; wait
    python benchmarks/verdicts.py --judge-only                  # the table from the cache

Writes benchmarks/results/verdicts.md and verdicts.json (unless --out "").
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import gzip
import json
import pickle
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.ab.driver import RoundPair  # noqa: E402
from harness.run.compose import compose  # noqa: E402
from harness.engines import engine_of  # noqa: E402
from harness.gates.ab import no_regression_between_sides, still_open  # noqa: E402
from harness.gates.verdict import undecided  # noqa: E402
from harness.gates.change import FIRST_LOOK, Sequential  # noqa: E402
from harness.gates.reference import comparisons  # noqa: E402
from harness.gates.profile import NoiseProfile  # noqa: E402
from harness.gates.reference import no_regression_against_reference  # noqa: E402
from harness.gates.registry import ABContext, GateContext  # noqa: E402
from harness.load import LoadPlan, run_load  # noqa: E402
from harness.measure.metrics import ArmResult, summarize  # noqa: E402
from harness.record.store import RunRecord  # noqa: E402
from harness.run.outcome import ArmOutcome  # noqa: E402
from harness.run.reference import history_profile  # noqa: E402
from harness.servers.process import ProcessServer  # noqa: E402

WORKLOAD = ["workload=chat_short", "workload.num_prompts=64", "workload.concurrency=8", "workload.max_tokens=64"]
DRIFTS = {"gpu_box": ["+drift=gpu_box"], "none": []}
MODES = ("single", "profile", "history", "ab", "ab-auto")
HISTORY_START = datetime(2026, 12, 1, tzinfo=timezone.utc)  # a history's runs: an hour apart


@dataclass
class Run:
    result: ArmResult  # what summarize() made of the load
    lines: list[dict]  # its request lines
    measured_at: float  # wall-clock time (the machine's drift follows it)


@dataclass(frozen=True)
class Settings:
    identical: int
    regressed: int
    slowdowns: tuple[float, ...]
    history: int
    profile_runs: int
    drift: str
    cache: Path
    gate: tuple[str, ...] = ()  # gate.key=value for every comparison
    ab_rounds: int = 3  # rounds of each A/B
    max_rounds: int = 10  # ab-auto: ab.rounds=auto's ab.max_rounds


# --- measuring: one fresh server and one load per run, cached ---------------------------------

def arm_config(settings: Settings, slowdown: float, machine: int = 0):
    """The arm's config; `machine` is the box's state (server.sim.drift_machine_seed): runs on
    main stand for CI runs on different days, each its own; an A/B's rounds share one."""
    cfg = copy.deepcopy(composed(settings))
    OmegaConf.set_readonly(cfg, False)
    for key in ("decode_step_ms", "verify_base_ms"):  # a slower GPU step, plain and speculative alike
        cfg.server.sim[key] *= 1.0 + slowdown
    if settings.drift != "none":
        cfg.server.sim.drift_machine_seed = machine
    return cfg


@functools.lru_cache(maxsize=None)
def composed(settings: Settings):
    """The benchmark's arm, composed once (Hydra takes a second or two per composition): the
    schema's structured config, resolved, so that a server takes it typed (OmegaConf.to_object)."""
    # a 0.1 s 'model load', not the simulator's 0.5 s: every run is a fresh server (30-42 of them),
    # and how long a server takes to get healthy is no part of any verdict
    overrides = ["+exp=sim_smoke", "backend=process", "telemetry=off", "server.sim.startup_s=0.1",
                 f"record.root={settings.cache / 'records'}",
                 *WORKLOAD, *DRIFTS[settings.drift], *(f"gate.{o}" for o in settings.gate)]
    cfg = copy.deepcopy(compose(overrides).arm("baseline").cfg)
    OmegaConf.resolve(cfg)
    return cfg


def measure(settings: Settings, key: str, slowdown: float, machine: int) -> Run:
    """The run called `key` on the box in state `machine`: from the cache, else measured now (and cached)."""
    file = settings.cache / f"{key}.pkl.gz"
    if file.is_file():
        with gzip.open(file, "rb") as f:
            return pickle.load(f)
    cfg = arm_config(settings, slowdown, machine)
    server = ProcessServer("baseline", OmegaConf.to_object(cfg), settings.cache / "logs" / f"{key}.log")
    try:
        server.start()
        engine = engine_of(cfg)
        at = time.time()
        load = run_load(LoadPlan.of(cfg.workload, server.base_url, cfg.server.model_path,
                                    request_extras=engine.request_extras, spec_details=engine.spec_details))
    finally:
        server.stop()
    run = Run(summarize("baseline", load), [{**r.to_json(), "repeat": 0} for r in load.records], at)
    partial = file.with_suffix(".tmp")
    with gzip.open(partial, "wb") as f:
        pickle.dump(run, f)
    partial.replace(file)
    return run


def slowdown_name(slowdown: float) -> str:
    return f"{slowdown:.0%} slower"


def stream_keys(settings: Settings) -> list[str]:
    """The identical runs, in the order measured, one after another as runs on main would be:
    enough before the first compared one for a whole history and a profile."""
    return [f"main-{i:03d}" for i in range(settings.profile_runs + settings.history + settings.identical + 1)]


def measure_stream(settings: Settings, say: Callable[[str], None]) -> None:
    keys = stream_keys(settings)
    for i, key in enumerate(keys):
        measure(settings, key, 0.0, machine=i)
        say(f"stream: identical run {i + 1}/{len(keys)}")
    for slowdown in settings.slowdowns:
        for j in range(settings.regressed):
            measure(settings, f"slow{slowdown:.2f}-{j:03d}", slowdown, machine=10_000 + int(slowdown * 1000) * 100 + j)
            say(f"stream: {slowdown_name(slowdown)} run {j + 1}/{settings.regressed}")


def ab_rounds(settings: Settings, case: str, index: int, slowdown: float) -> list[RoundPair]:
    """One A/B of `settings.ab_rounds` rounds in ABBA order, each side a fresh server (B `slowdown` slower),
    on one box (one machine state, as in one CI job)."""
    return [ab_round(settings, case, index, slowdown, r) for r in range(settings.ab_rounds)]


def ab_round(settings: Settings, case: str, index: int, slowdown: float, r: int) -> RoundPair:
    """Round r (0-based) of one A/B: its first rounds are every A/B's of that case and index,
    fixed or sequential (the job ran on)."""
    machine = 20_000 + hash_case(case) * 1000 + index
    pair = RoundPair(r + 1)
    for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
        run = measure(settings, f"ab-{case}-{index:03d}-r{r + 1}{side}", slowdown if side == "B" else 0.0, machine)
        pair.lines[side], pair.results[side] = run.lines, run.result
    return pair


def ab_until_decided(settings: Settings, case: str, index: int, slowdown: float, gate, measure_missing: bool = True):
    """One A/B with ab.rounds=auto, as harness/ab/driver.py runs it: judged after every round
    from the first look, stopped once no verdict is open, at max_rounds at the latest.
    (verdicts, rounds); None when the cache lacks a round and measuring is off."""
    sequential = Sequential(settings.max_rounds, len(comparisons(gate)))
    pairs, verdicts = [], []
    for r in range(settings.max_rounds):
        keys = [f"ab-{case}-{index:03d}-r{r + 1}{side}" for side in "AB"]
        if not measure_missing and not all((settings.cache / f"{k}.pkl.gz").is_file() for k in keys):
            return None
        pairs.append(ab_round(settings, case, index, slowdown, r))
        if r + 1 >= FIRST_LOOK:
            verdicts = no_regression_between_sides(ABContext(gate, {"baseline": pairs}, {"A": "main", "B": "change"},
                                                             sequential))
            if not still_open(verdicts):
                break
    return verdicts, len(pairs)


def hash_case(case: str) -> int:
    return 0 if case == "identical" else int(round(float(case.removeprefix("slow")) * 100))


def ab_cases(settings: Settings) -> list[tuple[str, float, int]]:
    return [("identical", 0.0, settings.identical)] + [(f"slow{s:.2f}", s, settings.regressed) for s in settings.slowdowns]


def measure_ab(settings: Settings, say: Callable[[str], None], only: list[str] | None = None,
               modes: tuple[str, ...] = ("ab",)) -> None:
    gate = gate_of(settings)
    for case, slowdown, count in ab_cases(settings):
        if only and case not in only:
            continue
        for i in range(count):
            if "ab" in modes:
                ab_rounds(settings, case, i, slowdown)
            if "ab-auto" in modes:
                _, ran = ab_until_decided(settings, case, i, slowdown, gate)
                say(f"ab-auto: {case} {i + 1}/{count}: {ran} rounds")
            say(f"ab: {case} {i + 1}/{count}")


# --- judging: each mode's gate on the cached runs ---------------------------------------------

def gate_of(settings: Settings):
    return arm_config(settings, 0.0).gate


def judge_single(gate, reference: Run, candidate: Run) -> list:
    ctx = GateContext(arm="baseline", gate=OmegaConf.merge(gate, {"baseline": "reference"}),
                      result=candidate.result, gpu=None, plain_arm=None, results={},
                      reference=reference.result.to_json(), reference_label="the previous run", telemetry_source="off",
                      requests=candidate.lines, reference_requests=reference.lines)
    return no_regression_against_reference(ctx)


def judge_ab(gate, pairs: list[RoundPair]) -> list:
    return no_regression_between_sides(ABContext(gate, {"baseline": pairs}, {"A": "main", "B": "change"}))


@dataclass
class Tally:
    comparisons: int = 0
    failed: int = 0
    inconclusive: int = 0
    failing_metrics: Counter = field(default_factory=Counter)
    inconclusive_metrics: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # ab-auto: the rounds each A/B ran
    decided_same: int = 0  # ab-auto: A/Bs whose every verdict passed (the same within the allowed change)
    undecided: int = 0  # of the inconclusive: those with a regression-sized change undecided (exit status 6)

    def add(self, verdicts: list, rounds: int | None = None) -> None:
        self.comparisons += 1
        if rounds is not None:
            self.rounds.append(rounds)
            self.decided_same += all(v.status == "passed" and not v.inconclusive for v in verdicts)
        failed = [v for v in verdicts if v.status == "failed"]
        if failed:
            self.failed += 1
            self.failing_metrics.update(v.name.split(".", 1)[1] for v in failed)
            if len(self.examples) < 2:
                self.examples.append(failed[0].detail)
        elif any(v.status == "inconclusive" for v in verdicts):
            self.inconclusive += 1
            self.undecided += bool(undecided(verdicts))
        self.inconclusive_metrics.update(v.name.split(".", 1)[1] for v in verdicts if v.status == "inconclusive")


def cached(settings: Settings, key: str) -> Run | None:
    file = settings.cache / f"{key}.pkl.gz"
    if not file.is_file():
        return None
    with gzip.open(file, "rb") as f:
        return pickle.load(f)


def judge_stream(settings: Settings, modes: list[str]) -> dict[str, dict[str, Tally]]:
    """single, profile and history on the stream of identical runs and the regressed ones."""
    gate = gate_of(settings)
    runs = [cached(settings, key) for key in stream_keys(settings)]
    if any(run is None for run in runs):
        return {}
    first = settings.profile_runs + settings.history  # the first compared run: a whole history behind it
    judges = {"single": lambda behind, run: judge_single(gate, behind[-1], run),
              "profile": lambda behind, run: judge_profile(gate, behind[-settings.profile_runs:], run),
              "history": lambda behind, run: judge_history(settings, behind[-settings.history:], run)}
    tallies = {mode: {"identical": Tally()} for mode in modes if mode in judges}
    for i in range(first, first + settings.identical):
        for mode in tallies:
            tallies[mode]["identical"].add(judges[mode](runs[:i + 1], runs[i + 1]))
    for slowdown in settings.slowdowns:
        for j in range(settings.regressed):
            slow = cached(settings, f"slow{slowdown:.2f}-{j:03d}")
            if slow is None:
                continue
            behind = runs[:first + 1 + j % settings.identical]  # the runs on main before it (a different last one each time)
            for mode in tallies:
                tallies[mode].setdefault(slowdown_name(slowdown), Tally()).add(judges[mode](behind, slow))
    return tallies


def results_of(run: Run) -> dict:
    """A run as its results.json would hold it (the arm block is what a real run writes)."""
    block = ArmOutcome("baseline", backend="process", status="measured", result=run.result).to_json()
    return {"experiment": "sim_smoke", "status": "finished", "arms": {"baseline": block}}


def judge_against(gate, profile: NoiseProfile, candidate: Run, label: str) -> list:
    ctx = GateContext(arm="baseline", gate=OmegaConf.merge(gate, {"baseline": label}), result=candidate.result,
                      gpu=None, plain_arm=None, results={}, reference=None, reference_label=label,
                      telemetry_source="off", requests=candidate.lines, profile=profile)
    return no_regression_against_reference(ctx)


def judge_profile(gate, profile: list[Run], candidate: Run) -> list:
    """Against a noise profile of identical runs, as `specgate calibrate` writes it."""
    made = NoiseProfile.from_results([results_of(run) for run in profile], "the calibration",
                                     run_labels=[f"run {i + 1}" for i in range(len(profile))])
    return judge_against(gate, made, candidate, "the calibration")


def judge_history(settings: Settings, history: list[Run], candidate: Run) -> list:
    """Against a history folder of these runs, as gate.baseline=<folder> reads it: the runs
    written as records, their change points found, the runs since the last one the profile
    (harness/run/reference.py history_profile); the newest run when too few are left."""
    folder = Path(tempfile.mkdtemp(prefix="history-", dir=settings.cache))
    try:
        for i, run in enumerate(history):
            record = RunRecord(folder, "sim_smoke", now=HISTORY_START + timedelta(hours=i))
            record.write_data(results_of(run))
        experiment = history_experiment(settings, str(folder))
        profile = history_profile(experiment, folder)
        if profile is None:
            return judge_single(experiment.arm("baseline").cfg.gate, history[-1], candidate)
        return judge_against(experiment.arm("baseline").cfg.gate, profile, candidate, str(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def history_experiment(settings: Settings, folder: str):
    overrides = ["+exp=sim_smoke", "backend=process", "telemetry=off", *WORKLOAD, f"gate.baseline={folder}",
                 *(f"gate.{o}" for o in settings.gate)]
    return compose(overrides)


def judge_abs(settings: Settings) -> dict[str, Tally]:
    gate, tallies = gate_of(settings), {}
    for case, slowdown, count in ab_cases(settings):
        name = "identical" if case == "identical" else slowdown_name(slowdown)
        for i in range(count):
            keys = [f"ab-{case}-{i:03d}-r{r + 1}{side}" for r in range(settings.ab_rounds) for side in "AB"]
            if all((settings.cache / f"{k}.pkl.gz").is_file() for k in keys):
                tallies.setdefault(name, Tally()).add(judge_ab(gate, ab_rounds(settings, case, i, slowdown)))
    return tallies


def judge_abs_auto(settings: Settings) -> dict[str, Tally]:
    gate, tallies = gate_of(settings), {}
    for case, slowdown, count in ab_cases(settings):
        name = "identical" if case == "identical" else slowdown_name(slowdown)
        for i in range(count):
            judged = ab_until_decided(settings, case, i, slowdown, gate, measure_missing=False)
            if judged is not None:
                tallies.setdefault(name, Tally()).add(*judged)
    return tallies


# --- the table -------------------------------------------------------------------------------

def modes_of(results: dict[str, dict[str, Tally]]) -> list[str]:
    """The --modes behind these rows, in MODES' order."""
    named = {m.split(",")[0] if not m.startswith("ab, auto") else "ab-auto" for m in results}
    return [m for m in MODES if m in named]


def render(results: dict[str, dict[str, Tally]], settings: Settings, minutes: float | None) -> str:
    gate = gate_of(settings)
    took = f", {minutes:.0f} minutes of measuring" if minutes else ""
    fixed = [m for m in results if m.startswith("ab, ") and not m.startswith("ab, auto")]
    more = sorted({m.split(", ")[1].split()[0] for m in fixed} - {str(settings.ab_rounds)})
    lines = ["# Merge-gate verdicts on a drifting machine: false alarms and detection", "",
             f"`python benchmarks/verdicts.py --identical {settings.identical} --regressed {settings.regressed}"
             f"{' --drift ' + settings.drift if settings.drift != 'gpu_box' else ''}"
             f"{' --also-ab-rounds ' + ','.join(more) if more else ''}"
             f"{' --slowdowns ' + ','.join(f'{x * 100:g}' for x in settings.slowdowns) if settings.slowdowns != (0.03, 0.05, 0.10) else ''}"
             f"{' --modes ' + ','.join(modes_of(results)) if modes_of(results) != list(MODES) else ''}` on the simulator (process backend, "
             f"drift model `{settings.drift}`{took}), the gating workload (64 requests of 64 tokens at concurrency 8). "
             f"Each comparison is judged by the gate with its defaults (tolerance {gate.tolerance:.0%}, "
             f"{gate.confidence:.0%} confidence). *failed* is a red gate: a false alarm among identical builds, a "
             "detection among slower ones; *inconclusive* (the data cannot tell) passes with a warning under "
             "the default `gate.inconclusive=warn`, unless its change is the size of a regression: then it is "
             f"*undecided* and the run exits 6 (`gate.undecided=exit`; the size: worse than allowed and "
             f"than `gate.undecided_above` {gate.undecided_above:.0%}). *exit 0* is what a CI gate lets "
             "through.", "",
             "| mode | case | comparisons | failed (exit 1) | inconclusive | of them undecided (exit 6) | exit 0 | "
             "metrics that failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode, tallies in results.items():
        for case, t in tallies.items():
            metrics = ", ".join(f"{m} ×{n}" for m, n in t.failing_metrics.most_common()) or "-"
            lines.append(f"| {mode} | {case} | {t.comparisons} | {t.failed} | {t.inconclusive} | {t.undecided} | "
                         f"{t.comparisons - t.failed - t.undecided} | {metrics} |")
    more = [mode for mode in fixed if mode != f"ab, {settings.ab_rounds} rounds"]
    if more:
        lines += ["", f"The rows {', '.join(more)} extend the {settings.ab_rounds}-round A/Bs with more rounds each "
                      "(measured later, on the same A/B's machine state: as if the job ran on); cases not listed "
                      "there were not measured with that many rounds."]
    lines += ["", "Inconclusive verdicts by metric:", ""]
    for mode, tallies in results.items():
        counts = sum((t.inconclusive_metrics for t in tallies.values()), Counter())
        lines.append(f"- {mode}: " + (", ".join(f"{m} ×{n}" for m, n in counts.most_common()) or "none"))
    auto = {mode: tallies for mode, tallies in results.items() if mode.startswith("ab, auto")}
    for mode, tallies in auto.items():
        lines += ["", f"**{mode}** (`ab.rounds=auto ab.max_rounds={settings.max_rounds}`): the rounds each A/B ran "
                      "before every verdict was decided (or the last):", "",
                  "| case | A/Bs | failed | every verdict passed (the same within the allowed change) | "
                  "still open at the last round | mean rounds | most rounds |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for case, t in tallies.items():
            mean = sum(t.rounds) / len(t.rounds) if t.rounds else float("nan")
            lines.append(f"| {case} | {t.comparisons} | {t.failed} | {t.decided_same} | {t.inconclusive} | {mean:.1f} | "
                         f"{max(t.rounds, default=0)} |")
    examples = [(mode, case, e) for mode, tallies in results.items() for case, t in tallies.items() for e in t.examples[:1]]
    if examples:
        lines += ["", "Examples of failed verdicts:", ""] + [f"- {mode}, {case}: {e}" for mode, case, e in examples[:8]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--identical", type=int, default=40, help="comparisons of identical builds per mode")
    ap.add_argument("--regressed", type=int, default=20, help="comparisons per slowdown and mode")
    ap.add_argument("--slowdowns", default="3,5,10", help="decode step slowdowns in percent")
    ap.add_argument("--history", type=int, default=10, help="runs in a history")
    ap.add_argument("--profile-runs", type=int, default=5, help="identical runs in a noise profile")
    ap.add_argument("--drift", default="gpu_box", choices=sorted(DRIFTS))
    ap.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    ap.add_argument("--part", default="all", choices=("all", "stream", "ab"), help="what to measure")
    ap.add_argument("--judge-only", action="store_true", help="measure nothing: judge what the cache holds")
    ap.add_argument("--ab-rounds", type=int, default=3, help="rounds of each A/B (its first rounds are shared "
                                                             "with an A/B of fewer: the job ran on)")
    ap.add_argument("--max-rounds", type=int, default=10, help="ab-auto: ab.max_rounds")
    ap.add_argument("--also-ab-rounds", default="", help="judge A/Bs of these round counts too (from the cache), "
                                                          "e.g. 5: a row each")
    ap.add_argument("--ab-cases", default="", help="measure only these A/B cases (identical, slow0.03, ...): "
                                                   "to split the A/B over processes")
    ap.add_argument("--cache", default="/tmp/specgate-verdicts", help="every run, kept for judging again")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="folder for verdicts.md/.json; '' = none")
    ap.add_argument("--gate", action="append", default=[], help="a gate setting for every comparison, e.g. tolerance=0.02")
    args = ap.parse_args(argv)
    settings = Settings(args.identical, args.regressed, tuple(float(s) / 100 for s in args.slowdowns.split(",") if s),
                        args.history, args.profile_runs, args.drift, Path(args.cache) / args.drift, tuple(args.gate),
                        args.ab_rounds, args.max_rounds)
    (settings.cache / "logs").mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    if not args.judge_only:
        if args.part in ("all", "stream") and set(modes) - {"ab"}:
            measure_stream(settings, say)
        if args.part in ("all", "ab") and {"ab", "ab-auto"} & set(modes):
            measure_ab(settings, say, [c for c in args.ab_cases.split(",") if c],
                       tuple(m for m in modes if m in ("ab", "ab-auto")))
        if args.part != "all":
            return 0
    minutes = None if args.judge_only else (time.monotonic() - started) / 60
    results = judge_stream(settings, modes)
    if "ab" in modes:
        results[f"ab, {settings.ab_rounds} rounds"] = judge_abs(settings)
        for rounds in [int(r) for r in args.also_ab_rounds.split(",") if r]:
            results[f"ab, {rounds} rounds"] = judge_abs(dataclasses.replace(settings, ab_rounds=rounds))
    if "ab-auto" in modes:
        results[f"ab, auto (up to {settings.max_rounds})"] = judge_abs_auto(settings)
    text = render(results, settings, minutes)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "verdicts.md").write_text(text)
        data = {mode: {case: {"comparisons": t.comparisons, "failed": t.failed, "inconclusive": t.inconclusive,
                              "failing_metrics": dict(t.failing_metrics), "inconclusive_metrics": dict(t.inconclusive_metrics)}
                       for case, t in tallies.items()} for mode, tallies in results.items()}
        (out / "verdicts.json").write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
