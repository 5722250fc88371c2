"""A node of rank ≥ 1 of a multi-node simulator (harness/sim/nodes.py): its TP ranks'
processes and SGLang's dummy health server, which answers /health and /health_generate
once the node has joined node 0 at the init address, and /sim/gpu for this node's GPUs.
It serves no model route: clients talk to node 0."""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import os

from aiohttp import web

from harness.interrupts import stop_on_signals
from harness.sim.errors import json_response
from harness.sim.gpu import SimGpuModel
from harness.sim.nodes import Membership, local_ranks, scrubs_workers
from harness.sim.procs import scrubbed_environ, spawn, stop_all
from harness.sim.scheduler import tp_worker_main

logger = logging.getLogger("harness.sim")


class FollowerNode:
    def __init__(self, ns: argparse.Namespace):
        self.ns = ns
        self.gpu = SimGpuModel.from_args(ns)
        self.procs: list[mp.process.BaseProcess] = []
        self.pipes = []
        self.membership: Membership | None = None
        self.lost: str | None = None

    def start_processes(self) -> None:
        """This node's TP ranks (before any thread exists: see scrubbed_environ)."""
        ctx = mp.get_context("spawn")
        me = os.getpid()
        with scrubbed_environ(scrubs_workers(self.ns)):
            for rank in local_ranks(self.ns):
                read, write = ctx.Pipe(duplex=False)
                self.procs.append(spawn(tp_worker_main, f"sglang-tp{rank}", (rank, read, me)))
                read.close()
                self.pipes.append(write)

    async def health(self, request: web.Request) -> web.Response:
        joined = self.membership is not None and self.membership.joined.is_set() and self.lost is None
        return web.Response(status=200 if joined else 503)

    async def sim_gpu(self, request: web.Request) -> web.Response:
        return json_response({"gpus": self.gpu.read(), **self.gpu.describe()})

    def shutdown(self) -> None:
        if self.membership is not None:
            self.membership.close()
        for pipe in self.pipes:
            try:
                pipe.send(("shutdown",))
            except (OSError, ValueError):
                pass
        stop_all(self.procs, timeout=1.0)


async def serve(node: FollowerNode) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stop_on_signals(loop, stop.set)

    def lost(why: str) -> None:
        node.lost = why
        logger.error(why)
        loop.call_soon_threadsafe(stop.set)

    node.membership = Membership(node.ns, lambda n: node.gpu.set_running(n), lost)
    app = web.Application()
    for path in ("/health", "/health_generate", "/ping"):
        app.router.add_get(path, node.health, allow_head=False)
    app.router.add_get("/sim/gpu", node.sim_gpu, allow_head=False)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, node.ns.host, node.ns.port, reuse_address=True).start()
    logger.info(f"node {node.ns.node_rank}: TP ranks {list(local_ranks(node.ns))}, health server on "
                f"http://{node.ns.host}:{node.ns.port}")
    await stop.wait()
    logger.info("Received shutdown signal, shutting down." if node.lost is None else "Shutting down: the group broke.")
    node.shutdown()
    try:
        await asyncio.wait_for(runner.cleanup(), timeout=1.0)
    except (asyncio.TimeoutError, Exception):
        pass
    return 1 if node.lost is not None else 0


def main(ns: argparse.Namespace) -> int:
    node = FollowerNode(ns)
    node.start_processes()
    logger.info(f"Launched TP workers: pids={[p.pid for p in node.procs]} (main pid={os.getpid()})")
    try:
        return asyncio.run(serve(node))
    finally:
        node.shutdown()
