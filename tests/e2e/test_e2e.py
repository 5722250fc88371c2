"""End to end, as a user meets it: `pytest suites/ ...` in a subprocess against the
simulator, then the exit status, the run record and the process table are checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness import cli
from harness.record.requests import read_lines
from harness.servers.labels import remove_container
from tests.support.runs import as_a_background_job, run_suites, specgate, start_suites
from harness.servers.labels import labelled_containers

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def sim_processes(marker: str) -> list[int]:
    """PIDs whose command line carries the marker (the model path given to the simulator)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and "pytest" not in cmdline:
                found.append(int(entry.name))
    return found


def wait_gone(marker: str, timeout_s: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := sim_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def specgate_containers(root: Path) -> list[str]:
    """What `docker ps -a --filter label=specgate.session` lists for the runs recorded under
    `root` (a container carries its record's path as `specgate.record`), so a specgate
    session running beside this test, even one whose record has the same name, is not
    mistaken for a leftover of it."""
    import docker

    runs = {str(p.resolve()) for p in root.iterdir() if p.is_dir() and not p.is_symlink()}
    client = docker.from_env()
    try:
        return [c.name for c in labelled_containers(client, "specgate.session")
                if c.labels.get("specgate.record") in runs]
    finally:
        client.close()


def assert_honest_agreement(arm: dict) -> bool:
    """An honest server agrees with the client on TPOT, and on TTFT unless the client reads it
    later: the HTTP hop and, on a busy machine, a wait for a core come before the server's
    clock starts (seen on 3 test workers: 23 ms against 3.6 over 4 requests). An honest
    server's TTFT is never the longer one."""
    found = arm["client_server_disagreement"]
    assert all(d["metric"].startswith("ttft") and d["client"] > d["server"] for d in found), found
    return True


@pytest.fixture
def marker() -> str:
    return f"e2e-{uuid.uuid4().hex[:8]}"


def results_of(root: Path) -> dict:
    return json.loads((root / "latest" / "results.json").read_text())


@pytest.mark.slow
def test_sim_smoke_passes_and_records_everything(sim_smoke_on_docker):
    proc, record, tmp_path, marker = (sim_smoke_on_docker.proc, sim_smoke_on_docker.record, sim_smoke_on_docker.root,
                                      sim_smoke_on_docker.marker)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for name in ("config.yaml", "overrides.yaml", "results.json", "arms/baseline/requests.parquet", "summary.md",
                 "arms/eagle3/requests.parquet", "arms/baseline/config.yaml", "arms/eagle3/config.yaml", "arms/baseline/server.log", "arms/eagle3/server.log"):
        assert (record / name).is_file(), f"{name} missing from the record"
    results = results_of(tmp_path)
    for arm in ("baseline", "eagle3"):
        block = results["arms"][arm]
        assert block["status"] == "measured"
        assert block["requests"]["failed"] == 0 and block["requests"]["ok"] == 4
        for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert set(block[metric]) >= {"mean", "p50", "p90", "p99"}
    assert results["arms"]["eagle3"]["accept_length_source"] == "run"
    assert 2.0 < results["arms"]["eagle3"]["accept_length"] < 2.8  # truth: 2.4
    for arm in ("baseline", "eagle3"):
        assert_honest_agreement(results["arms"][arm])
    assert results["arms"]["baseline"]["accept_length"] is None
    assert results["arms"]["eagle3"]["speedup_vs_baseline"] > 1.1
    assert results["arms"]["eagle3"]["break_even_accept_length_vs_baseline"] < 2.0
    assert not [g for g in results["gates"] if not g["passed"] and g["passed"] is not None]
    assert {g["name"] for g in results["gates"] if g["passed"]} >= {
        "min_output_tok_s", "min_speedup", "accept_length_at_least_break_even", "min_accept_length"}
    lines = read_lines(record)
    assert len(lines) == 2 * (4 + 1)  # measured + warm-up, per arm
    assert "test_min_speedup[eagle3] PASSED" in proc.stdout or "passed" in proc.stdout
    assert "specgate summary" in proc.stdout and "gate(s) passed" in proc.stdout
    assert results["arms"]["eagle3"]["server"]["image"]["tag"].startswith("specgate/sim:")
    # the model every request went to: the simulator serves its model path under that name
    assert results["arms"]["eagle3"]["model"] == results["arms"]["baseline"]["model"] == str(marker)
    assert "ready to roll" in (record / "arms/eagle3/server.log").read_text()  # the container's log
    assert wait_gone(marker) == []
    assert specgate_containers(tmp_path) == []


@pytest.mark.slow
def test_eagle_k2_sim_fails_its_gates_for_the_right_reasons(eagle_k2_sim_run):
    """The README's own command (tests/conftest.py: one run serves this test and the README's)."""
    proc = eagle_k2_sim_run.proc
    assert proc.returncode == 1, proc.stdout[-4000:]
    results = eagle_k2_sim_run.results
    base, eagle = results["arms"]["baseline"], results["arms"]["eagle3"]
    assert 75 <= base["output_tok_s"] <= 90, base["output_tok_s"]  # the session: 82-83 tok/s
    assert 55 <= eagle["output_tok_s"] <= 70, eagle["output_tok_s"]  # the session: 59-61 tok/s
    assert 1.75 <= eagle["accept_length"] <= 2.25
    verdicts = {(g["name"], g["arm"]): g for g in results["gates"]}
    speedup = verdicts[("min_speedup", "eagle3")]
    assert speedup["passed"] is False and "eagle3 is slower than baseline" in speedup["detail"]
    even = verdicts[("accept_length_at_least_break_even", "eagle3")]
    assert even["passed"] is False and "below break-even" in even["detail"]
    # 29.9 ms / 12.2 ms = 2.45; each measured on the load, so a busy machine moves it (2.62 beside
    # vLLM's runs in make test): the reason is right within 12 %
    assert 2.15 <= even["threshold"] <= 2.75, even["threshold"]
    assert verdicts[("min_output_tok_s", "baseline")]["passed"] is True
    assert_honest_agreement(base) and assert_honest_agreement(eagle)
    assert "eagle3 is slower than baseline" in proc.stdout and "below break-even" in proc.stdout
    assert specgate_containers(eagle_k2_sim_run.root) == []


@pytest.mark.parametrize("overrides, fragments", [
    (["+exp=sim_smoke", "workload.max_tokns=1"], ["workload.max_tokns", "did you mean 'max_tokens'"]),
    (["drafter=nope"], ["drafter=nope", "valid choices: eagle3_k25, ", ", none, "]),
    (["+exp=sim_smoke", "workload.max_tokens=lots"], ["workload.max_tokens", "not a valid integer"]),
])
def test_config_mistakes_stop_before_any_server_starts(tmp_path, overrides, fragments):
    started = time.monotonic()
    proc = run_suites(*overrides, f"record.root={tmp_path}", timeout=60, refused=True)
    elapsed = time.monotonic() - started
    assert proc.returncode == 4, proc.stdout + proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir()), "a record was written for a run that never started"
    print(f"config error reported in {elapsed:.1f} s")


def test_eagle_k2_without_a_gpu_fails_fast_in_one_sentence(tmp_path):
    proc = run_suites("+exp=eagle_k2", f"record.root={tmp_path}", timeout=60, refused=True)
    assert proc.returncode == 4
    assert "needs an NVIDIA GPU machine" in proc.stderr and "no NVIDIA driver" in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_server_that_never_gets_healthy_fails_with_its_log(tmp_path, marker):
    proc = run_suites("+exp=sim_smoke", f"record.root={tmp_path}", f"server.model_path={marker}",
                      "server.sim.startup_s=60", "backend.startup_timeout_s=2", "-k", "baseline and not eagle3")
    assert proc.returncode == 1
    assert "did not become healthy within 2 s" in proc.stdout
    assert "last 50 lines" in proc.stdout
    results = results_of(tmp_path)
    assert results["arms"]["baseline"]["status"] == "server_failed"
    assert wait_gone(marker) == []


def start_in_background(tmp_path: Path, marker: str, *extra: str, new_session: bool = False) -> subprocess.Popen:
    return start_suites("+exp=sim_smoke", f"record.root={tmp_path}", f"server.model_path={marker}",
                        "server.sim.decode_step_ms=20", "workload.num_prompts=200", *extra,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=as_a_background_job,
                        start_new_session=new_session)


def posts_served(tmp_path: Path) -> int:
    log = next(tmp_path.glob("*/arms/baseline/server.log"), None)
    return log.read_text(errors="replace").count("POST") if log is not None else 0


def wait_for_load(tmp_path: Path, marker: str, posts: int = 3, timeout_s: float = 60) -> None:
    """Until the simulator is up and has been sent `posts` requests."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if posts_served(tmp_path) >= posts and sim_processes(marker):
            return
        time.sleep(0.2)
    raise AssertionError("the load never started")


# Short requests at 2 streams (closed loop): once 1 warm-up + 2 + 5 requests were sent, at
# least 5 measured ones had finished, since each later one waits for an earlier one's end.
SHORT_LOAD = ("workload.max_tokens=32", "workload.concurrency=2", "workload.num_prompts=2000",
              "server.sim.decode_step_ms=4")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_mid_load_keeps_the_finished_requests_and_closes_the_record(tmp_path, marker, signum):
    proc = start_in_background(tmp_path, marker, *SHORT_LOAD)
    try:
        wait_for_load(tmp_path, marker, posts=1 + 2 + 5)
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, output[-3000:]  # pytest: interrupted
    assert wait_gone(marker) == [], "a server process outlived the interrupted run"
    results = results_of(tmp_path)
    assert results["status"] == "interrupted" and results["interrupted"] is True
    baseline = results["arms"]["baseline"]
    assert baseline["status"] == "interrupted" and "output_tok_s" not in baseline  # a cut load is no measurement
    lines = read_lines(tmp_path / "latest")
    measured = [line for line in lines if not line["warmup"]]
    assert len(measured) >= 5 and all(line["ok"] and line["e2e_ms"] for line in lines)
    assert all(line["arm"] == "baseline" and line["interrupted_load"] is True for line in lines)
    assert baseline["interrupted_load"]["finished"] == len(measured)
    assert 0 <= baseline["interrupted_load"]["in_flight"] <= 2
    assert results["arms"]["eagle3"]["status"] == "not_run"
    assert not list(tmp_path.rglob("*.tmp")), "a half-written file was left behind"
    assert specgate_containers(tmp_path) == [], "a container outlived the interrupted run"


def write_finished_record(root: Path) -> Path:
    """An earlier run's record, which `latest` names."""
    earlier = root / "20200101T000000Z_sim_smoke"
    earlier.mkdir()
    (earlier / "results.json").write_text(json.dumps({"status": "finished", "arms": {}}))
    (root / "latest").symlink_to(earlier.name)
    return earlier


def remove_leftovers(root: Path, marker: str) -> None:
    """What a kill -9 of the harness leaves: its containers (found by their run label) and
    any server process carrying the marker."""
    import docker

    runs = {str(p.resolve()) for p in root.iterdir() if p.is_dir() and not p.is_symlink()}
    client = docker.from_env()
    try:
        for container in labelled_containers(client, "specgate.session"):
            if container.labels.get("specgate.record") in runs:
                remove_container(container)  # another test's run may be clearing it as a dead session's
    finally:
        client.close()
    deadline = time.monotonic() + 15
    while specgate_containers(root) and time.monotonic() < deadline:  # a removal another run began
        time.sleep(0.2)
    for pid in sim_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_a_run_killed_with_sigkill_leaves_a_record_that_says_it_is_incomplete(tmp_path, marker):
    earlier = write_finished_record(tmp_path)
    proc = start_in_background(tmp_path, marker, new_session=True)
    try:
        wait_for_load(tmp_path, marker)
        os.killpg(proc.pid, signal.SIGKILL)  # pytest and anything in its process group, no clean-up at all
        proc.communicate(timeout=30)
        [record] = [p for p in tmp_path.iterdir() if p.is_dir() and p != earlier and not p.is_symlink()]
        results = json.loads((record / "results.json").read_text())
        assert results["status"] == "running" and results["finished_utc"] is None
        assert results["arms"]["baseline"]["status"] == "measuring"  # the arm it died in
        assert (tmp_path / "latest").resolve() == earlier.resolve(), "latest moved to a run that never ended"
        compare = specgate("compare", str(earlier), str(record), timeout=120)
        assert compare.returncode == 0, compare.stderr
        assert "**INCOMPLETE**" in compare.stdout and "the run died before it finished" in compare.stdout
        report = specgate("report", str(record), timeout=120)
        assert report.returncode == 0, report.stderr
        assert "INCOMPLETE: the run died before it finished" in (record / "report.html").read_text()
    finally:
        proc.kill()
        remove_leftovers(tmp_path, marker)
    assert wait_gone(marker) == [] and specgate_containers(tmp_path) == []


@pytest.mark.slow
def test_a_server_that_dies_mid_load_fails_the_arm_in_words(tmp_path, marker):
    proc = start_in_background(tmp_path, marker, "-k", "baseline and not eagle3")
    try:
        wait_for_load(tmp_path, marker)
        for pid in sim_processes(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, output[-3000:]
    assert "during the load" in output and ("SIGKILL" in output or "exited with code 137" in output)
    results = results_of(tmp_path)
    assert results["arms"]["baseline"]["status"] == "server_died"
    assert results["arms"]["baseline"]["requests"]["failed"] > 0
    assert wait_gone(marker) == []
    assert specgate_containers(tmp_path) == []


@pytest.mark.slow
def test_attach_measures_a_server_someone_else_started(tmp_path, marker):
    port = free_port()
    server = subprocess.Popen([PYTHON, "-m", "harness.sim", "--model-path", marker, "--port", str(port),
                               "--sim-decode-step-ms", "2", "--sim-startup-s", "0.2"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc = run_suites("backend=attach", f"backend.url=http://127.0.0.1:{port}", "workload=count_to_100",
                          "workload.num_prompts=2", f"record.root={tmp_path}", "-v")
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert "[default]" in proc.stdout  # the composed config is one arm named default
        assert "SKIPPED" in proc.stdout  # gates without thresholds are skipped, not passed
        assert server.poll() is None, "attach must not stop a server it did not start"
        assert results_of(tmp_path)["arms"]["default"]["requests"]["ok"] == 2
    finally:
        server.terminate()
        server.wait(timeout=10)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_specgate_list_and_show(capsys):
    # list and show read configs only: their output is asked of cli.main here (tests/e2e/test_readme.py
    # runs `specgate list` and `specgate show` as the processes a user starts); the mistake's exit
    # status is asked of a real process
    assert cli.main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "sim_smoke" in listing and "eagle_k2_sim" in listing
    assert cli.main(["show", "+exp=sim_smoke", "workload.max_tokens=64"]) == 0
    shown = capsys.readouterr().out
    assert "# ---- arm: baseline" in shown and "# ---- arm: eagle3" in shown
    assert shown.count("max_tokens: 64") == 2
    bad = specgate("show", "drafter=nope")
    assert bad.returncode == 4 and "valid choices" in bad.stderr  # a config mistake, as pytest says it


@pytest.mark.slow
def test_specmix_breaks_acceptance_and_speed_down_by_category(tmp_path):
    """The bundled dataset on the simulator, whose acceptance depends on the content
    (server.sim.accept_by_text): each category's accept length near its truth, in the
    summary, results.json and the report."""
    proc = run_suites("+exp=sim_specmix", "backend=process", f"record.root={tmp_path}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "## Per category" in proc.stdout
    eagle3 = results_of(tmp_path)["arms"]["eagle3"]["categories"]
    assert set(eagle3) == {"code", "prose", "extraction", "repetition", "math"}
    # truths 1 + p1 + p1 p2: code 2.665, prose 1.725 (a short output's last cycle is cut, so a little lower)
    assert 2.45 < eagle3["code"]["accept_length"] < 2.75 and 1.6 < eagle3["prose"]["accept_length"] < 1.85
    assert eagle3["code"]["speedup_vs_baseline"] > 1.2 > eagle3["prose"]["speedup_vs_baseline"]
    report = specgate("report", str(tmp_path / "latest"), timeout=120)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "latest" / "report.html").read_text()
    assert "Per category" in html and "<strong>eagle3</strong></td><td>prose</td>" in html
