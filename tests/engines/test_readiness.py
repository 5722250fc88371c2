"""Readiness as a wait strategy the engine provides and every backend waits on: ready when
the engine's health routes answer, a server that exits first fails at once with how it
ended, a hang fails at the deadline; both failures carry the server's log tail."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from harness.engines import ENGINES
from harness.engines.readiness import HttpWaitStrategy
from harness.servers.base import Server, ServerError


class Routes(http.server.BaseHTTPRequestHandler):
    ready_paths: set[str] = set()

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path in self.ready_paths else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    handler = type("Handler", (Routes,), {"ready_paths": set()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, handler.ready_paths
    server.shutdown()
    server.server_close()


class Watched(Server):
    """A server at a URL whose process this test says is alive or not."""

    def __init__(self, base_url: str, log_path, alive: bool = True):
        super().__init__("baseline", log_path)
        self.base_url, self.alive = base_url, alive
        self.log_path.write_text("loading weights\nstill loading\n")

    def start(self): ...

    def stop(self): ...

    def is_alive(self) -> bool:
        return self.alive

    def exit_description(self) -> str:
        return "exited with code 3"


def url_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_ready_when_every_route_answers(http_server, tmp_path):
    server, ready = http_server
    ready.update({"/health", "/health_generate"})
    strategy = HttpWaitStrategy(("/health", "/health_generate")).with_startup_timeout(5).with_poll_interval(0.05)
    assert strategy.wait_until_ready(Watched(url_of(server), tmp_path / "log")) < 5


def test_a_server_that_exits_first_fails_at_once_with_how_it_ended_and_its_log(http_server, tmp_path):
    server, _ = http_server
    started = time.monotonic()
    with pytest.raises(ServerError) as raised:
        HttpWaitStrategy().with_startup_timeout(30).wait_until_ready(Watched(url_of(server), tmp_path / "log", alive=False))
    assert time.monotonic() - started < 2
    assert "arm 'baseline': the server exited with code 3 before it became healthy" in str(raised.value)
    assert "still loading" in str(raised.value)


def test_a_hang_fails_at_the_deadline_naming_the_route_and_with_the_log(http_server, tmp_path):
    server, ready = http_server
    ready.add("/health")  # the second route never answers 200
    strategy = HttpWaitStrategy(("/health", "/health_generate")).with_startup_timeout(0.6).with_poll_interval(0.1)
    with pytest.raises(ServerError) as raised:
        strategy.wait_until_ready(Watched(url_of(server), tmp_path / "log"))
    message = str(raised.value)
    assert "did not become healthy within 0.6 s" in message and "/health_generate" in message and "HTTP 503" in message
    assert "loading weights" in message


def test_an_attached_server_is_not_watched_for_an_exit(http_server, tmp_path):
    server, ready = http_server
    ready.add("/health")
    # nothing of ours runs behind an attached server: is_alive is only these routes again
    assert HttpWaitStrategy().with_startup_timeout(5).wait_until_ready(
        Watched(url_of(server), tmp_path / "log", alive=False), watch_exit=False) < 5


def test_each_engine_provides_its_readiness_on_its_own_routes():
    for engine in ENGINES.values():
        strategy = engine.readiness()
        assert strategy.paths == engine.health_paths and strategy.paths[0] == "/health"
    assert any(len(engine.readiness().paths) > 1 for engine in ENGINES.values())
