"""``python -m sb3_async.benchmark --suite learners``: how close each learner's update is to the machine's limit.

For each learner (the networks and batch of its zoo entry), in this process, torch on one thread:

- **update**: one update (AE-DDPG's ``train(1)`` and Ape-X's learner batch as the algorithms run them: prioritized
  sample, update, priorities, target refresh, on a replay filled with random transitions; for A3C, a worker's loss
  on a segment of random observations, backward, clipping and the shared optimizer's step); the median of repeated
  calls;
- **before**: the same update without this library's speedups (``Learner.speedups``: SB3's Adam instead of torch's
  fused one; for A3C on the paper's network, the segment's forward pass recomputed with autograd instead of
  backpropagating through the acting passes), timed in alternating rounds with the update;
- **FLOPs** of that update (``torch.utils.flop_counter``: matrix products and convolutions, forward and backward);
- **the same arithmetic alone**: every matrix product and convolution the update ran (their shapes recorded during
  one update), replayed back to back on random tensors: the update without Python, autograd, sampling or optimizer,
  on 1 and on 2 threads;
- **share of the limit**: that arithmetic's time on 1 thread over the update's time (and over the time before): the
  share of the update spent in the arithmetic it cannot do without;
- **where the rest goes**: ``torch.profiler``'s operators by self CPU time for one update (the report's second
  table).

The machine's peak (a 1024 x 1024 matrix product, GFLOP/s on 1 and 2 threads) is in the notes.
"""

from __future__ import annotations

import functools
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.logger import configure
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer

__all__ = ["LEARNERS", "measure_learners", "table_of"]

aten = torch.ops.aten
#: The operators replayed as "the same arithmetic alone".
ARITHMETIC = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default}
ARITHMETIC_BACKWARD = {aten.convolution_backward.default}


@dataclass
class Learner:
    """One learner of the table: what to build, and its one update.

    ``build(reference)`` returns the update; with ``reference=True`` the same update without this library's speedups
    (``speedups`` names them), or None where none applies: the table's "before".
    """

    name: str
    build: Callable[[bool], Callable[[], None] | None]
    speedups: str = ""


def _quiet_logger(model: Any) -> Any:
    model.set_logger(configure(None, []))
    return model


def _random_transitions(model: Any, count: int) -> None:
    """Fill ``model.replay_buffer`` with ``count`` random transitions of the model's spaces."""
    buffer, rng = model.replay_buffer, np.random.default_rng(0)
    space, actions = model.observation_space, model.action_space
    for _ in range(count // 64):
        if space.dtype == np.uint8:
            obs = rng.integers(0, 256, size=(64, 1, *space.shape), dtype=np.uint8)
        else:
            obs = rng.standard_normal((64, 1, *space.shape)).astype(np.float32)
        act = np.stack([actions.sample() for _ in range(64)]).reshape(64, 1, -1)
        rewards, dones = rng.standard_normal((64, 1)).astype(np.float32), np.zeros((64, 1), dtype=np.float32)
        if isinstance(buffer, PrioritizedReplayBuffer):  # Ape-X's: a block at once
            buffer.extend(obs, obs, act, rewards, dones, None)
        else:
            for i in range(64):
                buffer.add(obs[i], obs[i], act[i], rewards[i], dones[i], [{}])


def _stock_adam(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the policy's Adam as SB3 builds it (torch's per-tensor loop on the CPU), not the fused one."""
    policy_kwargs = dict(kwargs.get("policy_kwargs") or {})
    policy_kwargs.update(optimizer_class=torch.optim.Adam, optimizer_kwargs={})
    return {**kwargs, "policy_kwargs": policy_kwargs}


def _ae_ddpg(env_id: str, **kwargs: Any) -> Callable[[bool], Callable[[], None] | None]:
    def build(reference: bool) -> Callable[[], None]:
        from sb3_async import AEDDPG

        model = _quiet_logger(
            AEDDPG(
                "MlpPolicy",
                env_id,
                n_envs=1,
                pool_kwargs=dict(n_hosts=0),
                seed=0,
                learning_starts=0,
                **(_stock_adam(kwargs) if reference else kwargs),
            )
        )
        model._setup_learn(1)
        _random_transitions(model, 10_000)
        return lambda: model.train(1, model.batch_size)

    return build


def _apex(algo: str, env: Any, policy: str, adam: bool, **kwargs: Any) -> Callable[[bool], Callable[[], None] | None]:
    """``adam``: the learner's optimizer is the fused Adam (its "before": SB3's); else the paper's RMSProp (no before)."""

    def build(reference: bool) -> Callable[[], None] | None:
        import sb3_async

        if reference and not adam:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            algorithm = getattr(sb3_async, algo)
            args = _stock_adam(kwargs) if reference else kwargs
            model = _quiet_logger(algorithm(policy, env() if callable(env) else env, seed=0, **args))
        model._share_state()
        _random_transitions(model, 10_000)
        model.policy.set_training_mode(True)
        return model.learner_step

    return build


def _a3c(env: Any, policy: str, n_envs: int, **kwargs: Any) -> Callable[[bool], Callable[[], None] | None]:
    """A worker's update on a segment (supp. Algorithm S3): the loss, backward, clipping, the shared optimizer's step.
    On the paper's network the worker backpropagates through its acting passes' activations
    (:class:`~sb3_async.a3c.recorded_activations.RecordedActivationsUpdate`); its "before" recomputes the segment's
    forward pass with autograd."""

    def build(reference: bool) -> Callable[[], None] | None:
        from sb3_async import A3C
        from sb3_async.a3c.recorded_activations import RecordedActivationsUpdate
        from sb3_async.common.torch_utils import clip_grad_norm

        model = A3C(policy, env() if callable(env) else env, n_workers=1, n_envs_per_worker=n_envs, seed=0, **kwargs)
        policy_net, batch = model.policy, model.n_steps * n_envs
        recorded = RecordedActivationsUpdate(policy_net) if RecordedActivationsUpdate.supports(policy_net) else None
        if reference and recorded is None:
            return None
        space = model.observation_space
        if space.dtype == np.uint8:  # frames as the workers' envs give them: channel-first views of channel-last
            channels, *pixels = space.shape or ()
            obs = torch.randint(0, 256, (batch, *pixels, channels), dtype=torch.uint8).permute(0, 3, 1, 2)
        else:
            obs = torch.randn(batch, *(space.shape or ()))
        actions = torch.as_tensor(np.stack([model.action_space.sample() for _ in range(batch)]))
        returns = torch.randn(batch)
        if recorded is not None and not reference:  # the segment's acting passes, n_envs observations each
            for step in range(model.n_steps):
                recorded.act(obs[step * n_envs : (step + 1) * n_envs].numpy())
            evaluate = recorded.evaluate_actions
        else:
            evaluate = functools.partial(policy_net.evaluate_actions, obs)

        def update() -> None:
            values, log_prob, entropy = evaluate(actions)
            advantages = returns - values.flatten().detach()
            loss = -(advantages * log_prob).mean() + model.vf_coef * torch.nn.functional.mse_loss(values.flatten(), returns)
            if entropy is not None:
                loss = loss - model.ent_coef * entropy.mean()
            policy_net.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if recorded is not None and not reference:
                recorded.backward()
            if model.gradient_sharing.max_grad_norm is not None:
                clip_grad_norm(list(policy_net.parameters()), model.gradient_sharing.max_grad_norm)
            policy_net.optimizer.step()

        return update

    return build


def _pong() -> Any:
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.vec_env import VecFrameStack

    from sb3_async.common.atari_wrappers import make_atari_env

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), n_stack=4)


#: The learners, each with its zoo entry's networks and batch (zoo_configs/).
LEARNERS = [
    Learner(
        "AE-DDPG Pendulum-v1",
        _ae_ddpg("Pendulum-v1", policy_kwargs=dict(net_arch=dict(pi=[128, 128], qf=[128, 128]))),
        "fused Adam",
    ),
    Learner("AE-DDPG Walker2d-v5", _ae_ddpg("Walker2d-v5", policy_kwargs=dict(n_critics=2)), "fused Adam"),
    Learner(
        "Ape-X DQN CartPole-v1",
        _apex(
            "ApeXDQN",
            "CartPole-v1",
            "MlpPolicy",
            adam=True,
            batch_size=256,
            buffer_size=20_000,
            policy_kwargs=dict(net_arch=[64, 64], optimizer_class=torch.optim.Adam, optimizer_kwargs=dict(fused=True)),
        ),
        "fused Adam",
    ),
    Learner("Ape-X DQN Pong", _apex("ApeXDQN", _pong, "CnnPolicy", adam=False, buffer_size=20_000)),
    Learner(
        "Ape-X DPG Pendulum-v1",
        _apex("ApeXDPG", "Pendulum-v1", "MlpPolicy", adam=True, batch_size=128, buffer_size=20_000),
        "fused Adam",
    ),
    Learner("A3C CartPole-v1", _a3c("CartPole-v1", "MlpPolicy", n_envs=8)),
    Learner(
        "A3C Pong",
        _a3c(_pong, "CnnPolicy", n_envs=8, max_grad_norm=40.0, ent_coef=0.01),
        "backward through the acting passes",
    ),
]


class _Recorder(TorchDispatchMode):
    """Records the arithmetic operators an update runs, with their arguments' shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in ARITHMETIC or func in ARITHMETIC_BACKWARD:
            spec = tuple(
                ("tensor", tuple(a.shape), a.dtype, a.stride()) if isinstance(a, torch.Tensor) else ("value", a) for a in args
            )
            self.calls.append((func, spec))
        return func(*args, **(kwargs or {}))


def _materialize(spec: tuple[Any, ...]) -> list[Any]:
    args = []
    for item in spec:
        if item[0] == "tensor":
            _, shape, dtype, stride = item
            tensor = torch.empty_strided(shape, stride, dtype=dtype)
            tensor.copy_(torch.randn(shape)) if dtype.is_floating_point else tensor.zero_()
            args.append(tensor)
        else:
            args.append(item[1])
    return args


def _median_seconds(fn: Callable[[], Any], seconds: float, least: int = 5) -> float:
    fn()  # warm-up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < least or time.perf_counter() - start < seconds:
        before = time.perf_counter()
        fn()
        times.append(time.perf_counter() - before)
    return statistics.median(times)


def peak_gflops(threads: int, seconds: float) -> float:
    """GFLOP/s of a 1024 x 1024 float32 matrix product on ``threads`` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
        return 2 * 1024**3 / _median_seconds(lambda: torch.mm(a, b), seconds) / 1e9
    finally:
        torch.set_num_threads(before)


def _interleaved_medians(updates: list[Callable[[], Any]], seconds: float, rounds: int = 4) -> list[float]:
    """The median time of each of ``updates``, timed in alternating rounds (``seconds`` each in all): the same load
    of the machine for each."""
    times: list[list[float]] = [[] for _ in updates]
    for _ in range(rounds):
        for i, update in enumerate(updates):
            times[i].append(_median_seconds(update, seconds / rounds, least=3))
    return [statistics.median(t) for t in times]


def measure_learner(learner: Learner, seconds: float) -> dict[str, Any]:
    torch.set_num_threads(1)
    update = learner.build(False)
    assert update is not None
    before = learner.build(True)
    update()  # warm-up (optimizer state, first allocations)
    if before is not None:
        before()
        update_s, before_s = _interleaved_medians([update, before], seconds)
    else:
        update_s, before_s = _interleaved_medians([update], seconds)[0], None
    with FlopCounterMode(display=False) as counter:
        update()
    recorder = _Recorder()
    with recorder:
        update()
    replay = [(func, _materialize(spec)) for func, spec in recorder.calls]

    def arithmetic() -> None:
        with torch.no_grad():
            for func, args in replay:
                func(*args)

    alone = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        alone[threads] = _median_seconds(arithmetic, seconds)
    torch.set_num_threads(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            update()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    return dict(
        update_ms=1e3 * update_s,
        before_ms=None if before_s is None else 1e3 * before_s,
        speedups=learner.speedups,
        flops=int(counter.get_total_flops()),
        arithmetic_ms_1=1e3 * alone[1],
        arithmetic_ms_2=1e3 * alone[2],
        operators=len(replay),
        profile=[dict(name=e.key, share=e.self_cpu_time_total / max(total, 1), calls=e.count // 5) for e in events],
    )


def measure_learners(seconds: float, only: list[str] | None = None) -> dict[str, Any]:
    """Every learner's measures (``only``: the learners whose name contains one of these), and the machine's peak."""
    results: dict[str, Any] = {"learners": {}, "peak_gflops": {}}
    for threads in (1, 2):
        results["peak_gflops"][str(threads)] = peak_gflops(threads, seconds)
    for learner in LEARNERS:
        if only and not any(word in learner.name for word in only):
            continue
        results["learners"][learner.name] = measure_learner(learner, seconds)
        print(learner.name, {k: v for k, v in results["learners"][learner.name].items() if k != "profile"}, flush=True)
    return results


def table_of(record: dict[str, Any]) -> dict[str, Any]:
    """The published table: one row per learner, its update without and with this library's speedups."""
    rows = []
    for name, row in record["learners"].items():
        gflops = row["flops"] / (row["update_ms"] / 1e3) / 1e9
        before = row.get("before_ms")
        limit = row["arithmetic_ms_1"]
        rows.append(
            [
                name,
                row.get("speedups") or "none",
                "=" if before is None else f"{before:.2f}",
                f"{row['update_ms']:.2f}",
                f"{row['flops'] / 1e6:,.1f}",
                f"{gflops:.1f}",
                f"{limit:.2f}",
                f"{row['arithmetic_ms_2']:.2f}",
                "=" if before is None else f"{limit / before:.2f}",
                f"{limit / row['update_ms']:.2f}",
                ", ".join(f"{p['name']} {100 * p['share']:.0f}%" for p in row["profile"][:3]),
            ]
        )
    peak = record["peak_gflops"]
    return dict(
        title="Learners: one update against the same arithmetic alone (torch on 1 thread)",
        columns=[
            "learner",
            "speedups",
            "update before (ms)",
            "update (ms)",
            "MFLOP",
            "GFLOP/s",
            "arithmetic alone, 1 thread (ms)",
            "2 threads (ms)",
            "share of the limit before",
            "share of the limit",
            "most self CPU time (profiler)",
        ],
        rows=rows,
        notes=(
            '"before": the same update without the speedups named, timed in alternating rounds with it ("=": none '
            'applies); "arithmetic alone": the update\'s matrix products and convolutions, shapes recorded during one '
            'update, replayed back to back on random tensors; "share of the limit": its 1-thread time over the '
            "update's time (before: over the time before). "
            f"Peak of a 1024 x 1024 matrix product: {peak['1']:.0f} GFLOP/s on 1 thread, {peak['2']:.0f} on "
            f"2. `python -m sb3_async.benchmark --suite learners --budget-seconds {record['args']['seconds']:g}`."
        ),
    )
