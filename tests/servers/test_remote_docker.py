"""Driving a Docker engine that is not the local socket, as a laptop drives a GPU box:
`backend.docker_host=tcp://...` and `ssh://...`, with `backend.publish_host`, end to end on
sim_smoke against the real engine, and what a remote engine changes in the checks (its
loopback is not ours; its GPUs are not the ones NVML sees here).

The TCP engine is this machine's engine exposed on a non-loopback address of this machine
(tests/support/tcp_to_unix.py, as `dockerd -H tcp://ADDR:PORT` would), so the server's port is
published on, and reached at, that address. The ssh engine is reached through a real sshd
on a loopback port with its own keys (scripts/ensure_sshd.sh installs it), the docker SDK
shelling out to `ssh ... docker system dial-stdio` as the docker CLI does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from harness.secrets import Policy
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.servers.docker import client_host, unreachable_publish
from tests.support.runs import run_suites

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def this_machines_address() -> str:
    """An address of this machine other than loopback (the route out), else loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
            address = probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"
    return address if not address.startswith("127.") else "127.0.0.1"


def start_and_read_line(argv: list[str], prefix: str, timeout: float = 10) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return proc, line[len(prefix):].strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"{argv[0]} did not say '{prefix}' within {timeout}s")


@pytest.fixture(scope="module")
def tcp_engine():
    """tcp://ADDR:PORT of this machine's engine, ADDR not loopback where this machine has one."""
    docker.from_env().ping()
    address = this_machines_address()
    proc, where = start_and_read_line([PYTHON, str(ROOT / "tests" / "support" / "tcp_to_unix.py"), address, "0",
                                       "/var/run/docker.sock"], "listening ")
    yield address, int(where.rsplit(":", 1)[1])
    proc.kill()
    proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ssh_engine(tmp_path_factory):
    """ssh://root@127.0.0.1:PORT served by an sshd of our own, and the PATH whose `ssh` uses
    this test's keys and known_hosts (the docker SDK runs plain `ssh`, as the CLI does)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure_sshd.sh")], check=True, capture_output=True, timeout=600)
    folder = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    port = free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        f"PasswordAuthentication no\nStrictModes no\nUsePAM no\nPidFile {folder / 'sshd.pid'}\n")
    (folder / "ssh_config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {folder / 'user_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec /usr/bin/ssh -F {folder / 'ssh_config'} \"$@\"\n")
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(folder / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    wait_for_ssh(port, env, sshd)
    yield f"ssh://root@127.0.0.1:{port}", env
    sshd.terminate()
    sshd.wait(10)


def wait_for_ssh(port: int, env: dict, sshd: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        probe = subprocess.run(["ssh", "-p", str(port), "root@127.0.0.1", "docker", "version", "--format",
                                "{{.Server.Version}}"], env=env, capture_output=True, text=True, timeout=20)
        if probe.returncode == 0:
            return
        if sshd.poll() is not None:
            pytest.fail(f"sshd exited: {sshd.stderr.read()}")
        time.sleep(0.3)
    pytest.fail(f"ssh to 127.0.0.1:{port} does not reach the engine: {probe.stderr.strip()}")


def run_sim_smoke(record_root: Path, *overrides: str, env: dict | None = None,
                  refused: bool = False) -> subprocess.CompletedProcess:
    return run_suites("+exp=sim_smoke", "backend=docker", f"record.root={record_root}", *overrides, env=env,
                      refused=refused)


def containers_named(names: list[str]) -> list[str]:
    existing = {c.name for c in docker.from_env().containers.list(all=True, ignore_removed=True)}
    return [n for n in names if n in existing]


def check_end_to_end(proc: subprocess.CompletedProcess, record_root: Path, host: str, docker_host: str) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    results = json.loads((record_root / "latest" / "results.json").read_text())
    assert results["status"] == "finished"
    servers = {arm: block["server"] for arm, block in results["arms"].items()}
    assert set(servers) == {"baseline", "eagle3"}
    for server in servers.values():
        # a URL's user is a secret by where it sits (ssh://USER@host): the record holds its fingerprint,
        # and the engine was still reached with it (the run passed)
        assert server["docker_host"] == Policy().mask_text(docker_host, "docker_host")
        assert server["base_url"].startswith(f"http://{host}:"), server["base_url"]
    assert containers_named([s["container"] for s in servers.values()]) == []


@pytest.mark.slow
def test_sim_smoke_runs_through_an_engine_reached_over_tcp(tcp_engine, tmp_path):
    """The server's port is published on this machine's non-loopback address only, and
    reached there: as on a GPU box whose engine listens on tcp://gpu-box:2375."""
    address, port = tcp_engine
    docker_host = f"tcp://{address}:{port}"
    proc = run_sim_smoke(tmp_path, f"backend.docker_host={docker_host}", f"backend.publish_host={address}")
    check_end_to_end(proc, tmp_path, address, docker_host)


@pytest.mark.slow
def test_sim_smoke_runs_through_an_engine_reached_over_ssh(ssh_engine, tmp_path):
    docker_host, env = ssh_engine
    proc = run_sim_smoke(tmp_path, f"backend.docker_host={docker_host}", env=env)
    check_end_to_end(proc, tmp_path, "127.0.0.1", docker_host)


@pytest.mark.slow
def test_an_engine_that_does_not_answer_fails_each_arm_in_one_sentence(tmp_path):
    proc = run_sim_smoke(tmp_path, "backend.docker_host=tcp://127.0.0.1:1")
    assert proc.returncode == 1
    sentence = ("no Docker engine answers at tcp://127.0.0.1:1 (Connection refused); check that the engine "
                "on that host listens there")
    assert sentence in proc.stdout
    assert "Traceback" not in proc.stdout and "During handling" not in proc.stdout
    results = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert results["status"] == "finished"
    assert {block["status"] for block in results["arms"].values()} <= {"server_failed", "not_run"}


def test_a_remote_engines_loopback_is_refused_before_anything_starts(tmp_path):
    proc = run_sim_smoke(tmp_path, "backend.docker_host=ssh://me@gpu-box", refused=True)
    assert proc.returncode == 4
    assert ("backend.publish_host 127.0.0.1 publishes the server on gpu-box's own loopback, which this "
            "machine cannot reach") in proc.stderr
    assert not any(tmp_path.iterdir())


def test_telemetry_of_a_remote_engine_is_not_sampled_here():
    """NVML here would sample this machine's GPUs (or none) for a server on another box."""
    remote = ["backend=docker", "backend.docker_host=tcp://gpu-box:2376", "backend.publish_host=0.0.0.0"]
    auto = compose(["+exp=sim_smoke", *remote, "server.requires_gpu=true", "telemetry=auto"])
    assert {arm.cfg.telemetry.source for arm in auto.arms} == {"off"}
    with pytest.raises(ConfigError, match="telemetry=nvml samples this machine's GPUs, but the server runs on gpu-box"):
        compose(["+exp=sim_smoke", *remote, "telemetry=nvml"])


def test_where_a_published_port_is_reached():
    assert client_host(None, "127.0.0.1") == "127.0.0.1"
    assert client_host("unix:///var/run/docker.sock", "0.0.0.0") == "127.0.0.1"
    assert client_host("ssh://me@gpu-box", "0.0.0.0") == "gpu-box"
    assert client_host("tcp://10.1.2.3:2376", "0.0.0.0") == "10.1.2.3"
    assert client_host("tcp://gpu-box:2376", "10.1.2.3") == "10.1.2.3"  # the box's own address, as given
    assert client_host("ssh://me@127.0.0.1:2222", "127.0.0.1") == "127.0.0.1"
    assert unreachable_publish("tcp://gpu-box:2376", "127.0.0.1")
    assert unreachable_publish("ssh://me@127.0.0.1", "127.0.0.1") is None
    assert unreachable_publish(None, "127.0.0.1") is None
