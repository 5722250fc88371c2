"""The pytest plugin: the only module that knows pytest.

Loaded with `-p harness.plugin` (pyproject's addopts), not from a conftest: pytest calls
`pytest_load_initial_conftests` only for early plugins, and that hook is where Hydra
overrides (`+exp=sim_smoke workload.max_tokens=64`) are taken off the command line before
pytest would read them as paths. The experiment is composed in `pytest_configure`, so a
config mistake stops the run before any server starts (pytest exit status 4).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Callable

import pytest

from harness.exit_status import UNDECIDED
from harness.gates import verdict
from harness.interrupts import interruptible_run
from harness.config.compose import DEFAULT_CONF_DIR, PYTEST_VALUE_OPTIONS, ConfigError, Experiment, is_override
from harness.run.compose import compose
from harness.gates.registry import GateContext, gates_of
from harness.run.preflight import check_experiment
from harness.run.replay import read_replayed, replay_experiment
from harness.load import print_progress
from harness.run.runner import ArmFailed, ArmRun, Runner
from harness.record.secrets import terminal_text
from harness.report.summary import gated_headline

OVERRIDES = pytest.StashKey[list]()
RUNNER = pytest.StashKey[Runner]()
ARMS = pytest.StashKey[list]()  # the arms --arm (or -k ARM) selected; absent: all


# --- command line -----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgate", "specgate: experiments composed from Hydra configs")
    group.addoption("--conf-dir", default=None, help="the Hydra config tree (default: <rootdir>/conf)")
    group.addoption("--no-progress", action="store_true", default=False, help="no live progress line during loads")
    group.addoption("--replay", default=None, metavar="RUN_DIR",
                    help="re-run the recorded config of a past run (key=value overrides apply on top) and print the drift")
    group.addoption("--multirun", action="store_true", default=False,
                    help="run the overrides' Hydra sweep (k=1,4 ...) as `specgate sweep` does: one whole "
                         "experiment, in its own pytest, per point")
    group.addoption("--arm", action="append", default=[], metavar="NAME",
                    help="run only this arm's tests (repeatable, or NAME,NAME); selects by arm id, where -k "
                         "matches substrings of file and test names too")


def options_taking_values(parser: pytest.Parser) -> set[str]:
    try:  # pytest keeps its argparse parser private; fall back to the common ones
        actions = parser._getparser()._option_string_actions  # noqa: SLF001
        return {flag for flag, action in actions.items() if action.nargs != 0}
    except Exception:  # pragma: no cover - depends on pytest internals
        return set(PYTEST_VALUE_OPTIONS)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    value_options = options_taking_values(parser)
    overrides, kept, previous = [], [], None
    for token in args:
        (overrides if is_override(token, previous, value_options) else kept).append(token)
        previous = token
    args[:] = kept
    early_config.stash[OVERRIDES] = overrides
    namespace = getattr(early_config, "known_args_namespace", None)
    if namespace is not None and getattr(namespace, "file_or_dir", None):
        namespace.file_or_dir = [a for a in namespace.file_or_dir if a not in overrides]


def conf_dir(config: pytest.Config) -> Path:
    if config.getoption("conf_dir"):
        return Path(config.getoption("conf_dir")).resolve()
    local = Path(config.rootpath) / "conf"
    return local if (local / "config.yaml").is_file() else DEFAULT_CONF_DIR


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`pytest suites/ +exp=NAME --multirun k=1,4`: this pytest runs no tests itself but the
    sweep (harness/sweep/driver.py), one pytest per point, and exits with the sweep's status. One
    pytest session is one experiment: its record, its exit status. (`-m` stays pytest's.)"""
    if not config.getoption("multirun"):
        return None
    from harness.sweep.driver import run_sweep  # the sweep's machinery only when one is asked for

    overrides = config.stash.get(OVERRIDES, [])
    options = [a for a in config.invocation_params.args if a not in overrides and a != "--multirun"]
    try:
        return run_sweep(overrides, options, conf_dir(config), ["pytest", *config.invocation_params.args])
    except ConfigError as exc:
        raise pytest.UsageError(terminal_text(f"specgate: {exc}", list(config.invocation_params.args))) from None


def pytest_configure(config: pytest.Config) -> None:
    overrides = config.stash.get(OVERRIDES, [])
    replay_dir, notes, replayed = config.getoption("replay"), [], None
    try:
        if replay_dir:
            experiment, notes = replay_experiment(Path(replay_dir), overrides, conf_dir(config))
            replayed, replay_notes = read_replayed(Path(replay_dir))
            notes += replay_notes
        else:
            experiment = compose(overrides, conf_dir(config))
        reference = check_experiment(experiment)  # what `specgate show` checks too; gate.baseline resolved once
    except ConfigError as exc:
        raise pytest.UsageError(terminal_text(f"specgate: {exc}", list(config.invocation_params.args))) from None
    progress = None if config.getoption("no_progress") else terminal_progress(config)
    runner = Runner(experiment, progress=progress, notes=notes + list(reference.notes), reference=reference,
                    replayed=replayed)
    config.stash[RUNNER] = runner
    arms = selected_arms(config, experiment)
    if arms is not None:
        config.stash[ARMS] = arms
    interruptible_run()  # Ctrl-C (also when inherited ignored) and SIGTERM unwind: servers stopped, record closed


def pytest_report_header(config: pytest.Config) -> list[str]:
    runner = config.stash.get(RUNNER, None)
    if runner is None:
        return []
    lines = [f"specgate: experiment {runner.experiment.name}, arms {', '.join(runner.experiment.arm_names)}"]
    if ARMS in config.stash:
        lines.append(f"specgate: selected arm(s) {', '.join(config.stash[ARMS])} by id; the others' tests are deselected")
    return lines + [f"specgate: {note}" for note in runner.notes]


def terminal_progress(config: pytest.Config):
    """Live progress line while a load runs, printed past pytest's output capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    shown: set[str] = set()

    def show(arm: str, snapshot) -> None:
        if capture is None:
            print_progress(snapshot, label=f"[{arm}] ")
            return
        with capture.global_and_fixture_disabled():
            if arm not in shown:  # start below the test file's name, not over it
                shown.add(arm)
                sys.stderr.write("\n")
            print_progress(snapshot, label=f"[{arm}] ")

    return show


# --- arms as parameters ---------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "arm_run" in metafunc.fixturenames:
        runner = metafunc.config.stash[RUNNER]
        names = ordered_arms(runner.experiment)
        # Session scope: pytest groups the tests by arm, so one server runs at a time.
        metafunc.parametrize("arm_run", names, ids=names, indirect=True, scope="session")


def selected_arms(config: pytest.Config, experiment: Experiment) -> list[str] | None:
    """The arms --arm names or, when -k is exactly an arm's name, that arm (-k alone would
    also match `test_baseline.py::...[eagle3]` for an arm named baseline); None: all."""
    wanted = [name for value in config.getoption("arm") for name in value.split(",") if name]
    keyword = (config.getoption("keyword") or "").strip()
    if not wanted and keyword in experiment.arm_names:
        wanted = [keyword]
    for name in wanted:
        if name not in experiment.arm_names:
            raise pytest.UsageError(f"specgate: --arm {name}: no such arm in experiment '{experiment.name}'; "
                                    f"arms: {', '.join(experiment.arm_names)}")
    return wanted or None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    arms = config.stash.get(ARMS, None)
    if arms is None:
        return

    def arm_of(item) -> str | None:
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("arm_run") if callspec is not None else None
    deselected = [item for item in items if arm_of(item) is not None and arm_of(item) not in arms]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


def ordered_arms(experiment: Experiment) -> list[str]:
    """The arms others are compared with first (the plain-decoding arm, then each `over` of a
    comparison gate), so that each comparison finds the other arm measured."""
    names = experiment.arm_names
    gate = experiment.base.gate
    first = [experiment.plain_arm, *(g.over for g in gate.min_speedup.values()),
             *(g.over for g in gate.min_prefix_cache_hit_rate_gain.values())]
    first = [n for i, n in enumerate(first) if n in names and n not in first[:i]]
    return first + [n for n in names if n not in first]


@pytest.fixture(scope="session")
def experiment(request: pytest.FixtureRequest) -> Experiment:
    return request.config.stash[RUNNER].experiment


@pytest.fixture(scope="session")
def runner(request: pytest.FixtureRequest) -> Runner:
    return request.config.stash[RUNNER]


@pytest.fixture(scope="session")
def arm_run(request: pytest.FixtureRequest, runner: Runner):
    """The measured arm: its server is up (for API checks), its load has run."""
    name = request.param
    failure = None
    try:
        run: ArmRun = runner.open_arm(name)
    except ArmFailed as exc:
        failure = runner.scrub(str(exc))
    if failure is not None:  # outside the except: the sentence alone, not its chain of causes
        pytest.fail(failure, pytrace=False)
    try:
        yield run
    finally:
        runner.close_arm(name)


class InconclusiveVerdict(UserWarning):
    """A comparison the data could not decide (gate.inconclusive=warn)."""


class GateChecker:
    """Records verdicts in the run record, then passes, fails or skips the test with
    the verdicts in words. Every verdict is kept, so the summary shows them all."""

    def __init__(self, runner: Runner, node: pytest.Item):
        self.runner = runner
        self.node = node

    def check(self, verdicts: list[verdict.Verdict], registered: str | None = None, arm: str | None = None) -> None:
        """Record and decide; `registered`/`arm` mark that gate as evaluated for the arm."""
        if registered is not None:
            self.runner.evaluated.add((registered, arm))
        self.runner.add_verdicts(verdicts)
        for v in verdicts:  # JUnit XML properties: CI tools show the numbers, not only pass/fail
            prefix = f"{v.name}[{v.arm}]"
            self.node.user_properties += [(f"{prefix}.status", v.status), (f"{prefix}.value", v.value),
                                          (f"{prefix}.threshold", v.threshold), (f"{prefix}.baseline", v.baseline)]
        scrub = self.runner.scrub  # messages reach the terminal and JUnit: no secret in them
        failed = [v for v in verdicts if v.passed is False]
        if failed:
            pytest.fail(scrub("\n".join(v.detail for v in failed)), pytrace=False)
        for v in verdicts:  # gate.inconclusive=warn: the test passes, and pytest's summary says why
            if v.inconclusive and v.passed and self.runner.experiment.arm(v.arm).cfg.gate.inconclusive == "warn":
                warnings.warn(InconclusiveVerdict(scrub(v.detail)))
        if all(v.passed is None for v in verdicts):
            pytest.skip(scrub("; ".join(v.detail for v in verdicts)))


@pytest.fixture
def gates(runner: Runner, request: pytest.FixtureRequest) -> GateChecker:
    return GateChecker(runner, request.node)


@pytest.fixture
def gate_context(arm_run: ArmRun, runner: Runner) -> GateContext:
    """What every registered gate reads for the arm under test."""
    return GateContext(arm=arm_run.name, gate=arm_run.cfg.gate, result=arm_run.result, gpu=arm_run.outcome.gpu,
                       plain_arm=runner.experiment.plain_arm, results=runner.results,
                       reference=arm_run.reference, reference_label=arm_run.reference_label,
                       requests=arm_run.outcome.request_lines, reference_requests=runner.reference_requests(arm_run.name),
                       history=runner.history_arms(arm_run.name), profile=runner.reference.profile,
                       arm_requests={name: o.request_lines for name, o in runner.outcomes.items()},
                       server_windows=arm_run.outcome.server_windows, fleet=arm_run.outcome.fleet, arm_gpus=runner.gpu,
                       telemetry_source=arm_run.cfg.telemetry.source,
                       benchmark_only={a.name: a.benchmark_only for a in runner.experiment.arms if a.benchmark_only})


def gate_tests(suite: str) -> dict[str, Callable[..., None]]:
    """A suite module's tests, one `test_<gate>` per registered gate of the suite:
    `globals().update(gate_tests("throughput"))`."""
    def test_of(registered):
        def test(gate_context: GateContext, gates: GateChecker) -> None:
            gates.check(registered.check(gate_context), registered.name, gate_context.arm)

        test.__name__ = test.__qualname__ = f"test_{registered.name}"
        test.__doc__ = registered.check.__doc__
        return test

    return {f"test_{g.name}": test_of(g) for g in gates_of(suite)}


# --- end of session: stop everything, write the record, say what happened --------------


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    runner = session.config.stash.get(RUNNER, None)
    if runner is not None:
        runner.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if exitstatus == pytest.ExitCode.OK and runner.ends_undecided():
            session.exitstatus = UNDECIDED  # could not decide must not look like passed


def pytest_unconfigure(config: pytest.Config) -> None:
    runner = config.stash.get(RUNNER, None)
    if runner is not None and runner.open_sessions:  # a backstop: nothing may outlive the run
        runner.finish(interrupted=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    runner = config.stash.get(RUNNER, None)
    if runner is None or not runner.recorder.started:  # nothing was measured
        return
    terminalreporter.section("specgate summary")
    terminalreporter.write(runner.scrub(runner.summary()))
    terminalreporter.write_line(runner.scrub(gated_headline(runner.verdicts)), bold=True)  # said first and last
    terminalreporter.write_line(f"run record: {runner.recorder.path}")
