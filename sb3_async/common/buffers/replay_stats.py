"""Logging of replay-buffer statistics through SB3's logger."""

from __future__ import annotations

from stable_baselines3.common.callbacks import BaseCallback


class ReplayStatsCallback(BaseCallback):
    """
    Records the replay buffer's ``stats()`` (e.g. ``replay/hmemory_size``, ``replay/r_max``,
    ``replay/hmemory_fraction`` of ``EpisodicDualReplayBuffer``) in the model's logger at every rollout end, so that
    they appear with SB3's own ``rollout/`` and ``train/`` keys. Buffers without ``stats()`` log nothing.

    :param verbose: verbosity level (SB3's convention)
    """

    def __init__(self, verbose: int = 0):
        super().__init__(verbose)

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        stats = getattr(getattr(self.model, "replay_buffer", None), "stats", None)
        if callable(stats):
            for key, value in stats().items():
                self.logger.record(key, value)
