"""What the benchmark knows: the envs (with their thresholds) and the algorithms (ours and their SB3 peers).

New algorithms join the benchmark with one :func:`register_algorithm` call in the "Registered algorithms" section at
the end of this module (or from any module imported before the benchmark runs): a name (the RL Zoo's ``--algo``
value), a library, the SB3 peer(s) it is compared with, and the envs it is benchmarked on. The suites
(:mod:`sb3_async.benchmark.suites`) pick their algorithms from this table; the runner and the report never name an
algorithm.

Hyperparameters always come from the RL Zoo's YAML files: ``zoo_configs/<name>.yml`` for ours (the file
:mod:`sb3_async.zoo` registers), ``rl_zoo3/hyperparams/<name>.yml`` (shipped with the zoo) for SB3's algorithms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

#: The two libraries an algorithm can come from.
LIBRARIES = ("sb3_async", "sb3")


@dataclass(frozen=True)
class EnvEntry:
    """An env of the benchmark.

    :param env_id: the Gymnasium id
    :param threshold: the deterministic evaluation mean (10 episodes) that counts as solved (docs/benchmarks.md)
    :param requires: what to install when the env cannot be built (shown in error messages)
    """

    env_id: str
    threshold: float
    requires: str = ""


@dataclass(frozen=True)
class AlgorithmEntry:
    """An algorithm of the benchmark.

    :param name: the RL Zoo's ``--algo`` value (``"a3c"``, ``"a2c"``, ``"dqn"``, ...)
    :param library: ``"sb3_async"`` (ours) or ``"sb3"`` (a stock SB3 peer)
    :param peers: for ours, the SB3 algorithms it is compared with (the ratio's denominators)
    :param envs: the env ids it is benchmarked on
    :param config: the zoo YAML file of its hyperparameters; None: ``zoo_configs/<name>.yml`` for ours, the zoo's
        shipped ``hyperparams/<name>.yml`` for SB3's
    :param config_aliases: env id -> the YAML entry to use when the file has no entry of that id (e.g. the zoo ships
        ``HalfCheetah-v4`` entries only: ``{"HalfCheetah-v5": "HalfCheetah-v4"}``); recorded with each run
    :param optimizers: the values its ``optimizer`` argument accepts (the ``optimizers`` suite sweeps them)
    """

    name: str
    library: str
    peers: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    config: Path | None = None
    config_aliases: Mapping[str, str] = field(default_factory=dict)
    optimizers: tuple[str, ...] = ()

    @property
    def is_ours(self) -> bool:
        return self.library == "sb3_async"

    def config_path(self) -> Path:
        """The YAML file its hyperparameters come from."""
        if self.config is not None:
            return Path(self.config)
        if self.is_ours:
            from sb3_async import zoo

            entry = zoo.zoo_algorithm(self.name)
            return entry.config_path if entry is not None else zoo.CONFIG_DIR / f"{self.name}.yml"
        import rl_zoo3

        return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{self.name}.yml"


_ENVS: dict[str, EnvEntry] = {}
_ALGORITHMS: dict[str, AlgorithmEntry] = {}

#: Read-only views of the tables.
ENVS: Mapping[str, EnvEntry] = MappingProxyType(_ENVS)
ALGORITHMS: Mapping[str, AlgorithmEntry] = MappingProxyType(_ALGORITHMS)


def register_env(env_id: str, threshold: float, requires: str = "") -> EnvEntry:
    """Add an env (or replace its entry) with the evaluation mean that counts as solved."""
    entry = EnvEntry(env_id, float(threshold), requires)
    _ENVS[env_id] = entry
    return entry


def register_algorithm(
    name: str,
    library: str,
    envs: Iterable[str],
    peers: str | Sequence[str] = (),
    config: str | Path | None = None,
    config_aliases: Mapping[str, str] | None = None,
    optimizers: Sequence[str] = (),
) -> AlgorithmEntry:
    """Add an algorithm to the benchmark (see :class:`AlgorithmEntry` for the arguments).

    Ours are compared with their ``peers``; the peers must be registered too (in any order) and list the same envs
    to be run on them. Registering a name again replaces its entry.

    :raises ValueError: for an unknown library or env, or an SB3 algorithm given peers
    """
    if library not in LIBRARIES:
        raise ValueError(f"Invalid library={library!r} for {name!r}: expected one of {', '.join(LIBRARIES)}")
    peers = (peers,) if isinstance(peers, str) else tuple(peers)
    if library == "sb3" and peers:
        raise ValueError(f"{name!r} is an SB3 algorithm: only sb3_async algorithms have peers")
    envs = tuple(envs)
    unknown = [env_id for env_id in envs if env_id not in _ENVS]
    if unknown:
        raise ValueError(
            f"Unknown env(s) {', '.join(unknown)} for {name!r}: register them first with register_env() "
            f"(known: {', '.join(_ENVS)})"
        )
    entry = AlgorithmEntry(
        name=name,
        library=library,
        peers=peers,
        envs=envs,
        config=None if config is None else Path(config),
        config_aliases=MappingProxyType(dict(config_aliases or {})),
        optimizers=tuple(optimizers),
    )
    _ALGORITHMS[name] = entry
    return entry


def get_algorithm(name: str) -> AlgorithmEntry:
    """The entry of ``name``.

    :raises ValueError: naming the registered algorithms
    """
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"Unknown algorithm {name!r}: expected one of {', '.join(sorted(_ALGORITHMS))}") from None


def get_env(env_id: str) -> EnvEntry:
    """The entry of ``env_id``.

    :raises ValueError: naming the registered envs
    """
    try:
        return _ENVS[env_id]
    except KeyError:
        raise ValueError(f"Unknown env {env_id!r}: expected one of {', '.join(_ENVS)}") from None


def peers_of(name: str) -> tuple[str, ...]:
    """The registered peers of ``name`` (none for SB3's algorithms)."""
    return tuple(peer for peer in get_algorithm(name).peers if peer in _ALGORITHMS)


# --- Registered envs: thresholds as in docs/benchmarks.md -------------------------------------------------------------

register_env("CartPole-v1", 475)
register_env("LunarLander-v3", 200, requires="pip install 'sb3-async[box2d]'")
register_env("Pendulum-v1", -200)
register_env("HalfCheetah-v5", 3000, requires="pip install 'sb3-async[mujoco]'")
# Hopper-v5: a hopper that keeps hopping forward to the 1000-step limit scores ~3000 (gymnasium's reward_threshold is
# 3800; HalfCheetah's 3000 is likewise below its 4800).
register_env("Hopper-v5", 3000, requires="pip install 'sb3-async[mujoco]'")
register_env("PongNoFrameskip-v4", 18, requires="pip install 'sb3-async[atari]'")
# CartPole-v1 with its velocities masked (rl_zoo3's MaskVelocityWrapper; the zoo registers the id): a task that needs
# memory; CartPole's threshold.
register_env("CartPoleNoVel-v1", 475)

# --- Registered algorithms: one call each ----------------------------------------------------------------------------

PONG = "PongNoFrameskip-v4"
# The zoo ships MuJoCo entries for the v4 envs only; the v5 envs have the same dynamics and spaces.
_MUJOCO_ALIASES = {"HalfCheetah-v5": "HalfCheetah-v4", "Hopper-v5": "Hopper-v4"}

register_algorithm(
    "a3c",
    "sb3_async",
    peers=("a2c", "ppo_lstm"),  # ppo_lstm: sb3-contrib's RecurrentPPO, the peer of A3C-LSTM on CartPoleNoVel-v1
    envs=("CartPole-v1", "LunarLander-v3", "Pendulum-v1", "HalfCheetah-v5", PONG, "CartPoleNoVel-v1"),
    optimizers=("shared_rmsprop", "rmsprop", "sgd"),
)
register_algorithm("ppo_lstm", "sb3", envs=("CartPoleNoVel-v1",))
register_algorithm(
    "a2c", "sb3", envs=("CartPole-v1", "LunarLander-v3", "Pendulum-v1", "HalfCheetah-v5", PONG), config_aliases=_MUJOCO_ALIASES
)
for _name in ("async_one_step_q", "async_sarsa", "async_n_step_q"):
    register_algorithm(
        _name,
        "sb3_async",
        peers="dqn",
        envs=("CartPole-v1", "LunarLander-v3", PONG),
        optimizers=("shared_rmsprop", "rmsprop", "sgd"),
    )
register_algorithm("apex_dqn", "sb3_async", peers="dqn", envs=("CartPole-v1", "LunarLander-v3", PONG))
register_algorithm("apex_dpg", "sb3_async", peers=("td3", "ddpg"), envs=("Pendulum-v1",))
_OFF_POLICY_CONTINUOUS = ("Pendulum-v1", "HalfCheetah-v5", "Hopper-v5")
register_algorithm("ae_ddpg", "sb3_async", peers=("td3", "ddpg"), envs=_OFF_POLICY_CONTINUOUS)
register_algorithm("dqn", "sb3", envs=("CartPole-v1", "LunarLander-v3", PONG))
register_algorithm("ddpg", "sb3", envs=_OFF_POLICY_CONTINUOUS, config_aliases=_MUJOCO_ALIASES)
register_algorithm("td3", "sb3", envs=_OFF_POLICY_CONTINUOUS, config_aliases=_MUJOCO_ALIASES)
