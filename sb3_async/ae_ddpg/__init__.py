from sb3_async.ae_ddpg.ae_ddpg import AEDDPG
from stable_baselines3.td3.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["AEDDPG", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
