"""EnvPool (C++ envs stepped by EnvPool's own threads) as an engine of :class:`~sb3_async.env_pool.AsyncEnvPool`.

``AsyncEnvPool("HalfCheetah-v5", 8, engine="envpool")`` serves every env from one ``envpool.make(...)`` pool held in
the main process: :class:`EnvPoolGroup` answers the same ``step``/``reset``/``call`` commands as a host's group of
gymnasium envs, so ids, the PettingZoo and ``send``/``recv`` dialects, ``as_vec_env()`` and the autoreset semantics are
the pool's own code. ``pip install "sb3-async[envpool]"`` (EnvPool 1.2.5 or later; 1.2.7 has wheels for Python 3.11 to 3.14).

What differs from the gymnasium engine, by EnvPool's design (tested in ``tests/env_pool/test_envpool_engine.py``):

* **Env ids** are EnvPool's (``envpool.list_all_envs()``): ``CartPole-v1``, ``HalfCheetah-v5``, ``Pong-v5``...; their
  dynamics are EnvPool's C++ ports, so trajectories differ from gymnasium's for the same seed. ``env_kwargs`` go to
  ``envpool.make`` (``max_episode_steps``, Atari's ``episodic_life``, ``reward_clip``, ``stack_num``...).
* **Atari defaults are EnvPool's**, not SB3's ``AtariWrapper``: ``Pong-v5`` returns 4 stacked 84x84 grey frames
  (``stack_num=4``, so no ``VecFrameStack``), frame skip 4, up to 30 no-ops, ``episodic_life=False`` and
  ``reward_clip=False`` unless asked for, sticky actions off (``repeat_action_probability=0``), 27,000 steps per episode.
* **Seeding** happens when EnvPool's pool is built: ``reset(seed=s)`` of every env rebuilds it with env ``i`` seeded
  ``s + i`` (the same seed gives the same trajectories); a seeded reset of only some envs raises ``ValueError``. An
  unseeded pool draws its seed from the OS, as gymnasium's envs do (EnvPool's own default is always 42).
* **Same-step autoreset** is built on EnvPool's next-step autoreset: an env that ends is reset at once with EnvPool's
  ``reset(env_id)``, so the step returns the new episode's first observation with the last one in ``final_obs``, and no
  action is discarded. Truncation by ``max_episode_steps`` comes back as ``truncated``.
* **Stepping is synchronous**: ``send`` returns when EnvPool's threads have stepped the envs sent (as with
  ``n_hosts=0``), so ``recv(min_ready=k)`` never waits. EnvPool's threads step the envs in parallel meanwhile.
* **No per-env Python objects**: ``get_attr`` raises ``AttributeError`` (``render_mode`` is None), ``set_attr``,
  ``call`` and ``render`` raise ``EnvError``; ``reset(options=...)`` is refused (EnvPool's envs take none).
  ``on_error="restart"`` is not offered.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.host import Missing
from sb3_async.env_pool.shared_buffers import FINAL_INFO, FINAL_OBS

#: Per-env info keys of EnvPool's that describe the batch, not the env.
_BATCH_KEYS = ("env_id", "players")


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            'engine="envpool" needs EnvPool: pip install "sb3-async[envpool]" (EnvPool 1.2.7 has wheels for Python '
            "3.11 to 3.14)"
        ) from error
    return envpool


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without gymnasium's float32 notes on EnvPool's own spaces (nothing a user can change)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered")
        yield


def _fresh_seeds(n_envs: int) -> list[int]:
    """Seeds ``s + i`` for a seed ``s`` drawn from the OS, each within EnvPool's int32 seeds."""
    start = int(np.random.SeedSequence().entropy % (2**31 - 1 - n_envs))  # type: ignore[operator]
    return [start + i for i in range(n_envs)]


class EnvPoolGroup:
    """Every env of an ``AsyncEnvPool(engine="envpool")``: one EnvPool in synchronous mode, stepped by its threads.

    :param env_id: an EnvPool env id (``envpool.list_all_envs()``)
    :param n_envs: number of envs
    :param env_kwargs: for ``envpool.make`` (``num_threads``, ``max_episode_steps``, Atari options...)
    :param autoreset: the pool's (same-step autoreset, or PettingZoo's: an ended env waits for ``reset``)
    """

    def __init__(self, env_id: str, n_envs: int, env_kwargs: dict[str, Any] | None, autoreset: bool):
        envpool = _import_envpool()
        if env_id not in envpool.list_all_envs():
            raise ValueError(f"Unknown EnvPool env id {env_id!r}: see envpool.list_all_envs()")
        kwargs = dict(env_kwargs or {})
        for key in ("num_envs", "batch_size", "env_type", "seed", "env_seed"):
            if key in kwargs:
                raise ValueError(f"env_kwargs may not set {key!r} with engine='envpool': the pool sets it")
        self.env_id, self.n_envs, self.kwargs, self.autoreset = env_id, n_envs, kwargs, autoreset
        self.ids = list(range(n_envs))
        self._make = envpool.make
        self.env = self._build(_fresh_seeds(n_envs))
        self.buffers: Any = None  # the pool's SharedBuffers, set by the pool
        observation_space, action_space = self.env.observation_space, self.env.action_space
        self.spaces = [(i, observation_space, action_space) for i in self.ids]
        self._action_dtype = np.int64 if isinstance(action_space, spaces.Discrete) else action_space.dtype

    def _build(self, seeds: list[int]) -> Any:
        with _quiet():
            # batch_size = num_envs: EnvPool's synchronous mode, which steps and resets any subset of ids
            env = self._make(
                self.env_id,
                env_type="gymnasium",
                num_envs=self.n_envs,
                batch_size=self.n_envs,
                env_seed=seeds,
                **self.kwargs,
            )
            env.observation_space, env.action_space  # built (and cached) at first access  # noqa: B018
        return env

    @staticmethod
    def _infos(info: dict[str, Any], count: int) -> list[dict[str, Any]]:
        """One info dict per env from EnvPool's batch of arrays (nested dicts split alike)."""

        def split(batch: dict[str, Any], k: int) -> dict[str, Any]:
            return {key: split(value, k) if isinstance(value, dict) else value[k] for key, value in batch.items()}

        own = {key: value for key, value in info.items() if key not in _BATCH_KEYS}
        return [split(own, k) for k in range(count)]

    def step(self, ids: list[int], restarts: dict[int, str] | None = None) -> tuple[dict[int, dict], dict[int, str]]:
        """Step the envs ``ids`` with their actions in the buffers (EnvPool's threads step them in parallel)."""
        buffers = self.buffers
        index = np.asarray(ids, dtype=np.int32)
        actions = np.asarray(buffers.actions.read(index), dtype=self._action_dtype)
        obs, rewards, terminations, truncations, info = self.env.step(actions, index)
        order = info["env_id"]
        infos = self._infos(info, len(order))
        ended = np.flatnonzero(terminations | truncations)
        if self.autoreset and len(ended):
            reset_ids = order[ended]
            reset_obs, reset_info = self.env.reset(reset_ids)
            reset_infos = self._infos(reset_info, len(reset_ids))
            position = {int(i): k for k, i in enumerate(reset_info["env_id"])}
            obs = obs.copy()
            for k in ended:
                r = position[int(order[k])]
                infos[k] = {**reset_infos[r], FINAL_OBS: obs[k].copy(), FINAL_INFO: infos[k]}
                obs[k] = reset_obs[r]
        buffers.obs.write(order, obs)
        buffers.rewards[order], buffers.terminated[order], buffers.truncated[order] = rewards, terminations, truncations
        return {int(i): infos[k] for k, i in enumerate(order) if infos[k]}, {}

    def reset(self, items: list[tuple[int, int | None, dict[str, Any] | None]]) -> tuple[dict[int, dict], dict[int, str]]:
        if any(options for _, _, options in items):
            raise ValueError("EnvPool's envs take no reset options (engine='envpool')")
        seeded = [seed is not None for _, seed, _ in items]
        ids = [i for i, _, _ in items]
        if any(seeded):
            if not all(seeded) or sorted(ids) != self.ids:
                raise ValueError(
                    "engine='envpool' seeds its envs when EnvPool's pool is built: reset(seed=...) must reset every env"
                )
            seeds = dict((i, seed) for i, seed, _ in items)
            self.env = self._build([int(seeds[i]) for i in self.ids])  # type: ignore[arg-type]
        obs, info = self.env.reset(np.asarray(ids, dtype=np.int32))
        order = info["env_id"]
        self.buffers.obs.write(order, obs)
        return dict(zip(map(int, order), self._infos(info, len(order)))), {}

    def call(self, ids: list[int], what: str, name: str, args: tuple, kwargs: dict) -> tuple[list[Any], dict[int, str]]:
        if what == "get_attr" and name == "render_mode":  # no rendering: what SB3's VecEnv asks at its start
            return [None for _ in ids], {}
        if what == "get_attr" and name == "metadata":  # what the vec-env views copy: EnvPool renders nothing
            return [{"render_modes": []} for _ in ids], {}
        if what == "get_attr":
            return [Missing(f"EnvPool's envs (engine='envpool') have no attribute {name!r}") for _ in ids], {}
        if what in ("has_attr", "is_wrapped"):
            return [what == "has_attr" and name in ("render_mode", "metadata") for _ in ids], {}
        message = f"engine='envpool' has no Python env objects: {what}({name!r}) is not available"
        return [], {i: message for i in ids}

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()
