"""A fleet as one Server (harness/servers/fleet.py), against fake workers and a fake router:
every worker launched from the caller's thread before any is waited on, a failure raised
with the worker's own log, everything stopped whatever failed, each process named by its
worker; and the config that asks for one, refused in one sentence where it cannot work."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.config.compose import ConfigError
from harness.config.schema import SpecgateConfig
from harness.engines import router as sglang_router
from harness.run.compose import compose
from harness.servers.base import Server, ServerError
from harness.servers.fleet import FleetServer, worker_config, worker_log
from harness.servers.labels import Session
from harness.servers.processes import ServerProcess


class FakeWorker(Server):
    """A backend's server that records what happened to it, and in which thread."""

    def __init__(self, name, cfg, log_path, session, scrub=None, journal=None, fail_ready=False, fail_stop=False):
        super().__init__(name, log_path, scrub)
        self.cfg, self.journal, self.fail_ready, self.fail_stop = cfg, journal, fail_ready, fail_stop
        self.alive = False

    def start(self) -> None:
        self.launch()
        self.await_ready()

    def launch(self) -> None:
        self.journal.append(("launch", self.name, threading.current_thread() is threading.main_thread()))
        self.alive, self.base_url = True, f"http://127.0.0.1:{10000 + len(self.journal)}"

    def await_ready(self) -> None:
        self.journal.append(("ready", self.name))
        if self.fail_ready:
            raise ServerError(f"arm '{self.name}': the server exited with code 1 before it became healthy")

    def stop(self) -> None:
        self.journal.append(("stop", self.name))
        self.alive = False
        if self.fail_stop:
            raise ServerError(f"could not remove {self.name}")

    def is_alive(self) -> bool:
        return self.alive

    def processes(self) -> list[ServerProcess]:
        return [ServerProcess(pid=1, ppid=0, cmdline=["python", "-m", "harness.sim"], environ={})]

    def gpu_ids(self):
        return [str(self.cfg.server.gpus[0])] if self.cfg.server.gpus else None


class FakeRouter:
    def __init__(self, journal):
        self.journal, self.metrics_url, self.base_url = journal, "http://127.0.0.1:2", "http://127.0.0.1:1"
        self.log_thread = None

    def start(self):
        self.journal.append(("router start",))

    def stop(self):
        self.journal.append(("router stop",))

    def is_alive(self):
        return True

    def describe(self):
        return {"policy": "cache_aware"}


def fleet(tmp_path: Path, monkeypatch, workers: int = 2, failing: tuple[str, ...] = (), failing_stop=(), gpus=None):
    journal: list = []
    cfg = SpecgateConfig()
    cfg.server.workers = workers
    cfg.server.gpus = gpus

    def start_worker(name, one, log_path, session, scrub):
        return FakeWorker(name, one, log_path, session, scrub, journal, name in failing, name in failing_stop)

    monkeypatch.setattr("harness.servers.fleet.RouterProcess", lambda *a, **k: FakeRouter(journal))
    return FleetServer("arm", cfg, tmp_path / "server.log", Session(), None, start_worker), journal


def test_every_worker_is_launched_from_the_callers_thread_before_any_is_waited_on(tmp_path, monkeypatch):
    server, journal = fleet(tmp_path, monkeypatch, workers=3)
    server.start()
    launches = [e for e in journal if e[0] == "launch"]
    # a process backend's child gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG)
    assert [e[1] for e in launches] == ["arm.w0", "arm.w1", "arm.w2"] and all(e[2] for e in launches)
    assert journal.index(("ready", "arm.w0")) > journal.index(launches[-1])
    assert journal[-1] == ("router start",) and server.base_url == "http://127.0.0.1:1"
    assert [m.name for m in server.members()] == ["arm.w0", "arm.w1", "arm.w2"]
    assert server.router_metrics_url() == "http://127.0.0.1:2"


def test_a_worker_that_fails_fails_the_fleet_and_stop_ends_every_worker(tmp_path, monkeypatch):
    server, journal = fleet(tmp_path, monkeypatch, failing=("arm.w1",))
    with pytest.raises(ServerError, match="arm.w1"):
        server.start()
    assert ("router start",) not in journal  # no router in front of a fleet that did not start
    server.stop()
    assert {e[1] for e in journal if e[0] == "stop"} == {"arm.w0", "arm.w1"}


def test_stop_stops_the_router_first_and_every_worker_even_when_one_stop_fails(tmp_path, monkeypatch):
    server, journal = fleet(tmp_path, monkeypatch, failing_stop=("arm.w0",))
    server.start()
    with pytest.raises(ServerError, match="could not remove arm.w0"):
        server.stop()
    stops = [e for e in journal if "stop" in e[0]]
    assert stops == [("router stop",), ("stop", "arm.w0"), ("stop", "arm.w1")]


def test_each_process_says_which_worker_it_is_in(tmp_path, monkeypatch):
    server, _ = fleet(tmp_path, monkeypatch)
    server.start()
    processes = server.processes()
    assert [p.where for p in processes] == ["arm.w0", "arm.w1"]
    assert processes[1].describe().startswith("arm.w1: pid 1")


def test_workers_are_one_server_each_on_ports_of_their_own_with_logs_beside_the_routers(tmp_path):
    cfg = SpecgateConfig()
    cfg.server.workers, cfg.server.port = 4, 30000
    one = worker_config(cfg)
    assert (one.server.workers, one.server.port) == (1, 0) and (cfg.server.workers, cfg.server.port) == (4, 30000)
    assert worker_log(tmp_path / "arms" / "a" / "server.log", 1) == tmp_path / "arms" / "a" / "server.w1.log"


def test_the_fleets_gpus_are_its_workers(tmp_path, monkeypatch):
    server, _ = fleet(tmp_path, monkeypatch, gpus=[3])
    assert server.gpu_ids() == ["3"]
    server, _ = fleet(tmp_path, monkeypatch)
    assert server.gpu_ids() is None  # a worker with all of them: all of them


def test_the_router_is_launched_in_front_of_the_workers_on_loopback_with_its_metrics_beside():
    argv = sglang_router.launch_argv("/usr/bin/python3", ["http://127.0.0.1:1", "http://127.0.0.1:2"], "round_robin",
                                     "127.0.0.1", 30000, 30001, ["--cache-threshold", "0.5"])
    assert argv[:3] == ["/usr/bin/python3", "-m", "sglang_router.launch_router"]
    joined = " ".join(argv)
    assert "--worker-urls http://127.0.0.1:1 http://127.0.0.1:2 --policy round_robin" in joined
    assert "--host 127.0.0.1 --port 30000 --prometheus-host 127.0.0.1 --prometheus-port 30001" in joined
    assert argv[-2:] == ["--cache-threshold", "0.5"]


def test_the_routers_worker_list_and_error_shape():
    listing = {"workers": [{"url": "http://a", "is_healthy": True}, {"url": "http://b", "is_healthy": False}]}
    assert sglang_router.healthy_workers(listing) == {"http://a"}
    assert sglang_router.healthy_workers("not json of the router") == set()
    body = {"error": {"message": "Missing Content-Type: application/json header", "type": "invalid_request_error"}}
    assert "application/json" in sglang_router.bad_request_message(body)
    with pytest.raises(AssertionError):
        sglang_router.bad_request_message({"object": "error", "message": "an engine's shape"})


@pytest.mark.parametrize("overrides, fragment", [
    (["server.workers=2", "router.policy=fastest"], "router.policy 'fastest' is unknown; valid: cache_aware"),
    (["server.workers=2", "router.args=[--port,1]"], "router.args sets --port, which specgate sets itself"),
    (["server.workers=2", "router.args=['--worker-urls=http://x']"], "router.args sets --worker-urls"),
    (["server.workers=2", "backend=attach", "backend.url=http://127.0.0.1:1"], "attach to the fleet's router instead"),
    (["server.workers=0"], "server.workers"),
])
def test_a_fleet_that_cannot_work_is_refused_in_one_sentence(overrides, fragment):
    with pytest.raises(ConfigError, match=None) as caught:
        compose(["+exp=sim_fleet", *overrides])
    assert fragment in str(caught.value) and "\n" not in str(caught.value).strip()


def test_the_fleet_experiment_composes_two_workers_and_the_two_policies():
    experiment = compose(["+exp=sim_fleet"])
    assert {a.name: (a.typed.server.workers, a.typed.router.policy) for a in experiment.arms} == {
        "cache_aware": (2, "cache_aware"), "round_robin": (2, "round_robin")}


def test_a_worker_that_dies_while_the_router_registers_fails_at_once_with_its_log(tmp_path, monkeypatch):
    from harness.servers.fleet import RouterProcess

    journal: list = []
    cfg = SpecgateConfig()
    cfg.server.workers = 2
    dead = FakeWorker("arm.w1", cfg, tmp_path / "server.w1.log", Session(), None, journal)
    router = RouterProcess("arm", cfg, tmp_path / "server.log", ["http://127.0.0.1:1"], None, [dead])
    monkeypatch.setattr(router, "is_alive", lambda: True)
    with pytest.raises(ServerError, match="worker arm.w1 .* while the router registered the workers"):
        router.wait_workers_registered()  # the worker never started: it is not alive


# --- a split fleet: prefill and decode workers (router.prefill, router.decode) -------------------

def split_fleet(tmp_path: Path, monkeypatch, backend: str = "process", prefill: int = 2, decode: int = 1):
    journal: list = []
    cfg = compose(["+exp=sim_smoke", f"backend={backend}", f"router.prefill={prefill}", f"router.decode={decode}"]
                  ).arms[0].typed

    def start_worker(name, one, log_path, session, scrub):
        return FakeWorker(name, one, log_path, session, scrub, journal)

    monkeypatch.setattr("harness.servers.fleet.RouterProcess", lambda *a, **k: FakeRouter(journal))
    return FleetServer("arm", cfg, tmp_path / "server.log", Session(), None, start_worker), journal


def test_a_split_fleet_is_its_prefill_workers_then_its_decode_workers_each_launched_as_such(tmp_path, monkeypatch):
    server, _ = split_fleet(tmp_path, monkeypatch)
    assert [w.name for w in server.members()] == ["arm.p0", "arm.p1", "arm.d0"]
    assert server.member_roles() == ["prefill", "prefill", "decode"]
    assert [w.log_path.name for w in server.members()] == ["server.p0.log", "server.p1.log", "server.d0.log"]
    ports = [plan.bootstrap_port for plan in server.plans]
    assert ports[2] is None and ports[0] != ports[1] and all(ports[:2])  # each prefill worker its own bootstrap
    first = server.members()[0].cfg.server.extra_args
    assert first[-6:] == ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake",
                          "--disaggregation-bootstrap-port", str(ports[0])]
    assert server.members()[2].cfg.server.extra_args[-4:] == ["--disaggregation-mode", "decode",
                                                              "--disaggregation-transfer-backend", "mooncake"]
    assert all(w.cfg.server.workers == 1 and w.cfg.router.prefill == 2 for w in server.members())
    described = server.describe()["workers"]
    assert [w.get("role") for w in described] == ["prefill", "prefill", "decode"]


def test_a_split_fleets_docker_workers_run_on_the_hosts_network(tmp_path, monkeypatch):
    """The router tells the decode side the prefill URL's host, loopback: a bridged container's
    loopback is its own, so the bootstrap port would be out of reach."""
    server, _ = split_fleet(tmp_path, monkeypatch, backend="docker", prefill=1, decode=1)
    assert [w.cfg.backend.network for w in server.members()] == ["host", "host"]


def test_the_router_splits_requests_over_each_prefill_and_its_bootstrap_port_and_each_decode():
    argv = sglang_router.launch_pd_argv(None, [("http://127.0.0.1:1", 9001), ("http://127.0.0.1:2", 9002)],
                                        ["http://127.0.0.1:3"], "round_robin", "127.0.0.1", 30000, 30001, [])
    joined = " ".join(argv)
    assert ("--pd-disaggregation --prefill http://127.0.0.1:1 9001 --prefill http://127.0.0.1:2 9002 "
            "--decode http://127.0.0.1:3 --policy round_robin") in joined
    assert "--worker-urls" not in argv and "--prometheus-port 30001" in joined


def test_the_router_process_of_a_split_fleet_is_launched_in_pd_mode(tmp_path):
    from harness.servers.fleet import RouterProcess, worker_plans

    cfg = compose(["+exp=sim_pd", "backend=process"]).arm("split").typed
    plans = worker_plans("split", cfg, tmp_path / "server.log")
    router = RouterProcess("split", cfg, tmp_path / "server.log", ["http://127.0.0.1:1", "http://127.0.0.1:2"],
                           None, [], plans)
    joined = " ".join(router.command())
    assert f"--prefill http://127.0.0.1:1 {plans[0].bootstrap_port} --decode http://127.0.0.1:2" in joined


@pytest.mark.parametrize("overrides, fragment", [
    (["router.prefill=1"], "a split fleet needs both"),
    (["router.prefill=1", "router.decode=1", "server.workers=2"], "server.workers=2 would make another: leave it at 1"),
    (["router.prefill=1", "router.decode=1", "backend=attach", "backend.url=http://127.0.0.1:1"],
     "backend=attach starts nothing"),
    (["router.prefill=1", "router.decode=1", "server.nnodes=2", "server.tp_size=3"],
     "server.tp_size=3 does not split over server.nnodes=2"),
    (["router.prefill=1", "router.decode=1", "backend=docker", "backend.docker_host=tcp://10.1.2.3:2375"],
     "run the fleet on that box itself"),
    (["router.prefill=-1", "router.decode=1"], "router.prefill"),
    (["router.args=[--pd-disaggregation]", "server.workers=2"], "router.args sets --pd-disaggregation"),
    (["router.prefill=1", "router.decode=1", "server.extra_args=[--disaggregation-mode,decode]"],
     "server.extra_args sets --disaggregation-mode, which specgate sets itself"),
])
def test_a_split_fleet_that_cannot_work_is_refused_in_one_sentence(overrides, fragment):
    with pytest.raises(ConfigError, match=None) as caught:
        compose(["+exp=sim_smoke", *overrides])
    assert fragment in str(caught.value) and "\n" not in str(caught.value).strip()


def test_an_engine_without_a_split_launch_is_refused_in_one_sentence():
    from harness.engines import EngineConfigError, engine_of

    cfg = compose(["+exp=vllm_cpu_smoke"]).arms[0].typed
    cfg.router.prefill = cfg.router.decode = 1
    with pytest.raises(EngineConfigError, match="has no such launch here"):
        engine_of(cfg).check(cfg)


def test_split_workers_spanning_nodes_are_each_a_server_of_nodes_with_both_sets_of_flags(tmp_path):
    """A prefill (or decode) server too big for one node, as SGLang runs them: every node of a
    split worker gets the worker's disaggregation flags and then its node flags; the router
    and the decode side reach a prefill worker at node 0 (its HTTP and its bootstrap server)."""
    from harness.servers import make_server
    from harness.servers.nodes import NodesServer

    cfg = compose(["+exp=sim_pd", "backend=docker", "server.nnodes=2", "server.tp_size=2"]).arm("split").typed
    fleet = make_server("split", cfg, tmp_path / "server.log", Session())
    assert fleet.member_roles() == ["prefill", "decode"]
    prefill, decode = fleet.members()
    assert isinstance(prefill, NodesServer) and isinstance(decode, NodesServer)
    port = fleet.plans[0].bootstrap_port
    for worker, mode in ((prefill, "prefill"), (decode, "decode")):
        assert [n.name for n in worker.nodes] == [f"{worker.name}.n0", f"{worker.name}.n1"]
        for rank, node in enumerate(worker.nodes):
            args = node.cfg.server.extra_args
            assert args[args.index("--disaggregation-mode") + 1] == mode
            assert args[-6:] == ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", worker.init_address]
            assert node.cfg.backend.network == "host"
            assert ("--disaggregation-bootstrap-port" in args) == (mode == "prefill")
    assert [n.log_path.name for n in prefill.nodes] == ["server.p0.log", "server.p0.n1.log"]
    assert f"--disaggregation-bootstrap-port {port}" in " ".join(prefill.nodes[1].cfg.server.extra_args)


def test_the_split_experiment_composes_a_split_arm_beside_two_whole_workers():
    experiment = compose(["+exp=sim_pd"])
    assert {a.name: (a.typed.server.workers, a.typed.router.prefill, a.typed.router.decode)
            for a in experiment.arms} == {"colocated": (2, 0, 0), "split": (1, 1, 1)}
