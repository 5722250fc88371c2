"""A local Ray cluster of two nodes (two raylets on this machine, one CPU each, so that two
one-CPU tasks or actors land one per node), small object stores, no dashboard."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def two_node_cluster() -> Iterator[str]:
    """The cluster's address (its GCS, HOST:PORT) while it runs."""
    import shutil
    import tempfile

    import ray
    from ray._private.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80_000_000}
    files = tempfile.mkdtemp(prefix="specgate-raytest-")  # not /tmp/ray, every instance's
    # Cluster() writes the head's address to /tmp/ray/ray_current_cluster whatever temp_dir
    # says, and fails where that folder does not exist yet (a machine that never ran Ray)
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False, "temp_dir": files})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        ray.shutdown()  # a driver this process started on it (a load's)
        cluster.shutdown()
        shutil.rmtree(files, ignore_errors=True)
