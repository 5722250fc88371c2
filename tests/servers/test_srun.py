"""The srun backend (harness/servers/srun.py) without a cluster: the step's command line, its
job name, the step's processes as the /proc tree below its pids, and a machine without SLURM
refused in one sentence."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness.config.schema import SpecgateConfig
from harness.servers.base import ServerError
from harness.servers.labels import Session
from harness.servers.srun import SrunServer, descendants, job_name


def srun_config() -> SpecgateConfig:
    cfg = SpecgateConfig()
    cfg.backend.kind = "srun"
    cfg.backend.srun_args = ["--partition=gpu", "--gres=gpu:8"]
    return cfg


def test_the_step_is_the_engines_launch_under_srun_named_by_session_and_server(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: f"/usr/bin/{name}")
    session = Session()
    server = SrunServer("eagle3.w1", srun_config(), tmp_path / "server.log", session)
    argv = server.command()
    assert argv[:7] == ["/usr/bin/srun", f"--job-name=specgate-{session.id}-eagle3.w1", "--ntasks=1", "--nodes=1",
                        "--unbuffered", "--kill-on-bad-exit=1", "--partition=gpu"]
    assert argv[7] == "--gres=gpu:8" and argv[9:11] == ["-m", "harness.sim"]
    assert server.job_name == job_name(session, "eagle3.w1")


def test_without_slurm_on_the_path_the_step_is_refused_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: None)
    with pytest.raises(ServerError, match="backend=srun needs SLURM's `srun` on this machine's PATH"):
        SrunServer("a", srun_config(), tmp_path / "server.log", Session()).command()


def test_a_steps_processes_are_its_pids_and_everything_below_them():
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        import time

        deadline = time.monotonic() + 5
        while len(tree := descendants({child.pid})) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert tree[0] == child.pid and len(tree) == 2  # the shell and its sleep
        assert os.getpid() not in tree
    finally:
        child.kill()
        subprocess.run(["pkill", "-P", str(child.pid)])
        child.wait()
