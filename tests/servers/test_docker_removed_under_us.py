"""A container removed by something else while its server starts (`specgate clean`, another run's
cleanup of dead sessions) fails the arm in one sentence, not with docker's NotFound (seen once in a
clean clone's make test: the replay test's baseline arm ended in ERRORs of docker.errors.NotFound)."""

from unittest import mock

import docker.errors
import pytest

from harness.servers.base import ServerError
from harness.servers.docker import DockerServer


def test_a_container_removed_before_it_was_ready_is_one_sentence(tmp_path):
    server = DockerServer.__new__(DockerServer)  # its start alone, on a fake engine
    server.name, server.log_path, server.cfg = "baseline", tmp_path / "server.log", mock.Mock()
    container = mock.Mock()
    container.name = "specgate-x-baseline"
    client = mock.Mock()
    client.containers.run.return_value = container
    with mock.patch("harness.servers.docker.docker_client", return_value=client), \
         mock.patch("harness.servers.docker.ensure_image"), \
         mock.patch.object(DockerServer, "run_kwargs", return_value={"entrypoint": [], "command": [], "environment": {}}), \
         mock.patch.object(DockerServer, "follow_logs", side_effect=docker.errors.NotFound("No such container")):
        with pytest.raises(ServerError, match=r"^arm 'baseline': its container specgate-x-baseline was removed by "
                                              r"something else before it was ready") as caught:
            server.start()
    assert "\n" not in str(caught.value)
