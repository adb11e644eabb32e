"""``backend="ray"``: the pure merge rule, the missing-Ray message, a local Ray started and shut down for a run, and a
real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): workers on both nodes, a killed Ray actor
(A3C: ``WorkerError`` naming the worker; Ape-X: restarted), a node removed mid-run (Ape-X goes on), VecNormalize
statistics merged across nodes, A3C and ApeXDQN learning CartPole-v1 (the model returned scores >= 475), the user's
Ray left running and no actor of ours left in it. Ray tests start clusters: run this file alone (``-m ray``)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from sb3_async import A3C, AEDDPG, ApeXDPG, ApeXDQN, AsyncNStepQ, WorkerError
from sb3_async.runtime import make_runtime
from sb3_async.runtime.ray_backend import NAMESPACE, RAY_INSTALL_HINT, entry_tensors, merge_changes
from tests.conftest import two_node_cluster
from tests.helpers import FAST_DQN, learns_and_returns_the_evaluated_model, zoo_model

# --- without a cluster ------------------------------------------------------------------------------------------------


def test_merge_changes_adds_the_other_machines_changes():
    """Hand values: global copy 10 when this machine last synced (base 10), since then it moved to 13 (own +3) and
    the other machines moved the global copy to 15 (+5): local becomes 18, base 18 (global 15 + own 3, the driver adds
    the returned +3 next), and +3 goes to the driver."""
    local, base = [torch.tensor([13.0, 1.0])], [torch.tensor([10.0, 1.0])]
    changes = merge_changes(local, base, [np.array([15.0, 2.0], dtype=np.float32)])
    np.testing.assert_allclose(changes[0], [3.0, 0.0])
    np.testing.assert_allclose(local[0].numpy(), [18.0, 2.0])
    np.testing.assert_allclose(base[0].numpy(), [18.0, 2.0])
    # Next round: nobody moved, this machine +1; the global copy got our +3 meanwhile (15 + 3 = 18).
    local[0] += torch.tensor([1.0, 0.0])
    changes = merge_changes(local, base, [np.array([18.0, 2.0], dtype=np.float32)])
    np.testing.assert_allclose(changes[0], [1.0, 0.0])
    np.testing.assert_allclose(local[0].numpy(), [19.0, 2.0])


def test_merge_changes_is_exact_for_one_writer_slots_of_uint8():
    """Observation slots are overwritten by one machine each: merging is exact, uint8 wrap-around included. This
    machine wrote 2 over 250 in slot 0 (change 8 mod 256); another machine wrote 9 over 7 in slot 1."""
    local, base = [torch.tensor([2, 7], dtype=torch.uint8)], [torch.tensor([250, 7], dtype=torch.uint8)]
    global_copy = np.array([250, 9], dtype=np.uint8)
    changes = merge_changes(local, base, [global_copy])
    assert changes[0].tolist() == [8, 0]
    assert local[0].tolist() == [2, 9] and base[0].tolist() == [2, 9]
    assert (global_copy + changes[0]).tolist() == [2, 9]  # the driver's copy after adding our change


def test_entry_tensors_flattens_in_order():
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.numel() for t in entry_tensors({"x": [a, b], "y": c})] == [1, 2, 3]
    with pytest.raises(TypeError, match="shared entry"):
        entry_tensors("not a tensor")


def test_missing_ray_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ImportError, match="sb3-async\\[ray\\]") as info:
        make_runtime("ray", "forkserver")
    assert RAY_INSTALL_HINT in str(info.value)
    with pytest.raises(ImportError, match="sb3-async\\[ray\\]"):
        A3C("MlpPolicy", "CartPole-v1", backend="ray")  # at construction, not at the first learn()


def test_backend_kwargs_are_checked():
    with pytest.raises(ValueError, match="backend='mp' takes none"):
        make_runtime("mp", "forkserver", {"address": "auto"})
    with pytest.raises(TypeError, match="backend_kwargs"):
        A3C("MlpPolicy", "CartPole-v1", backend="ray", backend_kwargs="auto")
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="workers_per_actor=0"):
        make_runtime("ray", "forkserver", {"workers_per_actor": 0})
    with pytest.raises(TypeError, match="unexpected keyword"):
        make_runtime("ray", "forkserver", {"adress": "auto"})


# --- Ray --------------------------------------------------------------------------------------------------------------


def _our_actors(ray) -> list[str]:
    return [actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True) if actor["namespace"] == NAMESPACE]


@pytest.mark.ray
def test_local_ray_is_started_and_shut_down():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    model = A3C(
        "MlpPolicy", "CartPole-v1", n_workers=2, seed=0, backend="ray", backend_kwargs={"init_kwargs": {"num_cpus": 2}}
    )
    before = [param.detach().clone() for param in model.policy.parameters()]
    callback = OnSteps(at=0)
    model.learn(3000, callback=callback)
    assert callback.local_workers == {2}  # a Ray we started runs every worker here: learn() leaves them their CPUs
    assert not ray.is_initialized()  # the Ray we started is gone
    assert model.num_timesteps >= 3000 and len(model.ep_info_buffer) > 0
    # The driver's policy is the parameter server: the workers' updates reached it.
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))


@pytest.fixture(scope="module")
def cluster():
    """One two-node cluster for the whole module (a start takes ~12 s); the test that adds a node removes one, so every
    test sees two nodes."""
    with two_node_cluster() as started:
        yield started


class OnSteps(BaseCallback):
    """Calls ``action(model)`` once, at the first callback step at or after ``at`` global steps; records the nodes and
    what the runtime counts as local workers."""

    def __init__(self, at: int, action=None):
        super().__init__()
        self.at, self.action, self.nodes, self.local_workers, self.done = at, action, set(), set(), False

    def _on_step(self) -> bool:
        self.nodes.update(self.model._runtime.worker_nodes().values())
        self.local_workers.add(self.model._runtime.local_workers())
        if not self.done and self.num_timesteps >= self.at:
            self.done = True
            if self.action is not None:
                self.action(self.model)
        return True


@pytest.mark.ray
def test_apex_actors_run_on_both_nodes_and_nothing_stays(cluster):
    import ray

    model = ApeXDQN("MlpPolicy", "CartPole-v1", backend="ray", **FAST_DQN)
    callback = OnSteps(at=0)
    model.learn(1000, callback=callback)
    assert len(callback.nodes) == 2  # one host per node (SPREAD)
    assert callback.local_workers == {0}  # a joined cluster places workers itself: the learner's threads stay as set
    assert model._n_updates > 0 and model.num_timesteps >= 1000
    assert ray.is_initialized() and len(ray.nodes()) == 2  # the user's cluster is left running
    assert _our_actors(ray) == []


@pytest.mark.ray
@pytest.mark.parametrize("algo", ["n_step_q", "apex_dpg"])
def test_async_q_and_apex_dpg_run_on_the_cluster(cluster, algo, tmp_path):
    """The other algorithms with workers: the driver's copy (what save() writes) gets the machines' updates, the
    async Q family's target network and optimizer statistics included (each machine's, averaged)."""
    if algo == "n_step_q":
        model = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=2, target_update_interval=500, seed=0, backend="ray")
        modules = [model.policy.q_net, model.policy.q_net_target]
        env = "CartPole-v1"
    else:
        model = ApeXDPG("MlpPolicy", "Pendulum-v1", backend="ray", **{**FAST_DQN, "policy_kwargs": dict(net_arch=[32, 32])})
        modules = [model.policy.actor]
        env = "Pendulum-v1"
    before = [[param.detach().clone() for param in module.parameters()] for module in modules]
    model.learn(1000)
    for module, old in zip(modules, before):
        assert any(not torch.equal(a, b) for a, b in zip(old, module.parameters()))
    if algo == "n_step_q":
        statistics = model.policy.optimizer.state_tensors()
        assert all(bool((tensor >= 0).all()) for tensor in statistics) and any(bool(tensor.any()) for tensor in statistics)
    model.save(tmp_path / "model.zip")
    loaded = type(model).load(tmp_path / "model.zip", env=gym.make(env))
    obs = model.observation_space.sample()[None]
    np.testing.assert_allclose(model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0])


@pytest.mark.ray
def test_multi_agent_pettingzoo_env_trains_on_the_cluster(cluster):
    """A3C's workers and AEDDPG's env hosts on both nodes with a PettingZoo factory: a slot per agent, episodes
    logged; ``n_envs`` counts env copies for AEDDPG as for the pool."""
    import ray

    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")

    def discrete():
        return simple_spread_v3.parallel_env(max_cycles=25)

    def continuous():
        return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=True)

    model = A3C("MlpPolicy", discrete, n_workers=2, backend="ray", seed=0)
    callback = OnSteps(at=0)
    model.learn(1500, callback=callback)
    assert len(callback.nodes) == 2 and model.n_envs == 6 and model.num_timesteps >= 1500
    assert model.ep_info_buffer and model.ep_info_buffer[-1]["l"] == 25
    ae_ddpg = AEDDPG("MlpPolicy", continuous, n_envs=2, backend="ray", learning_starts=100, seed=0)
    assert ae_ddpg.n_envs == 6
    ae_ddpg.learn(400)
    assert ae_ddpg.num_timesteps >= 400 and ae_ddpg.ep_info_buffer
    assert _our_actors(ray)  # the env hosts stay between learn() calls, as a SubprocVecEnv's processes do
    ae_ddpg.env.close()
    assert _our_actors(ray) == []  # closing the env removes them


@pytest.mark.ray
def test_a3c_plays_its_league_on_the_cluster_and_keeps_it_through_save_and_load(cluster, tmp_path):
    """The league's snapshots and results reach the driver from workers on both nodes; the saved model keeps them."""
    tictactoe_v3 = pytest.importorskip("pettingzoo.classic.tictactoe_v3")
    from sb3_async.env_pool.turns import TurnBasedGame
    from sb3_async.games import OpponentPool

    def tictactoe_league():  # pickled by value (a closure), as a user's script's factory
        return TurnBasedGame(tictactoe_v3.raw_env(), opponent=OpponentPool(snapshot_interval=10, size=2))

    model = A3C("MlpPolicy", tictactoe_league, n_workers=2, n_envs_per_worker=2, backend="ray", seed=0)
    callback = OnSteps(at=0)
    model.learn(2_000, callback=callback)
    assert len(callback.nodes) == 2
    record = model.league
    assert record is not None
    assert {name.split(".")[1] for name in record.snapshots} == {"0", "1"}  # both workers' snapshots
    assert all(len([n for n in record.snapshots if n.startswith(f"0.{rank}.")]) <= 2 for rank in (0, 1))
    snapshot_games = sum(sum(results) for name, results in record.results.items() if name != "latest")
    assert snapshot_games > 0 and sum(record.results["latest"]) > 0
    model.save(tmp_path / "model.zip")
    loaded = A3C.load(tmp_path / "model.zip")
    assert loaded.league is not None and list(loaded.league.snapshots) == list(record.snapshots)


@pytest.mark.ray
def test_pause_parks_the_workers_on_every_node(cluster):
    """``pause_workers()`` (frozen evaluations) holds the workers of every host: no step while paused."""
    counts = []

    def frozen(model) -> None:
        runtime = model._runtime
        with model.pause_workers():
            runtime.poll(0.3)  # the hosts' replies after the pause carry every step taken before it
            counts.append(runtime.steps())
            runtime.poll(0.5)
            counts.append(runtime.steps())

    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0, backend="ray")
    model.learn(3000, callback=OnSteps(at=1000, action=frozen))
    assert len(counts) == 2 and counts[0] == counts[1] and model.num_timesteps >= 3000


@pytest.mark.ray
def test_workers_the_cluster_cannot_place_fail_clearly(cluster):
    """Ray waits forever for CPUs a cluster lacks; we stop waiting and say what was asked, leaving no actor behind."""
    import ray

    model = A3C(
        "MlpPolicy", "CartPole-v1", n_workers=2, backend="ray", backend_kwargs=dict(num_cpus_per_worker=64, start_timeout=3)
    )
    with pytest.raises(TimeoutError, match="num_cpus_per_worker=64"):
        model.learn(1000)
    assert ray.is_initialized() and _our_actors(ray) == []


def _kill_a_host(model) -> None:
    import ray

    ray.kill(ray.get_actor(_our_actors(ray)[0], namespace=NAMESPACE))


@pytest.mark.ray
def test_killed_ray_actor_fails_a3c_naming_the_worker(cluster):
    import ray

    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0, backend="ray")
    start = time.monotonic()
    with pytest.raises(WorkerError, match="a3c-") as info:
        model.learn(1_000_000, callback=OnSteps(at=1000, action=_kill_a_host))
    assert time.monotonic() - start < 120
    assert "was lost" in str(info.value) and "ActorDiedError" in str(info.value)
    assert _our_actors(ray) == []


@pytest.mark.ray
def test_killed_ray_actor_is_restarted_for_apex(cluster):
    import ray

    model = ApeXDQN("MlpPolicy", "CartPole-v1", backend="ray", **FAST_DQN)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(1500, callback=OnSteps(at=500, action=_kill_a_host))
    restarts = [str(w.message) for w in caught if "restarting it (1/3)" in str(w.message)]
    assert len(restarts) == 1 and "apex-actor-" in restarts[0]
    assert model.num_timesteps >= 1500
    assert _our_actors(ray) == []


@pytest.mark.ray
@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_ctrl_c_or_an_exception_leaves_nothing_in_the_users_cluster(cluster, error):
    import ray

    def interrupt(model) -> None:
        raise error("raised in a callback")

    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0, backend="ray")
    with pytest.raises(error, match="raised in a callback"):
        model.learn(1_000_000, callback=OnSteps(at=500, action=interrupt))
    assert ray.is_initialized() and len(ray.nodes()) == 2 and _our_actors(ray) == []


@pytest.mark.ray
def test_a_stale_ray_address_file_does_not_stop_a_run():
    """With no address given, a run starts a Ray of its own: it never joins (nor fails on) the cluster whose address
    Ray's address file names, here one long gone, as a `ray start` that ended without `ray stop` leaves it. The file
    lives in a Ray temp dir of this test's own (``RAY_TMPDIR``), so no other Ray on the machine sees it."""
    pytest.importorskip("ray")
    temp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        (temp / "ray").mkdir()
        (temp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")  # nothing listens there
        script = (
            "from sb3_async import A3C\n"
            "if __name__ == '__main__':\n"
            "    model = A3C('MlpPolicy', 'CartPole-v1', n_workers=1, backend='ray')\n"
            "    model.learn(300)\n"
            "    print('steps', model.num_timesteps)\n"
        )
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        env.update(
            RAY_TMPDIR=str(temp),
            PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")])),
        )
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        assert int(result.stdout.split("steps")[-1]) >= 300
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.ray
def test_killed_driver_leaves_nothing_in_the_users_cluster(cluster, tmp_path):
    """A driver process SIGKILLed mid-run (no cleanup of ours runs): Ray removes the hosts it owned."""
    import ray

    script = tmp_path / "driver.py"
    script.write_text(
        "import ray\n"
        "from sb3_async import A3C\n"
        "if __name__ == '__main__':\n"
        f"    ray.init(address={cluster.address!r})\n"
        "    A3C('MlpPolicy', 'CartPole-v1', n_workers=2, backend='ray').learn(100_000_000)\n"
    )
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_our_actors(ray)) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(_our_actors(ray)) == 2, "the driver's hosts did not start"
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 60
    while _our_actors(ray) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _our_actors(ray) == []


@pytest.mark.ray
def test_node_removed_mid_run_apex_goes_on(cluster):
    """A third node joins; when one of the nodes running actors (not the head) is removed, its actors start again on
    the nodes left and learning goes on."""
    import ray

    cluster.add_node(num_cpus=2)
    head = cluster.head_node.node_id

    def remove_a_node(model) -> None:
        used = set(model._runtime.worker_nodes().values())
        node = next(node for node in cluster.worker_nodes if node.node_id in used and node.node_id != head)
        cluster.remove_node(node)

    model = ApeXDQN("MlpPolicy", "CartPole-v1", backend="ray", **{**FAST_DQN, "n_actors": 3})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(1500, callback=OnSteps(at=500, action=remove_a_node))
    assert any("restarting it" in str(w.message) for w in caught)
    assert model.num_timesteps >= 1500 and model._n_updates > 0
    assert _our_actors(ray) == []


@pytest.mark.ray
def test_a3c_normalization_statistics_merge_across_nodes(cluster):
    """VecNormalize with a host per node: every worker's observations reach the driver's statistics (the ones saved with
    the model and in the zoo's vecnormalize.pkl), each slot copied from the machine of its one writer."""
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=4), gamma=0.99)
    model = A3C("MlpPolicy", env, n_workers=2, n_envs_per_worker=2, seed=0, backend="ray")
    model.learn(3000)
    venv = model.get_vec_normalize_env()
    # as with backend="mp": one observation per env step plus each env's first reset; one return per env step
    assert venv.obs_rms.count == pytest.approx(model.num_timesteps + 4 + 1e-4)
    assert venv.ret_rms.count == pytest.approx(model.num_timesteps + 1e-4)


@pytest.mark.ray
def test_a3c_learns_cartpole_on_two_nodes(cluster, one_torch_thread, tmp_path):
    """The model learn() returns, trained by workers on both nodes, is the one a frozen evaluation scored >= 475 (a
    pause syncs every host into the driver's copy before the evaluation, and a stop keeps that copy)."""
    model = zoo_model("a3c", "CartPole-v1", tmp_path, seed=0, backend="ray")  # 2 workers x 8 envs
    learns_and_returns_the_evaluated_model(model, "CartPole-v1", 475, 400_000, 10_000, margin=75)


@pytest.mark.ray
@pytest.mark.slow  # 38-57 s; the default run keeps Ape-X's learning check (algorithms/test_apex.py) and A3C's on the cluster
def test_apex_dqn_learns_cartpole_on_two_nodes(cluster, one_torch_thread, tmp_path):
    """The zoo configuration of algorithms/test_apex.py on the cluster, as 2 actors of one env each (one per node): the model
    learn() returns is the one evaluated >= 475 (38-53 s in 4 runs on an idle machine)."""
    model = zoo_model("apex_dqn", "CartPole-v1", tmp_path, seed=0, n_actors=2, n_envs_per_actor=1)
    model.backend = "ray"
    learns_and_returns_the_evaluated_model(model, "CartPole-v1", 475, 150_000, 5000, margin=75)
