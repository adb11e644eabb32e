"""Watch or evaluate a trained agent with the RL Zoo: ``python -m sb3_async.enjoy --algo a3c --env CartPole-v1``.

Registers the sb3_async algorithms in the zoo (:func:`sb3_async.zoo.register`) and runs the zoo's own
``rl_zoo3.enjoy.enjoy()``; for our algorithms the log folder defaults to ``logs`` (where ``sb3_async.train`` saves)
instead of the zoo's ``rl-trained-agents``. See ``docs/guide/zoo.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sb3_async.zoo import run_zoo


def main(argv: Sequence[str] | None = None) -> None:
    """Run the zoo's ``enjoy`` on ``argv`` (default: the command line)."""
    run_zoo("enjoy", argv)


if __name__ == "__main__":
    main()
