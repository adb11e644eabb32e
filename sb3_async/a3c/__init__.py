from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy as MlpLstmPolicy
from sb3_contrib.common.recurrent.policies import RecurrentMultiInputActorCriticPolicy as MultiInputLstmPolicy
from stable_baselines3.common.policies import ActorCriticPolicy as MlpPolicy
from stable_baselines3.common.policies import MultiInputActorCriticPolicy as MultiInputPolicy

from sb3_async.a3c.a3c import A3C
from sb3_async.common.policies import A3CCnnLstmPolicy, A3CCnnPolicy, SoftplusGaussianPolicy

CnnPolicy = A3CCnnPolicy
SoftplusMlpPolicy = SoftplusGaussianPolicy
CnnLstmPolicy = A3CCnnLstmPolicy

__all__ = [
    "A3C",
    "CnnLstmPolicy",
    "CnnPolicy",
    "MlpLstmPolicy",
    "MlpPolicy",
    "MultiInputLstmPolicy",
    "MultiInputPolicy",
    "SoftplusMlpPolicy",
]
