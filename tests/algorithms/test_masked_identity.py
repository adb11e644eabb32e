"""sb3-contrib's masked identity test (``tests/test_invalid_actions.py::test_identity``) for our discrete algorithms.

The task: ``InvalidActionEnvDiscrete(dim=70, n_invalid_actions=55)``, 100 steps an episode, one reward for the action
that equals the observation, 15 legal actions at each step (the rewarded one among them); random legal play scores
about 6.7. sb3-contrib builds ``MaskablePPO("MlpPolicy", env, gamma=0.4, seed=32)``, calls ``learn(3000)`` (two
rollouts of 2048 steps: 4096 env steps) and requires 90 on 20 masked deterministic episodes.

Here each algorithm gets the same call with its own defaults, as a user would write it, and ``n_workers=2`` /
``n_actors=2``: the default on the 2 cores the suite is measured on, pinned so that a larger machine runs the same
test. None reaches sb3-contrib's 90 at this budget (docs/algorithms/a3c.md, async_q.md and apex.md, "Small
budgets", give each one's scores and why); each test holds the floor its algorithm keeps on every seed measured, well
above random legal play, so that a change that stops an algorithm learning at this budget fails it.
"""

from __future__ import annotations

import pytest
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.maskable.evaluation import evaluate_policy

from sb3_async import A3C, ApeXDQN, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa

#: each algorithm, its workers' argument and the mean it keeps at sb3-contrib's budget on every seed measured (mp
#: backend, 2 loaded cores); random legal play scores 6.7, its mean over 20 episodes spread by about 0.6
FLOORS = {
    A3C: ("n_workers", 60.0),  # 74.8 - 84.3 on 5 seeds
    AsyncOneStepQ: ("n_workers", 15.0),  # 28.5, 29.3 (seeds 32, 0)
    AsyncSarsa: ("n_workers", 15.0),  # 27.4, 26.3
    AsyncNStepQ: ("n_workers", 15.0),  # 21.7, 23.5
    ApeXDQN: ("n_actors", 10.0),  # 12.6 - 15.0 on 5 seeds; 7.5 (random) with the paper's learning_starts of 50 000
}


@pytest.mark.slow  # minutes on 2 cores; Ape-X's learner steps depend on the machine
@pytest.mark.parametrize("algorithm", list(FLOORS), ids=lambda algorithm: algorithm.__name__)
def test_masked_identity(algorithm):
    workers_argument, floor = FLOORS[algorithm]
    env = InvalidActionEnvDiscrete(dim=70, n_invalid_actions=55)
    model = algorithm("MlpPolicy", env, gamma=0.4, seed=32, verbose=0, **{workers_argument: 2})
    model.learn(3000)
    mean_reward, _ = evaluate_policy(model, env, n_eval_episodes=20, warn=False)
    print(f"{algorithm.__name__}: {mean_reward:.2f}")
    assert mean_reward >= floor, f"{algorithm.__name__}: {mean_reward:.1f} < {floor}"
