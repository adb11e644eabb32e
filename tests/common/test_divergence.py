"""A run whose parameters or gradients blow up fails learn() naming the algorithm, the step and the learning rate."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from sb3_async import DivergenceError, WorkerError
from sb3_async.common.divergence import PARAMETER_LIMIT, DivergenceGuard
from tests.helpers import small_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOO_HIGH = r"learning_rate=1e\+06 is far above the usual range"
DIVERGED = r"{name} diverged at step \d+ \(update \d+, learning_rate=1e\+06\)"


def test_a3c_with_a_huge_learning_rate_fails_learn_through_its_worker() -> None:
    with pytest.warns(UserWarning, match=TOO_HIGH):
        model = small_model("A3C", learning_rate=1e6)  # backend="mp": the worker's error reaches learn()
    with pytest.raises(WorkerError, match="DivergenceError: " + DIVERGED.format(name="A3C")) as info:
        model.learn(400)
    assert "a parameter reached" in str(info.value)


@pytest.mark.parametrize("name", ["AEDDPG", "ApeXDQN"])
def test_a_learner_with_a_huge_learning_rate_fails_learn(name: str) -> None:
    with pytest.warns(UserWarning, match=TOO_HIGH):
        model = small_model(name, learning_rate=1e6, backend="serial" if name == "ApeXDQN" else "mp")
    with pytest.raises(DivergenceError, match=DIVERGED.format(name=name)):
        model.learn(400)


@pytest.mark.parametrize("name", ["A3C", "AsyncOneStepQ", "ApeXDPG", "AEDDPG"])
def test_usual_learning_rates_do_not_warn(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        small_model(name)
        small_model(name, learning_rate=lambda progress: 1e-3 * progress)
    with pytest.warns(UserWarning, match=r"learning_rate=2 is far above"):
        small_model(name, learning_rate=lambda progress: 2.0)


def test_the_guard_fails_on_a_non_finite_number_before_the_step() -> None:
    guard = DivergenceGuard("A3C", [torch.zeros(3)])
    guard.check_values(5, 100, 1e-3, gradient_norm=2.0)
    expected = r"A3C diverged at step 100 \(update 5, learning_rate=0.001\): its gradient_norm is nan"
    with pytest.raises(DivergenceError, match=expected):
        guard.check_values(5, 100, 1e-3, gradient_norm=math.nan)
    with pytest.raises(DivergenceError, match="its loss is inf"):
        guard.check_values(5, 100, 1e-3, loss=math.inf)


def test_the_guard_checks_the_parameters_at_the_first_update_and_every_interval() -> None:
    weight = torch.zeros(4)
    guard = DivergenceGuard("AEDDPG", [torch.ones(2), weight], interval=10)
    weight[1] = math.nan
    with pytest.raises(DivergenceError, match=r"update 1, .*no longer finite"):
        guard.after_update(1, 7, 1e-4)
    for update in range(2, 10):
        guard.after_update(update, 7, 1e-4)  # between the checks: not looked at
    with pytest.raises(DivergenceError, match="update 10, "):
        guard.after_update(10, 7, 1e-4)
    weight[1] = -2 * PARAMETER_LIMIT
    with pytest.raises(DivergenceError, match=r"a parameter reached 2e\+06 in magnitude"):
        guard.after_update(20, 7, 1e-4)
    weight[1] = PARAMETER_LIMIT / 2
    guard.after_update(30, 7, 1e-4)
