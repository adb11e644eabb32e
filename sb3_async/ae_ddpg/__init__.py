from stable_baselines3.td3.policies import CnnPolicy, MlpPolicy

from sb3_async.ae_ddpg.ae_ddpg import AEDDPG

__all__ = ["AEDDPG", "CnnPolicy", "MlpPolicy"]
