"""Servers as SLURM job steps on the single-node cluster (`make slurm`; harness/servers/srun.py):
a fleet's workers each a step behind the router, a server's two nodes each a step, the
environment checked in every step's processes and a failure naming the node; no job and no
process left afterwards, also after Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_e2e import sim_processes, wait_gone
from tests.support import ROOT
from tests.support.runs import as_a_background_job, run_suites, start_suites, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def slurm():
    """The single-node cluster (`make slurm`), as the SLURM sweep tests get it."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "ensure_slurm.sh")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"scripts/ensure_slurm.sh failed: {done.stderr[-2000:]}"


def jobs_named(prefix: str) -> list[str]:
    listing = subprocess.run(["squeue", "--noheader", "--format=%j"], capture_output=True, text=True, timeout=10)
    return [name for name in listing.stdout.split() if name.startswith(prefix)]


def results_of(root: Path) -> dict:
    return json.loads((root / "latest" / "results.json").read_text())


def test_a_fleets_workers_and_a_servers_nodes_run_as_job_steps(tmp_path, slurm):
    marker = f"srun-{uuid.uuid4().hex[:8]}"
    done = run_suites("+exp=sim_env_node_scrubbed", "backend=srun", "server.workers=2", f"record.root={tmp_path}",
                      f"server.model_path={marker}", path="suites/test_environment.py", timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-4000:]
    for worker in ("scrubbed.w0", "scrubbed.w1"):  # each worker's node 1, and only those
        assert f"{worker} node 1: pid" in output and f"{worker} node 0: pid" not in output
    server = results_of(tmp_path)["arms"]["scrubbed"]["server"]
    steps = [node for worker in server["workers"] for node in worker["nodes"]]
    assert len(steps) == 4 and all(step["job_id"] and step["node"] for step in steps), steps
    assert len({step["job_id"] for step in steps}) == 4  # four jobs, one step each
    ours = {step["job_name"] for step in steps}
    deadline = time.monotonic() + 30  # an ended job is listed COMPLETING a moment before it goes
    while ours & set(jobs_named("specgate-")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ours & set(jobs_named("specgate-")), "a step's job outlived the run"
    assert sim_processes(marker) == []


def test_ctrl_c_cancels_the_steps(tmp_path, slurm):
    marker = f"srun-{uuid.uuid4().hex[:8]}"
    proc = start_suites("+exp=sim_smoke", "backend=srun", "server.nnodes=2", "server.tp_size=2",
                        f"record.root={tmp_path}", f"server.model_path={marker}", "server.sim.decode_step_ms=20",
                        "workload.num_prompts=200", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        preexec_fn=as_a_background_job)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            log = next(tmp_path.glob("*/arms/baseline/server.log"), None)
            if log is not None and "POST" in log.read_text(errors="replace"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the load never started")
        session_jobs = [j for j in jobs_named("specgate-") if j.endswith(("baseline.n0", "baseline.n1"))]
        assert len(session_jobs) >= 2, jobs_named("specgate-")
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 2, output[-3000:]
    assert wait_gone(marker) == [], "a step's process outlived the interrupted run"
    deadline = time.monotonic() + 30  # a cancelled job is listed COMPLETING a moment before it goes
    while set(session_jobs) & set(jobs_named("specgate-")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(session_jobs) & set(jobs_named("specgate-")), "a job outlived the interrupted run"


def test_a_dead_sessions_job_is_cancelled_by_the_next_session_and_clean_cancels_every_one(tmp_path, slurm):
    """A harness killed with SIGKILL with its srun leaves its job running: the next session
    (its start, as every driver's) cancels it (a live session's job stays); `specgate clean` cancels every specgate job. Only
    this file starts specgate's SLURM jobs, and its tests run one after another."""
    import os
    import socket

    dead = subprocess.Popen(["true"])
    dead.wait()
    prefix = f"specgate-{uuid.uuid4().hex[:12]}"
    live_prefix = f"specgate-{uuid.uuid4().hex[:12]}"
    for name, pid in ((f"{prefix}-left", dead.pid), (f"{live_prefix}-running", os.getpid())):
        subprocess.run(["sbatch", f"--job-name={name}", f"--comment=specgate specgate.pid={pid} "
                        f"specgate.host={socket.gethostname()}", "--output=/dev/null", "--wrap", "sleep 300"],
                       check=True, capture_output=True, timeout=30)
    try:
        # what every driver does before its first server (harness/run/runner.py, ab, capacity)
        from harness.config.schema import SpecgateConfig
        from harness.servers import Session, remove_dead_sessions_leftovers

        cfg = SpecgateConfig()
        cfg.backend.kind = "srun"
        assert remove_dead_sessions_leftovers(cfg, Session()) == [f"{prefix}-left"]
        wait_until(lambda: jobs_named(prefix) == [])
        assert jobs_named(live_prefix) == [f"{live_prefix}-running"]
        # what `specgate clean` does to SLURM (the CLI itself also removes every labelled
        # container, other tests' too: its wiring is checked with fakes, tests/servers/test_srun.py)
        from harness.servers.srun import cancel_jobs

        assert f"{live_prefix}-running" in cancel_jobs(only_dead=False)
        wait_until(lambda: jobs_named(live_prefix) == [])  # scancel returns before the job has ended
    finally:
        subprocess.run(["scancel", f"--name={prefix}-left"], capture_output=True, timeout=10)
        subprocess.run(["scancel", f"--name={live_prefix}-running"], capture_output=True, timeout=10)


def test_a_steps_processes_read_on_its_node_through_srun_are_those_read_here(tmp_path, slurm):
    """The reading for a step on another node (srun --jobid --overlap, on the step's node),
    made here on the single-node cluster, where the step's node is this machine: the same
    processes, command lines and environments as /proc read directly."""
    from harness.run.compose import compose
    from harness.servers import Session, make_server

    cfg = compose(["+exp=sim_smoke", "backend=srun", "nccl=pcie_tuned"]).arm("baseline").typed
    server = make_server("remote", cfg, tmp_path / "server.log", Session())
    try:
        server.start()
        here, there = server.processes(), server.remote_processes()
        assert len(here) >= 3  # the server and its scheduler, detokenizer (and TP) processes
        assert [(p.pid, p.cmdline) for p in there] == [(p.pid, p.cmdline) for p in here]
        assert all(p.environ.get("NCCL_ALGO") is not None and p.environ == q.environ for p, q in zip(there, here))
    finally:
        server.stop()
