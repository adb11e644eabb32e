"""The actor side of Ape-X (Horgan et al. 2018, Algorithm 1): :func:`apex_actor`, run by the runtime in each worker.

Each actor steps its env copies with a local copy of the networks, builds n-step transitions
(:class:`~sb3_async.apex.transitions.NStepBuilder`), computes their initial priorities ``|δ|`` with its own copy in batch
when it flushes its local buffer of ``block_size`` transitions, sends the block with ``ctx.send`` and refreshes its
parameters from the learner's published copy every ``actor_update_interval`` env steps. With an env that gives action
masks (sb3-contrib's ``action_masks()``, :mod:`sb3_async.common.masks`) it reads them after every step, acts and
bootstraps over the legal actions only and sends each transition with the mask of its next state.

Each block also carries the learner update count of the parameters the actor acted with (the last slot of the
published ``"params"`` entry), from which the learner logs ``async/param_age_*``; the actor reports the seconds it
waited for the learner and its blocks in flight (``async/actor_wait_share``, ``async/blocks_in_flight``).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sb3_async.apex.transitions import NStepBuilder, NStepTransitions, stack_transitions
from sb3_async.common.masks import mask_reader
from sb3_async.common.observations import check_finite_observations, check_finite_rewards
from sb3_async.common.returns import bootstrap_truncated_rewards
from sb3_async.common.torch_utils import build_worker_policy
from sb3_async.common.worker_side import StatsReporter, WorkerPolicyConfig, make_worker_envs
from sb3_async.games.league import attach_opponents
from sb3_async.runtime import WorkerContext


@dataclass
class ApeXActorConfig(WorkerPolicyConfig):
    """What an Ape-X actor needs."""

    block_size: int
    actor_update_interval: int
    max_blocks_in_flight: int
    published: tuple[str, ...]
    acting_class: type[ApeXActing]
    exploration: float | np.ndarray  # one for all the actor's envs, or one per env


class ApeXActing:
    """The algorithm-specific part of an actor: acting, bootstrap values and initial priorities on its local copy.

    :param policy: the actor's private policy (its published modules are refreshed from the learner)
    :param cfg: the actor's configuration
    :param rng: the actor's random generator
    """

    def __init__(self, policy: Any, cfg: ApeXActorConfig, rng: np.random.Generator):
        self.policy, self.cfg, self.rng = policy, cfg, rng

    @abstractmethod
    def act(self, obs: Any, masks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(actions to store, actions for the env)`` for a batch of observations (``masks``: their legal actions)."""

    @abstractmethod
    def values(self, obs: np.ndarray, masks: np.ndarray | None = None) -> np.ndarray:
        """Bootstrap values of time-limit-truncated last observations (``masks``: their legal actions)."""

    @abstractmethod
    def priorities(self, block: NStepTransitions) -> np.ndarray:
        """Initial priorities ``|δ|`` of a block of n-step transitions."""


def published_parameters(policy: nn.Module, names: tuple[str, ...]) -> list[torch.Tensor]:
    """The parameters the learner publishes to the actors, in a fixed order."""
    return [param for name in names for param in getattr(policy, name).parameters()]


def apex_actor(ctx: WorkerContext, cfg: ApeXActorConfig) -> None:
    """One Ape-X actor (Algorithm 1)."""
    env = make_worker_envs(ctx, cfg)
    policy = build_worker_policy(cfg.policy_class, cfg.observation_space, cfg.action_space, cfg.lr_schedule, cfg.policy_kwargs)
    policy.set_training_mode(False)
    local = published_parameters(policy, cfg.published)
    shared: list[torch.Tensor] = ctx.shared["params"][:-1]
    version: torch.Tensor = ctx.shared["params"][-1]  # the learner's update count when it published them
    inserted: torch.Tensor = ctx.shared["inserted"]
    acting = cfg.acting_class(policy, cfg, np.random.default_rng(ctx.seed))
    env_offset = ctx.rank * cfg.n_envs  # global index of the actor's first env
    reporter = StatsReporter(ctx, env_offset=env_offset)
    masks = mask_reader(env, cfg.action_space, env_offset)  # None: the env gives no action masks
    builder = NStepBuilder(cfg.n_envs, cfg.n_steps, cfg.gamma)

    acted_with = 0  # the learner update count of the local parameters (read first: never newer than they are)
    # turn-based games: the actor's policy plays the other seats too, or a league of its snapshots (its clock: acted_with)
    attach_opponents(
        env, policy, ctx.seed, rank=ctx.rank, n_workers=ctx.n_workers, updates=lambda: acted_with, league=cfg.league
    )

    def synchronize() -> None:  # θ ← learner.Parameters()
        nonlocal acted_with
        acted_with = int(version[0])
        with torch.no_grad():
            torch._foreach_copy_(local, shared)

    synchronize()
    obs = env.reset()
    check_finite_observations(obs, env_offset)
    legal = None if masks is None else masks.read()  # the legal actions in obs
    local_buffer: list[tuple[Any, ...]] = []
    # A restarted actor counts from the blocks the learner inserted for this rank, so the bound below still holds.
    sent, since_sync, waited = int(inserted[ctx.rank]), 0, 0.0

    def flush() -> None:
        nonlocal sent
        block = stack_transitions(local_buffer)
        local_buffer.clear()
        ctx.send("transitions", (block, acting.priorities(block).astype(np.float64), acted_with))
        sent += 1

    while not ctx.should_stop():
        stored, env_actions = acting.act(obs) if legal is None else acting.act(obs, legal)
        new_obs, rewards, dones, infos = env.step(env_actions)
        check_finite_observations(new_obs, env_offset)
        check_finite_rewards(rewards, env_offset, lambda: ctx.num_timesteps)
        rewards = rewards.astype(np.float32)
        truncated = [i for i in np.flatnonzero(dones) if infos[i].get("TimeLimit.truncated", False)]
        if truncated:  # bootstrap at time limits (SB3's convention): r + γ v(s_terminal), the transition stays done
            mask = np.zeros(cfg.n_envs, dtype=bool)
            mask[truncated] = True
            values = np.zeros(cfg.n_envs, dtype=np.float32)
            last_obs = np.stack([infos[i]["terminal_observation"] for i in truncated])
            check_finite_observations(last_obs, [env_offset + i for i in truncated])
            if masks is None:
                values[truncated] = acting.values(last_obs)
            else:
                values[truncated] = acting.values(last_obs, masks.terminal(infos, np.array(truncated)))
            rewards = bootstrap_truncated_rewards(rewards, mask, values, cfg.gamma)
        reporter.record_infos(dones, infos)
        if masks is not None:
            legal = masks.after_step()
        local_buffer += builder.push(obs, stored, rewards, dones, new_obs, legal)
        obs = new_obs
        ctx.add_steps(cfg.n_envs)
        since_sync += cfg.n_envs
        if len(local_buffer) >= cfg.block_size:
            flush()
            wait_start = time.monotonic()
            # Bounded flow: wait while the learner has not inserted our older blocks (no drops, no unbounded queue).
            while sent - int(inserted[ctx.rank]) > cfg.max_blocks_in_flight and not ctx.should_stop():
                time.sleep(0.002)
            waited += time.monotonic() - wait_start
        if since_sync >= cfg.actor_update_interval:
            synchronize()
            since_sync = 0
        reporter.record_worker(wait=waited, in_flight=sent - int(inserted[ctx.rank]))
        reporter.maybe_flush(obs)
    if local_buffer:
        flush()
    reporter.maybe_flush(obs, force=True)
    env.close()
