"""Sample Factory 2.1.1 APPO on CartPole-v1, Pendulum-v1, HalfCheetah-v5 and PongNoFrameskip-v4 (its asynchronous PPO:
rollout workers, inference workers and a learner, each in its own process): the peer of A3C. It runs in its own environment,
``.venv-sf`` (``benchmarks/peers/make_sf_venv.sh``): Sample Factory 2.1.1 pins gymnasium<1.0 and numpy<2.

Built and trained as Sample Factory's examples do, through its own ``make_runner`` / ``runner.init()`` /
``runner.run()`` (what ``sample_factory.train.run_rl`` does), with each example's settings:

- CartPole-v1: the gym example (``sf_examples/train_gym_env.py``: the env through ``gymnasium.make``), its CartPole-v1
  command line, every other setting Sample Factory's default (``sample_factory/cfg/cfg.py``);
- Pendulum-v1 (continuous actions: a Gaussian head): the settings Sample Factory ships for continuous control, its
  MuJoCo example's (``sf_examples/mujoco/mujoco_params.py``: synchronous PPO, 2 epochs of 4 minibatches of 1024,
  rollout 64, lr 2.95e-3 decayed linearly over 10^7 env steps, 64x64 tanh), the env through ``gymnasium.make``;
- HalfCheetah-v5: the same, the MuJoCo example's own task, as its ``mujoco_halfcheetah`` (HalfCheetah-v4: gymnasium
  0.29 has no v5; v5 keeps v4's dynamics and reward), trained and evaluated on v4;
- PongNoFrameskip-v4: the Atari example (``sf_examples/atari``: ``atari_params.py``, synchronous PPO, 8 rollout workers
  of 1 env, rollout 128, 4 epochs of 4 minibatches of 256, lr 2.5e-4 decayed linearly, the Nature CNN; its pipeline
  ``atari_utils.py``, as SB3's: 30 no-op starts, frame skip 4 with max-pooling, episodic life, fire reset, reward
  clipping, 84x84 grey frames, 4 stacked), evaluated on that pipeline (episodic life and reward clipping change
  nothing on Pong: no lives, rewards of ±1).

What differs from the examples, and why:

- ``num_workers=2`` rollout workers on CartPole-v1, Pendulum-v1 and HalfCheetah-v5 (the gym example's default is the
  machine's core count, 2 on the benchmark's machine, the MuJoCo example's 8), as ours use 2 workers; on Pong the
  example's 8;
- ``device=cpu`` (the default is ``gpu``);
- on Pong, ``summaries_use_frameskip=False``: the example counts env steps in frames (4 per agent step); this
  benchmark counts agent steps, for everyone (Sample Factory's own advice for comparisons with other frameworks, in
  ``atari_params.py``; it changes nothing else: the learning-rate horizon counts samples either way);
- no step budget of its own (the examples train for 10^7 or 10^10 env steps): this benchmark's ``n_timesteps`` cap,
  as for the other peers.

How it runs under the protocol (:mod:`sb3_async.benchmark.peers.protocol`), Sample Factory training asynchronously
in several processes:

- **the clock** starts in the observer's ``on_start`` hook (``AlgoObserver``, registered on the runner), called in
  the main process right after Sample Factory started its learner and rollout/inference worker processes: what the
  processes do to get ready (import torch, build their envs and model) is on the clock, as it is for ours;
- **the env steps**: the learner reports its env steps to the main process after each training iteration (the
  runner's ``LEARNER_ENV_STEPS`` message); a handler of that message, run by the runner's event loop in the main
  process after the runner's own, calls :meth:`PeerRun.step` with them;
- **the frozen policy**: the learner keeps its model in shared memory and sends that state dict (shared tensors, not
  a copy) to whoever connects to its ``model_initialized`` signal, as its inference workers do; the main process
  connects to it too. The policy handed to :meth:`PeerRun.step` is a copy of the model in the main process. When
  the protocol first calls it for an evaluation (that is, with the evaluation's time already off the clock), it
  takes the learner's ``policy_lock`` (the lock the learner holds while it changes its weights: no half-applied
  update is copied), sends ``SIGSTOP`` to every Sample Factory process (the learner, the inference and the rollout
  workers: psutil's children of this process, multiprocessing's resource tracker aside), waits until the kernel
  reports each of them stopped, copies the learner's weights (and input-normaliser statistics) into the copy, and
  releases the lock. Training is then suspended: no process of Sample Factory runs until the evaluation is over
  and the handler sends them ``SIGCONT``. The runner's heartbeat check (every ``heartbeat_reporting_interval``,
  180 s) would then find no heartbeat from any worker for as long as the evaluation took, and stop the training as
  stuck, after any evaluation longer than that interval; the handler moves each heartbeat the runner recorded
  forward by the time the processes were suspended (:func:`excuse_suspension`). The learner
  may have begun the next batch's update when the message is handled: the copy's weights are those of the counted
  env steps plus at most one batch (``batch_size`` env steps) of updates;
- **the deterministic policy**: the argmax of the action logits, or the Gaussian's mean (``argmax_actions``, what
  Sample Factory's ``enjoy --eval_deterministic`` does; neither it nor training clips continuous actions, the env
  does), on the observation normalised by the model's own normaliser;
- **the stop**: on :class:`StopRun` the handler takes a last copy of the weights (when the evaluation did not just
  take one) for the final evaluations, then asks the runner to stop (``_stop_training``, what the runner does at its
  own step limit), lets Sample Factory join its processes, and raises the :class:`StopRun` again once
  ``runner.run()`` has returned; an error of the handler (which Sample Factory's event loop would swallow) stops
  the runner the same way and is raised once it has. Whatever way ``train`` leaves, every process of Sample Factory
  still alive then is resumed, terminated and, failing that, killed: no orphans. Sample Factory's shutdown (its
  final checkpoint, joining its processes) is on the clock, as our workers' shutdown is (the clock stops when
  ``learn()`` returns); the time to the threshold is not affected.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import psutil

from sb3_async.benchmark.peers.protocol import PeerRun, StopRun, main

LIBRARY = "sample-factory"
PACKAGES = ("signal-slot-mp", "faster-fifo")
HYPERPARAMETERS = {
    "CartPole-v1": dict(
        # sf_examples/train_gym_env.py, the CartPole-v1 command line of its docstring
        algo="APPO",
        use_rnn=False,
        num_envs_per_worker=20,
        policy_workers_per_policy=2,
        recurrence=1,
        with_vtrace=False,
        batch_size=512,
        reward_scale=0.1,
        save_every_sec=10,
        experiment_summaries_interval=10,
        # sample_factory/cfg/cfg.py defaults (not in the example's command line; passed as they are, to record them)
        async_rl=True,
        rollout=32,
        num_batches_per_epoch=1,
        num_epochs=1,
        learning_rate=1e-4,
        gamma=0.99,
        gae_lambda=0.95,
        ppo_clip_ratio=0.1,
        ppo_clip_value=1.0,
        value_loss_coeff=0.5,
        exploration_loss="entropy",
        exploration_loss_coeff=0.003,
        max_grad_norm=4.0,
        adam_eps=1e-6,
        normalize_input=True,
        normalize_returns=True,
        encoder_mlp_layers=[512, 512],
        nonlinearity="elu",
        actor_critic_share_weights=True,
        batched_sampling=False,
        # this benchmark's layout: 2 rollout workers, as ours use 2 workers (the default: the core count), on the CPU
        num_workers=2,
        device="cpu",
        n_timesteps=1_000_000,  # this benchmark's cap: the example trains for the default 10^10 env steps
    ),
}
HYPERPARAMETERS["Pendulum-v1"] = dict(
    # sf_examples/mujoco/mujoco_params.py (mujoco_override_defaults), Sample Factory's continuous-control settings
    algo="APPO",
    batched_sampling=False,
    num_envs_per_worker=8,
    worker_num_splits=2,
    train_for_env_steps=10_000_000,  # the horizon of its linearly decayed learning rate
    encoder_mlp_layers=[64, 64],
    env_frameskip=1,
    nonlinearity="tanh",
    batch_size=1024,
    kl_loss_coeff=0.1,
    use_rnn=False,
    adaptive_stddev=False,
    policy_initialization="torch_default",
    reward_scale=1.0,
    rollout=64,
    max_grad_norm=3.5,
    num_epochs=2,
    num_batches_per_epoch=4,
    ppo_clip_ratio=0.2,
    value_loss_coeff=1.3,
    exploration_loss_coeff=0.0,
    learning_rate=0.00295,
    lr_schedule="linear_decay",
    shuffle_minibatches=False,
    gamma=0.99,
    gae_lambda=0.95,
    with_vtrace=False,
    recurrence=1,
    normalize_input=True,
    normalize_returns=True,
    value_bootstrap=True,
    experiment_summaries_interval=3,
    save_every_sec=15,
    serial_mode=False,
    async_rl=False,
    # this benchmark's layout: 2 rollout workers, as ours use 2 workers (the example's: 8), on the CPU
    num_workers=2,
    device="cpu",
    n_timesteps=1_000_000,  # this benchmark's cap
)
HYPERPARAMETERS["PongNoFrameskip-v4"] = dict(
    # sf_examples/atari/atari_params.py (atari_override_defaults), Sample Factory's Atari settings
    algo="APPO",
    summaries_use_frameskip=False,  # the example's True counts frames: env steps here are agent steps (see above)
    use_record_episode_statistics=True,
    encoder_conv_architecture="convnet_atari",
    obs_scale=255.0,
    gamma=0.99,
    env_frameskip=4,
    env_framestack=4,
    exploration_loss_coeff=0.01,
    num_workers=8,
    num_envs_per_worker=1,
    worker_num_splits=1,
    train_for_env_steps=10_000_000,  # the horizon of its linearly decayed learning rate
    nonlinearity="relu",
    kl_loss_coeff=0.0,
    use_rnn=False,
    adaptive_stddev=False,
    reward_scale=1.0,
    with_vtrace=False,
    recurrence=1,
    batch_size=256,
    rollout=128,
    max_grad_norm=0.5,
    num_epochs=4,
    num_batches_per_epoch=4,
    ppo_clip_ratio=0.1,
    value_loss_coeff=0.5,
    exploration_loss="entropy",
    learning_rate=0.00025,
    lr_schedule="linear_decay",
    shuffle_minibatches=False,
    gae_lambda=0.95,
    batched_sampling=False,
    normalize_input=True,
    normalize_returns=True,
    serial_mode=False,
    async_rl=False,
    experiment_summaries_interval=3,
    adam_eps=1e-5,
    device="cpu",  # the default is the GPU
    n_timesteps=10_000_000,  # this benchmark's cap: the atari suite's 10M agent steps
)
# The same settings on HalfCheetah, the MuJoCo example's own task (as mujoco_halfcheetah: HalfCheetah-v4, see above)
HYPERPARAMETERS["HalfCheetah-v5"] = dict(HYPERPARAMETERS["Pendulum-v1"], n_timesteps=10_000_000)
SOURCES = {
    "CartPole-v1": "Sample Factory 2.1.1 sf_examples/train_gym_env.py (its CartPole-v1 command line) and the defaults "
    "of sample_factory/cfg/cfg.py, with 2 rollout workers on the CPU (the module docstring lists the differences)",
    "PongNoFrameskip-v4": "Sample Factory 2.1.1 sf_examples/atari (atari_params.py: its Atari settings, 8 rollout "
    "workers of 1 env; atari_utils.py: its Atari pipeline, also the evaluation's), on the CPU, env steps counted as "
    "agent steps (the module docstring lists the differences)",
    "HalfCheetah-v5": "Sample Factory 2.1.1 sf_examples/mujoco (mujoco_params.py: its continuous-control settings; "
    "mujoco_utils.py: mujoco_halfcheetah, HalfCheetah-v4 in its gymnasium 0.29, also the evaluation's), with 2 "
    "rollout workers on the CPU (the module docstring lists the differences)",
    "Pendulum-v1": "Sample Factory 2.1.1 sf_examples/mujoco/mujoco_params.py (its continuous-control settings), the "
    "env through gymnasium.make as in sf_examples/train_gym_env.py, with 2 rollout workers on the CPU (the module "
    "docstring lists the differences)",
}

#: The settings that are this adapter's, not Sample Factory's command-line options.
_NOT_SF = ("n_timesteps",)
#: Envs whose settings are those of Sample Factory's MuJoCo or Atari example: its parser's defaults are that example's
#: (``mujoco_override_defaults``, ``atari_override_defaults``: they set values the command line does not accept, such as
#: ``lr_schedule="linear_decay"``).
_MUJOCO_EXAMPLE = ("Pendulum-v1", "HalfCheetah-v5")
_ATARI_EXAMPLE = ("PongNoFrameskip-v4",)
#: The MuJoCo example's envs: gymnasium 0.29 (Sample Factory's) has the v4 envs, whose dynamics and rewards the v5 ones
#: (gymnasium 1.x) keep.
_MUJOCO_V4 = {"HalfCheetah-v5": "HalfCheetah-v4"}


def make_sf_atari_env(full_env_name: str, cfg: Any = None, env_config: Any = None, render_mode: str | None = None) -> Any:
    """Sample Factory's Atari pipeline (``sf_examples/atari/atari_utils.py``) for the gymnasium id ``full_env_name``
    (its example names the envs ``atari_pong`` & co). ale-py registers its ids itself with gymnasium 1.x only: here,
    in each of Sample Factory's processes, once."""
    import gymnasium
    from sf_examples.atari.atari_utils import ATARI_ENVS, make_atari_env

    if full_env_name not in gymnasium.registry:
        from ale_py.registration import register_v0_v4_envs

        register_v0_v4_envs()
    (name,) = [spec.name for spec in ATARI_ENVS if spec.env_id == full_env_name]
    return make_atari_env(name, cfg, env_config, render_mode=render_mode)


def make_sf_mujoco_env(full_env_name: str, cfg: Any = None, env_config: Any = None, render_mode: str | None = None) -> Any:
    """Sample Factory's MuJoCo env (``sf_examples/mujoco/mujoco_utils.py``) for the gymnasium id ``full_env_name`` (v5:
    its v4 twin, the one gymnasium 0.29 has)."""
    from sf_examples.mujoco.mujoco_utils import MUJOCO_ENVS, make_mujoco_env

    env_id = _MUJOCO_V4.get(full_env_name, full_env_name)
    (name,) = [spec.name for spec in MUJOCO_ENVS if spec.env_id == env_id]  # "mujoco_halfcheetah" for HalfCheetah-v4
    return make_mujoco_env(name, cfg, env_config, render_mode=render_mode)


def make_env_func(env_id: str) -> Any:
    """The env factory Sample Factory's example for ``env_id`` registers: its Atari pipeline for an Atari id,
    ``gymnasium.make`` otherwise (``train_gym_env.py``). Both are importable by name: Sample Factory pickles its env
    registry into the processes it spawns."""
    if env_id in _ATARI_EXAMPLE or env_id in _MUJOCO_V4:
        import sf_appo  # this module by its name, not as __main__ (its folder is on the path: see registry.py)

        return sf_appo.make_sf_atari_env if env_id in _ATARI_EXAMPLE else sf_appo.make_sf_mujoco_env
    from sf_examples.train_gym_env import make_gym_env_func

    return make_gym_env_func


def sf_argv(
    env_id: str, settings: dict[str, Any], seed: int, train_dir: str, defaults: dict[str, Any] | None = None
) -> list[str]:
    """Sample Factory's command line for ``settings`` (lists as space-separated values, as its parser takes them),
    leaving out those equal to the parser's ``defaults``."""
    argv = [f"--env={env_id}", "--experiment=sf_appo", f"--train_dir={train_dir}", f"--seed={seed}"]
    defaults = defaults or {}
    for name, value in settings.items():
        if name in _NOT_SF or (name in defaults and defaults[name] == value):
            continue
        if isinstance(value, list):
            argv += [f"--{name}", *map(str, value)]
        else:
            argv.append(f"--{name}={value}")
    return argv


def sf_processes() -> list[psutil.Process]:
    """This process's descendants that are Sample Factory's (multiprocessing's resource tracker is not)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if not any("resource_tracker" in part for part in child.cmdline()):
                found.append(child)
    return found


def signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)


def wait_stopped(processes: list[psutil.Process], timeout: float = 10.0) -> None:
    """Wait until the kernel has stopped each process (``SIGSTOP`` is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(psutil.Error):
            while process.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Sample Factory's process {process.pid} did not stop within {timeout} s")
                time.sleep(0.001)


def excuse_suspension(heartbeats: dict[Any, dict[str, float | None]], seconds: float) -> None:
    """Move each heartbeat time the runner recorded (``Runner.heartbeat_dict``: component type -> component id -> the
    time of its last heartbeat, ``None`` before its first) ``seconds`` later: the time its processes spent suspended
    by us, during which no component could beat, is not the component's silence."""
    for times in heartbeats.values():
        for component, beat in times.items():
            if beat is not None:
                times[component] = beat + seconds


def end_processes(timeout: float = 10.0) -> None:
    """Resume, terminate then kill whatever Sample Factory process is left (none after a clean stop)."""
    left = sf_processes()
    signal_all(left, signal.SIGCONT)
    signal_all(left, signal.SIGTERM)
    _, alive = psutil.wait_procs(left, timeout=timeout)
    signal_all(alive, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=timeout)


class FrozenPolicy:
    """The deterministic policy of a copy of the learner's model in this process, refreshed (with Sample Factory's
    processes suspended) at its first call after :meth:`thaw`; see the module docstring."""

    def __init__(self, model: Any, lock: Any):
        self.model = model
        self.lock = lock
        self.shared: dict[str, Any] | None = None  # the learner's state dict, in shared memory
        self.suspended: list[psutil.Process] = []
        self.suspended_at: float | None = None  # time.time() when the processes were suspended
        self.fresh = False  # the copy holds the weights of now, Sample Factory's processes are suspended
        self.final = False  # training is over: the copy holds the last weights, for good

    def freeze(self) -> None:
        """Suspend Sample Factory's processes and copy the learner's weights."""
        if self.shared is None:
            raise RuntimeError("The learner's weights never reached the main process (no model_initialized signal)")
        if not self.lock.acquire(timeout=60):
            raise RuntimeError("The learner's policy lock was not released within 60 s")
        try:
            self.suspended, self.suspended_at = sf_processes(), time.time()
            signal_all(self.suspended, signal.SIGSTOP)
            wait_stopped(self.suspended)
            self.model.load_state_dict(self.shared)
        finally:
            self.lock.release()
        self.fresh = True

    def thaw(self) -> float:
        """Resume Sample Factory's processes (the next call copies the weights again, unless :attr:`final`); return
        the seconds they were suspended (0 when they were not)."""
        signal_all(self.suspended, signal.SIGCONT)
        seconds = time.time() - self.suspended_at if self.suspended_at is not None else 0.0
        self.suspended, self.suspended_at, self.fresh = [], None, False
        return seconds

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        import torch
        from sample_factory.algo.utils.action_distributions import argmax_actions
        from sample_factory.algo.utils.rl_utils import prepare_and_normalize_obs
        from sample_factory.model.model_utils import get_rnn_size

        if not (self.fresh or self.final):
            self.freeze()
        with torch.no_grad():
            normalized = prepare_and_normalize_obs(self.model, {"obs": torch.as_tensor(obs, dtype=torch.float32)})
            rnn_states = torch.zeros(len(obs), get_rnn_size(self.model.cfg))  # unused without an RNN
            self.model(normalized, rnn_states)
            return argmax_actions(self.model.action_distribution()).numpy()


def train(run: PeerRun) -> None:
    import torch
    from sample_factory.algo.runners.runner import AlgoObserver, Runner
    from sample_factory.algo.utils.misc import LEARNER_ENV_STEPS, ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.model.actor_critic import create_actor_critic
    from sample_factory.train import make_runner
    from sf_examples.atari.atari_params import atari_override_defaults
    from sf_examples.mujoco.mujoco_params import mujoco_override_defaults
    from signal_slot.signal_slot import EventLoopObject

    settings = run.hyperparameters
    make_env = make_env_func(run.env_id)
    register_env(run.env_id, make_env)
    train_dir = os.path.join(os.getcwd(), "train_dir")
    parser, partial = parse_sf_args(sf_argv(run.env_id, {}, run.seed, train_dir))
    if run.env_id in _MUJOCO_EXAMPLE:
        mujoco_override_defaults(partial.env, parser)
    if run.env_id in _ATARI_EXAMPLE:
        atari_override_defaults(partial.env, parser)
    defaults = {name: parser.get_default(name) for name in settings if name not in _NOT_SF}
    cfg = parse_full_cfg(parser, sf_argv(run.env_id, settings, run.seed, train_dir, defaults))
    for name, value in settings.items():  # the parser took every setting as given
        if name not in _NOT_SF and getattr(cfg, name) != value:
            raise ValueError(f"Sample Factory parsed {name}={getattr(cfg, name)!r}, expected {value!r}")
    if run.env_id in _ATARI_EXAMPLE or run.env_id in _MUJOCO_V4:  # evaluated on the example's env (frames, v4)
        run.use_eval_env(lambda: make_env(run.env_id, cfg, None))
    cfg, runner = make_runner(cfg)
    stopped: list[StopRun] = []
    failed: list[Exception] = []

    class Observer(AlgoObserver, EventLoopObject):
        def __init__(self) -> None:
            EventLoopObject.__init__(self, runner.event_loop, object_id="sb3_async_peer_run")
            self.policy: FrozenPolicy | None = None

        def on_init(self, runner: Runner) -> None:  # the env info is known, no process started
            model = create_actor_critic(cfg, runner.env_info.obs_space, runner.env_info.action_space)
            model.model_to_device(torch.device("cpu"))
            model.eval()
            self.policy = FrozenPolicy(model, None)

        def on_connect_components(self, runner: Runner) -> None:
            (learner,) = runner.learners.values()
            assert self.policy is not None
            self.policy.lock = learner.param_server.policy_lock
            learner.model_initialized.connect(self.on_model_initialized)
            runner.policy_msg_handlers[LEARNER_ENV_STEPS].append(self.on_env_steps)  # after the runner's own

        def on_model_initialized(self, init_model_data: Any) -> None:
            _, state_dict, _, _ = init_model_data
            assert self.policy is not None
            self.policy.shared = state_dict

        def on_start(self, runner: Runner) -> None:
            run.start()

        def on_env_steps(self, runner: Runner, msg: dict, policy_id: int) -> None:
            policy = self.policy
            if stopped or failed or policy is None or run.started is None or not runner.env_steps[policy_id]:
                return  # stopping, or the learner's report at its start (0 env steps)
            try:
                run.step(runner.env_steps[policy_id], policy)
            except StopRun as stop:
                try:
                    if not policy.fresh:
                        policy.freeze()
                    policy.final = True
                    stopped.append(stop)
                except Exception as error:
                    failed.append(error)
            except Exception as error:  # raised again after Sample Factory stopped (its event loop would swallow it)
                failed.append(error)
            finally:
                excuse_suspension(runner.heartbeat_dict, policy.thaw())
            if stopped or failed:
                runner._stop_training(failed=bool(failed))

    runner.register_observer(Observer())
    try:
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
    finally:
        end_processes()
    if failed:
        raise failed[0]
    if stopped:
        raise stopped[0]
    if status != ExperimentStatus.SUCCESS:
        raise RuntimeError(f"Sample Factory's runner ended with status {status}")


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
