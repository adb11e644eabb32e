from stable_baselines3.common.policies import ActorCriticPolicy as MlpPolicy
from stable_baselines3.common.policies import MultiInputActorCriticPolicy as MultiInputPolicy

from sb3_async.a3c.a3c import A3C
from sb3_async.common.policies import A3CCnnPolicy, SoftplusGaussianPolicy

CnnPolicy = A3CCnnPolicy
SoftplusMlpPolicy = SoftplusGaussianPolicy

__all__ = ["A3C", "CnnPolicy", "MlpPolicy", "MultiInputPolicy", "SoftplusMlpPolicy"]
