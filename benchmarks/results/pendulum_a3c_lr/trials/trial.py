import json, sys, time
import torch
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
from sb3_async import A3C

class Timed(EvalCallback):
    spent = 0.0
    def _on_step(self):
        t = time.perf_counter(); r = super()._on_step(); self.spent += time.perf_counter() - t; return r

if __name__ == "__main__":
    torch.set_num_threads(1)
    over = json.loads(sys.argv[1]); seed = int(sys.argv[2])
    kw = dict(n_workers=2, n_envs_per_worker=4, ent_coef=0.0, max_grad_norm=0.5, n_steps=8, gae_lambda=0.9, vf_coef=0.4,
              gamma=0.9, normalize_advantage=False, learning_rate="lin_7e-4", use_sde=True,
              policy_kwargs=dict(log_std_init=-2, ortho_init=False))
    kw.update(over)
    lr = kw["learning_rate"]
    if isinstance(lr, str):
        v = float(lr[4:]); kw["learning_rate"] = lambda p, v=v: p * v
    n = kw["n_workers"] * kw["n_envs_per_worker"]
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=n, seed=seed), gamma=kw["gamma"])
    eval_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 100), training=False, norm_reward=False)
    model = A3C("MlpPolicy", env, seed=seed, **kw)
    cb = Timed(eval_env, eval_freq=max(1, 2000 // n), n_eval_episodes=10, callback_on_new_best=StopTrainingOnRewardThreshold(-200), verbose=0)
    t = time.perf_counter()
    model.learn(1_000_000, callback=cb)
    clock = time.perf_counter() - t - cb.spent
    print(json.dumps(dict(over=over, seed=seed, steps=model.num_timesteps, clock=round(clock, 1), best=float(cb.best_mean_reward))), flush=True)
