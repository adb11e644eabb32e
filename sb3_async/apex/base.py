"""What Ape-X DQN and Ape-X DPG share (Horgan et al. 2018, Algorithms 1 and 2): actors on the runtime, one learner in
the main process, one prioritized replay.

* Actors (:func:`~sb3_async.apex.actor.apex_actor`, runtime workers): each steps its env copies with a local copy of
  the networks, builds n-step transitions (:class:`~sb3_async.apex.transitions.NStepBuilder`), computes their initial
  priorities ``|δ|`` with its own copy in batch when it flushes its local buffer of ``block_size`` transitions, sends
  the block with ``ctx.send`` and refreshes its parameters from the learner's published copy every
  ``actor_update_interval`` env steps.
* Learner (:meth:`ApeXAlgorithm._train_between_polls`, called by the supervision loop of ``learn()`` between two
  polls): inserts the received blocks, runs :meth:`ApeXAlgorithm.learner_step` (a prioritized batch, the IS-weighted
  update, the new priorities written back, the target network refreshed) for ~20 ms and publishes the parameters to
  shared memory.
* Blocks in flight are bounded: an actor that has ``max_blocks_in_flight`` blocks not yet inserted waits (it keeps
  answering stop/pause). The wait is counted and logged as ``async/actor_wait_share``; nothing is dropped.
* The replay is a ring (``buffer_size``): the oldest transitions are overwritten first, the paper's FIFO trimming
  done on every insert instead of every 100 learner steps, so the cap holds exactly.
"""

from __future__ import annotations

import io
import math
import time
import warnings
from abc import abstractmethod
from collections import deque
from typing import Any, ClassVar

import numpy as np
import torch
from stable_baselines3.common.type_aliases import Schedule

from sb3_async.apex.actor import ApeXActing, ApeXActorConfig, apex_actor, published_parameters
from sb3_async.apex.transitions import NStepTransitions
from sb3_async.common.async_algorithm import AsyncAlgorithm
from sb3_async.common.buffers.ages import sample_ages_of
from sb3_async.common.buffers.masked import MaskedPrioritizedReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedArrays, PrioritizedReplayBuffer, check_replay_memory
from sb3_async.common.divergence import DivergenceGuard
from sb3_async.common.masks import masking_supported
from sb3_async.common.save_util import PathLike, load_replay, save_replay_atomically
from sb3_async.runtime import Runtime, WorkerSpec
from sb3_async.runtime.processes import EXIT_UNGUARDED_MAIN, WorkerError
from sb3_async.validation import check_float, check_int, check_replay_sizes


class ApeXAlgorithm(AsyncAlgorithm):
    """Base class of :class:`~sb3_async.ApeXDQN` and :class:`~sb3_async.ApeXDPG`.

    :param buffer_size: replay capacity (transitions); oldest overwritten first (the paper's FIFO soft cap)
    :param learning_starts: transitions in the replay before the learner starts (it waits without spinning)
    :param batch_size: transitions per learner batch
    :param gamma: discount factor
    :param n_steps: n of the n-step transitions
    :param target_update_interval: learner batches between two hard copies of the target network
    :param alpha: priority exponent (0.6, Ape-X appendix)
    :param beta: importance-sampling exponent (0.4, Ape-X appendix)
    :param block_size: transitions an actor buffers before computing their priorities and sending them (50, paper)
    :param actor_update_interval: env steps of an actor between two parameter refreshes (400, paper §4.1)
    :param max_blocks_in_flight: blocks an actor may have sent and not yet inserted before it waits
    :param max_actor_restarts: how many times one actor whose process was lost (a signal, a crash, a lost Ray actor or
        node) is restarted within a ``learn()`` call (a warning each time, counted in ``rollout/actor_restarts``);
        once more and ``learn()`` raises :class:`~sb3_async.runtime.processes.WorkerError`. An actor that raises an
        exception (its env's error, a NaN observation) is not restarted: ``learn()`` raises its traceback at once
    :param replay_ratio: None (the paper: actors and learner each as fast as they can), or transitions the learner
        replays per transition inserted once learning started; the learner then holds blocks back when it is behind
        (its actors wait) and waits for data when it is ahead: SB3's fixed ``train_freq``/``gradient_steps`` ratio,
        independent of how fast each side runs on a shared machine; the blocks still held back when ``learn()`` ends
        (however it ends) are inserted then, so the replay keeps every transition received
    :param n_actors: actor processes
    :param n_envs_per_actor: envs stepped by each actor
    Other arguments: :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm`.
    """

    replay_buffer: PrioritizedReplayBuffer | None
    workers_argument: ClassVar[str] = "n_actors"
    envs_argument: ClassVar[str] = "n_envs_per_actor"
    #: Modules of the policy the learner publishes to the actors.
    published_modules: ClassVar[tuple[str, ...]]
    acting_class: ClassVar[type[ApeXActing]]

    def __init__(
        self,
        policy: Any,
        env: Any,
        learning_rate: float | Schedule,
        buffer_size: int,
        learning_starts: int,
        batch_size: int,
        gamma: float,
        n_steps: int,
        target_update_interval: int,
        alpha: float,
        beta: float,
        block_size: int,
        actor_update_interval: int,
        max_blocks_in_flight: int,
        max_actor_restarts: int,
        replay_ratio: float | None,
        n_actors: int,
        n_envs_per_actor: int,
        **kwargs: Any,
    ):
        self.buffer_size, self.batch_size = check_replay_sizes(buffer_size, batch_size)
        self.learning_starts = check_int("learning_starts", learning_starts, minimum=0)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self.n_steps = check_int("n_steps", n_steps)
        self.target_update_interval = check_int("target_update_interval", target_update_interval)
        self.alpha = check_float("alpha", alpha)
        self.beta = check_float("beta", beta)
        self.block_size = check_int("block_size", block_size)
        self.actor_update_interval = check_int("actor_update_interval", actor_update_interval)
        self.max_blocks_in_flight = check_int("max_blocks_in_flight", max_blocks_in_flight)
        self.max_actor_restarts = check_int("max_actor_restarts", max_actor_restarts, minimum=0)
        self.replay_ratio = None if replay_ratio is None else check_float("replay_ratio", replay_ratio)
        if self.replay_ratio == 0:
            raise ValueError("Invalid replay_ratio=0: expected a positive number or None")
        self.replay_buffer = None
        self._published: list[torch.Tensor] = []
        self._inserted = torch.zeros(0, dtype=torch.int64)
        self._reset_flow()
        super().__init__(policy, env, learning_rate, n_workers=n_actors, n_envs_per_worker=n_envs_per_actor, **kwargs)
        if env is not None:  # the replay is built in learn(): refuse one that cannot fit now
            check_replay_memory(self.buffer_size, self.observation_space, self.action_space)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        for theirs, ours in (("n_workers", "n_actors"), ("n_envs_per_worker", "n_envs_per_actor")):
            if theirs in kwargs:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {theirs!r}: Ape-X calls it {ours!r}")
        return super().__new__(cls)

    @property
    def n_actors(self) -> int:
        """Actor processes (the constructor's ``n_actors``)."""
        return self.n_workers

    @property
    def n_envs_per_actor(self) -> int:
        """Envs each actor steps, as given to the constructor (with a multi-agent env: env copies, not agents)."""
        agents = self._env_recipe.agents_per_env if self._env_recipe is not None else 1
        return self.n_envs_per_worker // agents

    def _setup_learn(self, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        total, callback = super()._setup_learn(total_timesteps, *args, **kwargs)
        stored = self.replay_buffer.size() if self.replay_buffer is not None else 0
        steps = total - self.num_timesteps
        if stored + steps < self.learning_starts:
            warnings.warn(
                f"{type(self).__name__}.learn() ends after {steps} env steps, before the replay holds "
                f"learning_starts={self.learning_starts} transitions ({stored} now): the learner will take no gradient "
                "step. Train longer, or lower learning_starts.",
                UserWarning,
                stacklevel=3,
            )
        return total, callback

    def _reset_flow(self) -> None:
        self._flow = dict(received=0, inserted=0, inserted_learning=0, replayed=0, batches=0)
        self._held: deque[tuple[int, NStepTransitions, np.ndarray]] = deque()
        self._busy = 0.0
        self._flow_start = time.monotonic()
        self._last_metrics: dict[str, float] = {}
        self._restarts: dict[int, int] = {}

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "_published",
            "_inserted",
            "_flow",
            "_busy",
            "_flow_start",
            "_last_metrics",
            "_held",
            "_restarts",
            "_divergence",
        ]

    def _setup_replay(self) -> None:
        if self.replay_buffer is None:  # with action masks, one that keeps each transition's next-state mask too
            masked = masking_supported(self.env)
            self.replay_buffer = (MaskedPrioritizedReplayBuffer if masked else PrioritizedReplayBuffer)(
                self.buffer_size,
                self.observation_space,
                self.action_space,
                device=self.device,
                n_envs=1,
                handle_timeout_termination=False,  # actors bootstrap time-limit truncations themselves
                alpha=self.alpha,
                beta=self.beta,
            )
        elif masking_supported(self.env) != isinstance(self.replay_buffer, MaskedPrioritizedReplayBuffer):
            has = "has" if masking_supported(self.env) else "has no"
            raise ValueError(
                f"Invalid env: it {has} action_masks() (action masks), and the loaded replay buffer was filled "
                f"{'without' if has == 'has' else 'with'} them: give the env it was filled with, or start a new replay"
            )

    def _setup_model(self) -> None:
        super()._setup_model()
        self.replay_buffer = None
        self._reset_flow()

    def save_replay_buffer(self, path: PathLike | io.BufferedIOBase) -> None:
        """Save the replay buffer as a pickle file (SB3's ``save_replay_buffer``); a path is replaced only once the
        new file is complete.

        :param path: the file (``.pkl`` added when the name has no suffix), or an open binary file
        """
        save_replay_atomically(self, path)

    def load_replay_buffer(self, path: Any, truncate_last_traj: bool = True) -> None:
        """Load a replay buffer (transitions and priorities) saved by :meth:`save_replay_buffer`. The file is a pickle,
        read without calling anything but what a replay buffer is made of (:func:`~sb3_async.common.save_util.load_replay`):
        a file that names anything else is refused with a ``ValueError`` before it runs.

        :param path: the pickle file
        :param truncate_last_traj: unused (SB3's argument for ``HerReplayBuffer``; the zoo passes it)
        """
        self.replay_buffer = load_replay(path, PrioritizedReplayBuffer, self.verbose)

    # --- actors ----------------------------------------------------------------------------------------------------

    def _actor_exploration(self, rank: int) -> float | np.ndarray:
        """The exploration parameter of actor ``rank`` (σ for DPG), or one per env of the actor (ε_i for DQN)."""
        raise NotImplementedError

    def _share_state(self) -> None:
        self._setup_replay()
        self._published = [param.detach().to("cpu", copy=True).share_memory_() for param in self._learner_parameters()]
        self._published.append(torch.tensor([self._n_updates], dtype=torch.int64).share_memory_())  # their version
        self._inserted = torch.zeros(self.n_actors, dtype=torch.int64).share_memory_()

    def _learner_parameters(self) -> list[torch.Tensor]:
        return published_parameters(self.policy, self.published_modules)

    def _publish(self) -> None:
        with torch.no_grad():
            if self.device.type == "cpu":
                torch._foreach_copy_(self._published[:-1], self._learner_parameters())
            else:  # learner on an accelerator: copy to the actors' CPU tensors one by one
                for published, param in zip(self._published, self._learner_parameters()):
                    published.copy_(param)
            self._published[-1][0] = self._n_updates
        self._published_changed("params")

    def _published_changed(self, name: str) -> None:
        """Tell the runtime (if workers run) that the ``published`` entry ``name`` changed."""
        if self._runtime is not None:
            self._runtime.publish(name)

    def _worker_specs(self) -> list[WorkerSpec]:
        specs = []
        for rank in range(self.n_actors):
            cfg = ApeXActorConfig(
                **self._worker_policy_config(self.n_steps, self.gamma),
                block_size=self.block_size,
                actor_update_interval=self.actor_update_interval,
                max_blocks_in_flight=self.max_blocks_in_flight,
                published=self.published_modules,
                acting_class=self.acting_class,
                exploration=self._actor_exploration(rank),
            )
            shared = {"params": self._published, "inserted": self._inserted}
            specs.append(WorkerSpec(apex_actor, cfg, shared, name=f"apex-actor-{rank}", published=("params", "inserted")))
        self._reset_flow()
        return specs

    def _on_worker_error(self, runtime: Runtime, error: WorkerError) -> None:
        """An actor's process was lost (killed, crashed, a lost Ray actor or node): restart it (Horgan et al.: actors
        may fail without stopping learning), up to ``max_actor_restarts`` times per actor and ``learn()`` call. An
        actor that raised (its env's code or ours: a NaN observation, an env failing at the same step) fails
        ``learn()`` at once with its traceback, since a restart would fail alike."""
        count = self._restarts.get(error.rank, 0)
        if not error.lost or count >= self.max_actor_restarts or error.exitcode == EXIT_UNGUARDED_MAIN:
            raise error
        self._restarts[error.rank] = count + 1
        how = error.worker_traceback.strip().splitlines()[-1] if error.worker_traceback else f"exit code {error.exitcode}"
        message = (
            f"Ape-X actor {error.rank} ({error.name}) died ({how}); restarting it ({count + 1}/{self.max_actor_restarts})"
        )
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        runtime.restart(error.rank)

    # --- learner ---------------------------------------------------------------------------------------------------

    def _on_message(self, rank: int, kind: str, data: Any) -> None:
        if kind != "transitions":
            super()._on_message(rank, kind, data)
            return
        block, priorities, acted_with = data
        self._flow["received"] += len(block.returns)
        if self._async_metrics is not None:
            self._async_metrics.add_param_age(self._n_updates - acted_with)
        self._held.append((rank, block, priorities))
        self._insert_ready()

    def _learning(self) -> bool:
        buffer = self.replay_buffer
        return buffer is not None and buffer.size() > 0 and buffer.size() >= self.learning_starts

    def _ratio_reached(self) -> bool:
        """Whether the learner has replayed ``replay_ratio`` transitions per transition inserted since it started."""
        return self.replay_ratio is None or self._flow["replayed"] >= self.replay_ratio * self._flow["inserted_learning"]

    def _insert_ready(self, everything: bool = False) -> None:
        """Insert the received blocks, or with ``replay_ratio`` only as many as keep the ratio (the others wait, and
        their actors with them once they have ``max_blocks_in_flight`` blocks waiting); ``everything``: all of them."""
        assert self.replay_buffer is not None
        while self._held and (everything or not self._learning() or self._ratio_reached()):
            rank, block, priorities = self._held.popleft()
            n = len(block.returns)
            learning = self._learning()
            for start in range(0, n, self.buffer_size):  # a block larger than the replay keeps its newest part
                part = slice(start, start + self.buffer_size)
                self.replay_buffer.extend(
                    block.obs[part, None],
                    block.next_obs[part, None],
                    block.actions[part, None],
                    block.returns[part, None],
                    block.dones[part, None],
                    None,
                    priorities=priorities[part, None],
                    **({} if block.next_masks is None else {"next_masks": block.next_masks[part, None]}),
                )
            self._flow["inserted"] += n
            if learning:
                self._flow["inserted_learning"] += n
            self._inserted[rank] += 1
            self._published_changed("inserted")

    def _supervise(self, *args: Any, **kwargs: Any) -> None:
        try:
            super()._supervise(*args, **kwargs)
        finally:
            # However learn() ends (its budget, a callback, Ctrl-C, an error), the blocks replay_ratio held back go
            # into the replay: the ratio paces the learner, it does not discard experience, and a replay saved after
            # learn() holds every transition received.
            if self.replay_buffer is not None:
                self._insert_ready(everything=True)

    @abstractmethod
    def _train_batch(self, batch: PrioritizedArrays) -> tuple[float, np.ndarray]:
        """One gradient step on a prioritized batch; returns the loss and the batch's new ``|δ|``."""

    @abstractmethod
    def _update_target(self) -> None:
        """Copy the online networks into the target networks."""

    def _train_between_polls(self) -> float:
        """Learner iterations for ~20 ms (the main process also polls actors and runs callbacks between two calls).

        Returns how long the next poll may wait: 0 while learning, 20 ms while the replay is below
        ``learning_starts`` (the learner then waits for data without spinning a core).
        """
        buffer = self.replay_buffer
        if buffer is None or not self._learning():
            return 0.02
        start = time.monotonic()
        # Turn-based workers (backend="serial") wait while the learner learns: up to the replay ratio, not the clock
        turn_based = self.replay_ratio is not None and self._runtime is not None and self._runtime.turn_based
        budget = math.inf if turn_based else 0.02
        self.policy.set_training_mode(True)
        while time.monotonic() - start < budget:
            self._insert_ready()
            if self.replay_ratio is not None and self._ratio_reached():
                break  # ahead of the actors: wait for data (the next poll blocks, no spinning)
            self.learner_step()
        self.policy.set_training_mode(False)
        self._publish()
        busy = time.monotonic() - start
        self._busy += busy
        return 0.0 if busy >= 0.02 else 0.02

    def learner_step(self) -> None:
        """One learner iteration (Ape-X, Algorithm 2): sample a prioritized batch from the replay, one gradient step on
        its importance-weighted loss (:meth:`_train_batch`: the DQN or DPG loss), write the batch's new priorities
        ``|δ|`` back, and refresh the target network every ``target_update_interval`` batches. ``learn()`` runs it
        between two polls of the actors once the replay holds ``learning_starts`` transitions."""
        assert self.replay_buffer is not None
        batch = self.replay_buffer.sample_arrays(self.batch_size)
        loss, td_abs = self._train_batch(batch)
        self._check_divergence(loss=loss)
        self.replay_buffer.update_priorities(batch.indices, td_abs)
        self._n_updates += 1
        self._divergence_guard().after_update(self._n_updates, self.num_timesteps, self._learning_rate_now())
        self._flow["batches"] += 1
        self._flow["replayed"] += self.batch_size
        self._last_metrics = dict(loss=loss, td_error_abs_mean=float(np.mean(td_abs)))
        if self._n_updates % self.target_update_interval == 0:
            self._update_target()

    _divergence: DivergenceGuard | None = None

    def _divergence_guard(self) -> DivergenceGuard:
        """The learner's divergence checks (:mod:`~sb3_async.common.divergence`), over the policy's parameters."""
        if self._divergence is None:
            self._divergence = DivergenceGuard(type(self).__name__, list(self.policy.parameters()))
        return self._divergence

    def _learning_rate_now(self) -> float:
        return float(self.lr_schedule(self._current_progress_remaining))

    def _check_divergence(self, **computed: float) -> None:
        """Fail with :class:`~sb3_async.common.divergence.DivergenceError` if a number the learner's next update
        computed (a loss, a gradient norm) is not finite."""
        self._divergence_guard().check_values(self._n_updates + 1, self.num_timesteps, self._learning_rate_now(), **computed)

    def _async_counters(self) -> dict[str, float]:
        return {"updates": self._n_updates, "replayed": self._flow["replayed"], "learner_busy": self._busy}

    def _sample_ages(self) -> tuple[float, int] | None:
        return None if self.replay_buffer is None else sample_ages_of(self.replay_buffer).take()

    def _log_extra(self) -> None:
        super()._log_extra()
        elapsed = max(time.monotonic() - self._flow_start, 1e-9)
        for key, value in self._last_metrics.items():
            self.logger.record(f"train/{key}", value)
        self.logger.record("train/n_updates", self._n_updates)
        self.logger.record("rollout/replay_size", self.replay_buffer.size() if self.replay_buffer is not None else 0)
        self.logger.record("rollout/transitions_received_per_s", self._flow["received"] / elapsed)
        self.logger.record("rollout/transitions_inserted_per_s", self._flow["inserted"] / elapsed)
        self.logger.record("rollout/actor_restarts", sum(self._restarts.values()))
