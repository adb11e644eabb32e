import contextlib
import os
import re
from typing import Any

import pytest

# Worker processes start through a forkserver, shared by all the tests of a session (as in a user's program).
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


@pytest.fixture(scope="session", autouse=True)
def sb3_log_folder(tmp_path_factory: pytest.TempPathFactory):
    """SB3's ``configure(None)``, which every ``learn()`` without a log folder calls, makes a new empty
    ``$TMPDIR/SB3-<date>`` folder unless ``SB3_LOGDIR`` names one: the session's runs share one under pytest's temporary
    folder instead of leaving hundreds in ``/tmp`` (set before the first test, so the forkserver and the CLI
    subprocesses inherit it)."""
    if "SB3_LOGDIR" in os.environ:
        yield
        return
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3_logdir"))
    yield
    del os.environ["SB3_LOGDIR"]


@pytest.fixture
def one_torch_thread():
    """One torch thread in the main process for the test (restored after): tiny networks and learners that share the
    cores with workers step faster on one thread than with torch's intra-op threads spinning on busy cores (measured:
    ~25x slower Ape-X learner batches with 2 threads than with 1 on 2 loaded cores). Test files with many such tests
    use it for all of them (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def two_node_cluster():
    """A real two-node Ray cluster on this machine (head + one node, 2 CPUs each), started by "the user" (us here), as
    tests/runtime/test_ray.py and tests/env_pool/test_ray_env_pool.py use it: never shut down by sb3_async."""
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


# Tests that never run beside one another, by marker, with the node ids that carry the marker: the xdist controller
# that schedules the default run (`-n 2` in pyproject.toml) sees node ids only, never markers.
_ONE_AT_A_TIME = {
    # they start Ray clusters: two side by side would compete for the machine's ports and cores
    "ray": re.compile(r"tests/(runtime|env_pool)/test_ray(_env_pool)?\.py::|\[ray\]$|\[docs/guide/ray\.md:\d+\]$"),
    # the peers' short runs start their own processes, and one checks that none of Sample Factory's outlives its run
    "peers": re.compile(r"tests/benchmark/test_peers\.py::test_(a_real_peer|sample_factory_appo)_runs_end_to_end\["),
}


def _one_at_a_time(nodeid: str) -> bool:
    return any(pattern.search(nodeid) for pattern in _ONE_AT_A_TIME.values())


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load scheduling, with the tests of ``_ONE_AT_A_TIME`` kept together in one worker, one after another."""
    from xdist.scheduler import LoadScopeScheduling

    class OneAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "one at a time" if _one_at_a_time(nodeid) else nodeid

    return OneAtATime(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker, pattern in _ONE_AT_A_TIME.items():
            if item.get_closest_marker(marker) is not None and not pattern.search(item.nodeid):
                raise pytest.UsageError(
                    f"{item.nodeid} carries the `{marker}` marker but tests/conftest.py's _ONE_AT_A_TIME does not match "
                    "its node id: extend the pattern, so that the default run keeps it away from the others"
                )
