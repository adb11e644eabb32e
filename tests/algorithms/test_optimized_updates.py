"""Each learner's optimized update equals its reference on a fixed batch, to 1e-5: torch's fused Adam (the default of
AE-DDPG, Ape-X DPG and the Ape-X DQN entries) against SB3's Adam. A3C's update through the acting passes is held equal
to autograd's in ``test_recorded_acting.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import configure

from sb3_async import AEDDPG, ApeXDPG, ApeXDQN
from sb3_async.common.buffers.prioritized import PrioritizedArrays
from sb3_async.common.dpg_update import dpg_update

TOLERANCE = 1e-5
UPDATES = 5


def assert_same_parameters(reference: torch.nn.Module, optimized: torch.nn.Module, initial: dict) -> None:
    for (name, expected), got in zip(reference.state_dict().items(), optimized.state_dict().values(), strict=True):
        torch.testing.assert_close(got, expected, atol=TOLERANCE, rtol=TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")
    moved = [name for name, value in optimized.state_dict().items() if not torch.allclose(value, initial[name], atol=1e-4)]
    assert moved, "the updates changed no parameter: nothing was compared"


def fixed_batch(obs_dim: int, act_dim: int, batch: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)

    def tensor(*shape: int) -> torch.Tensor:
        return torch.as_tensor(rng.standard_normal(shape).astype(np.float32))

    return dict(
        observations=tensor(batch, obs_dim),
        actions=torch.clamp(tensor(batch, act_dim), -1, 1),
        returns=tensor(batch, 1),
        dones=torch.as_tensor((rng.random((batch, 1)) < 0.1).astype(np.float32)),
        next_observations=tensor(batch, obs_dim),
        weights=torch.as_tensor(rng.random((batch, 1)).astype(np.float32)),
    )


@pytest.mark.parametrize("algorithm", [AEDDPG, ApeXDPG])
@pytest.mark.parametrize("prioritized", [False, True])
def test_the_dpg_update_with_fused_adam_equals_it_with_sb3s_adam(algorithm, prioritized) -> None:
    kwargs = dict(n_envs=1, seed=0) if algorithm is AEDDPG else dict(seed=0)
    if algorithm is AEDDPG:
        kwargs["pool_kwargs"] = dict(n_hosts=0)
    net = dict(net_arch=dict(pi=[32, 32], qf=[32, 32]))
    optimized = algorithm("MlpPolicy", "Pendulum-v1", policy_kwargs=net, **kwargs)
    reference = algorithm("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(net, optimizer_kwargs={}), **kwargs)
    assert optimized.policy.actor.optimizer.defaults["fused"] and not reference.policy.actor.optimizer.defaults["fused"]
    reference.policy.load_state_dict(optimized.policy.state_dict())
    initial = {name: value.clone() for name, value in optimized.policy.state_dict().items()}
    for update in range(UPDATES):
        batch = fixed_batch(3, 1, seed=update)
        weights = batch.pop("weights")
        weights = weights if prioritized else None
        steps = [dpg_update(model.policy, **batch, discount=0.99, weights=weights) for model in (reference, optimized)]
        assert steps[1].critic_loss == pytest.approx(steps[0].critic_loss, rel=TOLERANCE, abs=TOLERANCE)
        if prioritized:
            np.testing.assert_allclose(steps[1].priorities, steps[0].priorities, rtol=TOLERANCE, atol=TOLERANCE)
    assert_same_parameters(reference.policy, optimized.policy, initial)
    for model in (optimized, reference):
        if getattr(model, "env", None) is not None:
            model.env.close()


def test_the_apex_dqn_update_with_fused_adam_equals_it_with_sb3s_adam() -> None:
    def model(optimizer_kwargs: dict) -> ApeXDQN:
        net = dict(net_arch=[32, 32], optimizer_class=torch.optim.Adam, optimizer_kwargs=optimizer_kwargs)
        model = ApeXDQN("MlpPolicy", "CartPole-v1", seed=0, batch_size=64, policy_kwargs=net)
        model.set_logger(configure(None, []))
        return model

    optimized, reference = model(dict(fused=True)), model({})
    reference.policy.load_state_dict(optimized.policy.state_dict())
    initial = {name: value.clone() for name, value in optimized.policy.state_dict().items()}
    rng = np.random.default_rng(0)
    for _ in range(UPDATES):
        batch = PrioritizedArrays(
            observations=rng.standard_normal((64, 4)).astype(np.float32),
            actions=rng.integers(0, 2, (64, 1)),
            next_observations=rng.standard_normal((64, 4)).astype(np.float32),
            dones=(rng.random((64, 1)) < 0.1).astype(np.float32),
            rewards=rng.standard_normal((64, 1)).astype(np.float32),
            discounts=None,
            weights=rng.random((64, 1)).astype(np.float32),
            indices=np.arange(64),
        )
        (loss, td), (expected_loss, expected_td) = optimized._train_batch(batch), reference._train_batch(batch)
        assert loss == pytest.approx(expected_loss, rel=TOLERANCE, abs=TOLERANCE)
        np.testing.assert_allclose(td, expected_td, rtol=TOLERANCE, atol=TOLERANCE)
    assert_same_parameters(reference.policy, optimized.policy, initial)
