"""The zoo's own ``train``, ``enjoy`` and ``record_video`` commands with our algorithms: :func:`run_zoo` registers
them, completes the command line (:func:`zoo_argv`: our YAML files, the ``logs`` folder), registers a PettingZoo
``--env`` (:func:`~sb3_async.zoo.pettingzoo_envs.pettingzoo_envs`) and runs the zoo's script, so every zoo flag works."""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from sb3_contrib.common.maskable.utils import get_action_masks

from sb3_async.common.masks import masking_supported
from sb3_async.zoo.algorithms import CONFIG_DIR, ZOO_ALGORITHMS, register, zoo_algorithm
from sb3_async.zoo.experiment import BudgetedTrialEvalCallback, ZooExperimentManager
from sb3_async.zoo.pettingzoo_envs import make_pettingzoo_vec_env, pettingzoo_envs


def _pre_parse(argv: Sequence[str], options: dict[str, tuple[str, ...]], algo_default: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--algo", default=algo_default)
    for dest, flags in options.items():
        parser.add_argument(*flags, dest=dest, default=None)
    namespace, _ = parser.parse_known_args(list(argv))
    return namespace


def zoo_argv(argv: Sequence[str], script: str) -> list[str]:
    """``argv`` for the zoo's ``script`` (``"train"``, ``"enjoy"`` or ``"record_video"``), with our defaults added
    for our algorithms.

    - ``train``: ``--conf-file zoo_configs/<algo>.yml`` unless a config file is given; ``--vec-env subproc``
      becomes ``dummy``, with a note on stderr: the envs the zoo builds are only a template (the workers, separate
      processes already, build their own copies), and a ``SubprocVecEnv`` cannot be copied to them;
    - ``enjoy`` and ``record_video``: ``--folder logs`` (where ``train`` saves) unless a folder is given: the zoo's default,
      ``rl-trained-agents``, would try to download the agent from the Hugging Face Hub.

    Other algorithms' arguments pass unchanged.
    """
    argv = list(argv)
    if script == "train":
        args = _pre_parse(argv, {"conf_file": ("-conf", "--conf-file"), "vec_env": ("--vec-env",)}, algo_default="ppo")
        entry = zoo_algorithm(args.algo)
        if entry is not None and args.vec_env == "subproc":
            print(
                f"sb3_async: --vec-env subproc is replaced by dummy for {args.algo}: its workers are separate "
                "processes already (n_workers), each stepping its own copies of the env",
                file=sys.stderr,
            )
            argv += ["--vec-env", "dummy"]
        if entry is not None and args.conf_file is None:
            if not entry.config_path.is_file():
                raise FileNotFoundError(
                    f"No zoo config for {args.algo!r} at {entry.config_path}: pass one with --conf-file PATH"
                )
            argv += ["--conf-file", str(entry.config_path)]
    elif script in ("enjoy", "record_video"):
        args = _pre_parse(argv, {"folder": ("-f", "--folder")}, algo_default="ppo")
        if zoo_algorithm(args.algo) is not None and args.folder is None:
            argv += ["--folder", "logs"]
    else:
        raise ValueError(f"Invalid script={script!r}: expected 'train', 'enjoy' or 'record_video'")
    return argv


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = [saved[0] if saved else "sb3_async", *argv]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _rebound(module: ModuleType, name: str, value: Any) -> Iterator[None]:
    """``module.<name>`` is ``value`` while the context lasts, then what it was.

    The one hook into the zoo's modules, used where the zoo's scripts offer no parameter (see the calls in
    :func:`run_zoo`); it replaces a name the script looks up, never code of the zoo's."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def cli_help(script: str) -> str:
    """What ``--help`` says of sb3_async before the zoo's own help for ``script``."""
    names = ", ".join(entry.name for entry in ZOO_ALGORITHMS)
    lines = [
        f"sb3_async: the RL Zoo's own {script} script, with sb3_async's algorithms registered ({names}).",
        "For these algorithms:",
    ]
    if script == "train":
        lines += [
            f"  - hyperparameters come from {CONFIG_DIR}/<algo>.yml unless --conf-file is given;",
            "  - n_envs in those files is the total number of envs: n_workers x n_envs_per_worker (override with",
            "    -params n_envs:16 n_workers:2 n_envs_per_worker:8);",
            "  - --vec-env subproc becomes dummy: the workers are separate processes already, each stepping its own envs;",
            "  - models are saved under logs/<algo>/<env>_<run id>/ (-f/--log-folder changes logs/);",
            "  - -optimize --trial-seconds S: each trial trains for S seconds (evaluations left out) and its value is",
            "    the evaluation of the policy it ends with.",
        ]
    else:
        lines += ["  - models are read from logs/ (where train saves them) unless -f/--folder is given."]
    lines += ["Everything else is the zoo's; its options follow.", ""]
    return "\n".join(lines)


def _pop_trial_seconds(argv: Sequence[str]) -> tuple[list[str], float | None]:
    """``argv`` without ``--trial-seconds S`` (ours, not the zoo's), and ``S`` (None if not given)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--trial-seconds", dest="seconds", default=None)
    parser.add_argument("-optimize", "--hyperparameter-optimization", dest="optimize", action="store_true")
    args, _ = parser.parse_known_args(list(argv))
    if args.seconds is None:
        return list(argv), None
    try:
        seconds = float(args.seconds)
    except ValueError:
        raise ValueError(f"Invalid --trial-seconds={args.seconds!r}: expected a number of seconds > 0") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"Invalid --trial-seconds={args.seconds!r}: expected a number of seconds > 0")
    if not args.optimize:
        raise ValueError("--trial-seconds is the training budget of each -optimize trial: pass -optimize too")
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--trial-seconds":
            skip = True  # and its value, the next argument
        elif not arg.startswith("--trial-seconds="):
            rest.append(arg)
    return rest, seconds


def run_zoo(script: str, argv: Sequence[str] | None = None) -> None:
    """Register our algorithms, then run the zoo's own ``train()``, ``enjoy()`` or ``record_video`` script on
    ``argv`` (default: ``sys.argv[1:]``) completed by :func:`zoo_argv`. ``train -optimize --trial-seconds S`` gives
    each trial ``S`` seconds of training (:class:`~sb3_async.zoo.experiment.BudgetedTrialEvalCallback`)."""
    register()
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(cli_help(script))
    trial_seconds = None
    if script == "train":
        argv, trial_seconds = _pop_trial_seconds(argv)
    full_argv = zoo_argv(argv, script)
    with _argv(full_argv), pettingzoo_envs(full_argv) as pettingzoo_id:
        if script == "train":
            import rl_zoo3.exp_manager
            import rl_zoo3.train

            # The zoo's train() defines its command line (every flag of the zoo's version) and builds its
            # ExperimentManager in one function, with no parameter for the manager's class: rebinding the name it
            # builds keeps all of its flags without a copy of its parser that would fall behind the zoo's releases.
            # Its objective builds each trial's TrialEvalCallback the same way, with no parameter for a time budget.
            trial_callback: Any = rl_zoo3.exp_manager.TrialEvalCallback
            if trial_seconds is not None:
                trial_callback = functools.partial(BudgetedTrialEvalCallback, train_seconds=trial_seconds)
            with (
                _rebound(rl_zoo3.train, "ExperimentManager", ZooExperimentManager),
                _rebound(rl_zoo3.exp_manager, "TrialEvalCallback", trial_callback),
            ):
                rl_zoo3.train.train()
            return
        if pettingzoo_id is None:
            _enjoy_or_record(script)
            return
        import rl_zoo3.utils

        # enjoy and record_video build their env with rl_zoo3.utils.create_test_env, which calls the make_vec_env of
        # its module and takes no VecEnv factory from record_video: for a PettingZoo env (a pool of its copies, one
        # slot per agent) that name is the only place to build it without copies of both scripts.
        make = functools.partial(make_pettingzoo_vec_env, pettingzoo_id, one_copy_as_one_env=True)
        with _rebound(rl_zoo3.utils, "make_vec_env", make):
            _enjoy_or_record(script)


class _MaskedLoads:
    """``rl_zoo3.enjoy``'s ``ALGOS`` while ``enjoy`` runs: each algorithm's ``load`` gives a model whose ``predict``
    reads the action masks of the env ``enjoy`` built (``create_test_env``, recorded in ``envs``) when that env has
    masks and the model's ``predict`` takes them (our discrete algorithms, ``MaskablePPO``): the zoo's loop passes
    none."""

    def __init__(self, algos: dict[str, Any], envs: list[Any]):
        self.algos, self.envs = algos, envs

    def __getitem__(self, algo: str) -> Any:
        cls, envs = self.algos[algo], self.envs

        class Loader:
            @staticmethod
            def load(*args: Any, **kwargs: Any) -> Any:
                model = cls.load(*args, **kwargs)
                if envs and masking_supported(envs[-1]) and "action_masks" in inspect.signature(model.predict).parameters:
                    model.predict = functools.partial(_predict_with_masks, model.predict, envs[-1])
                return model

        return Loader

    def __contains__(self, algo: object) -> bool:
        return algo in self.algos

    def keys(self) -> Any:
        return self.algos.keys()


def _predict_with_masks(predict: Any, env: Any, *args: Any, action_masks: Any = None, **kwargs: Any) -> Any:
    return predict(*args, action_masks=get_action_masks(env) if action_masks is None else action_masks, **kwargs)


def _enjoy_or_record(script: str) -> None:
    if script == "enjoy":
        import rl_zoo3.enjoy

        envs: list[Any] = []
        create = rl_zoo3.enjoy.create_test_env

        def create_test_env(*args: Any, **kwargs: Any) -> Any:
            envs.append(create(*args, **kwargs))
            return envs[-1]

        with (
            _rebound(rl_zoo3.enjoy, "create_test_env", create_test_env),
            _rebound(rl_zoo3.enjoy, "ALGOS", _MaskedLoads(rl_zoo3.enjoy.ALGOS, envs)),
        ):
            rl_zoo3.enjoy.enjoy()
    else:  # the zoo's record_video is a script (its code under `if __name__ == "__main__"`): run it as one
        import runpy

        runpy.run_module("rl_zoo3.record_video", run_name="__main__", alter_sys=False)
