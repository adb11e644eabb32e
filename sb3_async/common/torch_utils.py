"""Small helpers for the workers' inner loops, where per-call overhead matters more than arithmetic."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import obs_as_tensor

from sb3_async.validation import check_int

_CPU = torch.device("cpu")


def to_tensor(obs: Any) -> Any:
    """Observation(s) as CPU tensors (dict observations key by key; a tensor as it is)."""
    return obs if isinstance(obs, torch.Tensor) else obs_as_tensor(obs, _CPU)


def has_categorical_head(policy: ActorCriticPolicy) -> bool:
    """Whether ``policy`` samples a ``Discrete`` action from SB3's own categorical head (its logits, unchanged)."""
    return isinstance(policy.action_space, spaces.Discrete) and (
        type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
    )


#: The logit sb3-contrib's ``MaskableCategorical`` gives an illegal action: its probability is exactly 0.
ILLEGAL_LOGIT = -1e8


def categorical_logits(policy: ActorCriticPolicy, features: torch.Tensor, masks: Any = None) -> torch.Tensor:
    """The logits of the categorical head of ``policy`` (:func:`has_categorical_head`) on the actor's ``features``;
    with ``masks`` ``(batch or 1, n_actions)`` (True: legal), the illegal actions' logits are ``MaskableCategorical``'s
    :data:`ILLEGAL_LOGIT`, so that their softmax is the masked distribution's probabilities."""
    logits = policy.action_net(policy.mlp_extractor.forward_actor(features))
    if masks is not None:
        logits = logits.masked_fill(~torch.as_tensor(masks, dtype=torch.bool), ILLEGAL_LOGIT)
    return logits


def sample_categorical(
    policy: ActorCriticPolicy, features: torch.Tensor, masks: Any = None, deterministic: bool = False
) -> np.ndarray:
    """Actions sampled from the categorical head of ``policy`` (:func:`has_categorical_head`) on the actor's
    ``features``, without gradients: the (masked, :func:`categorical_logits`) logits sampled directly, the distribution
    of ``policy.get_distribution(obs).get_actions()``; ``deterministic``: its mode."""
    with torch.no_grad():
        logits = categorical_logits(policy, features, masks)
        if deterministic:
            return logits.argmax(dim=-1).numpy()
        return torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(1).numpy()


def sample_actions(policy: ActorCriticPolicy, obs: Any, masks: Any = None, deterministic: bool = False) -> np.ndarray:
    """Sample actions from ``policy`` for a batch of observations, without gradients.

    For a ``Discrete`` action space with SB3's categorical head the logits are sampled directly
    (:func:`sample_categorical`, legal actions only where ``masks`` are given); every other case goes through the
    policy's distribution, exactly as ``policy.get_distribution(obs).get_actions(deterministic)``.
    """
    with torch.no_grad():
        obs_tensor = to_tensor(obs)
        if has_categorical_head(policy):
            features = policy.extract_features(obs_tensor, policy.pi_features_extractor)  # type: ignore[arg-type]
            if isinstance(features, tuple):  # separate actor/critic extractors
                features = features[0]
            return sample_categorical(policy, features, masks, deterministic)
        if masks is not None:
            raise ValueError(f"sample_actions(masks=...) needs a categorical head, not {type(policy).__name__}'s")
        return policy.get_distribution(obs_tensor).get_actions(deterministic=deterministic).numpy()


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> float:
    """Scale the gradients of ``params`` so that their global L2 norm is at most ``max_norm``; returns the norm.

    The same rule as ``torch.nn.utils.clip_grad_norm_``, in two multi-tensor calls.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))
    if norm > max_norm:
        torch._foreach_mul_(grads, max_norm / (norm + 1e-6))
    return norm


def soft_update(params: Iterable[torch.Tensor], target_params: Iterable[torch.Tensor], tau: float) -> None:
    """Polyak averaging of target networks, ``θ' ← τ θ + (1 - τ) θ'`` (DDPG's eq. 4; SB3's ``polyak_update``), every
    tensor in one multi-tensor call instead of two calls per tensor. ``tau=1`` copies (integer buffers such as a batch
    norm's ``num_batches_tracked`` too).

    :raises ValueError: the two lists differ in length
    """
    sources, targets = list(params), list(target_params)
    if len(sources) != len(targets):
        raise ValueError(f"soft_update of {len(sources)} tensors into {len(targets)} target tensors")
    if not targets:
        return
    with torch.no_grad():
        if tau == 1.0:
            torch._foreach_copy_(targets, sources)
        else:
            torch._foreach_lerp_(targets, sources, tau)


def prefer_fused_adam(policy_kwargs: dict[str, Any]) -> None:
    """Give a policy that keeps SB3's optimizer (Adam) and no ``optimizer_kwargs`` torch's fused Adam: the same update
    rule in one kernel per step, 2-3x faster than torch's default per-tensor loop on CPU (CUDA too). In place."""
    if policy_kwargs.get("optimizer_class", torch.optim.Adam) is torch.optim.Adam:
        policy_kwargs.setdefault("optimizer_kwargs", dict(fused=True))


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def main_process_threads(cpus: int, busy_processes: int, current: int, requested: int | None = None) -> int:
    """Torch intra-op threads for the main process while ``busy_processes`` processes (workers, actors, env processes)
    run beside it on this machine's ``cpus`` CPUs: ``requested`` when the user gave a count; else the CPUs the others
    leave free, at least 1 and never more than the ``current`` count (with no busy process: ``current``).

    Torch starts as many threads as there are cores. Next to busy processes they oversubscribe the CPUs and every
    small op of the learner waits for a preempted thread: Ape-X DQN's learner on CartPole, 2 actors on 2 cores,
    measured 3.7-3.9 ms per batch with 2 threads against 1.8 with 1 (docs/design.md, "Process-model decisions").
    """
    if requested is not None:
        return requested
    if busy_processes <= 0:
        return current
    return min(current, max(1, cpus - busy_processes))


@contextlib.contextmanager
def threads_beside_workers(n_workers: int, requested: int | None = None) -> Iterator[int]:
    """Set this process's torch intra-op threads to :func:`main_process_threads` for ``n_workers`` busy processes on
    this machine while the block runs; restore the previous count after it. Yields the count in force."""
    before = torch.get_num_threads()
    threads = main_process_threads(usable_cpus(), n_workers, before, requested)
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def flushes_denormals() -> bool:
    """Whether this thread's float arithmetic on the CPU flushes denormal (subnormal) results to zero."""
    return bool((torch.tensor(1e-30, dtype=torch.float32) * 1e-10).item() == 0.0)


@contextlib.contextmanager
def flush_denormals() -> Iterator[bool]:
    """Flush denormal floats to zero on the CPU (``torch.set_flush_denormal``) while the block runs; restore the previous
    mode after it. Yields whether the CPU supports it.

    Numbers below 1.2e-38 in magnitude become 0, which no update of ours can tell from them; on x86 arithmetic on
    denormals is up to a hundred times slower, and they appear in training: Adam's and RMSProp's running averages of
    small or vanished gradients decay into them. AE-DDPG's update on Walker2d-v5 took 6.16 ms with them and 4.22 ms
    without (one torch thread, docs/design.md, "Process-model decisions"). The mode is the calling thread's: torch's
    intra-op threads started before the block keep theirs.
    """
    before = flushes_denormals()
    supported = torch.set_flush_denormal(True)
    try:
        yield supported
    finally:
        if supported and not before:
            torch.set_flush_denormal(False)


@contextlib.contextmanager
def learner_cpu_settings(busy_processes: int, requested: int | None = None) -> Iterator[int]:
    """The main process's CPU settings while ``learn()`` runs, for every algorithm: torch threads beside
    ``busy_processes`` (:func:`threads_beside_workers`) and denormals flushed (:func:`flush_denormals`); both restored
    after the block. Yields the thread count in force."""
    with threads_beside_workers(busy_processes, requested) as threads, flush_denormals():
        yield threads


def check_torch_threads(value: Any) -> int | None:
    """``torch_threads`` as given to an algorithm: None (chosen from the free CPUs) or an integer >= 1."""
    return None if value is None else check_int("torch_threads", value)


class _NoOptimizer:
    """Stands in for a policy's own optimizer in workers, which apply updates through ``WorkerOptimizer``."""

    def __init__(self, params: Any, lr: float = 0.0, **kwargs: Any):
        self.param_groups: list[dict[str, Any]] = []


def build_worker_policy(
    policy_class: type,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    lr_schedule: Any,
    policy_kwargs: dict[str, Any],
) -> Any:
    """A private copy θ' of the policy for a worker, on CPU, without building its (unused) torch optimizer."""
    kwargs = {**policy_kwargs, "optimizer_class": _NoOptimizer, "optimizer_kwargs": {}}
    return policy_class(observation_space, action_space, lr_schedule, **kwargs)
