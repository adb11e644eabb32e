"""Train with the RL Zoo: ``python -m sb3_async.train --algo a3c --env CartPole-v1 [any rl_zoo3.train flag]``.

Registers the sb3_async algorithms in the zoo (:func:`sb3_async.zoo.register`), reads ``zoo_configs/<algo>.yml``
unless ``--conf-file`` is given, then runs the zoo's own ``rl_zoo3.train.train()`` with
:class:`sb3_async.zoo.ZooExperimentManager` as its experiment manager: every zoo flag works and models are saved in the
zoo's folder layout (``<log folder>/<algo>/<env>_<run id>/``). See ``docs/guide/zoo.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sb3_async.zoo import run_zoo


def main(argv: Sequence[str] | None = None) -> None:
    """Run the zoo's ``train`` on ``argv`` (default: the command line)."""
    run_zoo("train", argv)


if __name__ == "__main__":  # worker processes (forkserver) re-import the main module only under this guard
    main()
