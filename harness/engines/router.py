"""SGLang's router (`sglang-router`, a Rust binary in a Python wheel): what specgate knows of it
by name. How it is launched in front of a fleet's workers, how it says a bad request was
bad, and how it lists the workers it registered. harness/servers/fleet.py starts it.

Seen in sglang-router 0.3.2 (the version pyproject.toml pins): it answers /health at once
and registers its workers in the background (a request before that fails); /workers lists
them with `is_healthy`; it exports its own Prometheus metrics on a second port
(`--prometheus-port`, counters named `smg_*`, per worker labelled `worker=<url>`); a bad
request gets OpenAI's error shape. It re-serializes each request through its own types, so
fields it does not know (SGLang's `return_spec_tokens_details`) do not reach the workers.
"""

from __future__ import annotations

import sys
from typing import Any

MODULE = "sglang_router.launch_router"
HEALTH_ROUTE = "/health"
WORKERS_ROUTE = "/workers"


def launch_argv(python: str | None, worker_urls: list[str], policy: str, host: str, port: int,
                metrics_port: int, extra: list[str]) -> list[str]:
    """The router in front of `worker_urls`, listening on host:port, its metrics on host:metrics_port."""
    return [python or sys.executable, "-m", MODULE, "--worker-urls", *worker_urls, "--policy", policy,
            "--host", host, "--port", str(port), "--prometheus-host", host, "--prometheus-port", str(metrics_port),
            *extra]


def launch_pd_argv(python: str | None, prefill: list[tuple[str, int]], decode: list[str], policy: str, host: str,
                   port: int, metrics_port: int, extra: list[str]) -> list[str]:
    """The router splitting each request over a prefill worker (URL, its bootstrap port) and a
    decode worker (`--pd-disaggregation`): it sends the request to both, the body extended
    with bootstrap_host/port/room, and answers with the decode worker's reply."""
    pairs = [arg for url, bootstrap in prefill for arg in ("--prefill", url, str(bootstrap))]
    pairs += [arg for url in decode for arg in ("--decode", url)]
    return [python or sys.executable, "-m", MODULE, "--pd-disaggregation", *pairs, "--policy", policy,
            "--host", host, "--port", str(port), "--prometheus-host", host, "--prometheus-port", str(metrics_port),
            *extra]


def healthy_workers(listing: Any) -> set[str]:
    """The URLs /workers lists as healthy (nothing for an answer of another shape)."""
    workers = listing.get("workers") if isinstance(listing, dict) else None
    return {str(w.get("url")) for w in workers or [] if isinstance(w, dict) and w.get("is_healthy")}


def bad_request_message(body: Any) -> str:
    """The router's own 400 body: {"error": {"message", "type", "code"}}; AssertionError for another shape."""
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"not the router's error shape: {body}"
    return str(body["error"]["message"])
