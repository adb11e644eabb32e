"""What the benchmark knows: the envs (with their thresholds) and the algorithms (ours and their peers).

New algorithms join the benchmark with one :func:`register_algorithm` call in the "Registered algorithms" section at
the end of this module (or from any module imported before the benchmark runs): a name (the RL Zoo's ``--algo``
value), a library, the peer(s) it is compared with, and the envs it is benchmarked on. The suites
(:mod:`sb3_async.benchmark.suites`) pick their algorithms from this table; the runner and the report never name an
algorithm.

Hyperparameters of ours and of SB3's algorithms come from the RL Zoo's YAML files: ``zoo_configs/<name>.yml`` for
ours (the file :mod:`sb3_async.zoo` registers), ``rl_zoo3/hyperparams/<name>.yml`` (shipped with the zoo) for SB3's.

External peers (library ``"external"``: Sample Factory, TorchRL, Tianshou, ...) each have an *adapter*, a script
that trains with its library's own components and settings (taken from the library's examples, the source named
beside each value) under the protocol of :mod:`sb3_async.benchmark.peers.protocol`. It runs in a fresh process under
the Python of the peer's own virtual environment (``python_env``), so the benchmark never imports it nor its library.
The adapters are not part of the package: a folder of them registers them with a ``registry.py`` that
:func:`load_peers` imports (``python -m sb3_async.benchmark --peers-from DIR``; the repository's are in
``benchmarks/peers``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

#: The libraries an algorithm can come from: ours, stock SB3 (through the RL Zoo) and external peers (an adapter each).
LIBRARIES = ("sb3_async", "sb3", "external")

#: The Python environment of external peers unless registered otherwise (``benchmarks/peers/make_peer_venvs.sh``).
DEFAULT_PYTHON_ENV = "peers"

#: The script that builds each peers' environment (``.venv-NAME`` at the repository's root).
VENV_SCRIPTS = {"peers": "benchmarks/peers/make_peer_venvs.sh", "sf": "benchmarks/peers/make_sf_venv.sh"}


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
    :param library: ``"sb3_async"`` (ours), ``"sb3"`` (a stock SB3 peer) or ``"external"`` (a peer from another
        library, run by its adapter)
    :param peers: for ours, the algorithms it is compared with (the ratio's denominators)
    :param envs: the env ids it is benchmarked on
    :param config: the zoo YAML file of its hyperparameters; None: ``zoo_configs/<name>.yml`` for ours, the zoo's
        shipped ``hyperparams/<name>.yml`` for SB3's
    :param config_aliases: env id -> the YAML entry to use when the file has no entry of that id (e.g. the zoo ships
        ``HalfCheetah-v4`` entries only: ``{"HalfCheetah-v5": "HalfCheetah-v4"}``); recorded with each run
    :param optimizers: the values its ``optimizer`` argument accepts (the ``optimizers`` suite sweeps them)
    :param adapter: for an external peer, what runs it: the path of a script (``python ADAPTER.py SPEC.json
        RESULT.json``) or a module name (``python -m ADAPTER SPEC.json RESULT.json``)
    :param python_env: for an external peer, the name of the virtual environment it runs in (``--peer-python
        NAME=PATH``; by default ``.venv-NAME/bin/python`` at the repository's root)
    """

    name: str
    library: str
    peers: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    config: Path | None = None
    config_aliases: Mapping[str, str] = field(default_factory=dict)
    optimizers: tuple[str, ...] = ()
    adapter: str | None = None
    python_env: str | None = None

    @property
    def is_ours(self) -> bool:
        return self.library == "sb3_async"

    @property
    def is_external(self) -> bool:
        return self.library == "external"

    def config_path(self) -> Path:
        """The YAML file its hyperparameters come from (an external peer's: its adapter's source file)."""
        if self.config is not None:
            return Path(self.config)
        if self.adapter is not None:
            return adapter_path(self.adapter)
        if self.is_ours:
            from sb3_async import zoo

            entry = zoo.zoo_algorithm(self.name)
            return entry.config_path if entry is not None else zoo.CONFIG_DIR / f"{self.name}.yml"
        import rl_zoo3

        return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{self.name}.yml"


def is_adapter_file(adapter: str) -> bool:
    """Whether ``adapter`` names a script (run as ``python ADAPTER``) rather than a module (``python -m ADAPTER``)."""
    return adapter.endswith(".py")


def adapter_path(module: str) -> Path:
    """The source file of an adapter (a script's path, or a module found without executing it: its library may not be
    installed here).

    :raises ValueError: when no such script or module exists
    """
    if is_adapter_file(module):
        if not Path(module).is_file():
            raise ValueError(f"Invalid adapter={module!r}: no such file")
        return Path(module)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"Invalid adapter={module!r}: no such module")
    return Path(spec.origin)


Entry = TypeVar("Entry")


def lookup(table: Mapping[str, Entry], name: str, kind: str) -> Entry:
    """``table[name]``, or a ``ValueError`` naming ``kind`` and the registered names."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"Unknown {kind} {name!r}: expected one of {', '.join(table)}") from None


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
    adapter: str | None = None,
    python_env: str | None = None,
) -> AlgorithmEntry:
    """Add an algorithm to the benchmark (see :class:`AlgorithmEntry` for the arguments).

    Ours are compared with their ``peers``; the peers must be registered too (in any order) and list the same envs
    to be run on them. An external peer needs its ``adapter`` (its ``python_env`` defaults to
    :data:`DEFAULT_PYTHON_ENV`). Registering a name again replaces its entry.

    :raises ValueError: for an unknown library or env, a peer given peers, an external peer without an adapter or an
        adapter given to another library
    """
    if library not in LIBRARIES:
        raise ValueError(f"Invalid library={library!r} for {name!r}: expected one of {', '.join(LIBRARIES)}")
    peers = (peers,) if isinstance(peers, str) else tuple(peers)
    if library != "sb3_async" and peers:
        raise ValueError(f"{name!r} is a peer ({library}): only sb3_async algorithms have peers")
    if (library == "external") != (adapter is not None):
        raise ValueError(
            f"Invalid adapter={adapter!r} for {name!r} ({library}): an external peer needs one, the others take none"
        )
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
        adapter=adapter,
        python_env=(python_env or DEFAULT_PYTHON_ENV) if library == "external" else None,
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
        pass
    if any(name in entry.peers for entry in _ALGORITHMS.values()):
        raise ValueError(
            f"Unknown algorithm {name!r}: it is an external peer, whose adapter is not part of the package; register the "
            f"repository's adapters with --peers-from {PEERS_FOLDER} (python -m sb3_async.benchmark ... --peers-from "
            f"{PEERS_FOLDER})"
        )
    raise ValueError(
        f"Unknown algorithm {name!r}: expected one of {', '.join(sorted(_ALGORITHMS))} (external peers join with "
        f"--peers-from DIR, e.g. --peers-from {PEERS_FOLDER})"
    )


#: The repository's folder of external peers: their adapters, ``registry.py`` and the scripts building their venvs.
PEERS_FOLDER = "benchmarks/peers"


def load_peers(folder: str | Path) -> list[str]:
    """Register the external peers of ``folder`` (``--peers-from``): import ``folder/registry.py``, whose
    :func:`register_algorithm` calls name each peer's adapter (a script of that folder, usually) and environment.

    :returns: the names it registered (or registered again), in order
    :raises ValueError: when ``folder`` has no ``registry.py``
    """
    path = Path(folder) / "registry.py"
    if not path.is_file():
        raise ValueError(
            f"Invalid --peers-from {str(folder)!r}: no {path} (a folder of adapters registers them there; the "
            f"repository's: {PEERS_FOLDER})"
        )
    before = dict(_ALGORITHMS)
    # a name of its own per folder: two folders' registry.py never replace each other in sys.modules
    module_name = f"_sb3_async_peers_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return [name for name, entry in _ALGORITHMS.items() if before.get(name) is not entry]


def get_env(env_id: str) -> EnvEntry:
    """The entry of ``env_id``.

    :raises ValueError: naming the registered envs
    """
    return lookup(_ENVS, env_id, "env")


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
# Walker2d-v5: the same 3000 (a walker that keeps walking to the 1000-step limit; gymnasium sets no reward_threshold).
register_env("Walker2d-v5", 3000, requires="pip install 'sb3-async[mujoco]'")
register_env("PongNoFrameskip-v4", 18, requires="pip install 'sb3-async[atari]'")
# CartPole-v1 with its velocities masked (rl_zoo3's MaskVelocityWrapper; the zoo registers the id): a task that needs
# memory; CartPole's threshold.
register_env("CartPoleNoVel-v1", 475)

# --- Registered algorithms: one call each ----------------------------------------------------------------------------

PONG = "PongNoFrameskip-v4"
# The zoo ships MuJoCo entries for the v4 envs only; the v5 envs have the same dynamics and spaces.
_MUJOCO_ALIASES = {"HalfCheetah-v5": "HalfCheetah-v4", "Hopper-v5": "Hopper-v4", "Walker2d-v5": "Walker2d-v4"}

register_algorithm(
    "a3c",
    "sb3_async",
    # ppo_lstm: sb3-contrib's RecurrentPPO, the peer of A3C-LSTM on CartPoleNoVel-v1
    peers=("a2c", "ppo_lstm", "torchrl_ppo", "sf_appo"),
    envs=("CartPole-v1", "LunarLander-v3", "Pendulum-v1", "HalfCheetah-v5", PONG, "CartPoleNoVel-v1"),
    optimizers=("shared_rmsprop", "rmsprop", "sgd"),
)
register_algorithm("ppo_lstm", "sb3", envs=("CartPoleNoVel-v1",))
register_algorithm(
    "a2c", "sb3", envs=("CartPole-v1", "LunarLander-v3", "Pendulum-v1", "HalfCheetah-v5", PONG), config_aliases=_MUJOCO_ALIASES
)
_DQN_PEERS = ("dqn", "tianshou_dqn", "torchrl_dqn")
for _name in ("async_one_step_q", "async_sarsa", "async_n_step_q"):
    register_algorithm(
        _name,
        "sb3_async",
        peers=_DQN_PEERS,
        envs=("CartPole-v1", "LunarLander-v3", PONG),
        optimizers=("shared_rmsprop", "rmsprop", "sgd"),
    )
register_algorithm("apex_dqn", "sb3_async", peers=_DQN_PEERS, envs=("CartPole-v1", "LunarLander-v3", PONG))
_CONTINUOUS_PEERS = ("td3", "ddpg", "tianshou_td3", "tianshou_ddpg", "torchrl_td3")
register_algorithm("apex_dpg", "sb3_async", peers=_CONTINUOUS_PEERS, envs=("Pendulum-v1",))
_MUJOCO = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
_OFF_POLICY_CONTINUOUS = ("Pendulum-v1", *_MUJOCO)
register_algorithm("ae_ddpg", "sb3_async", peers=_CONTINUOUS_PEERS, envs=_OFF_POLICY_CONTINUOUS)
register_algorithm("dqn", "sb3", envs=("CartPole-v1", "LunarLander-v3", PONG))
register_algorithm("ddpg", "sb3", envs=_OFF_POLICY_CONTINUOUS, config_aliases=_MUJOCO_ALIASES)
register_algorithm("td3", "sb3", envs=_OFF_POLICY_CONTINUOUS, config_aliases=_MUJOCO_ALIASES)

# External peers (Sample Factory, TorchRL, Tianshou) are not registered here: the peers above name them, and
# `--peers-from benchmarks/peers` registers their adapters (benchmarks/peers/registry.py); until then peers_of() leaves
# them out.
