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
