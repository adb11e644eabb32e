"""Action masks, sb3-contrib's convention (``MaskablePPO``), for every discrete algorithm: written once here.

An env supports masks when it has a method ``action_masks()`` (sb3-contrib's ``ActionMasker`` wrapper provides one)
returning a bool array of shape ``(n_actions,)``: True for a legal action. On a ``VecEnv``, ``env_method("action_masks")``
gives one per env (sb3-contrib's ``get_action_masks`` and ``is_masking_supported``, used as they are).

* Workers read the masks of their envs after every step (:class:`MaskReader`; the mask of an episode's last
  observation, before the env is reset, is kept in its info as ``"terminal_action_mask"``: ``WorkerVecEnv``) and never
  choose an illegal action: ε-greedy draws its random action among the legal ones and its greedy action is the argmax
  over them (:func:`masked_argmax`, :func:`masked_epsilon_greedy`); A3C samples from the masked categorical
  (:class:`StepMaskedCategorical`, over sb3-contrib's ``MaskableCategorical``: illegal logits set to -1e8).
* Targets take their max over the next state's legal actions (:func:`masked_values`, used by the Q targets of
  :mod:`sb3_async.common.returns` and Ape-X's double-Q value).
* Nothing here runs for an env without ``action_masks()``: unmasked runs compute exactly what they did before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategorical
from sb3_contrib.common.maskable.utils import EXPECTED_METHOD_NAME, is_masking_supported
from stable_baselines3.common.distributions import CategoricalDistribution

#: The env method that gives the masks (sb3-contrib's name).
MASK_METHOD = EXPECTED_METHOD_NAME
#: Where ``WorkerVecEnv`` keeps the mask of an episode's last observation (the env is reset after it).
TERMINAL_MASK_KEY = "terminal_action_mask"

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


def masking_supported(env: Any) -> bool:
    """Whether ``env`` (a ``gym.Env`` or a ``VecEnv``) has ``action_masks()`` (sb3-contrib's ``is_masking_supported``)."""
    return env is not None and bool(is_masking_supported(env))


def check_masked_action_space(algorithm: str, env: Any, action_space: spaces.Space) -> bool:
    """Whether ``env`` gives action masks; a ``ValueError`` naming ``env`` if it does and the actions are not
    ``Discrete`` (masks mean one flag per action of a ``Discrete`` space, as with sb3-contrib's ``MaskablePPO``)."""
    if not masking_supported(env):
        return False
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(
            f"Invalid env: it has {MASK_METHOD}() (action masks), and {algorithm} supports action masks only for a "
            f"Discrete action space, got {action_space}. Remove the ActionMasker wrapper (or the method), or use a "
            "Discrete action space."
        )
    return True


def check_action_masks(masks: Any, n_actions: int, where: Callable[[int], str]) -> np.ndarray:
    """``masks`` as a bool array ``(k, n_actions)``: one mask ``(n_actions,)`` or ``k`` of them ``(k, n_actions)``.

    :param where: names row ``i`` in the errors (an env and its step, a row of ``predict()``'s ``action_masks``)
    :raises ValueError: a wrong shape, values other than True/False (0/1), or a row with no legal action
    """
    array = np.asarray(masks)
    if array.dtype != bool:
        if array.dtype.kind not in "iuf" or not np.isin(array, (0, 1)).all():
            raise ValueError(
                f"Invalid action mask for {where(0)}: expected bools (or 0/1) of shape ({n_actions},), got "
                f"dtype {array.dtype} {array.tolist() if array.size <= 16 else ''}".rstrip()
            )
        array = array.astype(bool)
    if array.ndim not in (1, 2) or array.shape[-1] != n_actions:
        raise ValueError(
            f"Invalid action mask for {where(0)}: expected shape ({n_actions},) (one flag per action) or "
            f"(n_envs, {n_actions}), got shape {array.shape}"
        )
    array = array.reshape(-1, n_actions)
    empty = np.flatnonzero(~array.any(axis=1))
    if empty.size:
        raise ValueError(f"Invalid action mask for {where(int(empty[0]))}: no legal action (every flag is False)")
    return array


class MaskReader:
    """The masks of a worker's envs, read after every step (``env_method("action_masks")``) and checked.

    :param env: the worker's ``VecEnv``
    :param n_actions: actions of the ``Discrete`` space
    :param env_offset: global index of the worker's first env (named in the errors)
    """

    def __init__(self, env: Any, n_actions: int, env_offset: int):
        self.env, self.n_actions, self.env_offset = env, n_actions, env_offset
        #: env steps of the worker so far (named in the errors)
        self.step = 0
        keep = getattr(env.unwrapped, "keep_terminal_masks", None)
        if keep is not None:
            keep()

    def _checked(self, masks: list[Any], envs: Any) -> np.ndarray:
        """``masks`` of the worker's envs ``envs`` checked one by one, each error naming its env and the step."""
        return np.stack([check_action_masks(mask, self.n_actions, self._namer(int(env)))[0] for mask, env in zip(masks, envs)])

    def _namer(self, env: int) -> Callable[[int], str]:
        return lambda _: f"env {self.env_offset + env} at step {self.step} of its worker"

    def read(self) -> np.ndarray:
        """``(n_envs, n_actions)`` masks of the envs' current observations."""
        masks = self.env.env_method(MASK_METHOD)
        return self._checked(masks, range(len(masks)))

    def after_step(self) -> np.ndarray:
        """Count a step, then :meth:`read`."""
        self.step += 1
        return self.read()

    def terminal(self, infos: list[dict[str, Any]], envs: np.ndarray) -> np.ndarray:
        """``(len(envs), n_actions)`` masks of the last observations of the episodes that ended in ``envs`` (all legal
        where the env does not keep them)."""
        every = np.ones(self.n_actions, dtype=bool)
        return self._checked([infos[i].get(TERMINAL_MASK_KEY, every) for i in envs], envs)


def mask_reader(env: Any, action_space: spaces.Space, env_offset: int) -> MaskReader | None:
    """A :class:`MaskReader` for a worker's envs if they give masks, else None (then nothing is read)."""
    if not masking_supported(env):
        return None
    return MaskReader(env, int(action_space.n), env_offset)  # type: ignore[attr-defined]


def masked_values(values: ArrayOrTensor, masks: ArrayOrTensor | np.ndarray) -> ArrayOrTensor:
    """``values`` ``(..., n_actions)`` with the illegal actions' entries set to -inf (a max or argmax over the result
    is one over the legal actions only)."""
    if isinstance(values, torch.Tensor):
        legal = torch.as_tensor(masks, dtype=torch.bool, device=values.device)
        return values.masked_fill(~legal, -torch.inf)
    return np.where(np.asarray(masks, dtype=bool), values, -np.inf).astype(values.dtype, copy=False)


def masked_argmax(q_values: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """The greedy action over the legal ones of each row: ``argmax_{a legal} q[i, a]``."""
    return masked_values(np.asarray(q_values), masks).argmax(axis=1)


def legal_uniform(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``masks`` ``(k, n_actions)``, uniform among that row's legal actions."""
    counts = masks.sum(axis=1)
    picks = np.minimum((rng.random(len(masks)) * counts).astype(np.int64), counts - 1)  # the picks-th legal action
    return (np.cumsum(masks, axis=1) > picks[:, None]).argmax(axis=1)


def masked_epsilon_greedy(greedy: np.ndarray, epsilon: Any, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``greedy`` (legal actions) with each replaced, with probability ``epsilon`` (one for all, or one per row), by an
    action drawn uniformly among the row's legal actions (the masked form of
    :func:`~sb3_async.common.exploration.epsilon_greedy`)."""
    explore = rng.random(len(greedy)) < epsilon
    if not explore.any():
        return greedy
    actions = np.array(greedy, copy=True)
    actions[explore] = legal_uniform(masks[explore], rng)
    return actions


class StepMaskedCategorical(CategoricalDistribution):
    """SB3's categorical head distribution over sb3-contrib's ``MaskableCategorical`` (illegal logits set to -1e8,
    entropy over the legal actions only), masked with :attr:`masks` whenever the policy builds it from its logits: a
    policy whose ``action_dist`` it is samples, scores (``log_prob``) and regularizes (``entropy``) the masked
    distribution in every code path (``forward``, ``evaluate_actions``, ``predict``; recurrent policies too).

    :attr:`masks`: ``(batch, n_actions)`` in the order of the observations the policy is given next (one row: every
    observation), or None (no mask)."""

    def __init__(self, action_dim: int):
        super().__init__(action_dim)
        self.masks: np.ndarray | torch.Tensor | None = None

    def proba_distribution(self, action_logits: torch.Tensor) -> StepMaskedCategorical:  # type: ignore[override]
        logits = action_logits.view(-1, self.action_dim)
        distribution = MaskableCategorical(logits=logits)
        if self.masks is not None:
            masks = torch.as_tensor(self.masks, dtype=torch.bool)
            if masks.shape[0] == 1 and len(logits) > 1:
                masks = masks.expand(len(logits), -1)
            elif masks.shape[0] != len(logits):
                raise ValueError(f"Invalid action_masks: {masks.shape[0]} rows for {len(logits)} observations")
            distribution.apply_masking(masks)
        self.distribution = distribution
        return self


def mask_policy(policy: Any) -> StepMaskedCategorical:
    """Give ``policy`` (an actor-critic policy on a ``Discrete`` space) a :class:`StepMaskedCategorical`; returns it."""
    dist = StepMaskedCategorical(int(policy.action_space.n))
    policy.action_dist = dist
    return dist


@contextlib.contextmanager
def masked_policy(policy: Any, masks: np.ndarray) -> Iterator[StepMaskedCategorical]:
    """``policy``'s action distribution masked with ``masks`` while the block runs (``predict(action_masks=...)``);
    its own distribution is restored after."""
    own = policy.action_dist
    dist = mask_policy(policy)
    dist.masks = masks
    try:
        yield dist
    finally:
        policy.action_dist = own


def predict_masks(action_masks: Any, action_space: spaces.Space) -> np.ndarray:
    """``predict()``'s ``action_masks`` checked: ``(k, n_actions)`` bools, one row per observation (one row: all)."""
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"Invalid action_masks: masks need a Discrete action space, got {action_space}")
    return check_action_masks(action_masks, int(action_space.n), lambda i: f"row {i} of predict()'s action_masks")


def rows_for(masks: np.ndarray, rows: int) -> np.ndarray:
    """``masks`` with one row per observation: a single row repeated, else exactly ``rows`` rows."""
    if len(masks) == 1:
        return np.broadcast_to(masks, (rows, masks.shape[1]))
    if len(masks) != rows:
        raise ValueError(f"Invalid action_masks: {len(masks)} rows for {rows} observations")
    return masks
