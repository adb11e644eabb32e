from sb3_async.apex.dpg import ApeXDPG
from sb3_async.apex.dqn import ApeXDQN

__all__ = ["ApeXDPG", "ApeXDQN"]
