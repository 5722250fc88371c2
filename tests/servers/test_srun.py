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
    assert argv[:8] == ["/usr/bin/srun", f"--job-name=specgate-{session.id}-eagle3.w1",
                        f"--comment=specgate specgate.pid={session.pid} specgate.host={session.host}", "--ntasks=1",
                        "--nodes=1", "--unbuffered", "--kill-on-bad-exit=1", "--partition=gpu"]
    assert argv[8] == "--gres=gpu:8" and argv[10:12] == ["-m", "harness.sim"]
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


def fake_squeue(monkeypatch, rows: str) -> list[list[str]]:
    """squeue answering `rows`; the scancel calls made, in order."""
    calls: list[list[str]] = []

    def run_tool(argv, timeout_s=10.0):
        calls.append(argv)
        return rows if "squeue" in argv[0] else ""

    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("harness.servers.srun.run_tool", run_tool)
    monkeypatch.setattr("harness.servers.srun.controller_refuses", lambda: None)  # whatever SLURM this box runs
    return calls


def test_only_the_jobs_of_dead_sessions_on_this_host_are_cancelled_at_a_sessions_start(monkeypatch):
    import socket

    from harness.servers.srun import cancel_jobs

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    rows = "\n".join([
        f"11|specgate-aaaaaaaaaaaa-eagle3|specgate specgate.pid={dead.pid} specgate.host={host}",  # a dead harness
        f"12|specgate-bbbbbbbbbbbb-eagle3.w0|specgate specgate.pid={os.getpid()} specgate.host={host}",  # a live one
        f"13|specgate-cccccccccccc-base|specgate specgate.pid={dead.pid} specgate.host=another-box",  # not judged here
        "14|specgate-dddddddddddd-x|(null)",  # no comment: an older specgate's, not judged
        f"15|training-run|specgate specgate.pid={dead.pid} specgate.host={host}",  # not ours by name
        f"16|specgate-eeeeeeeeeeee-mine|specgate specgate.pid={dead.pid} specgate.host={host}",  # this session's
    ])
    calls = fake_squeue(monkeypatch, rows)
    assert cancel_jobs(only_dead=True, keep_session="eeeeeeeeeeee") == ["specgate-aaaaaaaaaaaa-eagle3"]
    assert calls[-1] == ["/usr/bin/scancel", "11"]
    assert calls[0][:2] == ["/usr/bin/squeue", "--noheader"] and "--format=%A|%j|%k" in calls[0]


def test_clean_cancels_every_job_specgate_started_and_nothing_else(monkeypatch):
    from harness.servers.srun import cancel_jobs

    calls = fake_squeue(monkeypatch, "21|specgate-aaaaaaaaaaaa-a|(null)\n22|notebook|(null)\n"
                                     "23|specgate_2026-12-07_10-00-00|(null)\n")  # a sweep's point
    assert cancel_jobs(only_dead=False) == ["specgate-aaaaaaaaaaaa-a", "specgate_2026-12-07_10-00-00"]
    assert [c for c in calls if "scancel" in c[0]] == [["/usr/bin/scancel", "21"], ["/usr/bin/scancel", "23"]]


def test_a_sweeps_point_is_never_taken_for_a_dead_sessions_step(monkeypatch):
    """A sweep's points run their own whole runs to their end; only `specgate clean` cancels them."""
    from harness.servers.srun import cancel_jobs

    fake_squeue(monkeypatch, "24|specgate_2026-12-07_10-00-00|(null)\n")
    assert cancel_jobs(only_dead=True, keep_session="eeeeeeeeeeee") == []


def test_without_slurm_there_is_no_job_to_cancel(monkeypatch):
    from harness.servers.srun import cancel_jobs

    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: None)
    assert cancel_jobs(only_dead=False) == []


def test_specgate_clean_cancels_the_slurm_jobs_even_where_docker_does_not_answer(monkeypatch, capsys):
    import argparse

    from harness.cli import cmd_clean
    from harness.exit_status import MISTAKE
    from harness.servers.images import ImageError

    def no_engine(host):
        raise ImageError("the Docker engine does not answer")

    monkeypatch.setattr("harness.servers.images.docker_client", no_engine)
    calls = fake_squeue(monkeypatch, "31|specgate-aaaaaaaaaaaa-a|(null)\n")
    status = cmd_clean(argparse.Namespace(docker_host=None, images=False))
    out = capsys.readouterr()
    assert status == MISTAKE and "the Docker engine does not answer" in out.err  # said, and the exit says it
    assert "cancelled 1 SLURM job(s): specgate-aaaaaaaaaaaa-a" in out.out and ["/usr/bin/scancel", "31"] in calls


def clean_with(monkeypatch, run_tool) -> int:
    """`specgate clean` with a Docker engine that has nothing to remove and SLURM's tools
    answering through run_tool."""
    import argparse

    from harness.cli import cmd_clean

    monkeypatch.setattr("harness.servers.images.docker_client", lambda host: object())
    monkeypatch.setattr("harness.servers.labels.remove_containers", lambda client, only_dead: [])
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("harness.servers.srun.run_tool", run_tool)
    monkeypatch.setattr("harness.servers.srun.controller_refuses", lambda: None)
    return cmd_clean(argparse.Namespace(docker_host=None, images=False))


def test_clean_says_but_does_not_fail_on_a_slurm_whose_controller_does_not_answer(monkeypatch, capsys):
    """SLURM's client without a cluster (CI before its cluster starts): nothing could be
    listed, so nothing was left; said on stderr, the exit stays the Docker part's."""
    from harness.servers.base import ServerError

    def run_tool(argv, timeout_s=10.0):
        raise ServerError("`/usr/bin/squeue --noheader` failed: slurm_load_jobs error: Unable to contact slurm "
                          "controller (connect failure)")

    status = clean_with(monkeypatch, run_tool)
    out = capsys.readouterr()
    assert status == 0 and "removed 0 container(s)" in out.out
    assert "SLURM's jobs were not checked" in out.err and "Unable to contact slurm controller" in out.err


def slurm_conf(tmp_path, monkeypatch, text: str):
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


def test_a_controller_that_refuses_is_said_at_once_where_squeue_would_retry_for_seconds(tmp_path, monkeypatch):
    import socket
    import time

    from harness.servers.ports import free_port
    from harness.servers.srun import SlurmUnreachable, controller_refuses, specgate_jobs

    closed = free_port()
    slurm_conf(tmp_path, monkeypatch, f"ClusterName=x\nSlurmctldHost=box(127.0.0.1)  # primary\n"
                                      f"SlurmctldPort={closed}\n")
    started = time.monotonic()
    said = controller_refuses()
    assert said == (f"no SLURM controller listens at 127.0.0.1:{closed} (SlurmctldHost in {tmp_path / 'slurm.conf'}): "
                    f"SLURM is installed here but its cluster is not running")
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(SlurmUnreachable, match="no SLURM controller listens"):
        specgate_jobs()  # squeue is not even run
    assert time.monotonic() - started < 2
    with socket.create_server(("127.0.0.1", 0)) as listening:  # a controller that answers: squeue decides
        port = listening.getsockname()[1]
        slurm_conf(tmp_path, monkeypatch, f"ControlMachine=127.0.0.1\nSlurmctldPort={port}\n")
        assert controller_refuses() is None


@pytest.mark.parametrize("text", ["ClusterName=x\n", None])
def test_without_a_controller_named_squeue_decides(tmp_path, monkeypatch, text):
    from harness.servers.srun import controller_refuses

    if text is None:
        monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))  # configless SLURM: no file
    else:
        slurm_conf(tmp_path, monkeypatch, text)
    assert controller_refuses() is None


def test_clean_fails_when_a_job_it_found_could_not_be_cancelled(monkeypatch, capsys):
    from harness.exit_status import MISTAKE
    from harness.servers.base import ServerError

    def run_tool(argv, timeout_s=10.0):
        if "squeue" in argv[0]:
            return "41|specgate-aaaaaaaaaaaa-a|(null)\n"
        raise ServerError("`/usr/bin/scancel 41` failed: Access/permission denied")

    status = clean_with(monkeypatch, run_tool)
    assert status == MISTAKE and "scancel 41` failed" in capsys.readouterr().err


def test_a_step_on_another_node_is_read_there_through_a_step_beside_it(tmp_path, monkeypatch):
    """srun --jobid --overlap on the step's node: the job's pids there, then every process's
    dump; the step's are those pids and their descendants, nothing else of that node."""
    def hexed(text: str) -> str:
        return text.encode().hex()

    def dump(pid, ppid, cmd, env=""):
        return (f"pid={pid} ppid={ppid} comm={hexed(cmd.split()[0])} cmdline={hexed(cmd.replace(' ', chr(0)))} "
                f"environ={hexed(env)}")

    output = "\n".join(["PID      JOBID    STEPID   LOCALID GLOBALID", "4100     77       0        0       0",
                        "--specgate-listpids-end--",
                        dump(4100, 4090, "python -m harness.sim", "NCCL_ALGO=Ring\0HOME=/root"),
                        dump(4101, 4100, "sglang::tp_TP1", "NCCL_ALGO=Ring"),
                        dump(4090, 1, "slurmstepd"), dump(5000, 1, "sshd")])
    calls = []
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("harness.servers.srun.run_tool", lambda argv, timeout_s=10.0: calls.append(argv) or output)
    server = SrunServer("a", srun_config(), tmp_path / "server.log", Session())
    server.job_id, server.node = "77", "gpu-node-17"
    found = server.processes()
    assert [(p.pid, p.environ.get("NCCL_ALGO")) for p in found] == [(4100, "Ring"), (4101, "Ring")]
    assert calls[0][:7] == ["/usr/bin/srun", "--jobid=77", "--overlap", "--nodes=1", "--ntasks=1",
                            "--nodelist=gpu-node-17", "--quiet"]
    assert calls[0][7:9] == ["sh", "-c"] and calls[0][9].startswith("scontrol listpids 77; echo --specgate-listpids-end--;")
