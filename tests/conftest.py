import contextlib
import os

import pytest

# Worker processes start through a forkserver, shared by all the tests of a session (as in a user's program).
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


@contextlib.contextmanager
def two_node_cluster():
    """A real two-node Ray cluster on this machine (head + one node, 2 CPUs each), started by "the user" (us here), as
    tests/test_ray.py and tests/test_ray_env_pool.py use it: never shut down by sb3_async."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
