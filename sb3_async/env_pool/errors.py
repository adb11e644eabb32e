"""The errors of the env pool: those it raises to its users, and the one its collaborators pass among themselves when
an env host was respawned. This module does not import torch.
"""

from __future__ import annotations

from gymnasium.error import ClosedEnvironmentError


class PoolClosedError(RuntimeError, ClosedEnvironmentError):
    """A closed pool was used: a ``RuntimeError``, and gymnasium's ``ClosedEnvironmentError`` as its vector envs raise."""


class SpacesDifferError(ValueError, RuntimeError):
    """The envs of a pool have different spaces: a ``ValueError``, and a ``RuntimeError`` as gymnasium's vector envs
    raise."""


class EnvError(RuntimeError):
    """An env of the pool raised in ``step``/``reset``/a method call. The message names the env and carries its traceback.

    :param env_id: the env's id in the pool
    :param call: what the pool asked the env to do
    :param worker_traceback: the traceback formatted in the env's host (the name is kept for the users who read it)
    """

    def __init__(self, env_id: int, call: str, worker_traceback: str):
        self.env_id, self.call, self.worker_traceback = env_id, call, worker_traceback
        super().__init__(f"Env {env_id} of the AsyncEnvPool raised in {call}. Its traceback:\n{worker_traceback}")


class HostRespawned(Exception):
    """Internal: the env host read from was respawned (``on_error="restart"``); its pending work was resent."""
