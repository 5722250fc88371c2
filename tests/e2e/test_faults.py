"""The fault matrix: whole runs (`pytest suites/...` with backend=attach) against servers
that misbehave on purpose (tests/support/fake_openai.py, as a process). Every third request
misbehaves, so each run has requests that finished and requests that failed. For each
fault the run must end with:

* the reason in one sentence, said once with its count (not once per request);
* every finished request kept in requests.jsonl, the failed ones with their reason;
* a complete record: results.json `status: finished`, the arm's status right;
* the right exit status (1: a gate failed; 0 where the server was only slow);
* nothing left behind: no process of the run's process group outlives it, and the
  attached server is left running (it is not ours to stop), unless it died by itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.record.requests import read_lines
from tests.support.runs import start_suites

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "support" / "fake_openai.py"
pytestmark = pytest.mark.slow  # every test here is a whole run against a fake server
MEASURED, WARMUP = 6, 1  # fault_every=3: requests 3 and 6 (2 of the 6 measured) misbehave

# fault -> (fake's arguments, what the one reason says, how many measured requests fail)
FAULTS = {
    "http500": (["--mode", "http500"], "HTTP 500: the fake was told to fail", 2),
    "malformed_sse": (["--mode", "malformed_sse"], "malformed SSE line", 2),
    "drop_mid_stream": (["--mode", "drop_mid_stream"], "connection dropped mid-stream", 2),
    "hang_before_headers": (["--mode", "hang_before_headers"], "first_byte_timeout_s=1", 2),
    "hang_mid_stream": (["--mode", "hang_mid_stream"], "stalled mid-stream after 2 token chunks", 2),
    "lying_usage": (["--mode", "lying_usage", "--lie-factor", "1000000"], "completion tokens but streamed", 2),
    "done_no_tokens": (["--mode", "done_no_tokens"], "the stream finished without any tokens", 2),
    "error_200_json": (["--mode", "error_200", "--error-format", "json"], "server error: model overloaded", 2),
    "error_200_sse": (["--mode", "error_200", "--error-format", "sse"], "model overloaded", 2),
}


class Fake:
    """tests/support/fake_openai.py as a process: the server someone else started."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", *args], stdout=subprocess.PIPE,
                                     text=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=10)


def run_against(fake: Fake, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """One run of the throughput suite against the fake, in its own process group; asserts
    that nothing of that group outlives it."""
    proc = start_suites("backend=attach", f"backend.url={fake.url}", f"record.root={tmp_path}",
                        f"workload.num_prompts={MEASURED}", f"workload.warmup_requests={WARMUP}", "workload.max_tokens=16",
                        "workload.first_byte_timeout_s=1", "workload.timeout_s=2", *overrides,
                        path="suites/test_throughput.py", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        start_new_session=True)
    stdout, stderr = proc.communicate(timeout=300)
    assert not group_alive(proc.pid), "a process of the run outlived it"
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def group_alive(pgid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    return True


def record_of(tmp_path: Path) -> tuple[dict, list[dict], str]:
    record = tmp_path / "latest"
    results = json.loads((record / "results.json").read_text())
    lines = read_lines(record)
    return results, lines, (record / "summary.md").read_text()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_is_one_sentence_and_the_finished_requests_are_kept(fault, tmp_path):
    args, reason, failing = FAULTS[fault]
    fake = Fake(*args, "--fault-every", "3")
    try:
        proc = run_against(fake, tmp_path)
        assert fake.proc.poll() is None, "attach must not stop a server it did not start"
    finally:
        fake.stop()
    assert proc.returncode == 1, proc.stdout[-3000:]
    results, lines, summary = record_of(tmp_path)
    assert results["status"] == "finished" and results["arms"]["default"]["status"] == "measured"
    measured = [line for line in lines if not line["warmup"]]
    assert len(lines) == MEASURED + WARMUP and len(measured) == MEASURED
    assert sum(line["ok"] for line in measured) == MEASURED - failing  # the finished ones are all kept
    errors = {line["error"] for line in measured if not line["ok"]}
    assert all(reason in error and "\n" not in error for error in errors), errors
    said = [line for line in summary.splitlines() if "request(s) failed:" in line]
    assert len(said) == 1 and said[0].startswith(f"default: {failing} request(s) failed:") and reason in said[0]
    assert f"most common error ({failing}x)" in proc.stdout


def test_a_server_that_dies_mid_load_keeps_what_finished_and_says_it_died(tmp_path):
    fake = Fake("--mode", "dies_mid_load", "--die-after", str(WARMUP + 3))
    try:
        proc = run_against(fake, tmp_path)
        assert fake.proc.wait(timeout=10) == 1  # it died by itself
    finally:
        fake.stop()
    assert proc.returncode == 1, proc.stdout[-3000:]
    results, lines, summary = record_of(tmp_path)
    arm = results["arms"]["default"]
    assert results["status"] == "finished" and arm["status"] == "server_died"
    assert "the server stopped answering" in arm["error"] and "during the load" in arm["error"]
    measured = [line for line in lines if not line["warmup"]]
    assert len(measured) == MEASURED and sum(line["ok"] for line in measured) == 3
    assert "connection dropped mid-stream" in measured[3]["error"]  # the one it died in
    # the rest were refused; the first may have reached the dying server's socket (reset, no response)
    gone = ("cannot connect", "the connection closed before any response")
    assert all(any(reason in line["error"] for reason in gone) for line in measured[4:]), \
        [line["error"] for line in measured[4:]]
    assert "cannot connect" in measured[-1]["error"]
    assert summary.count("request(s) failed:") in (2, 3)  # died in one, (reset one,) refused the rest


def test_a_slow_health_route_is_slow_not_a_dead_server(tmp_path):
    fake = Fake("--mode", "slow_health", "--health-delay-s", "3")
    try:
        proc = run_against(fake, tmp_path, "backend.health_timeout_s=10")
        assert fake.proc.poll() is None
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stdout[-3000:]
    results, lines, _ = record_of(tmp_path)
    arm = results["arms"]["default"]
    assert results["status"] == "finished" and arm["status"] == "measured", arm.get("error")
    assert arm["server"]["health_route_slow_s"] >= 3
    assert sum(line["ok"] for line in lines) == MEASURED + WARMUP
