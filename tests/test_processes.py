"""Reading every server process's environment, and naming the ones that lack a variable."""

import json
import os
import subprocess
import sys

from harness.servers.processes import INSPECT_SCRIPT, ServerProcess, environment_mismatches, local_group, parse_inspection


def test_mismatches_name_the_process_and_the_variables():
    processes = [
        ServerProcess(10, 1, ["python3", "-m", "sglang.launch_server"], {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}),
        ServerProcess(11, 10, ["sglang::scheduler_TP0"], {"NCCL_ALGO": "Tree"}, name="sglang::sched"),
    ]
    problems = environment_mismatches(processes, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    assert problems == ["pid 11 sglang::sched (sglang::scheduler_TP0): missing NCCL_PROTO; different NCCL_ALGO='Tree' (expected 'Ring')"]


def test_the_inspection_script_reads_real_processes():
    output = subprocess.run([sys.executable, "-c", INSPECT_SCRIPT], capture_output=True, text=True, check=True).stdout
    processes = parse_inspection(output)
    me = [p for p in processes if p.pid == os.getpid()]
    assert me and me[0].environ.get("PATH") == os.environ["PATH"]
    assert all(p.pid != json.loads(output)[0].get("never", -1) for p in processes)


def test_local_group_lists_a_process_group_with_environments():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True,
                             env={**os.environ, "SPECGATE_PROBE": "yes"})
    try:
        group = local_group(child.pid)
        assert [p.pid for p in group] == [child.pid]
        assert group[0].environ["SPECGATE_PROBE"] == "yes"
    finally:
        child.kill()
        child.wait()
