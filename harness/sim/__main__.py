"""``python -m harness.sim --model-path M [--speculative-algorithm EAGLE3 ...] [--sim-* ...]``.

Process layout (like SGLang): this main process serves HTTP and plays the
TokenizerManager; children are the scheduler (TP rank 0), ``tp_size - 1`` TP
workers and a detokenizer.  Children die with this process (PDEATHSIG + ppid watch).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import sys

from aiohttp import web

from harness.interrupts import stop_on_signals
from harness.sim import follower, nodes
from harness.sim.app import SimServer, UvicornStyleAccessLogger, build_app
from harness.sim.cli import parse_args
from harness.sim.manager import EngineClient
from harness.sim.metrics import SimMetrics
from harness.sim.model import SimModel

logger = logging.getLogger("harness.sim")


async def _serve(server: SimServer) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stop_on_signals(loop, stop.set)
    server.engine.start_reader(loop)
    if server.ns.nnodes > 1:  # node 0 of a multi-node server: the others join at the init address
        def group_broke(why: str) -> None:
            logger.error(why)
            server.group_broken = True
            loop.call_soon_threadsafe(stop.set)

        server.engine.nodes = nodes.Rendezvous(server.ns, group_broke)
    try:
        await server.disagg.start()  # a prefill server's bootstrap server; a decode server's client
    except OSError as exc:
        logger.error(f"The bootstrap server cannot listen on {server.ns.host}:{server.ns.disaggregation_bootstrap_port}: {exc}")
        server.group_broken = True
        server.engine.shutdown()
        return
    app = build_app(server)
    access = logging.getLogger("uvicorn.access")
    runner = web.AppRunner(app, access_log=access, access_log_class=UvicornStyleAccessLogger, shutdown_timeout=0.5)
    await runner.setup()
    # uvicorn's accept backlog (SGLang's and vLLM's servers): aiohttp's 128 drops the SYNs of
    # a few hundred clients connecting at once, which then wait a second to retry
    site = web.TCPSite(runner, server.ns.host, server.ns.port, reuse_address=True, backlog=2048)
    await site.start()
    logger.info(f"Uvicorn running on http://{server.ns.host}:{server.ns.port} (Press CTRL+C to quit)")
    ready_task = asyncio.create_task(server.announce_when_ready())
    await stop.wait()
    logger.info("Received shutdown signal, shutting down." if not server.group_broken else "Shutting down: the group broke.")
    server.gracefully_exit = True
    if server.engine.nodes is not None:
        server.engine.nodes.close()
    ready_task.cancel()
    server.engine.shutdown()  # children first: a slow HTTP teardown must not keep them alive
    try:
        await asyncio.wait_for(server.disagg.close(), timeout=0.5)
        await asyncio.wait_for(runner.cleanup(), timeout=1.0)
    except (asyncio.TimeoutError, Exception):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ns = parse_args(argv)
    try:
        nodes.check(ns)
        model = SimModel.from_args(ns)
    except ValueError as exc:  # a value no server would start with: refused like a bad flag, in its sentence
        print(f"python -m harness.sim: error: {exc}", file=sys.stderr)
        return 2
    ns.launch_command = shlex.join([sys.executable, "-m", "harness.sim", *argv])
    logging.basicConfig(
        level=getattr(logging, str(ns.log_level).upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stdout,
    )
    for flag in ns.ignored_flags:
        logger.info(f"ignoring unsupported flag {flag}")
    if ns.node_rank >= 1:  # a node of a multi-node server: its TP ranks and a health server only
        return follower.main(ns)
    logger.info(f"server_args: model_path={ns.model_path}, served_model_name={ns.served_model_name}, tp_size={ns.tp_size}, "
                f"speculative_algorithm={ns.speculative_algorithm}, host={ns.host}, port={ns.port}, "
                f"disaggregation_mode={ns.disaggregation_mode}")
    logger.info(f"sim model: {model}")
    engine = EngineClient(ns, model, SimMetrics(ns.served_model_name))
    engine.start_processes()  # before any thread exists (scrubbed env + spawn)
    logger.info(f"Launched scheduler/detokenizer/TP workers: pids={engine.child_pids()} (main pid={os.getpid()})")
    server = SimServer(ns, engine)
    try:
        asyncio.run(_serve(server))
    finally:
        engine.shutdown()
    return 1 if server.group_broken else 0


if __name__ == "__main__":
    sys.exit(main())
