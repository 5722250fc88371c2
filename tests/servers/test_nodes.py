"""A server spanning nodes as one Server (harness/servers/nodes.py), against fake node servers:
each node's launch carries the engine's node flags, docker nodes run on the host's network,
every node is launched before any is waited on, the address is node 0's, every node's
processes say which node they are on (inside a fleet: which worker, and which node); and the
config that cannot work is refused in one sentence."""

from __future__ import annotations

import pytest

from harness.config.compose import ConfigError
from harness.config.schema import SpecgateConfig
from harness.run.compose import compose
from harness.servers.fleet import FleetServer
from harness.servers.labels import Session
from harness.servers.nodes import NodesServer, node_config, node_log
from tests.servers.test_fleet import FakeRouter, FakeWorker


def two_nodes(kind: str = "process") -> SpecgateConfig:
    cfg = SpecgateConfig()
    cfg.backend.kind, cfg.server.nnodes, cfg.server.tp_size, cfg.server.port = kind, 2, 4, 30000
    cfg.server.extra_args = ["--log-level", "info"]
    return cfg


def test_each_node_gets_the_engines_node_flags_after_its_own_arguments():
    cfg = two_nodes()
    zero, one = node_config(cfg, 0, "127.0.0.1:5000"), node_config(cfg, 1, "127.0.0.1:5000")
    assert one.server.extra_args == ["--log-level", "info", "--nnodes", "2", "--node-rank", "1",
                                     "--dist-init-addr", "127.0.0.1:5000"]
    assert zero.server.port == 30000 and one.server.port == 0  # server.port is the server's address: node 0's
    assert zero.backend.network == "bridge" and cfg.server.extra_args == ["--log-level", "info"]  # a copy
    assert node_config(two_nodes("docker"), 1, "127.0.0.1:5000").backend.network == "host"  # the nodes meet on loopback


def test_node_logs_sit_beside_the_servers():
    assert node_log(__import__("pathlib").Path("/r/arms/a/server.log"), 0).name == "server.log"
    assert node_log(__import__("pathlib").Path("/r/arms/a/server.log"), 1).name == "server.n1.log"
    assert node_log(__import__("pathlib").Path("/r/arms/a/server.w0.log"), 1).name == "server.w0.n1.log"


def nodes_server(tmp_path, journal, cfg=None):
    def start_node(name, one, log_path, session, scrub):
        return FakeWorker(name, one, log_path, session, scrub, journal)

    return NodesServer("arm", cfg or two_nodes(), tmp_path / "server.log", Session(), None, start_node)


def test_every_node_is_launched_before_any_is_waited_on_and_the_address_is_node_zeros(tmp_path):
    journal: list = []
    server = nodes_server(tmp_path, journal)
    server.start()
    assert [e[:2] for e in journal[:2]] == [("launch", "arm.n0"), ("launch", "arm.n1")] and all(e[2] for e in journal[:2])
    assert server.base_url == server.nodes[0].base_url and server.members() == [server]
    assert server.gpu_urls() == [node.base_url for node in server.nodes]  # every node's GPUs are sampled
    assert [p.where for p in server.processes()] == ["node 0", "node 1"]
    described = server.describe()
    assert described["nnodes"] == 2 and described["dist_init_addr"].startswith("127.0.0.1:")
    server.stop()
    assert [e[1] for e in journal if e[0] == "stop"] == ["arm.n0", "arm.n1"]


def test_inside_a_fleet_a_process_says_its_worker_and_its_node(tmp_path, monkeypatch):
    journal: list = []
    cfg = two_nodes()
    cfg.server.workers = 2

    def start_worker(name, one, log_path, session, scrub):
        return NodesServer(name, one, log_path, session, scrub,
                           lambda *a: FakeWorker(*a, journal=journal))

    monkeypatch.setattr("harness.servers.fleet.RouterProcess", lambda *a, **k: FakeRouter(journal))
    fleet = FleetServer("arm", cfg, tmp_path / "server.log", Session(), None, start_worker)
    fleet.start()
    assert [p.where for p in fleet.processes()] == ["arm.w0 node 0", "arm.w0 node 1", "arm.w1 node 0", "arm.w1 node 1"]
    assert len(fleet.gpu_urls()) == 4


@pytest.mark.parametrize("overrides, fragment", [
    (["server.nnodes=2", "server.tp_size=3"], "server.tp_size=3 does not split over server.nnodes=2"),
    (["server.nnodes=2", "backend=attach", "backend.url=http://127.0.0.1:1"], "attach to node 0's address instead"),
    (["server.nnodes=2", "backend.docker_host=ssh://gpu-box"], "a remote engine's (ssh://gpu-box) is not this machine's"),
    (["backend.network=overlay"], "backend.network 'overlay' is unknown; valid: bridge, host"),
    (["server=vllm_tiny", "build=vllm_cpu", "backend=process", "telemetry=off", "server.nnodes=2"],
     "vllm has no multi-node launch here"),
])
def test_a_server_spanning_nodes_that_cannot_work_is_refused_in_one_sentence(overrides, fragment):
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", *overrides])
    assert fragment in str(caught.value) and "\n" not in str(caught.value).strip()


def test_the_two_node_experiments_compose():
    scrubbed = compose(["+exp=sim_env_node_scrubbed"]).arms[0].typed
    assert (scrubbed.server.nnodes, scrubbed.server.tp_size, scrubbed.server.sim.scrub_worker_env_nodes) == (2, 4, [1])
    eagle = compose(["+exp=eagle_k2_2node"]).arms[0].typed
    assert (eagle.server.nnodes, eagle.server.tp_size, eagle.server.engine) == (2, 16, "sglang")
