"""TorchRL 0.14 PPO on CartPole-v1, Pendulum-v1, HalfCheetah-v5 and PongNoFrameskip-v4: the peer of A3C.

On the state-based envs, built and trained as TorchRL's state-based PPO example does (sota-implementations/ppo:
``ppo_mujoco.py``, its ``utils_mujoco.py`` and ``config_mujoco.yaml``): 64x64 tanh MLPs with orthogonal
initialisation, ``ClipPPOLoss``, GAE recomputed at every epoch, a ``SamplerWithoutReplacement`` replay buffer of one
batch, Adam (eps 1e-5) with the learning rate annealed linearly to 0 over the run. What differs from the example, and why:

- on CartPole-v1 and Pendulum-v1, the collector: ``MultiSyncCollector`` over ``num_workers`` processes instead of the
  example's single-process ``Collector`` (the fastest synchronous, hence on-policy, collector TorchRL documents for one
  machine), and no observation normalisation (``VecNorm``: each collector process would keep statistics of its own,
  and CartPole's and Pendulum's observations are of order 1 to 8; the example's ``normalize_observation``, off);
- on HalfCheetah-v5, the example as it is: its single-process ``Collector`` and its ``VecNorm`` (decay 0.99999, eps
  1e-2) then ``ClipTransform`` (±10) on the observation; the evaluated policy normalises with the training statistics
  frozen at the evaluation;
- the action head on CartPole-v1: a ``Categorical`` over its two actions, as TorchRL's discrete (Atari) PPO example
  has it; elsewhere the MuJoCo example's own head (a ``TanhNormal`` over the action bounds, its location from the MLP,
  a state-independent scale).

On PongNoFrameskip-v4, built and trained as TorchRL's Atari PPO example does (``ppo_atari.py``, ``utils_atari.py``,
``config_atari.yaml``): 8 envs in a ``ParallelEnv`` (a process each) under a single-process ``Collector``, its frame
pipeline (``GymEnv`` with ``frame_skip=4``: the action repeated, rewards summed, the last frame kept; 30 random no-ops
at reset; grey 84x84 frames, 4 stacked, a 4,500-step limit, rewards clipped to their sign for training, pixels through
``VecNorm``), the Nature CNN shared by actor and critic, GAE and the PPO loss on end-of-life, one Adam over both with
the gradient norm clipped at 0.5, the learning rate and the clip range annealed linearly to 0. What differs:

- its step counts are agent steps: the example divides its frame counts by the frame skip (batch 4096 frames = 1024
  agent steps, minibatch 1024 frames = 256), and so does the adapter (the protocol counts agent steps);
- its ``Resize`` calls torchvision, whose wheels on PyPI do not load beside torch 2.13's CPU build: the adapter's
  subclass computes the same with torch alone (``interpolate``, bilinear with antialiasing: what torchvision's tensor
  ``resize`` runs);
- the evaluation runs the example's test pipeline (no end-of-life, rewards unclipped) on one env, with the training
  ``VecNorm``'s statistics frozen at the evaluation (the example's test env keeps a ``VecNorm`` of its own).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "torchrl"
PACKAGES = ("tensordict",)
#: sota-implementations/ppo/config_mujoco.yaml, utils_mujoco.py and ppo_mujoco.py: the example's settings.
_EXAMPLE = dict(
    # config_mujoco.yaml
    frames_per_batch=2048,
    n_timesteps=1_000_000,  # total_frames
    lr=3e-4,
    anneal_lr=True,
    gamma=0.99,
    mini_batch_size=64,
    ppo_epochs=10,
    gae_lambda=0.95,
    clip_epsilon=0.2,
    critic_coef=0.25,
    entropy_coef=0.0,
    loss_critic_type="l2",
    # utils_mujoco.py and ppo_mujoco.py
    hidden_sizes=[64, 64],
    adam_eps=1e-5,
    normalize_advantage=True,
    # this benchmark's layout: one collector process per core of the 2-core machine, as ours use 2 workers
    num_workers=2,
    normalize_observation=False,
)
HYPERPARAMETERS = {
    "CartPole-v1": dict(_EXAMPLE),
    "Pendulum-v1": dict(_EXAMPLE),
    # the example's own layout and observation normalisation (its env_name: HalfCheetah-v4, the same task)
    "HalfCheetah-v5": dict(_EXAMPLE, num_workers=1, normalize_observation=True),
    # sota-implementations/ppo/config_atari.yaml (its env_name: PongNoFrameskip-v4), in agent steps
    "PongNoFrameskip-v4": dict(
        atari=True,
        num_envs=8,
        frame_skip=4,
        noops=30,
        max_episode_steps=4500,  # utils_atari.py's StepCounter
        frames_per_batch=1024,  # 4096 frames
        n_timesteps=10_000_000,  # total_frames 40M
        lr=2.5e-4,
        adam_eps=1e-6,
        max_grad_norm=0.5,
        anneal_lr=True,
        gamma=0.99,
        mini_batch_size=256,  # 1024 frames
        ppo_epochs=3,
        gae_lambda=0.95,
        clip_epsilon=0.1,
        anneal_clip_epsilon=True,
        critic_coef=1.0,
        entropy_coef=0.01,
        loss_critic_type="l2",
        normalize_advantage=True,
    ),
}
SOURCES = {
    "CartPole-v1": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py) with "
    "a MultiSyncCollector and a Categorical head (the module docstring lists the differences)",
    "Pendulum-v1": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py: its "
    "TanhNormal head) with a MultiSyncCollector (the module docstring lists the differences)",
    "HalfCheetah-v5": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py), "
    "its single-process Collector and VecNorm",
    "PongNoFrameskip-v4": "TorchRL 0.14 sota-implementations/ppo (config_atari.yaml, utils_atari.py, ppo_atari.py): "
    "its ParallelEnv of 8 envs and frame pipeline, in agent steps (the module docstring lists the differences)",
}

#: utils_mujoco.py's observation normalisation: ``VecNorm`` then ``ClipTransform``.
VECNORM = dict(decay=0.99999, eps=1e-2)
CLIP = 10.0


def make_env(env_id: str, normalize_observation: bool = False) -> Any:
    """The example's env pipeline: ``GymEnv``, ``VecNorm`` + ``ClipTransform`` where ``normalize_observation``,
    ``RewardSum``, ``StepCounter``, ``DoubleToFloat`` for float64 observations (MuJoCo's)."""
    import torch
    from torchrl.envs import ClipTransform, DoubleToFloat, RewardSum, StepCounter, TransformedEnv, VecNorm
    from torchrl.envs.libs.gym import GymEnv

    env = TransformedEnv(GymEnv(env_id, device="cpu", categorical_action_encoding=True))
    if normalize_observation:
        env.append_transform(VecNorm(in_keys=["observation"], new_api=False, **VECNORM))
        env.append_transform(ClipTransform(in_keys=["observation"], low=-CLIP, high=CLIP))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter())
    if env.observation_spec["observation"].dtype is torch.float64:
        env.append_transform(DoubleToFloat(in_keys=["observation"]))
    return env


def normalized(obs: np.ndarray, vecnorm: Any, key: str = "observation", clip: float | None = CLIP) -> np.ndarray:
    """``obs`` as the training env's ``VecNorm`` (and ``ClipTransform``, where ``clip``) pass it to the policy, with
    the statistics as they are now (``VecNorm``'s ``loc`` and ``scale``, read without updating them)."""
    loc, scale = vecnorm.loc[key].numpy(), vecnorm.scale[key].numpy()
    obs = (obs - loc) / np.maximum(scale, vecnorm.eps)
    return obs if clip is None else np.clip(obs, -clip, clip)


def make_models(env: Any, hidden_sizes: list[int]) -> tuple[Any, Any]:
    """The example's actor and critic: a ``Categorical`` head for a discrete action space, the example's
    ``TanhNormal`` (state-independent scale) for a continuous one."""
    import torch
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.data import Categorical
    from torchrl.envs.utils import ExplorationType
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator

    n_obs = env.observation_spec["observation"].shape[-1]
    action_spec = env.action_spec_unbatched
    discrete = isinstance(action_spec, Categorical)
    n_out = action_spec.space.n if discrete else action_spec.shape[-1]
    policy_mlp = MLP(in_features=n_obs, activation_class=torch.nn.Tanh, out_features=n_out, num_cells=hidden_sizes)
    value_mlp = MLP(in_features=n_obs, activation_class=torch.nn.Tanh, out_features=1, num_cells=hidden_sizes)
    for mlp, gain in ((policy_mlp, 1.0), (value_mlp, 0.01)):
        for layer in mlp.modules():
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.orthogonal_(layer.weight, gain)
                layer.bias.data.zero_()
    if discrete:
        head = TensorDictModule(policy_mlp, in_keys=["observation"], out_keys=["logits"])
        in_keys, distribution, distribution_kwargs = ["logits"], torch.distributions.Categorical, None
    else:
        location_and_scale = torch.nn.Sequential(policy_mlp, AddStateIndependentNormalScale(n_out, scale_lb=1e-8))
        head = TensorDictModule(location_and_scale, in_keys=["observation"], out_keys=["loc", "scale"])
        in_keys, distribution = ["loc", "scale"], TanhNormal
        distribution_kwargs = dict(low=action_spec.space.low, high=action_spec.space.high, tanh_loc=False)
    actor = ProbabilisticActor(
        head,
        in_keys=in_keys,
        spec=env.full_action_spec_unbatched,
        distribution_class=distribution,
        distribution_kwargs=distribution_kwargs,
        return_log_prob=True,
        default_interaction_type=ExplorationType.RANDOM,
    )
    critic = ValueOperator(value_mlp, in_keys=["observation"])
    return actor, critic


# ---------------------------------------------------------------- PongNoFrameskip-v4: the Atari example


def _resize_transform(size: int) -> Any:
    """``Resize(size, size)`` computed without torchvision (the module docstring says why)."""
    import torch
    from torchrl.envs import Resize
    from torchrl.envs.transforms import ObservationTransform

    class TorchResize(Resize):
        def __init__(self, size: int):
            ObservationTransform.__init__(self, in_keys=["pixels"], out_keys=["pixels"])
            self.w = self.h = int(size)
            self.interpolation = "bilinear"

        def _apply_transform(self, observation: torch.Tensor) -> torch.Tensor:
            if observation.shape[-2:] == torch.Size([self.w, self.h]):
                return observation
            batch = observation.shape[:-3]
            flat = observation.reshape(-1, *observation.shape[-3:])
            resized = torch.nn.functional.interpolate(
                flat, size=(self.h, self.w), mode="bilinear", align_corners=False, antialias=True
            )
            return resized.reshape(*batch, *resized.shape[-3:])

    return TorchResize(size)


def make_atari_base_env(env_id: str, frame_skip: int, noops: int, is_test: bool = False) -> Any:
    """utils_atari.py's ``make_base_env``: the ALE env with the action repeated ``frame_skip`` times, random no-ops at
    reset, end-of-life flags for training."""
    import ale_py
    import gymnasium
    from torchrl.envs import EndOfLifeTransform, NoopResetEnv, TransformedEnv
    from torchrl.envs.libs.gym import GymEnv

    gymnasium.register_envs(ale_py)
    env = GymEnv(
        env_id, frame_skip=frame_skip, from_pixels=True, pixels_only=False, device="cpu", categorical_action_encoding=True
    )
    env = TransformedEnv(env)
    env.append_transform(NoopResetEnv(noops=noops, random=True))
    if not is_test:
        env.append_transform(EndOfLifeTransform())
    return env


def make_atari_env(env_id: str, settings: dict[str, Any], num_envs: int, is_test: bool = False) -> Any:
    """utils_atari.py's ``make_parallel_env``: ``num_envs`` base envs in a ``ParallelEnv`` (one: in this process), then grey
    84x84 frames, 4 stacked, the step limit, sign-clipped rewards and ``VecNorm`` on the pixels for training; for the
    evaluation (``is_test``) neither the clipping nor the ``VecNorm`` (the policy normalises with the training one)."""
    from torchrl.envs import (
        CatFrames,
        DoubleToFloat,
        EnvCreator,
        GrayScale,
        ParallelEnv,
        RenameTransform,
        RewardSum,
        SignTransform,
        StepCounter,
        ToTensorImage,
        TransformedEnv,
        VecNorm,
    )

    make_base = functools.partial(make_atari_base_env, env_id, int(settings["frame_skip"]), int(settings["noops"]), is_test)
    env = TransformedEnv(ParallelEnv(num_envs, EnvCreator(make_base), serial_for_single=True, device="cpu"))
    env.append_transform(RenameTransform(in_keys=["pixels"], out_keys=["pixels_int"]))
    env.append_transform(ToTensorImage(in_keys=["pixels_int"], out_keys=["pixels"]))
    env.append_transform(GrayScale())
    env.append_transform(_resize_transform(84))
    env.append_transform(CatFrames(N=4, dim=-3))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter(max_steps=int(settings["max_episode_steps"])))
    if not is_test:
        env.append_transform(SignTransform(in_keys=["reward"]))
    env.append_transform(DoubleToFloat())
    if not is_test:
        env.append_transform(VecNorm(in_keys=["pixels"], new_api=False))  # the example's: the old API's defaults
    return env


def make_atari_models(env: Any) -> tuple[Any, Any]:
    """utils_atari.py's ``make_ppo_modules_pixels``: the Nature CNN (32-64-64, kernels 8-4-3, strides 4-2-1) and a
    512-unit layer shared by a ``Categorical`` policy head and a value head."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.envs.utils import ExplorationType
    from torchrl.modules import MLP, ActorValueOperator, ConvNet, ProbabilisticActor, ValueOperator

    input_shape = env.observation_spec["pixels"].shape
    n_actions = env.action_spec_unbatched.space.n
    cnn = ConvNet(activation_class=torch.nn.ReLU, num_cells=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1])
    n_features = cnn(torch.ones(input_shape)).shape[-1]
    dense = MLP(
        in_features=n_features, activation_class=torch.nn.ReLU, activate_last_layer=True, out_features=512, num_cells=[]
    )
    common = TensorDictModule(torch.nn.Sequential(cnn, dense), in_keys=["pixels"], out_keys=["common_features"])
    policy_head = MLP(in_features=512, out_features=n_actions, activation_class=torch.nn.ReLU, num_cells=[])
    policy = ProbabilisticActor(
        TensorDictModule(policy_head, in_keys=["common_features"], out_keys=["logits"]),
        in_keys=["logits"],
        spec=env.full_action_spec_unbatched,
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
        default_interaction_type=ExplorationType.RANDOM,
    )
    value_head = MLP(activation_class=torch.nn.ReLU, in_features=512, out_features=1, num_cells=[])
    value = ValueOperator(value_head, in_keys=["common_features"])
    actor_critic = ActorValueOperator(common_operator=common, policy_operator=policy, value_operator=value)
    with torch.no_grad():  # the lazy shapes, as the example initialises them
        actor_critic(env.fake_tensordict().expand(10))
    return actor_critic.get_policy_operator(), actor_critic.get_value_operator()


class TorchRLEnvView:
    """A one-env TorchRL env seen through gymnasium's ``reset``/``step``: what the protocol's evaluation steps (the
    observation: the ``pixels`` entry)."""

    def __init__(self, env: Any):
        self.env = env
        self.td: Any = None

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.env.set_seed(seed)
        self.td = self.env.reset()
        return self.td["pixels"][0].numpy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        import torch
        from torchrl.envs.utils import step_mdp

        self.td["action"] = torch.as_tensor(np.asarray(action)).reshape(1)  # a batch of one env
        out = self.env.step(self.td)
        after = out["next"]
        result: tuple[np.ndarray, float, bool, bool, dict[str, Any]] = (
            after["pixels"][0].numpy(),
            float(after["reward"].sum()),
            bool(after["terminated"].any()),
            bool(after["truncated"].any()),
            {},
        )
        self.td = step_mdp(out)
        return result

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def build_state_based(run: PeerRun, settings: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """The MuJoCo example's actor, critic and collector for ``run.env_id``, and what the evaluation policy does to an
    observation first (the training ``VecNorm``'s normalisation, where the example normalises)."""
    import torch
    from torchrl.collectors import Collector, MultiSyncCollector

    make = functools.partial(make_env, run.env_id, bool(settings["normalize_observation"]))
    proof = make()
    actor, critic = make_models(proof, settings["hidden_sizes"])
    proof.close()
    layout = dict(
        frames_per_batch=int(settings["frames_per_batch"]), total_frames=run.max_steps, device="cpu", storing_device="cpu"
    )
    prepare: Any = None
    if int(settings["num_workers"]) == 1:  # the example's: its one env's VecNorm holds the statistics
        train_env = make()
        if settings["normalize_observation"]:
            prepare = functools.partial(normalized, vecnorm=train_env.transform[0])
        collector: Any = Collector(create_env_fn=train_env, policy=actor, max_frames_per_traj=-1, **layout)
    else:
        collector = MultiSyncCollector(
            create_env_fn=[make] * int(settings["num_workers"]),
            policy=actor,
            max_frames_per_traj=-1,
            num_threads=torch.get_num_threads(),  # the protocol's setting for this process, as for every algorithm
            **layout,
        )
    return actor, critic, collector, prepare


def build_atari(run: PeerRun, settings: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """The Atari example's actor, critic and collector (its ``ParallelEnv`` under a single-process ``Collector``), its
    test pipeline as the evaluation env, and the training ``VecNorm``'s normalisation for the evaluation policy."""
    from torchrl.collectors import Collector

    proof = make_atari_env(run.env_id, settings, 1)
    actor, critic = make_atari_models(proof)
    if not proof.is_closed:  # a batched env not yet started counts as closed
        proof.close()
    train_env = make_atari_env(run.env_id, settings, int(settings["num_envs"]))
    collector = Collector(
        create_env_fn=train_env,
        policy=actor,
        frames_per_batch=int(settings["frames_per_batch"]),
        total_frames=run.max_steps,
        device="cpu",
        max_frames_per_traj=-1,
    )
    run.use_eval_env(lambda: TorchRLEnvView(make_atari_env(run.env_id, settings, 1, is_test=True)))
    prepare = functools.partial(normalized, vecnorm=train_env.transform[-1], key="pixels", clip=None)
    return actor, critic, collector, prepare


def train(run: PeerRun) -> None:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    settings = run.hyperparameters
    torch.manual_seed(run.seed)
    atari = bool(settings.get("atari"))
    actor, critic, collector, prepare = (build_atari if atari else build_state_based)(run, settings)
    key = "pixels" if atari else "observation"

    def act(obs: np.ndarray) -> np.ndarray:
        observation = torch.as_tensor(obs if prepare is None else prepare(obs), dtype=torch.float32)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            action = actor(TensorDict({key: observation}, batch_size=[len(obs)]))["action"]
        return action.numpy()

    frames_per_batch, total_frames = int(settings["frames_per_batch"]), run.max_steps
    n_minibatches = frames_per_batch // int(settings["mini_batch_size"])
    total_updates = (total_frames // frames_per_batch) * int(settings["ppo_epochs"]) * n_minibatches
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=int(settings["mini_batch_size"]),
    )
    advantage = GAE(gamma=settings["gamma"], lmbda=settings["gae_lambda"], value_network=critic, average_gae=False)
    clip_epsilon = float(settings["clip_epsilon"])
    loss_module = ClipPPOLoss(
        actor_network=actor,
        critic_network=critic,
        clip_epsilon=clip_epsilon,
        loss_critic_type=settings["loss_critic_type"],
        entropy_coeff=settings["entropy_coef"],
        critic_coeff=settings["critic_coef"],
        normalize_advantage=settings["normalize_advantage"],
    )
    if atari:  # the example's: a lost life ends the return (Pong has no lives: the game's end)
        advantage.set_keys(done="end-of-life", terminated="end-of-life")
        loss_module.set_keys(done="end-of-life", terminated="end-of-life")
    # One Adam over both networks (the Atari example's; the MuJoCo example's two Adams with the same settings on
    # disjoint parameters make the same steps); a parameter the two share (the Atari trunk) counted once.
    parameters = list(dict.fromkeys([*actor.parameters(), *critic.parameters()]))
    lr = float(settings["lr"])
    optim = torch.optim.Adam(parameters, lr=lr, eps=settings["adam_eps"])
    max_grad_norm = settings.get("max_grad_norm")
    collector.set_seed(run.seed)
    run.start()
    collected, updates = 0, 0
    try:
        for data in collector:  # the envs wait between batches: nothing moves while the protocol evaluates
            collected += data.numel()
            for _ in range(int(settings["ppo_epochs"])):
                with torch.no_grad():
                    data = advantage(data)
                buffer.extend(data.reshape(-1))
                for batch in buffer:
                    alpha = max(0.0, 1 - updates / total_updates)
                    if settings["anneal_lr"]:
                        for group in optim.param_groups:
                            group["lr"] = lr * alpha
                    if settings.get("anneal_clip_epsilon"):
                        loss_module.clip_epsilon.copy_(clip_epsilon * alpha)
                    loss = loss_module(batch)
                    optim.zero_grad(set_to_none=True)
                    (loss["loss_critic"] + loss["loss_objective"] + loss["loss_entropy"]).backward()
                    if max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(parameters, max_norm=float(max_grad_norm))
                    optim.step()
                    updates += 1
            collector.update_policy_weights_()
            run.step(collected, act)
    finally:
        collector.shutdown()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
