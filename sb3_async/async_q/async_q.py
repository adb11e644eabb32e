"""The asynchronous value-based methods of Mnih et al. 2016: one-step Q-learning, one-step Sarsa, n-step Q-learning.

One machinery, three targets (``sb3_async.common.returns``): every worker runs supp. Algorithm S1 / Algorithm 1 on
the shared runtime. It synchronizes its private Q network θ' with the shared θ, acts ε-greedily on Q(s, ·; θ') for
up to ``n_steps`` steps (t_max = I_AsyncUpdate = 5) or to a terminal state, computes the targets with the *shared*
target network θ⁻ and applies the accumulated gradient of ``Σ (y - Q(s, a; θ'))²`` to θ with shared RMSProp. The worker
whose update makes the global counter T cross a multiple of ``target_update_interval`` copies θ⁻ ← θ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.dqn.policies import DQNPolicy, MultiInputPolicy, QNetwork
from torch.nn import functional as F

from sb3_async.common.async_algorithm import AsyncAlgorithm, forwarded_arguments
from sb3_async.common.exploration import (
    PAPER_FINAL_EPSILON_PROBS,
    PAPER_FINAL_EPSILONS,
    check_epsilons,
    epsilon_greedy,
    linear_epsilon,
    sample_final_epsilons,
)
from sb3_async.common.gradient_sharing import (
    GRADIENT_SHARING_ENTRIES,
    GradientSharing,
    GradientWorker,
    GradientWorkerConfig,
    Segment,
    shared_setting,
    stack_steps,
    tensor_obs,
)
from sb3_async.common.masks import masked_argmax, masked_epsilon_greedy, masked_values
from sb3_async.common.policies import AsyncQCnnPolicy, with_target_synced
from sb3_async.common.returns import nstep_q_targets, one_step_q_targets, sarsa_targets
from sb3_async.common.torch_utils import to_tensor
from sb3_async.games.league import attach_opponents
from sb3_async.runtime import WorkerContext, WorkerSpec
from sb3_async.validation import check_float, check_int

SelfAsyncQ = TypeVar("SelfAsyncQ", bound="AsyncQLearning")

TARGETS = ("one_step_q", "sarsa", "n_step_q")
LOSSES = ("mse", "huber")


@dataclass
class _AsyncQWorkerConfig(GradientWorkerConfig):
    algorithm_class: type[AsyncQLearning]  # whose targets() the worker computes
    target: str
    loss: str
    target_update_interval: int
    exploration_initial_eps: float
    exploration_final_eps: np.ndarray  # one final ε per env of the worker
    exploration_fraction: float


def _q_values(q_net: QNetwork, obs: Any) -> np.ndarray:
    with torch.no_grad():
        return q_net(to_tensor(obs)).numpy()


#: Q(·; θ⁻) of a batch of observations: the target network's values, ``(n_obs, n_actions)``
TargetQ = Callable[[Any], np.ndarray]


def _next_state_q(segment: Segment, target_q: TargetQ) -> np.ndarray:
    """Q(s_{t+1}, ·; θ⁻) of each step of a segment, shape ``(n_steps, n_envs, n_actions)``."""
    next_q = target_q(stack_steps([*segment.obs[1:], segment.next_obs]))
    return next_q.reshape(len(segment), len(segment.rewards[0]), next_q.shape[-1])


def _async_q_worker(ctx: WorkerContext, cfg: _AsyncQWorkerConfig) -> None:
    """A worker of supp. Algorithm S1 (n-step Q) / Algorithm 1 (one-step Q, one-step Sarsa): each segment's targets
    from the algorithm's :meth:`~AsyncQLearning.targets`, its update from :meth:`AsyncQLearning.td_loss`."""
    worker = GradientWorker(ctx, cfg, local_module=lambda policy: policy.q_net, attach_players=attach_opponents)
    q_net: QNetwork = worker.policy.q_net  # θ'
    target_net: QNetwork = worker.policy.q_net_target
    shared_target: list[torch.Tensor] = ctx.shared["target_params"]  # θ⁻, read in place: no copy per segment
    for param, shared in zip(target_net.parameters(), shared_target):
        param.data = shared
    target_net.set_training_mode(False)
    target_updates: torch.Tensor = ctx.shared["target_updates"]  # how many times θ⁻ was refreshed (T // interval)
    n_actions = int(cfg.action_space.n)  # type: ignore[attr-defined]
    rng = np.random.default_rng(ctx.seed)
    sarsa = cfg.target == "sarsa"

    def epsilon() -> np.ndarray:  # one ε per env
        return linear_epsilon(
            ctx.progress_remaining, cfg.exploration_initial_eps, cfg.exploration_final_eps, cfg.exploration_fraction
        )

    def act(obs: Any, envs: np.ndarray | slice = slice(None), masks: np.ndarray | None = None) -> np.ndarray:
        """ε-greedy actions for ``obs``, of the envs ``envs`` (whose ε; default: all); with action masks (``masks``,
        default the envs' current ones), greedy and random actions among the legal ones only."""
        masks = worker.masks if masks is None else masks
        if masks is None:
            return epsilon_greedy(_q_values(q_net, obs).argmax(axis=1), epsilon()[envs], n_actions, rng)
        return masked_epsilon_greedy(masked_argmax(_q_values(q_net, obs), masks), epsilon()[envs], masks, rng)

    # Sarsa needs a' = the action actually taken in s': each step's next action is chosen as soon as s' is seen and
    # taken at the next step (of this segment or the next one).
    next_actions: list[np.ndarray | None] = [None]

    def act_sarsa(obs: Any) -> np.ndarray:
        actions = next_actions[0] if next_actions[0] is not None else act(obs)
        next_actions[0] = None
        return actions

    def terminal_value(obs: Any, envs: np.ndarray) -> np.ndarray:  # bootstrap of a time-limit truncation, from θ⁻
        q_target, masks = _q_values(target_net, obs), worker.terminal_masks  # masks: legal actions in s_terminal
        if sarsa:  # the action the env's ε-greedy policy would take in s_terminal (never taken: the env was reset)
            return q_target[np.arange(len(q_target)), act(obs, envs, masks)]
        return q_target.max(axis=1) if masks is None else masked_values(q_target, masks).max(axis=1)

    while not ctx.should_stop():
        worker.synchronize()  # θ' = θ
        segment = worker.collect(act_sarsa if sarsa else act, terminal_value)
        n = len(segment)
        next_action = None
        if sarsa:  # a' of the segment's last step, taken at the next segment's first step
            next_action = next_actions[0] = act(segment.next_obs)
        targets = cfg.algorithm_class.targets(segment, lambda obs: _q_values(target_net, obs), next_action, cfg.gamma)
        all_actions = torch.as_tensor(stack_steps(segment.actions), dtype=torch.long).reshape(-1, 1)  # time-major
        all_targets = torch.as_tensor(targets.reshape(-1))
        for envs, rows in worker.actor_learners(n):  # the worker's envs together, or each env alone (separate_updates)
            obs = segment.obs if rows is None else segment.select(envs).obs
            actions, y = (all_actions, all_targets) if rows is None else (all_actions[rows], all_targets[rows])
            loss = AsyncQLearning.td_loss(q_net, tensor_obs(obs), actions, y, cfg.loss, len(envs))
            global_steps = worker.apply_gradients(loss, n, n_envs=len(envs))  # asynchronous update of θ using dθ
            refresh = global_steps // cfg.target_update_interval
            if refresh > int(target_updates[0]):  # "if T mod I_target == 0 then θ⁻ ← θ"
                target_updates[0] = refresh
                with torch.no_grad():
                    torch._foreach_copy_(shared_target, worker.shared_params)
            worker.reporter.record_train(loss=loss.item() / n, exploration_rate=float(np.mean(epsilon()[envs])))
        worker.reporter.maybe_flush(worker.obs)
    worker.close()


class AsyncQLearning(AsyncAlgorithm, epsilon_greedy=True):
    """Base class of the asynchronous value-based methods (Mnih et al. 2016, "Asynchronous Methods for Deep
    Reinforcement Learning", https://arxiv.org/abs/1602.01783, §4 and supp. Algorithm S1). Use one of
    :class:`AsyncOneStepQ`, :class:`AsyncSarsa`, :class:`AsyncNStepQ`.

    :param policy: ``"MlpPolicy"``, ``"CnnPolicy"`` (the paper's Atari network, one linear output per action),
        ``"MultiInputPolicy"`` or a ``DQNPolicy`` class
    :param env: env id, factory, ``gym.Env`` or ``VecEnv`` with a ``Discrete`` action space
    :param learning_rate: learning rate or schedule of global progress; 7e-4, inside the paper's LogUniform(1e-4, 1e-2)
        (the paper anneals it to 0: pass a linear schedule, as the zoo configs do; with a constant rate the model
        ``learn()`` returns is a snapshot of a still-oscillating learner, docs/benchmarks.md "final_policy")
    :param n_steps: t_max = I_AsyncUpdate, steps per asynchronous update; 5 from the paper (supp. §2)
    :param gamma: discount factor; 0.99 from the paper (supp. §2)
    :param target_update_interval: global env steps between two refreshes of the shared target network θ⁻;
        10 000, the paper's 40 000 frames at the Atari action repeat of 4 (supp. §2)
    :param exploration_initial_eps: ε at the start; 1 from the paper (supp. §2)
    :param exploration_final_eps: the final ε: a float (every env), or a tuple of values that each env draws from
        with ``exploration_final_eps_probs``; the paper's (0.1, 0.01, 0.5) (supp. §2). The paper draws one ε per
        actor-learner thread, each stepping one env; here each env draws its own (a worker steps several envs), so
        16 envs keep the paper's mix of 16 threads however they are spread over workers (one draw per worker can leave
        no env at ε = 0.5: docs/benchmarks.md "final_policy")
    :param exploration_final_eps_probs: probabilities of ``exploration_final_eps``; the paper's (0.4, 0.3, 0.3)
    :param exploration_fraction: share of training over which ε is annealed; 0.1, the paper's 4 million frames in
        a 10M-step (40M-frame) Atari run; SB3's DQN default too
    :param loss: ``"mse"``, the paper's squared error, or ``"huber"`` (SB3's DQN)
    :param max_grad_norm: clip each worker's gradient to this norm; None (the paper does not clip)
    :param n_workers: actor-learner processes; default the CPU count (the paper: 16 threads)
    :param n_envs_per_worker: envs per worker stepped together (1 in the paper); the loss sums over a segment's steps
        and averages over the envs of an update
    :param separate_updates: each env of a worker is an actor-learner of its own (see :class:`~sb3_async.A3C`)
    :param optimizer: ``"shared_rmsprop"`` (paper default), ``"rmsprop"`` or ``"sgd"`` (supp. §1)
    :param optimizer_kwargs: for the optimizer (``alpha=0.99`` from the paper, ``eps``)
    Other parameters as :class:`~sb3_async.A3C`.
    """

    other_action_spaces = " (for Box actions: A3C, ApeXDPG or AEDDPG)"

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": DQNPolicy,
        "CnnPolicy": AsyncQCnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: DQNPolicy
    gradient_sharing: GradientSharing  # always held (set in __init__)
    optimizer_name = shared_setting("optimizer_name")
    optimizer_kwargs = shared_setting("optimizer_kwargs")
    max_grad_norm = shared_setting("max_grad_norm")
    separate_updates = shared_setting("separate_updates")
    #: Which target the workers compute: one of :data:`TARGETS`.
    target: ClassVar[str]

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: GymEnv | str | Any | None,
        learning_rate: float | Schedule = 7e-4,
        n_steps: int = 5,
        gamma: float = 0.99,
        target_update_interval: int = 10_000,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float | tuple[float, ...] = PAPER_FINAL_EPSILONS,
        exploration_final_eps_probs: tuple[float, ...] | None = PAPER_FINAL_EPSILON_PROBS,
        exploration_fraction: float = 0.1,
        loss: str = "mse",
        max_grad_norm: float | None = None,
        n_workers: int | None = None,
        n_envs_per_worker: int = 1,
        separate_updates: bool = False,
        optimizer: str = "shared_rmsprop",
        optimizer_kwargs: dict[str, Any] | None = None,
        backend: str = "mp",
        start_method: str = "forkserver",
        backend_kwargs: dict[str, Any] | None = None,
        pause_for_eval: bool = True,
        torch_threads: int | None = None,
        step_timeout: float | None = 60.0,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        _init_setup_model: bool = True,
    ):
        self.n_steps = check_int("n_steps", n_steps)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self.target_update_interval = check_int("target_update_interval", target_update_interval)
        self.exploration_initial_eps = check_float("exploration_initial_eps", exploration_initial_eps, 0.0, 1.0)
        self.exploration_fraction = check_float("exploration_fraction", exploration_fraction, 0.0, 1.0)
        if isinstance(exploration_final_eps, (int, float)) and not isinstance(exploration_final_eps, bool):
            exploration_final_eps, exploration_final_eps_probs = (float(exploration_final_eps),), (1.0,)
        elif not isinstance(exploration_final_eps, (tuple, list)):
            raise TypeError(f"Invalid exploration_final_eps={exploration_final_eps!r}: expected a float or a tuple of floats")
        self.exploration_final_eps, self.exploration_final_eps_probs = check_epsilons(
            exploration_final_eps, exploration_final_eps_probs
        )
        if loss not in LOSSES:
            raise ValueError(f"Invalid loss={loss!r}: expected one of {', '.join(LOSSES)}")
        self.loss = loss
        self.worker_final_eps: np.ndarray | None = None
        #: the lock-free optimizer and what the workers share
        self.gradient_sharing = GradientSharing(optimizer, optimizer_kwargs, max_grad_norm, separate_updates)
        super().__init__(
            **forwarded_arguments(locals(), AsyncAlgorithm.__init__, device="cpu", supported_action_spaces=(spaces.Discrete,))
        )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        self.policy = with_target_synced(self._make_policy(DQNPolicy).to(torch.device("cpu")))
        self._create_aliases()
        # the paper's lock-free optimizer over θ replaces the policy's own (its statistics are saved with the model)
        self.policy.optimizer = self.gradient_sharing.make_optimizer(self.policy.q_net, self.lr_schedule(1.0))

    def _create_aliases(self) -> None:
        # The names DQN users know: the online network θ and the target network θ⁻.
        self.q_net = self.policy.q_net
        self.q_net_target = self.policy.q_net_target

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "q_net", "q_net_target"]

    def save_replay_buffer(self, path: Any) -> None:
        raise TypeError(
            f"{type(self).__name__} has no replay buffer: the paper's asynchronous methods learn online from parallel "
            "workers instead of replaying experience (Mnih et al. 2016, §4)."
        )

    def load_replay_buffer(self, path: Any, truncate_last_traj: bool = True) -> None:
        self.save_replay_buffer(path)

    @property
    def exploration_rate(self) -> float:
        """The current ε of ``predict(deterministic=False)``, as SB3's DQN: annealed from the initial ε on global
        progress towards the most probable final ε (0.1 with the paper's distribution)."""
        final = self.exploration_final_eps[int(np.argmax(self.exploration_final_eps_probs))]
        return linear_epsilon(self._current_progress_remaining, self.exploration_initial_eps, final, self.exploration_fraction)

    def _final_epsilons(self) -> np.ndarray:
        """The final ε of each env, shape ``(n_workers, n_envs_per_worker)``: drawn once per model (saved with it) and
        redrawn if the layout changes."""
        shape = (self.n_workers, self.n_envs_per_worker)
        if self.worker_final_eps is None or np.shape(self.worker_final_eps) != shape:
            rng = np.random.default_rng(self.seed)
            draws = sample_final_epsilons(
                self.n_workers * self.n_envs_per_worker, self.exploration_final_eps, self.exploration_final_eps_probs, rng
            )
            self.worker_final_eps = draws.reshape(shape)
            if self.verbose >= 1:
                print(f"{type(self).__name__}: final ε of each worker's envs: {self.worker_final_eps.tolist()}")
        return self.worker_final_eps

    @staticmethod
    def targets(segment: Segment, target_q: TargetQ, next_action: np.ndarray | None, gamma: float) -> np.ndarray:
        """The targets y of a segment's steps, shape ``(n_steps, n_envs)``; each subclass computes its own.

        :param segment: the steps, from :meth:`~sb3_async.common.gradient_sharing.GradientWorker.collect`
        :param target_q: Q(s, ·; θ⁻) of a batch of observations
        :param next_action: Sarsa's a' in the state after the segment (None for the other targets)
        :param gamma: the discount factor
        """
        raise NotImplementedError(f"{AsyncQLearning.__name__} has no target: use AsyncOneStepQ, AsyncSarsa or AsyncNStepQ")

    @staticmethod
    def td_loss(
        q_net: QNetwork, obs: Any, actions: torch.Tensor, targets: torch.Tensor, loss: str, n_envs: int
    ) -> torch.Tensor:
        """dθ accumulated over a segment: Σ_t ∂(y_t - Q(s_t, a_t; θ'))² / ∂θ' (``loss="huber"``: SB3's DQN loss), the
        mean over the ``n_envs`` envs it learns from.

        :param q_net: θ'
        :param obs: the segment's observations, time-major
        :param actions: the actions taken, shape ``(n_steps * n_envs, 1)``
        :param targets: y of each step, from :meth:`targets`
        """
        q_taken = q_net(obs).gather(1, actions).flatten()
        if loss == "mse":
            return F.mse_loss(q_taken, targets, reduction="sum") / n_envs
        return F.smooth_l1_loss(q_taken, targets, reduction="sum") / n_envs

    def _worker_specs(self) -> list[WorkerSpec]:
        base = {
            **self._worker_policy_config(self.n_steps, self.gamma),
            **self.gradient_sharing.worker_config(self.policy.optimizer),
        }
        target_updates = torch.full((1,), self.num_timesteps // self.target_update_interval, dtype=torch.int64)
        shared = {
            **self.gradient_sharing.shared(self.policy.q_net, self.policy.optimizer),
            "target_params": list(self.policy.q_net_target.parameters()),
            "target_updates": target_updates.share_memory_(),
        }
        specs = []
        for rank, final_eps in enumerate(self._final_epsilons()):
            cfg = _AsyncQWorkerConfig(
                **base,
                algorithm_class=type(self),
                target=self.target,
                loss=self.loss,
                target_update_interval=self.target_update_interval,
                exploration_initial_eps=self.exploration_initial_eps,
                exploration_final_eps=np.asarray(final_eps, dtype=np.float64),
                exploration_fraction=self.exploration_fraction,
            )
            specs.append(
                WorkerSpec(
                    _async_q_worker,
                    cfg,
                    dict(shared),
                    name=f"{self.target}-{rank}",
                    synced=GRADIENT_SHARING_ENTRIES["synced"],
                    averaged=(*GRADIENT_SHARING_ENTRIES["averaged"], "target_params"),  # θ⁻: each machine refreshes its own
                )
            )
        return specs


class AsyncOneStepQ(AsyncQLearning):
    """Asynchronous one-step Q-learning (Mnih et al. 2016, Algorithm 1): target ``r + γ max_a' Q(s', a'; θ⁻)``.

    Parameters: :class:`AsyncQLearning`.
    """

    target = "one_step_q"

    @staticmethod
    def targets(segment: Segment, target_q: TargetQ, next_action: np.ndarray | None, gamma: float) -> np.ndarray:
        """``y = r + γ max_a' Q(s', a'; θ⁻)``, ``r`` at a terminal state (with action masks: the max over the legal
        actions of s')."""
        next_q = _next_state_q(segment, target_q)
        n_steps, n_envs, n_actions = next_q.shape
        rewards, dones = np.stack(segment.rewards).reshape(-1), np.stack(segment.dones).reshape(-1)
        next_masks = None  # with action masks: the legal actions of each next state
        if segment.next_masks is not None:
            next_masks = np.stack([*segment.masks[1:], segment.next_masks]).reshape(-1, n_actions)
        targets = one_step_q_targets(rewards, dones, next_q.reshape(-1, n_actions), gamma, next_masks)
        return targets.reshape(n_steps, n_envs)


class AsyncSarsa(AsyncQLearning):
    """Asynchronous one-step Sarsa (Mnih et al. 2016, §4): target ``r + γ Q(s', a'; θ⁻)`` with ``a'`` the action the
    worker takes in ``s'``.

    Parameters: :class:`AsyncQLearning`.
    """

    target = "sarsa"

    @staticmethod
    def targets(segment: Segment, target_q: TargetQ, next_action: np.ndarray | None, gamma: float) -> np.ndarray:
        """``y = r + γ Q(s', a'; θ⁻)`` with ``a'`` the action taken in ``s'`` (``next_action`` after the segment's
        last step), ``r`` at a terminal state."""
        assert next_action is not None
        next_q = _next_state_q(segment, target_q)
        taken_next = np.stack([*segment.actions[1:], next_action])
        next_q_taken = np.take_along_axis(next_q, taken_next[..., None], axis=2)[..., 0]
        return sarsa_targets(np.stack(segment.rewards), np.stack(segment.dones), next_q_taken, gamma)


class AsyncNStepQ(AsyncQLearning):
    """Asynchronous n-step Q-learning (Mnih et al. 2016, supp. Algorithm S1): for each state of a segment, the longest
    available return ``Σ γ^k r_{t+k} + γ^n max_a Q(s_{t+n}, a; θ⁻)``.

    Parameters: :class:`AsyncQLearning`.
    """

    target = "n_step_q"

    @staticmethod
    def targets(segment: Segment, target_q: TargetQ, next_action: np.ndarray | None, gamma: float) -> np.ndarray:
        """``y_t = Σ_k γ^k r_{t+k} + γ^(n-t) max_a Q(s_n, a; θ⁻)``, from the state after the segment (s_n; its legal
        actions with action masks), cut at terminal states."""
        rewards, dones = np.stack(segment.rewards), np.stack(segment.dones)
        return nstep_q_targets(rewards, dones, target_q(segment.next_obs), gamma, segment.next_masks)
