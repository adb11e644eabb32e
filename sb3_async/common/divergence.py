"""Divergence: an update that made the parameters unusable fails ``learn()`` instead of training on.

A learning rate far too high (or a loss that explodes) drives the parameters to infinity or NaN, or so large that the
network saturates and float32 can no longer represent the optimizer's steps; without a check, ``learn()`` returned a
model whose policy always picks one action, or failed later on a NaN action with an error blaming the env.
:class:`DivergenceGuard` checks, at a cost of a few float comparisons per update:

* every update, before its optimizer step, the numbers the update computed anyway (the gradient norm used for
  clipping, the losses): one that is not finite fails at once;
* at the first update and every :data:`CHECK_INTERVAL` updates, the parameters themselves, in one multi-tensor call:
  not finite, or a magnitude above :data:`PARAMETER_LIMIT`.

Each failure is a :class:`DivergenceError` naming the algorithm, the global step, the update and the learning rate.
:func:`warn_if_learning_rate_too_high` warns at construction of a rate above :data:`LEARNING_RATE_LIMIT`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "CHECK_INTERVAL",
    "LEARNING_RATE_LIMIT",
    "PARAMETER_LIMIT",
    "DivergenceError",
    "DivergenceGuard",
    "warn_if_learning_rate_too_high",
]

#: The parameters are checked at the first update and every this many updates after it.
CHECK_INTERVAL = 100

#: Largest parameter magnitude taken as still learning. At 2^20 (about 1e6) float32 numbers are 0.125 apart, so an
#: optimizer step smaller than 0.06, which is every step of RMSProp or Adam with a learning rate up to ~1e-2 (their
#: steps are about the learning rate), leaves such a parameter where it is; trained networks hold parameters many
#: orders of magnitude smaller.
PARAMETER_LIMIT = 1e6

#: Learning rates above this warn at construction. RMSProp and Adam normalise the gradient, so each update moves a
#: parameter by about the learning rate; above 1 one update moves every weight by more than its initial scale (an
#: initial weight is at most ~1), which no run learns from. The papers of these algorithms use 1e-5 to 1e-2 (momentum
#: SGD, the third optimizer of the gradient-sharing algorithms, needs smaller rates still).
LEARNING_RATE_LIMIT = 1.0


class DivergenceError(ValueError):
    """An update made the parameters or gradients non-finite, or the parameters so large that training has diverged:
    the message names the algorithm, the step and the learning rate."""


def warn_if_learning_rate_too_high(algorithm: str, learning_rate: float | Callable[[float], float]) -> None:
    """Warn (``UserWarning``) when ``learning_rate`` (a schedule: its value at the start) is above
    :data:`LEARNING_RATE_LIMIT`, naming the argument."""
    value = learning_rate(1.0) if callable(learning_rate) else learning_rate
    if isinstance(value, (int, float)) and value > LEARNING_RATE_LIMIT:
        warnings.warn(
            f"{algorithm}: learning_rate={value:g} is far above the usual range of its optimizers (1e-5 to 1e-2; above "
            f"{LEARNING_RATE_LIMIT:g} one update moves every parameter by more than its initial scale), and training "
            "will likely diverge",
            UserWarning,
            stacklevel=3,
        )


class DivergenceGuard:
    """Checks an algorithm's updates for divergence (see the module's docstring).

    :param algorithm: the algorithm's name, for the message (``"A3C"``)
    :param params: the parameters the updates change (read, never written)
    :param interval: check the parameters every ``interval`` updates (and at the first)
    """

    def __init__(self, algorithm: str, params: Sequence[torch.Tensor], interval: int = CHECK_INTERVAL):
        self.algorithm, self.params, self.interval = algorithm, list(params), interval

    def check_values(self, n_updates: int, step: int, learning_rate: float, **computed: float) -> None:
        """Check the numbers update ``n_updates`` (counted from 1, at global step ``step``) computed anyway: a gradient
        norm, the losses (``grad_norm=...``), before its optimizer step.

        :raises DivergenceError: one of them is not finite
        """
        for name, value in computed.items():
            if not math.isfinite(value):
                self._fail(n_updates, step, learning_rate, f"its {name} is {value}")

    def after_update(self, n_updates: int, step: int, learning_rate: float) -> None:
        """After update ``n_updates``'s optimizer step: check the parameters at the first update and every
        ``interval``.

        :raises DivergenceError: a parameter is not finite, or beyond :data:`PARAMETER_LIMIT`
        """
        if n_updates == 1 or n_updates % self.interval == 0:
            self.check_parameters(n_updates, step, learning_rate)

    def check_parameters(self, n_updates: int, step: int, learning_rate: float) -> None:
        """Check the parameters now (one multi-tensor call): finite, and no magnitude above :data:`PARAMETER_LIMIT`."""
        if not self.params:
            return
        with torch.no_grad():
            largest = float(torch.stack(torch._foreach_norm(self.params, math.inf)).max())
        if not math.isfinite(largest):
            self._fail(n_updates, step, learning_rate, "its parameters are no longer finite (inf or NaN)")
        if largest > PARAMETER_LIMIT:
            self._fail(
                n_updates,
                step,
                learning_rate,
                f"a parameter reached {largest:.3g} in magnitude (above {PARAMETER_LIMIT:g}, where float32 can no "
                "longer represent the optimizer's steps)",
            )

    def _fail(self, n_updates: int, step: int, learning_rate: Any, what: str) -> None:
        raise DivergenceError(
            f"{self.algorithm} diverged at step {step} (update {n_updates}, learning_rate={learning_rate:g}): {what}. "
            "Lower the learning rate (or clip the gradients harder)."
        )
