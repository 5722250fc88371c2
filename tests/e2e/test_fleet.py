"""A fleet end to end (harness/servers/fleet.py): workers behind SGLang's real router
(sglang-router, pinned in pyproject.toml), measured through it as a user would; per-worker
figures and the router's own counters in the record; cache-aware routing measured against
round robin on a shared-prefix workload; every worker's processes checked for the
configured environment, named by worker; Ctrl-C while the fleet starts or mid-load leaves
no worker, router or container."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_e2e import results_of, sim_processes, specgate_containers, wait_gone
from tests.support.runs import as_a_background_job, run_suites, start_suites, wait_until

pytestmark = pytest.mark.slow


def routers_of(parent: int) -> list[int]:
    """The router processes a run started: children of its pytest that are no simulator (the
    router renames itself `sglang::router` with setproctitle, command line included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and "router" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cache_aware_routing_raises_the_hit_rate_over_round_robin_through_the_real_router(sim_fleet_run):
    """The README's own sim_fleet command (docker workers; tests/conftest.py: one run serves
    this test and the README's)."""
    done, root = sim_fleet_run.proc, sim_fleet_run.root
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    results = results_of(root)
    aware, robin = results["arms"]["cache_aware"], results["arms"]["round_robin"]
    assert aware["prefix_cache_hit_rate"] > robin["prefix_cache_hit_rate"] + 0.05
    for arm, block in (("cache_aware", aware), ("round_robin", robin)):
        fleet = block["fleet"]
        assert fleet["policy"] == arm and [w["worker"] for w in fleet["workers"]] == [f"{arm}.w0", f"{arm}.w1"]
        assert sum(w["requests_finished"] for w in fleet["workers"]) == 32  # every measured request, on some worker
        assert all("prefix_cache_hit_rate" in w for w in fleet["workers"] if w["requests_finished"])
        window = block["server_metrics"][0]
        assert window["requests_finished"] == 32  # the fleet's window: its workers' counters summed
        routed = {k: v for k, v in window["router"].items() if k.startswith("smg_worker_cb_outcomes_total")}
        assert sum(routed.values()) == 32, window["router"]  # the router's own count, per worker
        server = block["server"]
        assert server["router"]["policy"] == arm and len(server["workers"]) == 2
        record = root / "latest" / "arms" / arm
        assert (record / "server.log").is_file() and (record / "server.w1.log").is_file()
        assert not alive(server["router"]["pid"]), f"the router of arm {arm} outlived the run"
    assert robin["fleet"]["imbalance"]["requests_max_over_mean"] == 1.0
    summary = (root / "latest" / "summary.md").read_text()
    assert "## Fleet: each worker's share" in summary and "| round_robin | round_robin.w1 | 16 " in summary
    assert "PASSED min_prefix_cache_hit_rate_gain cache_aware" in done.stdout
    assert specgate_containers(root) == []  # every worker's container gone


def test_a_prefill_decode_split_trades_the_itl_tail_for_ttft_with_its_ttft_split_in_the_record(tmp_path):
    """sim_pd as docs/fleets.md runs it (docker: each worker a container on the host's network)
    through the real router in --pd-disaggregation mode: each request prefilled on the prefill
    worker, its KV fetched by the decode worker; read by role, the TTFT in its stages."""
    marker = f"pd-{uuid.uuid4().hex[:8]}"
    done = run_suites("+exp=sim_pd", f"record.root={tmp_path}", f"server.model_path={marker}", "-rA", timeout=240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    results = results_of(tmp_path)
    split, whole = results["arms"]["split"], results["arms"]["colocated"]
    fleet = split["fleet"]
    assert fleet["disaggregation"] == "prefill/decode"
    assert [(w["worker"], w["role"]) for w in fleet["workers"]] == [("split.p0", "prefill"), ("split.d0", "decode")]
    assert [w["requests_finished"] for w in fleet["workers"]] == [32, 32]  # each request passed through both
    window = split["server_metrics"][0]
    assert window["requests_finished"] == 32  # counted once: the decode side's
    stages = fleet["ttft_split_ms"]
    assert set(stages) == {"bootstrap_ms", "prefill_queue_ms", "prefill_ms", "transfer_ms", "first_decode_ms"}
    # truth: a 2048-token prompt's prefill is 43 ms of compute, its KV transfer 1 + 20.5 ms
    assert stages["prefill_ms"] >= 40 and 20 <= stages["transfer_ms"] < 60 and stages["prefill_queue_ms"] >= 0
    # the stages are parts of the decode server's TTFT (from its arrival to its first token)
    assert sum(stages.values()) <= window["ttft_mean_ms"] + 5
    # the trade: a whole worker's decodes stop for each new prompt's prefill, the split decode worker's never
    assert whole["itl_ms"]["p99"] > 30 > split["itl_ms"]["p99"]
    assert split["ttft_ms"]["p50"] > whole["ttft_ms"]["p50"]
    server = split["server"]
    assert [w.get("role") for w in server["workers"]] == ["prefill", "decode"] and server["workers"][0]["bootstrap_port"]
    assert not alive(server["router"]["pid"]) and specgate_containers(tmp_path) == []
    summary = (tmp_path / "latest" / "summary.md").read_text()
    assert re.search(r"\| split +\| split\.p0 \(prefill\) +\| 32 ", summary) and "split: TTFT split (the servers' means): bootstrap" in summary
    assert sim_processes(marker) == []


def test_a_prefill_worker_that_dies_mid_load_fails_the_arm_naming_it_and_leaves_nothing(tmp_path):
    """The decode worker's requests lose their KV source at once (not at a bootstrap timeout),
    and the arm ends server_died, naming the worker that died."""
    marker = f"pd-{uuid.uuid4().hex[:8]}"
    proc = start_suites("+exp=sim_pd", "backend=process", f"record.root={tmp_path}", f"server.model_path={marker}",
                        "workload.num_prompts=120", "-k", "split", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, preexec_fn=as_a_background_job)
    try:
        wait_until(lambda: any(tmp_path.glob("*/arms/split/server.d0.log"))
                   and "POST" in next(tmp_path.glob("*/arms/split/server.d0.log")).read_text(errors="replace"))
        prefill = next(pid for pid in sim_processes(marker)
                       if b"--disaggregation-mode\0prefill" in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(prefill, signal.SIGKILL)
        started = time.monotonic()
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, output[-3000:]
    assert time.monotonic() - started < 60  # not each request's 30 s bootstrap timeout in turn
    arm = results_of(tmp_path)["arms"]["split"]
    assert arm["status"] == "server_died", arm.get("error")
    assert "worker split.p0 was killed by signal SIGKILL" in arm["error"], arm["error"]
    assert wait_gone(marker) == []


def test_every_node_of_every_split_worker_is_checked_and_a_failure_names_both_on_docker(tmp_path):
    """A prefill and a decode server each spanning two nodes (four containers on the host's
    network), node 1 of each losing the NCCL variables: the failure names the worker and the
    node of each process that lost them, and nothing of node 0."""
    done = run_suites("+exp=sim_env_node_scrubbed", "backend=docker", "router.prefill=1", "router.decode=1",
                      f"record.root={tmp_path}", path="suites/test_environment.py", timeout=240)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    for worker in ("scrubbed.p0", "scrubbed.d0"):
        assert f"{worker} node 1: pid" in done.stdout and f"{worker} node 0: pid" not in done.stdout
    assert "missing NCCL_ALGO" in done.stdout
    arm = results_of(tmp_path)["arms"]["scrubbed"]
    assert {entry["where"] for entry in arm["environment"]} == {
        "scrubbed.p0 node 0", "scrubbed.p0 node 1", "scrubbed.d0 node 0", "scrubbed.d0 node 1"}
    assert specgate_containers(tmp_path) == [], "a node's container outlived the run"


def start_fleet(tmp_path: Path, marker: str, *extra: str) -> subprocess.Popen:
    return start_suites("+exp=sim_fleet", "backend=process", f"record.root={tmp_path}", f"server.model_path={marker}",
                        *extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        preexec_fn=as_a_background_job)


@pytest.mark.parametrize("moment", ["starting", "mid_load"])
def test_ctrl_c_at_any_moment_leaves_no_worker_or_router(tmp_path, moment):
    marker = f"fleet-{uuid.uuid4().hex[:8]}"
    if moment == "starting":  # the workers are up as processes and not yet healthy: no router yet
        proc = start_fleet(tmp_path, marker, "server.sim.startup_s=30")
    else:  # a long load through the router
        proc = start_fleet(tmp_path, marker, "server.sim.decode_step_ms=20", "workload.num_prompts=400")
    try:
        if moment == "starting":
            wait_until(lambda: len(sim_processes(marker)) >= 2)
        else:
            wait_until(lambda: routers_of(proc.pid) and any(tmp_path.glob("*/arms/*/server.w0.log"))
                       and "POST" in next(tmp_path.glob("*/arms/*/server.w0.log")).read_text(errors="replace"))
        routers = routers_of(proc.pid)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, output[-3000:]
    assert time.monotonic() - started < 30, "the interrupted fleet took its startup timeout to stop"
    assert wait_gone(marker) == [], "a worker outlived the interrupted run"
    assert (moment == "starting") == (routers == []) and not any(alive(pid) for pid in routers)
    assert results_of(tmp_path)["status"] == "interrupted"
