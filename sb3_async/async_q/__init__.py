"""Asynchronous one-step Q-learning, one-step Sarsa and n-step Q-learning (Mnih et al. 2016)."""

from sb3_async.async_q.async_q import AsyncNStepQ, AsyncOneStepQ, AsyncQLearning, AsyncSarsa

__all__ = ["AsyncNStepQ", "AsyncOneStepQ", "AsyncQLearning", "AsyncSarsa"]
