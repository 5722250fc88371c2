"""`specgate sweep ... hydra/launcher=ray`: the points run as Ray tasks of a local Ray instance
the sweep starts (Hydra's hydra-ray-launcher), with SLURM's guarantees: a point whose Ray
worker died is a failed point with Ray's reason (the others run on), Ctrl-C stops every
point and leaves no Ray process, nothing secret in what Ray writes; a cluster to join that
does not answer is one sentence before anything starts."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from harness import cli
from harness.secrets import fingerprint
from harness.servers.ports import free_port
from tests.support.ray_cluster import two_node_cluster
from tests.sweep.test_sweep_launchers import (SIM, assert_point_passed, finished, leftover, sweep, sweep_record,
                                              wait_for)

LONG = "workload.num_prompts=20"  # with SIM's 16 tokens each: the load outlasts the test's look-up


def test_a_ray_address_that_does_not_answer_is_one_sentence_before_anything_starts(tmp_path, capsys):
    port = free_port()
    status = cli.main(["sweep", *SIM, "workload.concurrency=1,2", "hydra/launcher=ray",
                       f"hydra.launcher.ray.init.address=127.0.0.1:{port}", f"record.root={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert status == 4 and "\n" not in err
    assert err.startswith(f"specgate: hydra.launcher.ray.init.address=127.0.0.1:{port}: no Ray cluster answers there")
    status = cli.main(["sweep", *SIM, "hydra/launcher=ray", "hydra.launcher.ray.init.address=nowhere",
                       f"record.root={tmp_path}"])
    assert status == 4 and "a Ray cluster's address is HOST:PORT" in capsys.readouterr().err
    status = cli.main(["sweep", *SIM, "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpu=2",
                       f"record.root={tmp_path}"])
    assert status == 4 and "hydra.launcher.ray.init.num_cpu: not an argument of ray.init" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cluster
def test_two_points_as_ray_tasks_with_nothing_secret_in_what_ray_writes(tmp_path, own_ray_folders):
    runs = tmp_path / "runs"
    secret = "hf_raysecret0123456789"
    status, output = finished(sweep(runs, "workload.concurrency=1,2", "hydra/launcher=ray",
                                    f"+server.env.HF_TOKEN={secret}", '+server.env.FOO_CFG="K9ray sp"',
                                    "+build.build_args.GH_PAT=ghpRAY88",
                                    "server.extra_args=[--api-keys,k1-ray-aaaaaa,k2-ray-bbbbbb]"))
    assert status == 0, output[-4000:]
    sweep_dir, data = sweep_record(runs)
    assert (data["status"], data["exit_status"], data["launcher"]["engine"]) == ("finished", 0, "ray")
    for point, concurrency in zip(data["points"], (1, 2)):
        assert_point_passed(sweep_dir, point, concurrency)
        assert point["job_log"] == f"points/.jobs/{data['points'].index(point)}/point.log"
    # Ray's own logs (GCS, raylet, the workers) are in the record, redacted like everything else
    assert (sweep_dir / "ray_logs" / "raylet.out").is_file() and list((sweep_dir / "ray_logs").glob("worker-*.out"))
    assert f"HF_TOKEN={fingerprint(secret)}" in (sweep_dir / "launcher.log").read_text()
    holding = [str(f.relative_to(sweep_dir)) for f in sweep_dir.rglob("*") if f.is_file()
               and any(value.encode() in f.read_bytes()
                       for value in (secret, "k1-ray-aaaaaa", "k2-ray-bbbbbb", "K9ray sp", "K9ray\\ sp", "ghpRAY88"))]
    assert holding == []
    # the sweep's Ray instance and its folder are gone with it
    assert own_ray_folders() == set() and leftover(sweep_dir) is None


def point_worker(session: int, marker: str) -> int | None:
    """The Ray worker (`ray::_run_job`) whose point's pytest has `marker` on its command line."""
    from harness.sweep.ray_cluster import is_ray_worker, parent_of, session_members

    for pid, _ in session_members(session):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() and is_ray_worker(parent_of(pid)):
                return parent_of(pid)
        except OSError:
            continue
    return None


def app_session(sweep_dir: Path) -> int | None:
    """The Hydra app (the Ray driver) of this sweep: its own session's leader."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        if b"harness.sweep.app" in text and str(sweep_dir).encode() in text:
            return int(cmdline.parent.name)
    return None


@pytest.mark.cluster
def test_a_point_whose_ray_worker_died_is_failed_with_rays_reason_and_the_other_runs_on(tmp_path):
    runs = tmp_path / "runs"
    process = sweep(runs, "workload.concurrency=1,2", LONG, "hydra/launcher=ray")
    sweep_dir = wait_for(lambda: next(runs.glob("*_sweep"), None), 60, "sweep folder")
    session = wait_for(lambda: app_session(sweep_dir), 60, "Ray driver")
    worker = wait_for(lambda: point_worker(session, "workload.concurrency=2"), 90, "Ray worker of point 1")
    subprocess.run(["kill", "-KILL", str(worker)], check=True)  # as the OOM killer would
    status, output = finished(process)
    assert status == 1, output[-4000:]
    _, data = sweep_record(runs)
    short, long = data["points"]  # concurrency 1, 2
    assert (short["exit_status"], short["status"]) == (0, "finished") and "error" not in short
    assert (long["status"], long["exit_status"]) == ("job_failed", None)
    assert long["error"].startswith("Ray task WorkerCrashedError: The worker died unexpectedly")
    assert (sweep_dir / long["job_log"]).is_file()
    if long["record"]:  # its pytest was stopped as by a Ctrl-C, its servers with it
        assert json.loads((sweep_dir / long["record"] / "results.json").read_text())["status"] == "interrupted"
    assert f"- {long['label']}: Ray task WorkerCrashedError" in (sweep_dir / "summary.md").read_text()
    assert leftover(sweep_dir) is None


@pytest.mark.cluster
def test_ctrl_c_stops_every_point_and_the_ray_instance(tmp_path, own_ray_folders):
    runs = tmp_path / "runs"
    process = sweep(runs, "workload.concurrency=1,2", LONG, "hydra/launcher=ray")
    sweep_dir = wait_for(lambda: next(runs.glob("*_sweep"), None), 60, "sweep folder")
    session = wait_for(lambda: app_session(sweep_dir), 60, "Ray driver")
    wait_for(lambda: point_worker(session, "workload.concurrency=2"), 90, "a running point")
    process.send_signal(signal.SIGINT)
    status, output = finished(process, timeout=200)
    assert status == 2, output[-4000:]
    _, data = sweep_record(runs)
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)
    first, running = data["points"]  # concurrency 1, 2: the second ran when Ctrl-C came
    assert running["exit_status"] != 0
    # the first may have ended before it (its 20 short requests, on a busy box where the second started late)
    assert first["exit_status"] != 0 or first["status"] == "finished", first
    for point in data["points"]:
        if point["record"] and point["status"] != "finished":
            assert json.loads((sweep_dir / point["record"] / "results.json").read_text())["status"] == "interrupted"
    from harness.sweep.ray_cluster import session_members

    assert session_members(session) == [] and leftover(sweep_dir) is None
    assert own_ray_folders() == set()
    assert "status **interrupted**" in (sweep_dir / "summary.md").read_text()


@pytest.mark.cluster
def test_joining_a_two_node_cluster_runs_a_point_on_each_and_ctrl_c_cancels_them(tmp_path):
    """A cluster's workers are not in the app's session: the driver cancels its tasks (each
    stops its point's pytest) and waits for them."""
    runs = tmp_path / "runs"
    with two_node_cluster() as address:
        process = sweep(runs, "workload.concurrency=1,2", LONG, "hydra/launcher=ray",
                        f"hydra.launcher.ray.init.address={address}")
        sweep_dir = wait_for(lambda: next(runs.glob("*_sweep"), None), 60, "sweep folder")
        logs = [sweep_dir / "points" / ".jobs" / str(n) / "point.log" for n in (0, 1)]
        wait_for(lambda: all(log.is_file() and b"test session starts" in log.read_bytes() for log in logs), 90,
                 "both points' pytests")
        process.send_signal(signal.SIGINT)
        status, output = finished(process, timeout=200)
    assert status == 2, output[-4000:]
    nodes = {log.read_text().splitlines()[0].split("Ray node ")[1].split()[0] for log in logs}
    assert len(nodes) == 2  # one point on each node
    _, data = sweep_record(runs)
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)
    for point in data["points"]:
        assert point["exit_status"] == 2  # the task stopped its pytest and returned its status
        if point["record"]:
            assert json.loads((sweep_dir / point["record"] / "results.json").read_text())["status"] == "interrupted"
    assert not (sweep_dir / "ray_logs").exists()  # a joined cluster's files are its own
    assert leftover(sweep_dir) is None
