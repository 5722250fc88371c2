"""Attach backend liveness: a slow health route is slow, not dead; a closed port is gone."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from harness.config.schema import BackendConfig, ServerConfig, SpecgateConfig
from harness.servers.attach import SLOW_HEALTH_S, AttachedServer


class SlowHealth(BaseHTTPRequestHandler):
    delay_s = 0.0

    def do_GET(self):
        time.sleep(self.delay_s)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    servers = []

    def start(delay_s: float) -> str:
        handler = type("Handler", (SlowHealth,), {"delay_s": delay_s})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def attached(url: str, tmp_path, health_timeout_s: float) -> AttachedServer:
    cfg = SpecgateConfig(backend=BackendConfig(kind="attach", url=url, startup_timeout_s=5,
                                               health_timeout_s=health_timeout_s),
                         server=ServerConfig(engine="sim"))
    return AttachedServer("arm", cfg, tmp_path / "server.log")


def test_a_slow_health_route_after_a_load_is_slow_not_dead(health_server, tmp_path):
    # 1.5 s a route: past SLOW_HEALTH_S (1 s), well within the deadline
    assert SLOW_HEALTH_S < 1.5
    server = attached(health_server(1.5), tmp_path, health_timeout_s=10)
    assert server.is_alive()
    assert server.describe()["health_route_slow_s"] >= 1.5


def test_a_health_route_slower_than_the_deadline_is_said_in_those_words(health_server, tmp_path):
    server = attached(health_server(5.0), tmp_path, health_timeout_s=1)
    assert not server.is_alive()
    assert server.exit_description().startswith("did not answer its health route within backend.health_timeout_s=1s")


def test_a_closed_port_is_gone_at_once(health_server, tmp_path):
    url = health_server(0.0)
    server = attached(url, tmp_path, health_timeout_s=30)
    assert server.is_alive() and "health_route_slow_s" not in server.describe()

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    server = attached(dead, tmp_path, health_timeout_s=30)
    t = time.monotonic()
    assert not server.is_alive()
    assert time.monotonic() - t < 5 and server.exit_description().startswith("stopped answering: Cannot connect")
