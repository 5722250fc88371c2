"""What every test area shares: the running test, told to the whole-run helper
(tests/support/runs.py) so that it can refuse to start a run under an unmarked test, and the
sim_smoke runs that several areas read."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from filelock import FileLock
from xdist.scheduler import LoadFileScheduling

from tests.support import runs

# Started as a background job of a non-interactive shell (`make test &`, nohup, some CI
# runners), this process inherits SIGINT ignored, and so would every server, load and run it
# starts, so the Ctrl-C tests would test nothing (../shared/FACTS.md). Its children get the
# default back: a Python handler is reset to the default on exec, an ignored signal is not.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


WHOLE_RUN_MARKERS = ("slow", "cluster", "real_engine", "benchmark_reduced", "serial")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that start whole runs first, each file's tests in their order: `make test`'s
    workers take a file at a time in this order (--dist loadfile --no-loadscope-reorder; xdist's
    default hands out the files with the most tests first), so the minutes-long ones
    start early and the quick ones fill the gaps at the end, instead of one worker finishing
    a three-minute sweep while the other waits."""
    heavy_files = {item.path for item in items if any(item.get_closest_marker(m) for m in WHOLE_RUN_MARKERS)}
    root = Path(__file__).resolve().parent

    def rank(item: pytest.Item) -> tuple[int, int]:
        longest = [root / name for name in LONGEST_FILES]
        return (item.path not in heavy_files, longest.index(item.path) if item.path in longest else len(longest))

    items.sort(key=rank)  # stable: the order within each file stays


# Files that read one session's run (a session fixture in their folder's conftest.py): under
# --dist loadfile each file is a unit of work, so two such files on two workers would start the
# run twice (or one would wait out the other's). Their unit is the group instead.
SHARED_RUN_FILES = {
    "tests/engines/test_vllm_cpu.py": "tests/engines/conftest.py::vllm_run",
    "tests/engines/test_vllm_eagle3.py": "tests/engines/conftest.py::vllm_run",
}


class SharedRunFileScheduling(LoadFileScheduling):
    """xdist's loadfile, the files of SHARED_RUN_FILES one unit (xdist's own loadgroup cannot do
    this under pytest 9: it renames `item._nodeid`, which pytest 9 no longer reads)."""

    def _split_scope(self, nodeid: str) -> str:
        file = LoadFileScheduling._split_scope(self, nodeid)
        return SHARED_RUN_FILES.get(file, file)


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadFileScheduling | None:
    return SharedRunFileScheduling(config, log) if config.getoption("dist") == "loadfile" else None


# the longest files of the first pass, by `make test`'s --durations (two sweeps, 2-3 min on 2 cores, and a run)
LONGEST_FILES = ("sweep/test_sweep_crossover.py", "schedule/test_schedule_sim.py", "e2e/test_steady_window.py")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the fixtures: a module-scoped fixture that starts a run is set up here, in its first test.
    runs.current_test = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    runs.current_test = None


@dataclass(frozen=True)
class WholeRun:
    """A finished `pytest suites/ ...` in a subprocess: its output and its record."""

    proc: subprocess.CompletedProcess
    root: Path  # record.root: the record is root/latest
    marker: str  # the simulator's model path, to find its processes

    @property
    def record(self) -> Path:
        return (self.root / "latest").resolve()

    @property
    def results(self) -> dict:
        return json.loads((self.record / "results.json").read_text())

    def to_json(self) -> dict:
        proc = self.proc
        return {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                "root": str(self.root), "marker": self.marker}

    @classmethod
    def from_json(cls, data: dict) -> "WholeRun":
        proc = subprocess.CompletedProcess(data["args"], data["returncode"], data["stdout"], data["stderr"])
        return cls(proc, Path(data["root"]), data["marker"])


def _sim_smoke(root: Path, *overrides: str) -> WholeRun:
    marker = f"e2e-{uuid.uuid4().hex[:8]}"
    proc = runs.run_suites("+exp=sim_smoke", f"record.root={root}", f"server.model_path={marker}", "-v", *overrides)
    return WholeRun(proc, root, marker)


def shared_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str,
               make: Callable[[Path], WholeRun]) -> WholeRun:
    """One run for the whole pass, whichever worker asks first: a session fixture is made once
    per pytest-xdist worker, so two workers would each start the same run. The first to ask
    makes it under a lock in the pass's shared folder; the others wait and read what it left
    (the records are only read by the tests that share them). A run that raised is made again."""
    if worker_id == "master":  # no xdist: the session is the pass
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # every worker's base folder lies in it
    saved = shared / f"{name}.json"
    with FileLock(str(saved) + ".lock"):
        if saved.is_file():
            return WholeRun.from_json(json.loads(saved.read_text()))
        root = shared / name
        root.mkdir(exist_ok=True)
        run = make(root)
        saved.write_text(json.dumps(run.to_json()))
        return run


# One sim_smoke run per backend serves every test that only reads what such a run leaves
# (its exit status, output, record): one run instead of one per test, and one per pass
# instead of one per worker. A test that needs a run of its own (other overrides, an
# interruption) still starts one.
@pytest.fixture(scope="session")
def sim_smoke_on_docker(tmp_path_factory, worker_id) -> WholeRun:
    """`pytest suites/ +exp=sim_smoke -v` on the default (docker) backend."""
    return shared_run(tmp_path_factory, worker_id, "sim_smoke_docker", _sim_smoke)


@pytest.fixture(scope="session")
def sim_smoke_on_processes(tmp_path_factory, worker_id) -> WholeRun:
    """`pytest suites/ +exp=sim_smoke backend=process nccl=pcie_tuned -v -rA`: the process
    backend, with an NCCL preset its processes must carry."""
    return shared_run(tmp_path_factory, worker_id, "sim_smoke_process",
                      lambda root: _sim_smoke(root, "backend=process", "nccl=pcie_tuned", "-rA"))


# README commands as the README shows them (its own entry point), each run once per pass: the
# README test checks how it ends, another test what it recorded (tests/e2e/test_e2e.py why
# eagle_k2_sim fails, tests/e2e/test_fleet.py what the fleet's workers counted).
EAGLE_K2_SIM = ".venv/bin/pytest suites/ +exp=eagle_k2_sim"
SIM_FLEET = ".venv/bin/pytest suites/ +exp=sim_fleet"


def readme_command_run(root: Path, command: str) -> WholeRun:
    """A README command run as the README shows it, its record under `root`."""
    runs.require_whole_run_marker()
    argv = shlex.split(command) + [f"record.root={root}", "--no-progress", "-p", "no:cacheprovider"]
    proc = subprocess.run(argv, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GITHUB_STEP_SUMMARY": ""})
    return WholeRun(proc, root, marker="")


@pytest.fixture(scope="session")
def eagle_k2_sim_run(tmp_path_factory, worker_id) -> WholeRun:
    return shared_run(tmp_path_factory, worker_id, "eagle_k2_sim", lambda root: readme_command_run(root, EAGLE_K2_SIM))


@pytest.fixture(scope="session")
def sim_fleet_run(tmp_path_factory, worker_id) -> WholeRun:
    return shared_run(tmp_path_factory, worker_id, "sim_fleet", lambda root: readme_command_run(root, SIM_FLEET))


@pytest.fixture
def own_ray_folders(monkeypatch) -> Iterator[Callable[[], set[Path]]]:
    """The Ray folders (specgate-ray-*) the test's runs make, and only theirs: its subprocesses
    get a private TMPDIR, since other workers' Ray tests make their own in /tmp meanwhile (a
    folder of another test's sweep, seen in /tmp during a Ctrl-C test, failed make test).
    Short, for the Unix sockets Ray puts under it (107 bytes at most)."""
    home = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(home))
    yield lambda: set(home.glob("specgate-ray-*"))
    shutil.rmtree(home, ignore_errors=True)
