"""A server spanning two nodes end to end (harness/servers/nodes.py, harness/sim/nodes.py):
the ranks meet at an init address on loopback, the environment suite checks every process
on every node and names the node that lacks the variables, every node's GPUs are sampled,
a node that dies takes the server with it (said, in one sentence), and Ctrl-C while the
nodes start leaves nothing behind; on the process and the docker backends."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_e2e import results_of, sim_processes, specgate_containers, wait_gone
from tests.support.runs import as_a_background_job, run_suites, start_suites, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_the_environment_suite_names_the_node_that_lost_the_variables(tmp_path, backend):
    marker = f"nodes-{uuid.uuid4().hex[:8]}"
    done = run_suites("+exp=sim_env_node_scrubbed", f"backend={backend}", "telemetry=sim", f"record.root={tmp_path}",
                      f"server.model_path={marker}", timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-4000:]
    assert "FAILED suites/test_environment.py::test_configured_environment_reached_every_server_process" in output
    assert "node 1: pid" in output and "sglang::tp_TP2" in output and "node 0: pid" not in output
    assert output.count("FAILED suites/") == 1, output[-4000:]  # every other suite passes on two nodes
    arm = results_of(tmp_path)["arms"]["scrubbed"]
    where = {entry.get("where") for entry in arm["environment"]}
    assert where == {"node 0", "node 1"}
    # the other side of the same check: every process on node 0 holds every configured variable
    node0 = [entry for entry in arm["environment"] if entry["where"] == "node 0"]
    assert len(node0) >= 3 and all(None not in entry["vars"].values() for entry in node0), node0
    assert arm["server"]["nnodes"] == 2 and len(arm["server"]["nodes"]) == 2
    assert len(arm["gpu"]["gpus"]) == 4, arm["gpu"]  # both nodes' GPUs, two ranks each
    assert sim_processes(marker) == []
    assert specgate_containers(tmp_path) == []


def node_pid(marker: str, rank: int) -> int | None:
    for pid in sim_processes(marker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"--node-rank {rank} " in cmdline and "harness.sim" in cmdline:
            return pid
    return None


def start_two_nodes(tmp_path: Path, marker: str, *extra: str) -> subprocess.Popen:
    return start_suites("+exp=sim_smoke", "backend=process", "server.nnodes=2", "server.tp_size=2",
                        f"record.root={tmp_path}", f"server.model_path={marker}", *extra,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=as_a_background_job)


def test_a_node_that_dies_mid_load_takes_the_server_with_it_in_one_sentence(tmp_path):
    marker = f"nodes-{uuid.uuid4().hex[:8]}"
    proc = start_two_nodes(tmp_path, marker, "server.sim.decode_step_ms=20", "workload.num_prompts=200", "-k", "baseline")
    try:
        wait_until(lambda: any(tmp_path.glob("*/arms/baseline/server.log"))
                   and "POST" in next(tmp_path.glob("*/arms/baseline/server.log")).read_text(errors="replace"))
        os.kill(node_pid(marker, 1), signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, output[-3000:]
    arm = results_of(tmp_path)["arms"]["baseline"]
    assert arm["status"] == "server_died", arm.get("error")
    assert "node 1 was killed by signal SIGKILL" in arm["error"], arm["error"]
    assert wait_gone(marker) == []


def test_ctrl_c_while_the_nodes_start_leaves_nothing(tmp_path):
    marker = f"nodes-{uuid.uuid4().hex[:8]}"
    proc = start_two_nodes(tmp_path, marker, "server.sim.startup_s=30")
    try:
        wait_until(lambda: node_pid(marker, 0) and node_pid(marker, 1))
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, output[-3000:]
    assert time.monotonic() - started < 30, "the interrupted nodes took their startup timeout to stop"
    assert wait_gone(marker) == [], "a node outlived the interrupted run"
