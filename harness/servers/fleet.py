"""A fleet: `server.workers` data-parallel replicas of an arm's server behind SGLang's own
router (`python -m sglang_router.launch_router`), started and stopped as one Server.

The workers are started by the arm's backend as any server is (containers for docker,
process groups for process), each on its own loopback port; the router is a process on
this machine in front of them, listening on loopback, reaching every worker at its
loopback address (a docker worker's published port), and exporting its Prometheus
metrics on a second loopback port. The fleet's `base_url` is the router's: specgate
measures through it as a user would. Each worker stays reachable on its own (`members`),
for what only a worker answers (/metrics, /tokenize, its server info) and for the
per-worker figures.

A split fleet (`router.prefill`, `router.decode`: SGLang's prefill/decode disaggregation)
has prefill workers (`<arm>.p<i>`, each serving its bootstrap on a port of its own) and
decode workers (`<arm>.d<i>`) and the router in `--pd-disaggregation` mode: it sends every
request to one of each, and the decode worker fetches the prompt's KV from the prefill
worker named in the request. The decode side reaches the prefill side's bootstrap port at
the prefill URL's host, loopback: docker workers of a split fleet run on the host's network.

Why the router runs as a process and not in a container: no registry can be reached, and
the router is a Rust binary inside a Python wheel whose launcher needs fastapi, uvicorn
and their compiled dependencies for the host's Python; the images here carry another
Python. As a process it is what many deployments run in front of their workers anyway.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Callable

from harness.config.schema import SpecgateConfig
from harness.engines import engine_of
from harness.engines import router as sglang_router
from harness.engines.readiness import HttpWaitStrategy
from harness.servers.base import Server, ServerError
from harness.servers.group import start_together, stop_all, united_gpu_ids
from harness.servers.labels import Session
from harness.servers.ports import free_port
from harness.servers.process import ProcessServer
from harness.servers.processes import ServerProcess

REGISTER_POLL_S = 0.2


ROLE_LETTER = {"server": "w", "prefill": "p", "decode": "d"}  # a worker's name and log: <arm>.w0, server.p0.log


def worker_name(arm: str, index: int, role: str = "server") -> str:
    return f"{arm}.{ROLE_LETTER[role]}{index}"


def worker_log(log_path: Path, index: int, role: str = "server") -> Path:
    """arms/<arm>/server.log is the router's (the fleet's address); each worker's beside it."""
    return log_path.with_name(f"server.{ROLE_LETTER[role]}{index}.log")


def worker_config(cfg: SpecgateConfig) -> SpecgateConfig:
    """One worker's config: the arm's, as one server on a port of its own."""
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, workers=1, port=0))


def split_worker_config(cfg: SpecgateConfig, role: str, bootstrap_port: int) -> SpecgateConfig:
    """A prefill or decode worker's config: one worker's, with the engine's disaggregation
    flags after the server's own arguments, on the host's network for docker (the decode side
    reaches the prefill side's bootstrap port on loopback)."""
    one = worker_config(cfg)
    flags = engine_of(cfg).disaggregation_args(role, bootstrap_port, cfg.router.transfer_backend) or []
    backend = dataclasses.replace(cfg.backend, network="host") if cfg.backend.kind == "docker" else cfg.backend
    return dataclasses.replace(one, backend=backend,
                               server=dataclasses.replace(one.server, extra_args=[*one.server.extra_args, *flags]))


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """One worker of a fleet before it starts: what it is called, does and runs with."""

    name: str
    role: str  # server | prefill | decode
    cfg: SpecgateConfig
    log: Path
    bootstrap_port: int | None = None  # a prefill worker's


def worker_plans(arm: str, cfg: SpecgateConfig, log_path: Path) -> list[WorkerPlan]:
    """`server.workers` whole workers; or a split fleet's prefill workers, then its decode workers."""
    if not cfg.router.disaggregated:
        one = worker_config(cfg)
        return [WorkerPlan(worker_name(arm, i), "server", one, worker_log(log_path, i)) for i in range(cfg.server.workers)]
    plans = []
    for role, count in (("prefill", cfg.router.prefill), ("decode", cfg.router.decode)):
        for i in range(count):
            port = free_port(cfg.server.host) if role == "prefill" else None
            plans.append(WorkerPlan(worker_name(arm, i, role), role, split_worker_config(cfg, role, port or 0),
                                    worker_log(log_path, i, role), port))
    return plans


class RouterProcess(ProcessServer):
    """SGLang's router as a local process in its own process group (stopped as the process
    backend stops a server), ready once every worker is registered and healthy."""

    private_tmp = False  # it runs no engine: its environment is the harness's (below)

    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, worker_urls: list[str], scrub=None,
                 workers: list[Server] = (), plans: list[WorkerPlan] = ()):
        super().__init__(name, cfg, log_path, scrub)
        self.worker_urls = worker_urls
        self.workers = list(workers)  # watched while the router registers them: one that dies fails at once
        self.plans = list(plans)  # each worker's role (and a prefill worker's bootstrap port), in worker_urls order
        self.metrics_port = free_port(cfg.server.host)
        self.metrics_url = f"http://{cfg.server.host}:{self.metrics_port}"

    def command(self) -> list[str]:
        router, host = self.cfg.router, self.cfg.server.host
        if router.disaggregated:
            roles = list(zip(self.worker_urls, self.plans))
            prefill = [(url, plan.bootstrap_port) for url, plan in roles if plan.role == "prefill"]
            decode = [url for url, plan in roles if plan.role == "decode"]
            return sglang_router.launch_pd_argv(router.python, prefill, decode, router.policy, host, self.port,
                                                self.metrics_port, list(router.args))
        return sglang_router.launch_argv(router.python, self.worker_urls, router.policy, host,
                                         self.port, self.metrics_port, list(router.args))

    def environment(self) -> dict[str, str]:
        # the router gets no NCCL or engine variables: it runs no model
        return dict(os.environ)

    def readiness(self) -> HttpWaitStrategy:
        return HttpWaitStrategy((sglang_router.HEALTH_ROUTE,)).with_startup_timeout(self.cfg.backend.startup_timeout_s)

    def start(self) -> None:
        super().start()
        self.wait_workers_registered()

    def wait_workers_registered(self) -> None:
        """The router registers its workers in the background after it answers /health:
        requests sent before that fail. Ready when /workers lists every worker healthy."""
        from harness.http_client import ClientError, ServerClient

        deadline = time.monotonic() + self.cfg.backend.startup_timeout_s
        seen: set[str] = set()
        with ServerClient(self.base_url) as client:
            while time.monotonic() < deadline:
                if not self.is_alive():
                    raise self.failure(f"arm '{self.name}': the router {self.exit_description()} before it "
                                       f"registered its workers")
                ended = [w for w in self.workers if not w.is_alive()]
                if ended:
                    raise ended[0].failure(f"arm '{self.name}': worker {ended[0].name} {ended[0].exit_description()} "
                                           f"while the router registered the workers")
                try:
                    seen = sglang_router.healthy_workers(client.get_json(sglang_router.WORKERS_ROUTE))
                except (ClientError, ValueError):
                    seen = set()
                if set(self.worker_urls) <= seen:
                    return
                time.sleep(REGISTER_POLL_S)
        missing = sorted(set(self.worker_urls) - set(seen))
        raise self.failure(f"arm '{self.name}': the router did not register {', '.join(missing)} as healthy "
                           f"within {self.cfg.backend.startup_timeout_s:g} s")

    def describe(self) -> dict:
        split = {"disaggregation": "prefill/decode"} if self.cfg.router.disaggregated else {}
        return {**super().describe(), "policy": self.cfg.router.policy, **split, "metrics_url": self.metrics_url}

    def gpu_ids(self) -> list[str] | None:
        return []


class FleetServer(Server):
    """`server.workers` servers of one backend (or a split fleet's prefill and decode workers)
    and the router in front of them."""

    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub,
                 start_worker: Callable[..., Server]):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.plans = worker_plans(name, cfg, log_path)
        self.workers: list[Server] = [start_worker(plan.name, plan.cfg, plan.log, session, scrub) for plan in self.plans]
        self.router: RouterProcess | None = None

    def members(self) -> list[Server]:
        return list(self.workers)

    def member_roles(self) -> list[str]:
        return [plan.role for plan in self.plans]

    def start(self) -> None:
        """Every worker launched, then waited on together (a fleet of slow-loading servers
        starts in the time of one), then the router in front of them; a failure raises and
        the caller's stop() stops the lot. Launched from this thread: a process backend's
        child gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG)."""
        start_together(self.workers, self.name)
        self.router = RouterProcess(self.name, self.cfg, self.log_path, [w.base_url for w in self.workers], self.scrub,
                                    self.workers, self.plans)
        self.router.start()
        self.base_url = self.router.base_url
        self.log_thread = self.router.log_thread

    def stop(self) -> None:
        """The router first (no new request reaches a stopping worker), then every worker;
        every one is stopped even when another's stop fails, the first failure raised after."""
        stop_all(([self.router] if self.router is not None else []) + self.workers)

    def is_alive(self) -> bool:
        return (self.router is not None and self.router.is_alive()
                and all(worker.is_alive() for worker in self.workers))

    def exit_description(self) -> str:
        if self.router is not None and not self.router.is_alive():
            return f"router {self.router.exit_description()}"
        ended = [f"worker {w.name} {w.exit_description()}" for w in self.workers if not w.is_alive()]
        return "; ".join(ended) if ended else "is still running"

    def failure(self, sentence: str) -> ServerError:
        """A fleet's failure shows the log of what ended (a worker's, else the router's)."""
        ended = [w for w in self.workers if not w.is_alive()]
        if ended:
            return ended[0].failure(sentence)
        return (self.router or super()).failure(sentence)

    def describe(self) -> dict:
        workers = [{**w.describe(), **({"role": p.role} if p.role != "server" else {}),
                    **({"bootstrap_port": p.bootstrap_port} if p.bootstrap_port else {})}
                   for w, p in zip(self.workers, self.plans)]
        return {"base_url": self.base_url, "workers": workers,
                "router": self.router.describe() if self.router is not None else
                {"policy": self.cfg.router.policy}}

    def bad_request_message(self, body, engine) -> str:
        """The router answers a bad request itself, in its own shape."""
        return sglang_router.bad_request_message(body)

    def gpu_urls(self) -> list[str]:
        return [url for worker in self.workers for url in worker.gpu_urls()]

    def router_metrics_url(self) -> str | None:
        return self.router.metrics_url if self.router is not None else None

    def gpu_ids(self) -> list[str] | None:
        return united_gpu_ids(self.workers)

    def processes(self) -> list[ServerProcess]:
        """Every process of every worker, each saying which worker it is in (the router
        runs no model and is not asked: it gets none of the engine's variables)."""
        found = []
        for worker in self.workers:
            for process in worker.processes():
                process.where = f"{worker.name} {process.where}".strip()  # a worker spanning nodes: and its node
                found.append(process)
        return found
