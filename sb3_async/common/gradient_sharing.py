"""What the gradient-sharing algorithms (A3C, the async Q family) have in common, written once.

Mnih et al. 2016 (supp. Alg. S1-S3): each actor-learner keeps a private copy θ' of the shared parameters θ,
synchronizes θ' = θ, steps its env copies for up to ``n_steps`` (t_max) steps or to a terminal state, computes a
gradient on θ' and applies it to θ with a lock-free optimizer (shared RMSProp by default; Hogwild, Recht et al. 2011).
The algorithms differ only in the loss, so the rest lives here:

* main process: :class:`GradientSharing`, held by the algorithm, validates the optimizer arguments, builds the
  paper's lock-free optimizer over the trained module, shares parameters and optimizer statistics with the workers
  and saves its hyperparameters with the model;
* workers: :class:`GradientWorker` builds the env copies, the private policy θ', the optimizer view on the shared
  statistics and the statistics reporter; runs the segment loop (:meth:`GradientWorker.collect`, time-limit
  truncations bootstrapped), splits a segment among its actor-learners (:meth:`GradientWorker.actor_learners`) and
  applies updates (:meth:`GradientWorker.apply_gradients`), reporting each update's policy lag: the shared updates
  other workers applied between θ' = θ and its own (one counter slot per worker, ``shared["updates"]``, summed: no
  lost increments, no lock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from sb3_async.common.divergence import DivergenceGuard
from sb3_async.common.masks import mask_reader
from sb3_async.common.observations import check_finite_observations, check_finite_rewards
from sb3_async.common.optimizers import OPTIMIZER_NAMES, AsyncOptimizer, WorkerOptimizer, as_async_optimizer, make_optimizer
from sb3_async.common.returns import bootstrap_truncated_rewards
from sb3_async.common.torch_utils import build_worker_policy, clip_grad_norm, to_tensor
from sb3_async.common.worker_side import StatsReporter, WorkerPolicyConfig, make_worker_envs
from sb3_async.runtime import WorkerContext
from sb3_async.validation import check_float

#: How the shared entries of gradient-sharing workers cross machines (``backend="ray"``: lock-free updates on each
#: machine's own copy): θ merged (:attr:`WorkerSpec.synced`), the optimizer statistics per machine
#: (:attr:`WorkerSpec.averaged`).
GRADIENT_SHARING_ENTRIES: dict[str, tuple[str, ...]] = dict(synced=("params", "updates"), averaged=("optimizer_state",))


def stack_steps(items: list[Any]) -> Any:
    """``(n_steps, n_envs, ...)`` arrays flattened to ``(n_steps * n_envs, ...)`` (dict observations key by key)."""
    if isinstance(items[0], dict):
        return {key: stack_steps([item[key] for item in items]) for key in items[0]}
    if isinstance(items[0], list) and isinstance(items[0][0], dict):  # per-env dict observations (terminal ones)
        keys = items[0][0].keys()
        return {key: stack_steps([np.stack([obs[key] for obs in step]) for step in items]) for key in keys}
    first = items[0]
    if isinstance(first, np.ndarray) and first.ndim == 4 and first.transpose(0, 2, 3, 1).flags.c_contiguous:
        # channel-first views of channel-last images (as SB3's VecTransposeImage gives them): stacked in that memory
        # layout, which torch's convolutions read faster than a contiguous channel-first batch
        last = np.stack([item.transpose(0, 2, 3, 1) for item in items])
        return last.reshape(-1, *last.shape[2:]).transpose(0, 3, 1, 2)
    stacked = np.stack(items)
    return stacked.reshape(stacked.shape[0] * stacked.shape[1], *stacked.shape[2:])


@dataclass
class GradientWorkerConfig(WorkerPolicyConfig):
    """What a gradient-sharing worker needs; algorithms subclass it with their own hyperparameters."""

    max_grad_norm: float | None
    optimizer: tuple[type[AsyncOptimizer], dict[str, Any]]
    optimizer_shared: bool
    separate_updates: bool


@dataclass
class Segment:
    """Up to ``n_steps`` steps of every env of a worker, time first. ``rewards`` already include the bootstrap
    ``γ V(s_terminal)`` of time-limit truncations; ``next_obs`` is the observation after the segment. With an env
    that gives action masks, ``masks`` holds the legal actions of each step's observations and ``next_masks`` those of
    ``next_obs`` (else ``[]`` and None)."""

    obs: list[Any]
    actions: list[np.ndarray]
    rewards: list[np.ndarray]
    dones: list[np.ndarray]
    next_obs: Any
    masks: list[np.ndarray] = field(default_factory=list)
    next_masks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.obs)

    def select(self, envs: np.ndarray) -> Segment:
        """The steps of the envs ``envs`` alone (in that order)."""

        def pick(batch: Any) -> Any:
            return {key: value[envs] for key, value in batch.items()} if isinstance(batch, dict) else batch[envs]

        return Segment(
            [pick(obs) for obs in self.obs],
            [actions[envs] for actions in self.actions],
            [rewards[envs] for rewards in self.rewards],
            [dones[envs] for dones in self.dones],
            pick(self.next_obs),
            [masks[envs] for masks in self.masks],
            None if self.next_masks is None else self.next_masks[envs],
        )


class GradientWorker:
    """The worker side of a gradient-sharing algorithm: env copies, θ', optimizer, statistics, the segment loop and
    the lock-free update. The algorithm's worker function builds one and adds its loss.

    :param ctx: the worker's context
    :param cfg: the algorithm's worker configuration
    :param local_module: picks the module holding θ' from the worker's policy (default: the whole policy)
    :param attach_players: called with the env copies, θ' and the worker's seed before the first reset, and with
        ``rank``, ``n_workers``, ``updates`` (the worker's update count) and ``league`` (``cfg.league``) by keyword,
        to seat players in turn-based games (the algorithms pass :func:`sb3_async.games.league.attach_opponents`: θ'
        plays the other seats of self-play games, a league of its snapshots those of league games)
    """

    def __init__(
        self,
        ctx: WorkerContext,
        cfg: GradientWorkerConfig,
        local_module: Callable[[Any], nn.Module] = lambda policy: policy,
        attach_players: Callable[..., Any] | None = None,
    ):
        self.ctx, self.cfg = ctx, cfg
        self.env = make_worker_envs(ctx, cfg)
        self.policy = build_worker_policy(
            cfg.policy_class, cfg.observation_space, cfg.action_space, cfg.lr_schedule, cfg.policy_kwargs
        )
        self.policy.set_training_mode(True)
        if attach_players is not None:
            attach_players(
                self.env,
                self.policy,
                ctx.seed,
                rank=ctx.rank,
                n_workers=ctx.n_workers,
                updates=lambda: self._own_updates,
                league=cfg.league,
            )
        self.shared_params: list[torch.Tensor] = ctx.shared["params"]
        self.local_params: list[torch.Tensor] = list(local_module(self.policy).parameters())  # θ'
        self.optimizer = WorkerOptimizer(
            *cfg.optimizer, self.shared_params, ctx.shared["optimizer_state"], cfg.optimizer_shared
        )
        self.env_offset = ctx.rank * cfg.n_envs  # global index of the worker's first env
        self.reporter = StatsReporter(ctx, env_offset=self.env_offset)
        # shared updates applied by each worker (slot `rank` written by worker `rank` alone); their sum counts them all
        self.update_counts: torch.Tensor = ctx.shared["updates"]
        self._own_updates: int = int(self.update_counts[ctx.rank])
        self._updates_at_snapshot = int(self.update_counts.sum())
        self.divergence = DivergenceGuard(cfg.algorithm, self.shared_params)
        self.obs = self.env.reset()
        check_finite_observations(self.obs, self.env_offset)
        self.mask_reader = mask_reader(self.env, cfg.action_space, self.env_offset)  # None: no action masks
        #: the legal actions in each env's current observation (None: the env gives no masks); and, while
        #: ``terminal_value`` runs, those of the truncated episodes' last observations
        self.masks = None if self.mask_reader is None else self.mask_reader.read()
        self.terminal_masks: np.ndarray | None = None
        # whether each env's current observation starts an episode (recurrent policies reset their state there);
        # all True at first, as RecurrentPPO's `_last_episode_starts`
        self.episode_starts = np.ones(cfg.n_envs, dtype=bool)

    def synchronize(self) -> None:
        """θ' = θ, noting how many shared updates θ had seen (read first: an update counted later may be partly in θ',
        and counts as lag)."""
        self._updates_at_snapshot = int(self.update_counts.sum())
        with torch.no_grad():
            torch._foreach_copy_(self.local_params, self.shared_params)

    def actor_learners(self, n_steps: int) -> list[tuple[np.ndarray, torch.Tensor | None]]:
        """The actor-learners of a segment of ``n_steps`` steps, each learning from its own envs' steps: the worker's
        envs together, or with ``separate_updates`` (see :class:`~sb3_async.A3C`) each env alone. Each is
        ``(envs, rows)``: the envs' indices and their rows in the segment's time-major batch (None: every row)."""
        envs = np.arange(self.cfg.n_envs)
        if not self.cfg.separate_updates or self.cfg.n_envs == 1:
            return [(envs, None)]
        steps = torch.arange(n_steps)[:, None] * self.cfg.n_envs
        return [(envs[i : i + 1], (steps + i).flatten()) for i in range(self.cfg.n_envs)]

    def collect(
        self,
        act: Callable[[Any], np.ndarray],
        terminal_value: Callable[[Any, np.ndarray], np.ndarray],
        env_action: Callable[[np.ndarray], np.ndarray] = lambda actions: actions,
    ) -> Segment:
        """Step the envs for ``n_steps`` steps, or to a terminal state with one env ("until terminal s_t or
        t - t_start == t_max", Alg. S1-S3; with several envs, fixed-length segments with done masks, as A2C).

        :param act: actions for a batch of observations
        :param terminal_value: bootstrap values of a batch of last observations of time-limit-truncated episodes,
            called with the observations and the indices of their envs
        :param env_action: maps the policy's actions to the env's (e.g. clipping to a Box)
        """
        cfg = self.cfg
        segment = Segment([], [], [], [], None)
        for _ in range(cfg.n_steps):
            actions = act(self.obs)
            new_obs, rewards, dones, infos = self.env.step(env_action(actions))
            check_finite_observations(new_obs, self.env_offset)
            check_finite_rewards(rewards, self.env_offset, lambda: self.ctx.num_timesteps)
            rewards = rewards.astype(np.float32)
            truncated = np.array([i for i in np.flatnonzero(dones) if infos[i].get("TimeLimit.truncated", False)], dtype=int)
            if truncated.size:  # bootstrap at time limits, as SB3 does: r + γ V(s_terminal), the step stays done
                values = np.zeros(cfg.n_envs, dtype=np.float32)
                last_obs = stack_steps([[infos[i]["terminal_observation"] for i in truncated]])
                check_finite_observations(last_obs, self.env_offset + truncated)
                if self.mask_reader is not None:
                    self.terminal_masks = self.mask_reader.terminal(infos, truncated)
                values[truncated] = terminal_value(last_obs, truncated)
                mask = np.zeros(cfg.n_envs, dtype=bool)
                mask[truncated] = True
                rewards = bootstrap_truncated_rewards(rewards, mask, values, cfg.gamma)
            self.reporter.record_infos(dones, infos)
            segment.obs.append(self.obs)
            segment.actions.append(actions)
            segment.rewards.append(rewards)
            segment.dones.append(dones)
            self.obs, self.episode_starts = new_obs, dones
            if self.mask_reader is not None:
                segment.masks.append(self.masks)  # type: ignore[arg-type]  # read whenever a reader exists
                self.masks = self.mask_reader.after_step()
            if cfg.n_envs == 1 and dones[0]:
                break
        segment.next_obs, segment.next_masks = self.obs, self.masks
        return segment

    def apply_gradients(
        self,
        loss: torch.Tensor,
        n_steps: int,
        after_backward: Callable[[], None] | None = None,
        n_envs: int | None = None,
    ) -> int:
        """Backpropagate ``loss`` into θ', clip, apply dθ to θ without locks; count the steps and the update, report
        its policy lag (shared updates since :meth:`synchronize`). Returns the global T. A non-finite gradient norm
        (or loss, without clipping), or θ found non-finite or beyond
        :data:`~sb3_async.common.divergence.PARAMETER_LIMIT` (checked at the first update and every
        :data:`~sb3_async.common.divergence.CHECK_INTERVAL`), raises
        :class:`~sb3_async.common.divergence.DivergenceError`, which fails ``learn()`` through the worker's error.

        :param n_steps: the steps of each env the loss learns from
        :param after_backward: completes the gradients after ``loss.backward()`` (the part of θ' the loss's graph
            does not reach, backpropagated by hand)
        :param n_envs: the envs the loss learns from (default: every env of the worker)
        """
        for param in self.local_params:
            param.grad = None
        loss.backward()
        if after_backward is not None:
            after_backward()
        learning_rate = self.cfg.lr_schedule(self.ctx.progress_remaining)
        n_new = n_steps * (self.cfg.n_envs if n_envs is None else n_envs)
        update, step = self._own_updates + 1, self.ctx.num_timesteps + n_new  # the step this update is counted at
        # a non-finite gradient fails the worker before it reaches the shared θ (DivergenceError)
        if self.cfg.max_grad_norm is not None:
            norm = clip_grad_norm(self.local_params, self.cfg.max_grad_norm)
            self.divergence.check_values(update, step, learning_rate, gradient_norm=norm)
        else:
            self.divergence.check_values(update, step, learning_rate, loss=float(loss.detach()))
        grads = [param.grad if param.grad is not None else torch.zeros_like(param) for param in self.local_params]
        lag = int(self.update_counts.sum()) - self._updates_at_snapshot
        self.optimizer.step(grads, learning_rate)
        self.divergence.after_update(update, step, learning_rate)
        self._own_updates += 1
        self.update_counts[self.ctx.rank] = self._own_updates  # counted once applied
        self.reporter.record_update(lag)
        return self.ctx.add_steps(n_new)

    def close(self) -> None:
        self.reporter.maybe_flush(self.obs, force=True)
        self.env.close()


def tensor_obs(items: list[Any]) -> Any:
    """A segment's observations as one batch tensor."""
    return to_tensor(stack_steps(items))


def shared_setting(name: str) -> property:
    """A read-only model attribute that is its :class:`GradientSharing`'s ``name`` (``model.max_grad_norm`` as in SB3's
    A2C: the algorithms declare ``optimizer_name``, ``optimizer_kwargs``, ``max_grad_norm``, ``separate_updates``)."""
    return property(lambda model: getattr(model.gradient_sharing, name), doc=f"``gradient_sharing.{name}``")


class GradientSharing:
    """The main-process side of a gradient-sharing algorithm, held by it (``model.gradient_sharing``): the lock-free
    optimizer of supp. §1 over the module the workers train, the tensors the workers share and the count of the
    updates they applied. Saved with the model (its hyperparameters; the counts are not).

    :param optimizer: ``"shared_rmsprop"`` (the paper's default), ``"rmsprop"`` (per-worker statistics) or ``"sgd"``
        (momentum SGD with per-worker momentum)
    :param optimizer_kwargs: for the optimizer (e.g. ``alpha``, ``eps`` of :class:`~sb3_async.common.optimizers.SharedRMSprop`)
    :param max_grad_norm: clip each worker's gradient to this global norm (None: no clipping)
    :param separate_updates: each env of a worker is an actor-learner of its own (see :class:`~sb3_async.A3C`)
    """

    def __init__(
        self,
        optimizer: str = "shared_rmsprop",
        optimizer_kwargs: dict[str, Any] | None = None,
        max_grad_norm: float | None = None,
        separate_updates: bool = False,
    ):
        if not isinstance(separate_updates, (bool, np.bool_)):
            raise TypeError(f"Invalid separate_updates={separate_updates!r}: expected a bool")
        if optimizer not in OPTIMIZER_NAMES:
            raise ValueError(f"Invalid optimizer={optimizer!r}: expected one of {', '.join(OPTIMIZER_NAMES)}")
        if optimizer_kwargs is not None and not isinstance(optimizer_kwargs, dict):
            raise TypeError(f"Invalid optimizer_kwargs={optimizer_kwargs!r}: expected a dict or None")
        self.separate_updates = bool(separate_updates)
        self.optimizer_name = optimizer
        self.optimizer_kwargs = dict(optimizer_kwargs or {})
        self.max_grad_norm = None if max_grad_norm is None else check_float("max_grad_norm", max_grad_norm)
        #: shared updates applied by each worker during ``learn()`` (one slot per worker; None before)
        self.update_counts: torch.Tensor | None = None

    @classmethod
    def from_saved_attributes(cls, attributes: dict[str, Any]) -> GradientSharing:
        """The one of a model saved before the algorithms held one, when these hyperparameters were the model's own
        attributes (taken out of ``attributes``, the model's ``__dict__``)."""
        return cls(
            attributes.pop("optimizer_name", "shared_rmsprop"),
            attributes.pop("optimizer_kwargs", None),
            attributes.pop("max_grad_norm", None),
            attributes.pop("separate_updates", False),
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "update_counts": None}  # shared memory of one learn() call: not saved

    def make_optimizer(self, module: nn.Module, lr: float) -> AsyncOptimizer:
        """The paper's lock-free optimizer over ``module``'s parameters θ (it replaces the policy's own)."""
        return make_optimizer(self.optimizer_name, module.parameters(), lr=lr, **self.optimizer_kwargs)

    def share(self, policy: Any, n_workers: int) -> None:
        """Move the policy, its optimizer's statistics and new update counts to shared memory (before ``learn()``
        starts the workers)."""
        self.update_counts = torch.zeros(n_workers, dtype=torch.int64).share_memory_()  # one slot per worker
        policy.share_memory()
        as_async_optimizer(policy.optimizer).share_memory()

    def counters(self) -> dict[str, float] | None:
        """Updates the workers applied to θ in this ``learn()`` call (see :mod:`sb3_async.common.async_metrics`)."""
        return None if self.update_counts is None else {"updates": int(self.update_counts.sum())}

    def worker_config(self, optimizer: Any) -> dict[str, Any]:
        """The fields :class:`GradientWorkerConfig` adds to the worker's policy configuration."""
        optimizer = as_async_optimizer(optimizer)
        return dict(
            max_grad_norm=self.max_grad_norm,
            optimizer=(type(optimizer), optimizer.hyperparameters()),
            optimizer_shared=optimizer.shared,
            separate_updates=self.separate_updates,
        )

    def shared(self, module: nn.Module, optimizer: Any) -> dict[str, Any]:
        """The shared tensors every gradient-sharing worker needs: θ (``module``'s parameters), the optimizer
        statistics and the update counts."""
        return {
            "params": list(module.parameters()),
            "optimizer_state": as_async_optimizer(optimizer).state_tensors(),
            "updates": self.update_counts,
        }
