"""A server spanning nodes (`server.nnodes`), as SGLang runs one: every node the same launch
with `--nnodes N --node-rank i --dist-init-addr HOST:PORT`, node 0 serving HTTP, the others
their TP ranks and a health server; the ranks meet at the init address before node 0 is
ready. Started and stopped as one Server.

Each node is a server of the arm's backend: a process group (process), a container on the
host's network (docker: the nodes meet at the init address on this machine's loopback, as
SGLang's multi-node containers run with --network host). The server's address is node 0's;
its processes are every node's, each saying which node it is on, so the environment suite
checks every process on every node and names the node in a failure.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from harness.config.schema import SpecgateConfig
from harness.engines import engine_of
from harness.servers.base import Server, ServerError
from harness.servers.group import start_together, stop_all, united_gpu_ids
from harness.servers.labels import Session
from harness.servers.ports import free_port
from harness.servers.processes import ServerProcess


def node_name(arm: str, rank: int) -> str:
    return f"{arm}.n{rank}"


def node_log(log_path: Path, rank: int) -> Path:
    """Node 0's log is the server's; node i's beside it (server.n1.log, server.w0.n1.log)."""
    return log_path if rank == 0 else log_path.with_name(f"{log_path.stem}.n{rank}{log_path.suffix}")


def node_config(cfg: SpecgateConfig, rank: int, init_address: str) -> SpecgateConfig:
    """Node `rank`'s config: the server's, with the engine's node flags after its own
    arguments, on the host's network for docker, on a port of its own but node 0's."""
    server = cfg.server
    flags = engine_of(cfg).node_args(server.nnodes, rank, init_address) or []
    backend = dataclasses.replace(cfg.backend, network="host") if cfg.backend.kind == "docker" else cfg.backend
    return dataclasses.replace(cfg, backend=backend, server=dataclasses.replace(
        server, port=server.port if rank == 0 else 0, extra_args=[*server.extra_args, *flags]))


class NodesServer(Server):
    """`server.nnodes` node servers of one backend, meeting at one init address."""

    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub,
                 start_node: Callable[..., Server]):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.init_address = f"{cfg.server.host}:{free_port(cfg.server.host)}"
        self.nodes: list[Server] = [start_node(node_name(name, rank), node_config(cfg, rank, self.init_address),
                                               node_log(log_path, rank), session, scrub)
                                    for rank in range(cfg.server.nnodes)]

    def start(self) -> None:
        """Every node launched from this thread (a process backend's child dies with the thread
        that started it), then all waited on together: node 0 is ready only once the others
        joined, and they join only once launched. A failure raises; stop() stops the lot."""
        start_together(self.nodes, self.name)
        self.base_url = self.nodes[0].base_url
        self.log_thread = self.nodes[0].log_thread

    def stop(self) -> None:
        """Every node, each even when another's stop fails (the first failure raised after)."""
        stop_all(self.nodes)

    def is_alive(self) -> bool:
        return all(node.is_alive() for node in self.nodes)

    def exit_description(self) -> str:
        ended = [f"node {rank} {node.exit_description()}" for rank, node in enumerate(self.nodes) if not node.is_alive()]
        return "; ".join(ended) if ended else "is still running"

    def failure(self, sentence: str) -> ServerError:
        """The log of the node that ended first in the list (else node 0's)."""
        ended = [node for node in self.nodes if not node.is_alive()]
        return (ended[0] if ended else self.nodes[0]).failure(sentence)

    def describe(self) -> dict:
        return {"base_url": self.base_url, "nnodes": len(self.nodes), "dist_init_addr": self.init_address,
                "nodes": [node.describe() for node in self.nodes]}

    def gpu_ids(self) -> list[str] | None:
        return united_gpu_ids(self.nodes)

    def gpu_urls(self) -> list[str]:
        return [node.base_url for node in self.nodes]

    def processes(self) -> list[ServerProcess]:
        """Every process of every node, each saying which node it is on."""
        found = []
        for rank, node in enumerate(self.nodes):
            for process in node.processes():
                process.where = f"node {rank}"
                found.append(process)
        return found
