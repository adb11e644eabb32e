"""Replay buffers usable by stock SB3 off-policy algorithms: prioritized (Ape-X) and episodic dual (AE-DDPG)."""

from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer, PrioritizedReplayBufferSamples
from sb3_async.common.buffers.replay_stats import ReplayStatsCallback

__all__ = ["EpisodicDualReplayBuffer", "PrioritizedReplayBuffer", "PrioritizedReplayBufferSamples", "ReplayStatsCallback"]
