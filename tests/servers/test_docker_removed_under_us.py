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


def listing_where_one_vanishes(kind: str):
    """A docker client whose engine lists two objects and has lost the second by the time it
    is inspected: what another run removing its own container (or image) looks like."""
    from docker.models.containers import ContainerCollection
    from docker.models.images import ImageCollection

    def inspect(ident):
        if ident == "gone":
            raise (docker.errors.NotFound if kind == "container" else docker.errors.ImageNotFound)("gone")
        return {"Id": ident, "Name": "/specgate-kept", "Config": {"Labels": {"specgate": "1", "specgate.session": "s"}}}

    client = mock.Mock()
    client.api.containers.return_value = client.api.images.return_value = [{"Id": "kept"}, {"Id": "gone"}]
    client.api.inspect_container.side_effect = client.api.inspect_image.side_effect = inspect
    client.containers, client.images = ContainerCollection(client=client), ImageCollection(client=client)
    return client


def test_a_container_removed_while_the_list_is_read_is_left_out_not_an_error():
    """Seen in a clean clone's make test: a suite's session start (its cleanup of dead
    sessions' containers) died of NotFound because another test removed its own container
    between docker listing the ids and inspecting each."""
    from harness.servers.labels import labelled_containers, remove_containers

    client = listing_where_one_vanishes("container")
    assert [c.id for c in labelled_containers(client)] == ["kept"]
    assert remove_containers(client, only_dead=False) == ["specgate-kept"]


def test_an_image_removed_while_the_list_is_read_is_left_out_not_an_error():
    from harness.servers.images import labelled_images, remove_labelled_images

    assert [i.id for i in labelled_images(listing_where_one_vanishes("image"), "specgate")] == ["kept"]
    assert remove_labelled_images(listing_where_one_vanishes("image")) == 1
