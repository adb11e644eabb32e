"""Multi-agent PettingZoo envs in the zoo's commands.

A multi-agent PettingZoo env is named by an id of PettingZoo's registry (``--env butterfly/pistonball-v6``) or by
``<package>/<module>`` (``--env mpe2/simple_spread_v3``), its arguments from the YAML's ``env_kwargs`` or
``--env-kwargs``. :func:`pettingzoo_envs` registers that id in gymnasium's registry (the zoo looks ``--env`` up there)
under an entry point that marks it as a PettingZoo env; wherever the zoo then builds envs of that id, it gets
``n_envs`` copies of the env in an :class:`~sb3_async.env_pool.AsyncEnvPool` VecEnv, one slot per agent (parameter
sharing), for every algorithm, ours or the zoo's (:func:`make_pettingzoo_vec_env`; ``train`` through
:class:`~sb3_async.zoo.experiment.ZooExperimentManager`). See ``docs/guide/pettingzoo.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.multi_agent import PettingZooEnv, pettingzoo_env_id
from sb3_async.env_pool.turns import is_turn_based


class _CopyDones(np.ndarray):
    """The dones of the slots of one env copy, true as a whole when every slot's episode ended (the zoo's ``enjoy``
    loop tests ``if done`` when it steps one env)."""

    def __bool__(self) -> bool:
        return bool(np.asarray(self).all())


class _OneCopyVecEnv(VecEnvWrapper):
    """The slots of one copy of a PettingZoo env, stepped by the zoo's ``enjoy``, ``record_video`` and
    ``push_to_hub`` loops as one env: its dones are true as a whole when the copy's episode ends, and those loops
    report the first agent's return (its ``reward[0]``)."""

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, rewards, dones.view(_CopyDones), infos


def make_pettingzoo_vec_env(
    pettingzoo_id: str,
    env_id: Any = None,
    n_envs: int = 1,
    seed: int | None = None,
    start_index: int = 0,
    monitor_dir: str | None = None,
    wrapper_class: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    vec_env_cls: type[VecEnv] | None = None,
    vec_env_kwargs: dict[str, Any] | None = None,
    monitor_kwargs: dict[str, Any] | None = None,
    wrapper_kwargs: dict[str, Any] | None = None,
    *,
    one_copy_as_one_env: bool = False,
    opponent: Any = None,
) -> VecEnv:
    """What the zoo's ``make_vec_env`` calls build for the PettingZoo env ``pettingzoo_id`` (then SB3's
    ``make_vec_env`` arguments; its ``env_id``, the zoo's maker, is not used): ``n_envs`` copies of the env
    (:class:`~sb3_async.env_pool.multi_agent.PettingZooEnv` with ``env_kwargs``) in an
    :class:`~sb3_async.env_pool.AsyncEnvPool`, as its VecEnv: one slot per agent. The copies step in this process
    (``--vec-env dummy``) or in the pool's worker processes (``subproc``). The pool reports each agent's episodes in
    ``info["episode"]``; no Monitor file is written.

    :param one_copy_as_one_env: with ``n_envs=1``, dones that are true as a whole when the copy's episode ends (for
        the loops of the zoo's scripts that step one env, see :class:`_OneCopyVecEnv`)
    :param opponent: who plays the other seats of a turn-based game (``TurnBasedGame``'s ``opponent``), None for the
        pool's default (``"self"``)
    :raises ValueError: for an ``env_wrapper`` (gymnasium wrappers cannot wrap a PettingZoo env)
    """
    if wrapper_class is not None:
        raise ValueError(
            f"env_wrapper cannot wrap the PettingZoo env {pettingzoo_id}: gymnasium wrappers take a gymnasium env"
        )
    n_hosts = 0 if vec_env_cls in (None, DummyVecEnv) else None
    pool = AsyncEnvPool(PettingZooEnv(pettingzoo_id, env_kwargs, opponent), n_envs=n_envs, n_hosts=n_hosts)
    venv: VecEnv = pool.as_vec_env()
    venv.seed(seed)
    return _OneCopyVecEnv(venv) if one_copy_as_one_env and n_envs == 1 else venv


def _not_a_gymnasium_env(**kwargs: Any) -> gym.Env:
    raise TypeError(
        "This id names a multi-agent PettingZoo env, which gymnasium.make cannot build: give AsyncEnvPool a factory of it"
        " (sb3_async.env_pool.multi_agent.PettingZooEnv); with the RL Zoo's Python API, build"
        " sb3_async.zoo.ZooExperimentManager instead of the zoo's ExperimentManager"
    )


def registered_pettingzoo_id(env_id: str | None) -> str | None:
    """``env_id`` if :func:`pettingzoo_envs` registered it as a PettingZoo env, else None."""
    spec = gym.envs.registry.get(env_id) if env_id is not None else None
    return env_id if spec is not None and spec.entry_point is _not_a_gymnasium_env else None


def env_agents(pettingzoo_id: str, env_kwargs: dict[str, Any] | None) -> int:
    """The slots each env copy adds: the number of agents of one copy of the PettingZoo env, 1 for a turn-based game
    (one seat learns, see :class:`~sb3_async.env_pool.turns.TurnBasedGame`)."""
    env = PettingZooEnv(pettingzoo_id, env_kwargs)()
    return 1 if is_turn_based(env) else len(env.possible_agents)


@contextlib.contextmanager
def pettingzoo_envs(argv: Sequence[str]) -> Iterator[str | None]:
    """If ``--env`` in ``argv`` is not a gymnasium id but names a PettingZoo env
    (:class:`~sb3_async.env_pool.multi_agent.PettingZooEnv`: ``butterfly/pistonball-v6``, ``mpe2/simple_spread_v3``):
    register it in gymnasium's registry while the context lasts (the zoo looks the id up there), marked so that the
    zoo's env makers build pools of its copies (:func:`make_pettingzoo_vec_env`) for ``train`` (through
    :class:`~sb3_async.zoo.experiment.ZooExperimentManager`), ``enjoy`` and ``record_video``, any algorithm.
    ``n_envs`` counts env copies; ``--eval-freq`` and ``--save-freq`` count steps of all the slots (the zoo divides
    them by ``n_envs``; they are divided by the agents as well, as each call of the callbacks sees a step of every slot).

    :return: (as the context's value) the PettingZoo id, or None for any other ``--env``
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--env", default=None)
    parser.add_argument("--gym-packages", nargs="+", default=[])
    args, _ = parser.parse_known_args(list(argv))
    for package in args.gym_packages:  # as the zoo does, before it looks the id up
        importlib.import_module(package)
    env_id = None if args.env is None or args.env in gym.envs.registry else pettingzoo_env_id(args.env)
    if env_id is None:
        yield None
        return
    gym.register(id=env_id, entry_point=_not_a_gymnasium_env, disable_env_checker=True, order_enforce=False)
    try:
        yield env_id
    finally:
        gym.envs.registry.pop(env_id, None)
