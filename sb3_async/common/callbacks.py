"""Evaluations of a frozen policy: SB3's ``EvalCallback`` inside ``learn()`` of an asynchronous algorithm.

SB3's algorithms stop training while a callback runs, so an ``EvalCallback`` scores one policy and ``best_model.zip``
holds exactly that policy. Asynchronous workers keep updating the shared parameters while the main process runs
callbacks: without care, an evaluation would score a policy that moves while it is evaluated, save parameters that
were never evaluated, and a ``StopTrainingOnRewardThreshold`` would stop training several updates later.

:func:`frozen_evaluations` restores SB3's guarantee. For the duration of ``learn()`` it wraps the ``_on_step`` of every
``EvalCallback`` (subclasses included) found in the callback tree (``CallbackList``, ``EveryNTimesteps``, an
``EvalCallback``'s ``callback_on_new_best`` / ``callback_after_eval``, any callback holding callbacks): when an
evaluation is due (SB3's own condition, ``eval_freq > 0 and n_calls % eval_freq == 0``), the workers are parked
(:meth:`~sb3_async.common.async_algorithm.AsyncAlgorithm.pause_workers`) while it runs, so it scores, logs and saves
one set of parameters. Between evaluations the workers run at full speed. If the evaluation asks to stop training
(e.g. a reward threshold), the stop is requested before the workers are let go, so the model ``learn()`` returns is the
one evaluated. The wrapping is removed when ``learn()`` ends.

An algorithm opts out with ``pause_for_eval=False``: evaluations then run while the workers train.

``learn(progress_bar=True)`` shows :class:`LiveProgressBar` (:func:`with_live_progress_bar`): SB3's bar, with the env steps
per second and the latest mean episode return beside it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    ConvertCallback,
    EvalCallback,
    ProgressBarCallback,
)


def iter_callbacks(callback: BaseCallback) -> Iterator[BaseCallback]:
    """``callback`` and every callback it holds, depth first, each once (``CallbackList.callbacks``,
    ``EventCallback.callback``, ``EvalCallback.callback_on_new_best``, or any attribute holding callbacks)."""
    seen: set[int] = set()
    stack = [callback]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        children: list[BaseCallback] = []
        for name, value in vars(current).items():
            if name == "parent":  # the way back up, not a child
                continue
            if isinstance(value, BaseCallback):
                children.append(value)
            elif isinstance(value, (list, tuple)):
                children.extend(item for item in value if isinstance(item, BaseCallback))
        stack.extend(reversed(children))


def show_final_timesteps(callback: BaseCallback, num_timesteps: int) -> None:
    """Set ``num_timesteps`` of ``callback`` and of every callback it holds to the model's final count, before
    ``on_training_end()``.

    SB3's callbacks copy ``model.num_timesteps`` in each ``on_step()``, which SB3's loops call after every env step, so
    after ``learn()`` they hold the final count. Asynchronous workers finish their last steps after the last
    ``on_step()`` (those steps are counted once they arrive); without this, a callback would see an earlier count than
    the model's.
    """
    for item in iter_callbacks(callback):
        item.num_timesteps = num_timesteps


def evaluation_due(callback: EvalCallback) -> bool:
    """Whether ``callback._on_step()``, called now, evaluates: SB3's ``EvalCallback`` condition (``on_step()`` has
    already counted this call in ``n_calls``)."""
    return callback.eval_freq > 0 and callback.n_calls % callback.eval_freq == 0


@contextlib.contextmanager
def frozen_evaluations(model: Any, callback: BaseCallback) -> Iterator[None]:
    """While the block runs, every ``EvalCallback`` in ``callback``'s tree evaluates with ``model``'s workers parked.

    Does nothing when ``model.pause_for_eval`` is False. Wrappers are set on the callback instances (not their
    classes) and removed on exit, so the callbacks are unchanged after ``learn()``.

    :param model: an :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm` whose workers are running
    :param callback: the callback ``learn()`` calls (SB3 has already wrapped a list of callbacks in a ``CallbackList``)
    """
    if not getattr(model, "pause_for_eval", True):
        yield
        return
    # One park for nested evaluations (an EvalCallback run by another's callback_after_eval): the inner one must not
    # let the workers go while the outer one is still evaluating.
    depth = [0]
    wrapped: list[BaseCallback] = []
    for item in iter_callbacks(callback):
        if isinstance(item, EvalCallback) and "_on_step" not in vars(item):
            item._on_step = _frozen_on_step(model, item, item._on_step, depth)  # type: ignore[method-assign]
            wrapped.append(item)
    try:
        yield
    finally:
        for item in wrapped:
            del item._on_step


def _frozen_on_step(model: Any, callback: EvalCallback, on_step: Callable[[], bool], depth: list[int]) -> Callable[[], bool]:
    def frozen_on_step() -> bool:
        if depth[0] > 0 or not evaluation_due(callback):
            return on_step()
        depth[0] += 1
        try:
            with model.pause_workers():
                continue_training = on_step()
                runtime = model._runtime
                if not continue_training and runtime is not None:
                    runtime.request_stop()  # before the workers resume: the returned model is the evaluated one
                return continue_training
        finally:
            depth[0] -= 1

    return frozen_on_step


def progress_description(model: Any, seconds: float, steps: int) -> str:
    """What the progress bar shows beside the bar: env steps per second over ``seconds`` (``steps`` taken in them) and
    the mean return of the episodes in ``model.ep_info_buffer`` (SB3's ``rollout/ep_rew_mean``), once there is one."""
    parts = [f"{steps / seconds:,.0f} steps/s"] if seconds > 0 else []
    if model.ep_info_buffer:
        parts.append(f"ep_rew_mean {float(np.mean([info['r'] for info in model.ep_info_buffer])):.4g}")
    return ", ".join(parts)


class LiveProgressBar(ProgressBarCallback):
    """SB3's progress bar (tqdm and rich), with the env steps per second since ``learn()`` started and the latest mean
    episode return as its description, refreshed at most every ``interval`` seconds.

    :param interval: seconds between two refreshes of the description
    """

    def __init__(self, interval: float = 0.5):
        super().__init__()
        self.interval = interval

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._start, self._start_steps = time.monotonic(), self.model.num_timesteps
        self._next = self._start + self.interval

    def _on_step(self) -> bool:
        super()._on_step()
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            self.pbar.set_description_str(
                progress_description(self.model, now - self._start, self.model.num_timesteps - self._start_steps),
                refresh=False,
            )
        return True


def with_live_progress_bar(callback: Any) -> BaseCallback:
    """``callback`` (None, a function, a callback or a list of them) followed by a :class:`LiveProgressBar`: what
    ``learn(progress_bar=True)`` runs in place of SB3's bar."""
    if isinstance(callback, list):
        callback = CallbackList(callback)
    if not isinstance(callback, BaseCallback):
        callback = ConvertCallback(callback)
    return CallbackList([callback, LiveProgressBar()])
