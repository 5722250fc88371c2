"""`specgate`: look at experiments without running them, or run one.

    specgate list                      experiments and their one-line descriptions
    specgate show +exp=NAME [k=v ...]  the composed config of each arm
    specgate run  +exp=NAME [k=v ...]  the same as `pytest suites/ +exp=NAME ...`
    specgate sweep +exp=NAME k=1,4 ... one whole experiment per point of a Hydra sweep
    specgate capacity +exp=NAME slo.tpot_ms.p99=50 ...  per arm, the largest load meeting every SLO
    specgate ab +exp=NAME [k=v ...] a:k=v b:k=v   side B against side A in alternating rounds (ABBA)
    specgate calibrate +exp=NAME calibrate.runs=5  identical runs -> a noise profile for gate.baseline
    specgate replay RUN_DIR [k=v ...]  re-run a recorded run's config; print the drift
    specgate compare RUN RUN [...]     arms x metrics side by side across runs
    specgate report RUN_DIR [-o FILE]  one self-contained HTML report of a record, the page of its kind
                                       (a run, a sweep: its break-even map, capacity, A/B, calibration)
    specgate schedule SWEEP_DIR [--arm A] per concurrency the fastest k (or plain) with its interval;
                                       schedule.json, schedule.md and the engines' forms in the sweep
    specgate schedule SWEEP_DIR --served RUN_DIR
                                       did the schedule hold when served back: each arm's speedup
                                       against the sweep's interval (exit 1 when one did not, or
                                       could not be checked)
    specgate history DIR [--metric PATH ...] [--experiment NAME] [-o FILE]
                                       a folder of run records over time, with change points
    specgate clean [--images]          remove every container (and image) specgate labelled, cancel its SLURM jobs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from harness.exit_status import MISTAKE
from harness import SUITES_DIR, __version__
from harness.report.compare import CompareError
from harness.record.secrets import terminal_text
from harness.config.compose import DEFAULT_CONF_DIR, ConfigError, list_experiments
from harness.run.compose import compose
from harness.record.store import RecordError
from harness.record.kinds import RUN
from harness.report.page import ReportError
from harness.run.driver import split_tokens  # noqa: F401 (also the sweep tests' way in)
from harness.schedule.grid import ScheduleError

USAGE_ERROR = MISTAKE  # a config, input or usage mistake (2 is Ctrl-C)


def cmd_list(args: argparse.Namespace) -> int:
    experiments = list_experiments(args.conf_dir)
    width = max((len(name) for name in experiments), default=0)
    for name, description in experiments.items():
        print(f"{name.ljust(width)}  {description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Each arm's composed config as the record will hold it: written from the typed config,
    each secret as its fingerprint."""
    from harness.run.preflight import check_experiment

    experiment = compose(args.overrides, args.conf_dir)
    check_experiment(experiment)  # every check `run` makes before a server starts: show refuses what run refuses
    print(f"# experiment: {experiment.name} — {experiment.description}")
    for arm in experiment.arms:
        print(f"\n# ---- arm: {arm.name}  (overrides: {' '.join(arm.shown_overrides) or 'none'})")
        print(yaml.safe_dump(OmegaConf.to_container(arm.cfg, resolve=True), sort_keys=False), end="")
    return 0


def hydra_overrides(tokens: list[str]) -> list[str]:
    """The Hydra overrides among a command line's tokens (the rest are pytest's)."""
    return split_tokens(tokens)[0]


class RunCommand:
    """`specgate run`: a run follows the drivers' shape inside pytest (the plugin composes and
    plans, harness/run/runner.py measures, the run record's kind carries its page), so its entry
    is a driver's, handing the tokens to pytest."""

    command, kind = "run", RUN

    def main(self, tokens: list[str], conf_dir: Path, command: list[str]) -> int:
        import pytest

        compose(hydra_overrides(tokens), conf_dir)  # fail fast, with the same sentence, before pytest starts
        # everything else (-k eagle3, -v, --junitxml=...) is pytest's
        return int(pytest.main([str(SUITES_DIR), "-p", "harness.plugin", "--conf-dir", str(conf_dir), *tokens]))


def drivers() -> dict[str, Any]:
    """Every driver command by name, each run as `main(tokens, conf_dir, command)` (harness/run/driver.py).
    Imported when a driver command runs, so that `specgate list` or `report` stays quick."""
    from harness.ab.driver import ABDriver
    from harness.bisect.driver import BisectDriver
    from harness.calibrate.driver import CalibrateDriver
    from harness.capacity.driver import CapacityDriver
    from harness.sweep.driver import SweepDriver

    return {driver.command: driver for driver in (RunCommand, SweepDriver, CapacityDriver, ABDriver, CalibrateDriver,
                                                  BisectDriver)}


def cmd_driver(args: argparse.Namespace) -> int:
    driver = drivers()[args.command]()
    return driver.main(args.tokens, args.conf_dir, ["specgate", args.command, *args.tokens])


# each driver command's help and the help of its tokens: what `specgate COMMAND --help` says
DRIVER_COMMANDS = {
    "run": ("run the suites on an experiment (pytest options pass through)",
            "Hydra overrides and pytest options, e.g. +exp=sim_smoke -k eagle3 -v"),
    "sweep": ("one whole experiment per point of a Hydra sweep, one after another",
              "Hydra overrides with sweeps (k=1,4  k=range(1,9,2)  k=choice(a,b)) and pytest options"),
    "capacity": ("per arm, the largest concurrency or request rate that meets every SLO",
                 "Hydra overrides, e.g. +exp=sim_capacity slo.tpot_ms.p99=50 capacity.dimension=request_rate"),
    "ab": ("side B against side A, measured in alternating rounds on this machine",
           "Hydra overrides for both sides, a:KEY=VALUE for side A's own, b:KEY=VALUE for side B's, "
           "e.g. +exp=sim_smoke b:server.sim.decode_step_ms=4.4 ab.rounds=3"),
    "calibrate": ("identical whole runs, one after another: a noise profile for gate.baseline",
                  "Hydra overrides and pytest options, e.g. +exp=sim_smoke calibrate.runs=5"),
    "bisect": ("the first value of an ordered list that regressed, by A/B against the first (good) value",
               "Hydra overrides, one KEY=V0,V1,...,Vn (the first good, the last bad), e.g. +exp=sim_smoke "
               "server.sim.decode_step_ms=4.0,4.1,4.2,4.3"),
}


def cmd_replay(args: argparse.Namespace) -> int:
    import pytest

    pytest_args = [str(SUITES_DIR), "-p", "harness.plugin", "--conf-dir", str(args.conf_dir),
                   "--replay", str(args.run_dir), *args.overrides]
    return int(pytest.main(pytest_args))


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.report.compare import compare_runs

    print(compare_runs(args.runs), end="")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.record.kinds import kind_of

    # the page of the record's kind; a folder of no kind is read as a run, whose reader says what is missing
    print(f"report: {(kind_of(args.run_dir) or RUN).write_page(args.run_dir, args.output)}")
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from harness.schedule.make import make_schedule

    if args.served is not None:
        from harness.schedule.served import check_served

        checks, written = check_served(args.sweep_dir, args.served)
        for check in checks:
            print(check.words())
        held = sum(c.held is True for c in checks)
        print(f"served schedule: {held} of {len(checks)} arm(s) held; {written}")
        return 0 if held == len(checks) else 1
    data, written = make_schedule(args.sweep_dir, args.arm, args.confidence)
    for choice in data["concurrencies"]:
        print(choice["words"])
    print(f"schedule: {', '.join(str(p) for p in written)}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from harness.history.folder import read_history
    from harness.history.report import history_text, write_history_page

    history = read_history(args.folder, args.metric, args.experiment)
    print(history_text(history), end="")
    print(f"history: {write_history_page(history, args.output)}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove every container specgate labelled (e.g. after a kill -9), on the local engine or
    --docker-host, with --images also the images it built; remove the temp folders that dead
    harnesses' process servers left; and cancel every SLURM job of this user that specgate
    started, where SLURM is installed. Exit 4 when something could not be removed or the
    Docker engine cannot be reached; a SLURM whose controller does not answer is said on
    stderr but is not a failure: its jobs could not even be listed (a machine with SLURM's
    client and no cluster, as CI's before its cluster starts)."""
    from harness.servers.base import ServerError
    from harness.servers.images import ImageError, docker_client, remove_labelled_images
    from harness.servers.labels import remove_containers
    from harness.servers.process import remove_dead_sessions_tmp_dirs
    from harness.servers.srun import SlurmUnreachable, cancel_jobs

    status = 0
    try:
        client = docker_client(args.docker_host)
    except ImageError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        client, status = None, USAGE_ERROR  # nothing to clean with there: like a run that cannot start here
    if client is not None:
        removed = remove_containers(client, only_dead=False)
        print(f"removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}")
        if args.images:
            print(f"removed {remove_labelled_images(client)} image(s)")
    left = remove_dead_sessions_tmp_dirs()
    if left:
        print(f"removed {len(left)} temp folder(s) of dead sessions' servers: {', '.join(left)}")
    try:
        cancelled = cancel_jobs(only_dead=False)
    except SlurmUnreachable as exc:
        print(f"specgate: SLURM's jobs were not checked: {exc}", file=sys.stderr)
        return status
    except ServerError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if cancelled:
        print(f"cancelled {len(cancelled)} SLURM job(s): {', '.join(cancelled)}")
    return status


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a mistake like any other: one sentence and exit
    status 4 (argparse's own 2 is what README keeps for an interrupted run)."""

    def error(self, message: str):
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="specgate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--conf-dir", type=Path, default=DEFAULT_CONF_DIR, help="the Hydra config tree")
    root.add_argument("--version", action="version", version=f"specgate {__version__}")
    commands = root.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list experiments").set_defaults(func=cmd_list)
    replay = commands.add_parser("replay", help="re-run a recorded run's config and print the drift")
    replay.add_argument("run_dir", type=Path, help="a run record folder (e.g. runs/latest)")
    replay.add_argument("overrides", nargs="*", help="key=value overrides on the recorded config")
    replay.set_defaults(func=cmd_replay)
    compare = commands.add_parser("compare", help="arms x metrics side by side across runs")
    compare.add_argument("runs", type=Path, nargs="+", help="run record folders or results.json files")
    compare.set_defaults(func=cmd_compare)
    report = commands.add_parser("report", help="one self-contained HTML page of a record, the page of its kind")
    report.add_argument("run_dir", type=Path, help="a record folder: a run's, a sweep's (its break-even map), a capacity "
                                                   "record's, an A/B record's or a calibration's")
    report.add_argument("-o", "--output", type=Path, default=None, help="where to write (default <run>/report.html)")
    report.set_defaults(func=cmd_report)
    schedule = commands.add_parser("schedule", help="from a sweep over concurrency x k: per concurrency the fastest "
                                                    "k (or plain decoding), and the schedule in the engines' forms")
    schedule.add_argument("sweep_dir", type=Path, help="a sweep's folder (specgate sweep ... drafter.num_steps=1,2,3)")
    schedule.add_argument("--arm", default=None, help="the speculative arm to schedule, when the sweep has several")
    schedule.add_argument("--confidence", type=float, default=0.95,
                          help="one-sided confidence at each end of the intervals (default 0.95, as gate.confidence)")
    schedule.add_argument("--served", type=Path, default=None, metavar="RUN_DIR",
                          help="a run that served the schedule back (its engine form, best beside a static k and "
                               "plain): check each arm's speedup against the interval the sweep predicted")
    schedule.set_defaults(func=cmd_schedule)
    history = commands.add_parser("history", help="a folder of run records over time: each arm's headline metrics "
                                                  "with their change points (a table and an HTML page)")
    history.add_argument("folder", type=Path, help="a folder of run records (e.g. runs/)")
    history.add_argument("--metric", action="append", default=[], metavar="PATH",
                         help="another metric path of an arm's results (e.g. ttft_ms.p99); repeatable")
    history.add_argument("--experiment", default=None, metavar="NAME",
                         help="the experiment whose runs to read, when the folder holds runs of several")
    history.add_argument("-o", "--output", type=Path, default=None, help="where to write the page (default DIR/history.html)")
    history.set_defaults(func=cmd_history)
    clean = commands.add_parser("clean", help="remove every container specgate labelled, cancel its SLURM jobs")
    clean.add_argument("--docker-host", default=None, help="another engine (ssh://..., tcp://...)")
    clean.add_argument("--images", action="store_true", help="also remove the images specgate built")
    clean.set_defaults(func=cmd_clean)
    show = commands.add_parser("show", help="print each arm's composed config")
    show.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +exp=sim_smoke workload.max_tokens=64")
    show.set_defaults(func=cmd_show)
    for name, (help_text, tokens_help) in DRIVER_COMMANDS.items():
        driver = commands.add_parser(name, help=help_text)
        # capacity takes Hydra overrides only; the others pass pytest's options through
        driver.add_argument("tokens", nargs="*" if name == "capacity" else argparse.REMAINDER, help=tokens_help)
        driver.set_defaults(func=cmd_driver)
    return root


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, RecordError, CompareError, ReportError, ScheduleError) as exc:
        print(f"specgate: {terminal_text(str(exc), argv)}", file=sys.stderr)
        return USAGE_ERROR



if __name__ == "__main__":
    sys.exit(main())
