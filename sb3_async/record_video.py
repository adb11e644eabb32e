"""Record a video of a trained agent with the RL Zoo:
``python -m sb3_async.record_video --algo a3c --env CartPole-v1 -n 1000`` (needs ``moviepy``).

Registers the sb3_async algorithms in the zoo (:func:`sb3_async.zoo.register`) and runs the zoo's own
``rl_zoo3.record_video`` script; for our algorithms the log folder defaults to ``logs`` (where ``sb3_async.train``
saves) instead of the zoo's ``rl-trained-agents``. The video goes to ``<run folder>/videos/``. See ``docs/guide/zoo.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sb3_async.zoo import run_zoo


def main(argv: Sequence[str] | None = None) -> None:
    """Run the zoo's ``record_video`` on ``argv`` (default: the command line)."""
    run_zoo("record_video", argv)


if __name__ == "__main__":
    main()
