"""Models saved by an earlier release load and act exactly as they did (the saved-model format stays readable).

``tests/data/saved_models/<version>/`` holds one small model of each algorithm saved by that release of sb3-async
(``make.py`` there made them, run with that release), with 16 observations and the deterministic actions that model chose
for them when it was saved.
"""

from pathlib import Path

import numpy as np
import pytest

from sb3_async import A3C, AEDDPG, ApeXDPG, ApeXDQN, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa

DATA = Path(__file__).resolve().parents[1] / "data" / "saved_models"

SAVED = {
    "a3c": A3C,
    "a3c_lstm": A3C,
    "async_one_step_q": AsyncOneStepQ,
    "async_sarsa": AsyncSarsa,
    "async_n_step_q": AsyncNStepQ,
    "apex_dqn": ApeXDQN,
    "apex_dpg": ApeXDPG,
    "ae_ddpg": AEDDPG,
}


VERSIONS = ["0.1.0", "0.2.0"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_model_saved_by_an_earlier_release_loads_and_acts_the_same(name, version):
    model = SAVED[name].load(DATA / version / f"{name}.zip", device="cpu")
    recorded = np.load(DATA / version / f"{name}.npz")
    actions, _ = model.predict(recorded["obs"], deterministic=True)
    if np.issubdtype(recorded["actions"].dtype, np.floating):
        # the same float32 network: CPUs with other matmul kernels (AVX-512 or not) may round the last bit differently
        np.testing.assert_allclose(actions, recorded["actions"], rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(actions, recorded["actions"])
