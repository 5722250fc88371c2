"""A process server's port: a taken one is refused before the server starts, and once ready
the listener must be the arm's own server, not another that answered its health check."""

from __future__ import annotations

import os
import socket

import pytest

from harness.run.compose import compose
from harness.servers.base import ServerError
from harness.servers.ports import describe_pid, free_port, listener_pids, port_taken
from harness.servers.process import ProcessServer
from tests.support.sim_process import FAST, Sim


@pytest.fixture
def listener():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


def test_a_listening_port_is_taken_on_its_address_and_on_every_address_and_its_holder_is_found(listener):
    assert port_taken("127.0.0.1", listener) and port_taken("0.0.0.0", listener)
    assert listener_pids(listener) == {os.getpid()}
    assert describe_pid(os.getpid()).startswith(f"pid {os.getpid()} (")
    closed = free_port()
    assert not port_taken("127.0.0.1", closed) and listener_pids(closed) is None


def _cfg(port: int):
    return compose(["+exp=sim_smoke", "backend=process", "telemetry=off", f"server.port={port}"]).arm("baseline").typed


def test_a_process_server_refuses_a_port_another_process_listens_on_before_starting(listener, tmp_path):
    server = ProcessServer("baseline", _cfg(listener), tmp_path / "server.log")
    with pytest.raises(ServerError) as refused:
        server.start()
    server.stop()
    assert server.proc is None  # nothing was started
    assert str(refused.value) == (f"arm 'baseline': port {listener} on 127.0.0.1 is already in use by "
                                  f"{describe_pid(os.getpid())}: that server would be measured instead of this "
                                  f"arm's; stop it, or set server.port to a free port (unset, a free one is chosen)")


def test_a_server_that_answers_on_the_port_for_another_is_refused_once_ready(tmp_path, monkeypatch):
    # the race a chosen free port loses: another process binds it between the check and the server's bind
    with Sim(FAST) as other:
        monkeypatch.setattr("harness.servers.process.port_taken", lambda host, port: False)
        server = ProcessServer("baseline", _cfg(other.port), tmp_path / "server.log")
        try:
            with pytest.raises(ServerError) as refused:
                server.start()
        finally:
            server.stop()
        first = str(refused.value).splitlines()[0]
        assert first.startswith(f"arm 'baseline': another process (pid {other.proc.pid} (") and \
            f"answers on port {other.port}, not this arm's server" in first, first
        assert not server.is_alive()
        assert listener_pids(other.port) == {other.proc.pid}  # the other server is left alone
