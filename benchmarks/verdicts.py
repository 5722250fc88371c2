"""How often the reference-run gate cries wolf, and how often it catches a real slowdown.

Measured on the simulator with the process backend, each run a fresh server and one load,
judged by the same gate the suites run (harness.gates.registry.no_regression_against_reference,
with the default compared metrics and settings):

- **false alarms**: N + 1 identical runs, each compared with the one before it (as CI
  compares a change with the last run on main): how many comparisons failed;
- **detection**: for a decode step 3 %, 5 % and 10 % slower, R runs each compared with
  one of the identical runs: how many failed (inconclusive is not a detection).

Two workloads: sim_smoke's own (4 requests of ~200 tokens, one at a time) and the
gating workload the README recommends (64 requests of 64 tokens at concurrency 8).

    python benchmarks/verdicts.py                       # 40 identical + 3 x 20 regressed, both workloads
    python benchmarks/verdicts.py --identical 8 --regressed 4 --slowdowns 10 --workloads gating

Writes benchmarks/results/verdicts.md and verdicts.json (unless --out "").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.config.compose import compose  # noqa: E402
from harness.engines import engine_of  # noqa: E402
from harness.gates.registry import GateContext
from harness.gates.reference import no_regression_against_reference  # noqa: E402
from harness.load import LoadPlan, run_load  # noqa: E402
from harness.measure.metrics import ArmResult, summarize  # noqa: E402
from harness.servers.process import ProcessServer  # noqa: E402

WORKLOADS = {
    "default": [],  # sim_smoke's workload: count_to_100 with 4 measured requests
    "gating": ["workload=chat_short", "workload.num_prompts=64", "workload.concurrency=8", "workload.max_tokens=64"],
}


@dataclass
class Run:
    result: ArmResult  # what summarize() made of the load
    lines: list[dict]  # its requests.jsonl lines


@dataclass
class Tally:
    comparisons: int = 0
    failed: int = 0
    inconclusive: int = 0
    failing_metrics: Counter = field(default_factory=Counter)
    inconclusive_metrics: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    changes: dict = field(default_factory=dict)  # metric -> measured relative regressions (for choosing tolerances)


GATE_OVERRIDES: list[str] = []  # --gate key=value, e.g. tolerance=0.02


def arm_config(workload: str, slowdown: float, log_dir: Path):
    overrides = ["+exp=sim_smoke", "backend=process", "telemetry=off", f"record.root={log_dir}", *WORKLOADS[workload],
                 *(f"gate.{o}" for o in GATE_OVERRIDES)]
    cfg = compose(overrides).arm("baseline").cfg
    cfg = OmegaConf.to_container(cfg, resolve=True)
    for key in ("decode_step_ms", "verify_base_ms"):  # a slower GPU step, plain and speculative alike
        cfg["server"]["sim"][key] *= 1.0 + slowdown
    return OmegaConf.create(cfg)


def measure(workload: str, slowdown: float, log_dir: Path, index: int) -> Run:
    cfg = arm_config(workload, slowdown, log_dir)
    server = ProcessServer("baseline", cfg, log_dir / f"server-{index}.log")
    try:
        server.start()
        engine = engine_of(cfg)
        load = run_load(LoadPlan.of(cfg.workload, server.base_url, cfg.server.model_path,
                                    request_extras=engine.request_extras, spec_details=engine.spec_details))
    finally:
        server.stop()
    return Run(summarize("baseline", load), [{**r.to_json(), "repeat": 0} for r in load.records])


def judge(reference: Run, candidate: Run, cfg) -> list:
    ctx = GateContext(arm="baseline", gate=OmegaConf.merge(cfg.gate, {"baseline": "reference"}),
                      result=candidate.result, gpu=None, plain_arm=None, results={},
                      reference=reference.result.to_json(), reference_label="the previous run", telemetry_source="off",
                      requests=candidate.lines, reference_requests=reference.lines)
    return no_regression_against_reference(ctx)


def tally(verdicts: list, into: Tally) -> None:
    into.comparisons += 1
    for v in verdicts:
        if v.value is not None and v.baseline:
            worse = (v.value / v.baseline - 1.0) * (1.0 if v.name.split(".")[1].endswith("_ms") else -1.0)
            into.changes.setdefault(v.name.removeprefix("baseline."), []).append(round(worse, 5))
    failed = [v for v in verdicts if v.status == "failed"]
    if failed:
        into.failed += 1
        into.failing_metrics.update(v.name for v in failed)
        if len(into.examples) < 3:
            into.examples.append(failed[0].detail)
    elif any(v.status == "inconclusive" for v in verdicts):
        into.inconclusive += 1
    into.inconclusive_metrics.update(v.name for v in verdicts if v.status == "inconclusive")


def run_workload(workload: str, identical: int, regressed: int, slowdowns: list[float], log_dir: Path,
                 say) -> dict[str, Tally]:
    cfg = arm_config(workload, 0.0, log_dir)
    tallies: dict[str, Tally] = {"identical": Tally()}
    runs = []
    for i in range(identical + 1):
        runs.append(measure(workload, 0.0, log_dir, len(runs)))
        if i:
            tally(judge(runs[i - 1], runs[i], cfg), tallies["identical"])
        say(f"{workload}: identical run {i + 1}/{identical + 1}")
    for slowdown in slowdowns:
        name = f"{slowdown:.0%} slower"
        tallies[name] = Tally()
        for i in range(regressed):
            slow = measure(workload, slowdown, log_dir, 1000 + i)
            tally(judge(runs[i % len(runs)], slow, cfg), tallies[name])
            say(f"{workload}: {name} run {i + 1}/{regressed}")
    return tallies


def render(results: dict[str, dict[str, Tally]], elapsed_s: float, args) -> str:
    settings = "".join(f" --gate {g}" for g in args.gate)
    gate_cfg = arm_config(next(iter(results)), 0.0, Path(args.logs)).gate
    tolerance, confidence = gate_cfg.tolerance, gate_cfg.confidence
    lines = ["# Reference-run verdicts: false alarms and detection", "",
             f"`python benchmarks/verdicts.py --identical {args.identical} --regressed {args.regressed}{settings}` "
             f"on the simulator (process backend), {elapsed_s / 60:.1f} minutes. Each comparison is one fresh run "
             "against another, judged by the gate with its defaults (the registry's compared metrics, "
             f"tolerance {tolerance:.0%}, {confidence:.0%} confidence). *failed* is a red gate; *inconclusive* (the data cannot tell) "
             "passes with a warning under the default `gate.inconclusive=warn`.", "",
             "| workload | case | comparisons | failed | inconclusive | metrics that failed |",
             "| --- | --- | --- | --- | --- | --- |"]
    for workload, tallies in results.items():
        for case, t in tallies.items():
            metrics = ", ".join(f"{m.removeprefix('baseline.')} ×{n}" for m, n in t.failing_metrics.most_common()) or "-"
            lines.append(f"| {workload} | {case} | {t.comparisons} | {t.failed} | {t.inconclusive} | {metrics} |")
    lines += ["", "Measured change per comparison (how much worse; median and 5th-95th percentile):", "",
              "| workload | case | metric | median | 5th | 95th |", "| --- | --- | --- | --- | --- | --- |"]
    for workload, tallies in results.items():
        for case, t in tallies.items():
            for m, values in t.changes.items():
                q = np.percentile(values, [50, 5, 95])
                lines.append(f"| {workload} | {case} | {m} | {q[0]:+.1%} | {q[1]:+.1%} | {q[2]:+.1%} |")
    lines += ["", "Inconclusive verdicts by metric (all cases):", ""]
    for workload, tallies in results.items():
        counts = sum((t.inconclusive_metrics for t in tallies.values()), Counter())
        lines.append(f"- {workload}: " + (", ".join(f"{m.removeprefix('baseline.')} ×{n}" for m, n in counts.most_common()) or "none"))
    examples = [e for tallies in results.values() for t in tallies.values() for e in t.examples[:1]]
    if examples:
        lines += ["", "Examples of failed verdicts:", ""] + [f"- {e}" for e in examples[:6]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--identical", type=int, default=40, help="comparisons of identical runs (N + 1 runs)")
    ap.add_argument("--regressed", type=int, default=20, help="runs per slowdown")
    ap.add_argument("--slowdowns", default="3,5,10", help="decode step slowdowns in percent")
    ap.add_argument("--workloads", default="default,gating", help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="folder for verdicts.md/.json; '' = none")
    ap.add_argument("--logs", default="/tmp/specgate-verdicts", help="server logs")
    ap.add_argument("--gate", action="append", default=[], help="a gate setting for every comparison, e.g. tolerance=0.02")
    args = ap.parse_args(argv)
    GATE_OVERRIDES[:] = args.gate
    log_dir = Path(args.logs)
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = {w: run_workload(w, args.identical, args.regressed, [float(s) / 100 for s in args.slowdowns.split(",") if s],
                               log_dir, lambda line: print(line, file=sys.stderr, flush=True))
               for w in args.workloads.split(",")}
    text = render(results, time.monotonic() - started, args)
    print(text)
    if args.out:
        out = Path(args.out)
        (out / "verdicts.md").write_text(text)
        data = {w: {case: {"comparisons": t.comparisons, "failed": t.failed, "inconclusive": t.inconclusive,
                           "failing_metrics": dict(t.failing_metrics), "inconclusive_metrics": dict(t.inconclusive_metrics),
                           "changes": t.changes}
                    for case, t in tallies.items()} for w, tallies in results.items()}
        (out / "verdicts.json").write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
