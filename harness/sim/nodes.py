"""A simulated server spanning nodes, as SGLang runs one: every node starts
``--nnodes N --node-rank i --dist-init-addr HOST:PORT`` with the same ``--tp-size``, each
node holding ``tp_size / nnodes`` of the TP ranks.

- Node 0 serves HTTP (tokenizer, detokenizer, its scheduler ranks) and listens at the init
  address; it is not ready until every other node has joined there (SGLang's ranks meet in
  torch.distributed's rendezvous at that address before the first forward).
- Node i ≥ 1 runs only its TP ranks' processes and a dummy health server on ``--host:--port``
  (SGLang's ``launch_dummy_health_check_server``: /health and /health_generate answer 200
  once its ranks are up), here also /sim/gpu for its own GPUs.
- The link stays up: node 0 tells the other nodes how many requests run (their GPUs follow
  the load, as ranks of one collective do); a node that leaves breaks the collective, and
  node 0 exits as a real server would, so a dead node is a dead server.

The wire is one line per message: ``rank <i>`` from a joining node, ``running <n>`` from node 0.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import time
from typing import Callable

logger = logging.getLogger("harness.sim")

JOIN_RETRY_S = 0.2


def check(ns: argparse.Namespace) -> None:
    """The multi-node flags as SGLang would take them; ValueError with the sentence."""
    if ns.nnodes < 1 or not 0 <= ns.node_rank < ns.nnodes:
        raise ValueError(f"--node-rank {ns.node_rank} is not a rank of --nnodes {ns.nnodes}")
    if ns.tp_size % ns.nnodes:
        raise ValueError(f"--tp-size {ns.tp_size} does not split over --nnodes {ns.nnodes} (each node holds "
                         f"tp_size / nnodes ranks)")
    if ns.nnodes > 1:
        init_address(ns)


def init_address(ns: argparse.Namespace) -> tuple[str, int]:
    host, _, port = str(ns.dist_init_addr or "").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--nnodes {ns.nnodes} needs --dist-init-addr HOST:PORT (where the nodes meet), "
                         f"got {ns.dist_init_addr!r}")
    return host.strip("[]"), int(port)


def scrubs_workers(ns: argparse.Namespace) -> bool:
    """Whether this node's workers start with a minimal environment (a fault: every node's, or this node's)."""
    return bool(ns.sim_scrub_worker_env or ns.node_rank in (ns.sim_scrub_worker_env_nodes or []))


def local_ranks(ns: argparse.Namespace) -> range:
    """The TP ranks this node holds."""
    per_node = ns.tp_size // max(1, ns.nnodes)
    return range(ns.node_rank * per_node, (ns.node_rank + 1) * per_node)


class Rendezvous:
    """Node 0's side: accept every other node at the init address, keep their links, tell
    them the load, and say when one leaves."""

    def __init__(self, ns: argparse.Namespace, on_lost: Callable[[str], None]):
        self.expected = set(range(1, ns.nnodes))
        self.peers: dict[int, socket.socket] = {}
        self.on_lost = on_lost
        self.lock = threading.Lock()
        host, port = init_address(ns)
        self.listener = socket.create_server((host, port), reuse_port=False)
        self.closing = False
        threading.Thread(target=self.accept, name="rendezvous", daemon=True).start()
        logger.info(f"waiting for nodes {sorted(self.expected)} at {host}:{port}")

    @property
    def complete(self) -> bool:
        with self.lock:
            return set(self.peers) == self.expected

    def accept(self) -> None:
        while not self.closing:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.admit, args=(conn,), name="rendezvous-peer", daemon=True).start()

    def admit(self, conn: socket.socket) -> None:
        reader = conn.makefile("r")
        words = reader.readline().split()
        if len(words) != 2 or words[0] != "rank" or not words[1].isdigit() or int(words[1]) not in self.expected:
            logger.error(f"a node sent {' '.join(words)!r} at the init address: not a rank this server waits for")
            conn.close()
            return
        rank = int(words[1])
        with self.lock:
            self.peers[rank] = conn
            joined = len(self.peers)
        logger.info(f"node {rank} joined ({joined + 1} of {len(self.expected) + 1} nodes)")
        try:
            reader.read()  # until the node's link ends
        except OSError:  # ended with a reset: a node killed with lines unread in its socket (no FIN: RST)
            pass
        if not self.closing:
            self.on_lost(f"node {rank} left the server's group (its link to the init address closed): "
                         f"the collective is broken")

    def broadcast_running(self, running: int) -> None:
        line = f"running {running}\n".encode()
        with self.lock:
            peers = list(self.peers.values())
        for conn in peers:
            try:
                conn.sendall(line)
            except OSError:
                pass  # its reader says it left

    def close(self) -> None:
        self.closing = True
        for conn in [self.listener, *self.peers.values()]:
            hang_up(conn)


class Membership:
    """Node i's side: join node 0 at the init address (it may not listen yet), follow the
    load it reports, and say when node 0 goes."""

    def __init__(self, ns: argparse.Namespace, on_running: Callable[[int], None], on_lost: Callable[[str], None]):
        self.ns, self.on_running, self.on_lost = ns, on_running, on_lost
        self.joined = threading.Event()
        self.closing = False
        self.conn: socket.socket | None = None
        threading.Thread(target=self.run, name="membership", daemon=True).start()

    def run(self) -> None:
        host, port = init_address(self.ns)
        while not self.closing:
            try:
                self.conn = socket.create_connection((host, port), timeout=2.0)
                break
            except OSError:
                time.sleep(JOIN_RETRY_S)
        if self.conn is None:
            return
        self.conn.settimeout(None)
        self.conn.sendall(f"rank {self.ns.node_rank}\n".encode())
        self.joined.set()
        logger.info(f"node {self.ns.node_rank} joined the group at {host}:{port}")
        try:
            for line in self.conn.makefile("r"):
                words = line.split()
                if len(words) == 2 and words[0] == "running" and words[1].isdigit():
                    self.on_running(int(words[1]))
        except OSError:  # the link was reset, not closed: node 0 is gone all the same
            pass
        if not self.closing:
            self.on_lost("node 0 is gone (its init address closed the link): the collective is broken")

    def close(self) -> None:
        self.closing = True
        if self.conn is not None:
            hang_up(self.conn)


def hang_up(conn: socket.socket) -> None:
    """End a link for both sides now (a reader's file object holds the socket open past close())."""
    for end in (lambda: conn.shutdown(socket.SHUT_RDWR), conn.close):
        try:
            end()
        except OSError:
            pass
