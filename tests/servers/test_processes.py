"""Reading every server process's environment, and naming the ones that lack a variable."""

import shutil
import os
import subprocess
import sys
import time

from harness.servers.processes import (INSPECT_SCRIPT, ServerProcess, environment_mismatches, local_group,
                                       parse_inspection, read_proc)


def test_mismatches_name_the_process_and_the_variables():
    processes = [
        ServerProcess(10, 1, ["python3", "-m", "sglang.launch_server"], {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}),
        ServerProcess(11, 10, ["sglang::scheduler_TP0"], {"NCCL_ALGO": "Tree"}, name="sglang::sched"),
    ]
    problems = environment_mismatches(processes, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    assert problems == ["pid 11 sglang::sched (sglang::scheduler_TP0): missing NCCL_PROTO; different NCCL_ALGO='Tree' (expected 'Ring')"]


def test_the_inspection_script_reads_real_processes():
    """The script runs under a plain POSIX sh (no interpreter of the engine's in the image)
    and reads what /proc says, even a command line and environment with newlines in them."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "two\nlines", "x y"],
                             env={**os.environ, "SPECGATE_PROBE": "a\nb=c"})
    try:
        deadline = time.monotonic() + 10
        while read_proc(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)  # Popen returns once exec began; the new command line appears a moment later
        output = subprocess.run(["dash" if shutil.which("dash") else "sh", "-c", INSPECT_SCRIPT],
                                capture_output=True, text=True, check=True).stdout
        processes = {p.pid: p for p in parse_inspection(output)}
        for pid in (os.getpid(), child.pid):
            direct = read_proc(pid)
            seen = processes[pid]
            assert (seen.ppid, seen.name, seen.cmdline, seen.environ) == (direct.ppid, direct.name, direct.cmdline, direct.environ)
        assert processes[child.pid].cmdline[-2:] == ["two\nlines", "x y"]
        assert processes[child.pid].environ["SPECGATE_PROBE"] == "a\nb=c"
        assert not [p for p in processes.values() if p.cmdline[:1] in (["od"], ["cat"], ["tr"])]  # not its own helpers
    finally:
        child.kill()
        child.wait()


def test_local_group_lists_a_process_group_with_environments():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True,
                             env={**os.environ, "SPECGATE_PROBE": "yes"})
    try:
        # Popen returns once exec began; the new command line appears a moment later
        deadline = time.monotonic() + 10
        while read_proc(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        group = local_group(child.pid)
        assert [p.pid for p in group] == [child.pid]
        assert group[0].environ["SPECGATE_PROBE"] == "yes"
    finally:
        child.kill()
        child.wait()


def test_the_temp_folders_of_dead_harnesses_servers_go_and_a_live_ones_stay(tmp_path, monkeypatch, capsys):
    """A harness killed with SIGKILL leaves its process servers' temp folders (the servers get
    SIGTERM, nobody removes the folder): the next session's clean-up and `specgate clean`
    remove them, and nothing of a live harness or not named as ours."""
    import argparse

    from harness.cli import cmd_clean
    from harness.servers import remove_dead_sessions_leftovers
    from harness.servers.labels import Session
    from harness.servers.process import TMP_PREFIX, remove_dead_sessions_tmp_dirs
    from harness.run.compose import compose

    monkeypatch.setattr("harness.servers.process.tempfile.gettempdir", lambda: str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()

    def folders(dead_ones: int) -> list:
        made = [tmp_path / f"{TMP_PREFIX}{dead.pid}-{i}" for i in range(dead_ones)]
        for path in made:
            path.mkdir()
            (path / "socket-like").write_text("")
        return made

    left = folders(2)
    live = tmp_path / f"{TMP_PREFIX}{os.getpid()}-x"
    not_ours = [tmp_path / f"{TMP_PREFIX}abc-x", tmp_path / "specgate-sim-base-x"]
    for path in (live, *not_ours):
        path.mkdir()
    (tmp_path / f"{TMP_PREFIX}{dead.pid}-file").write_text("")  # a file, not a server's folder
    assert remove_dead_sessions_tmp_dirs() == [str(p) for p in left]
    assert all(p.exists() for p in (live, *not_ours)) and not any(p.exists() for p in left)
    # the session-start clean-up of a process backend, and `specgate clean`
    folders(1)
    cfg = compose(["+exp=sim_smoke", "backend=process"]).arms[0].typed
    assert remove_dead_sessions_leftovers(cfg, Session()) == [str(tmp_path / f"{TMP_PREFIX}{dead.pid}-0")]
    folders(1)
    monkeypatch.setattr("harness.servers.images.docker_client", lambda host: object())
    monkeypatch.setattr("harness.servers.labels.remove_containers", lambda client, only_dead: [])
    monkeypatch.setattr("harness.servers.srun.shutil.which", lambda name: None)
    assert cmd_clean(argparse.Namespace(docker_host=None, images=False)) == 0
    assert "removed 1 temp folder(s) of dead sessions' servers" in capsys.readouterr().out
    assert live.exists()
