"""The README's own commands work: every command README.md shows under "Running an
experiment" runs here, on the simulator, and ends as the README says it does. A command
added to that list without its expected outcome here fails the first test."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import EAGLE_K2_SIM, SIM_FLEET
from tests.support.runs import REFUSED, require_whole_run_marker

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
ATTACH_URL = "http://127.0.0.1:30000"

# The command as the README shows it -> (exit status, text its output contains), or why it is not run here.
OUTCOMES: dict[str, tuple[int, str] | str] = {
    ".venv/bin/pytest suites/ +exp=sim_smoke": (0, "gate(s) passed, 0 failed"),
    ".venv/bin/pytest suites/ +exp=sim_smoke workload.max_tokens=64": (0, "gate(s) passed, 0 failed"),
    ".venv/bin/pytest suites/ +exp=sim_smoke workload=chat_short": (0, "gate(s) passed, 0 failed"),
    ".venv/bin/pytest suites/ +exp=sim_smoke backend=process": (0, "gate(s) passed, 0 failed"),
    ".venv/bin/pytest suites/ +exp=sim_fleet": (0, "PASSED min_prefix_cache_hit_rate_gain cache_aware"),
    ".venv/bin/pytest suites/ +exp=eagle_k2_sim": (1, "FAILED suites/test_speculative.py::test_min_speedup[eagle3]"),
    ".venv/bin/pytest suites/ +exp=sim_lossy": (1, "FAILED suites/test_speculative.py::test_lossless[eagle3]"),
    ".venv/bin/pytest suites/ +exp=eagle_k2": (4, "needs an NVIDIA GPU machine"),
    f".venv/bin/pytest suites/ backend=attach backend.url={ATTACH_URL} workload=count_to_100":
        (0, "gate(s) passed, 0 failed"),
    ".venv/bin/specgate list": (0, "sim_smoke"),
    ".venv/bin/specgate show +exp=sim_smoke": (0, "# ---- arm: eagle3"),
    ".venv/bin/specgate run +exp=sim_smoke -k eagle3": (0, "gate(s) passed, 0 failed"),
    ".venv/bin/specgate clean [--images]": "removes every container specgate labelled, other tests' too: "
                                           "tests/servers/test_docker_backend.py checks it against its own engine",
}


def readme_commands() -> list[str]:
    """The commands of the first bash block under "## Running an experiment", comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Running an experiment", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = []
    for line in block.splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            commands.append(re.sub(r"\s+", " ", command))
    return commands


# README commands whose one run of the pass a session fixture makes (tests/conftest.py), as this
# test would: the command line as shown, its record in a folder of its own
SHARED_RUNS = {EAGLE_K2_SIM: "eagle_k2_sim_run", SIM_FLEET: "sim_fleet_run"}


def test_every_readme_command_has_a_documented_outcome():
    assert sorted(readme_commands()) == sorted(OUTCOMES)


@pytest.fixture(scope="module")
def attached_sim():
    """The server "someone already started" for the attach example, at a free port."""
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([PYTHON, "-m", "harness.sim", "--model-path", "sim/model", "--port", str(port),
                               "--sim-decode-step-ms", "2", "--sim-startup-s", "0.2"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


def starts_a_run(command: str) -> bool:
    """A run that gets as far as starting servers (a config refusal, exit status 4, does not)."""
    argv = shlex.split(command)
    return ("suites/" in argv or argv[1:2] == ["run"]) and OUTCOMES[command][0] != REFUSED


@pytest.mark.parametrize("command", [pytest.param(c, marks=[pytest.mark.slow] if starts_a_run(c) else [])
                                     for c, outcome in OUTCOMES.items() if isinstance(outcome, tuple)])
def test_a_readme_command_ends_as_documented(command, tmp_path, attached_sim, request):
    status, says = OUTCOMES[command]
    argv = shlex.split(command.replace(ATTACH_URL, attached_sim))
    if starts_a_run(command):
        require_whole_run_marker()  # the README's own command line, so not through run_suites
    if command in SHARED_RUNS:  # the same command line, run once for this test and another's
        proc = request.getfixturevalue(SHARED_RUNS[command]).proc
    else:
        if "suites/" in argv or argv[1:2] == ["run"]:  # a run: its record goes to tmp_path
            argv += [f"record.root={tmp_path}", "--no-progress", "-p", "no:cacheprovider"]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "GITHUB_STEP_SUMMARY": ""})
    output = proc.stdout + proc.stderr
    assert proc.returncode == status, output[-3000:]
    assert says in output, output[-3000:]
