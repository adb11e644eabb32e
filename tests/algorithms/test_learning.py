"""A3C actually learns: CartPole-v1 (zoo_configs/a3c.yml's entry) until 20 deterministic evaluation episodes average
>= 495; the model ``learn()`` returns is the evaluated one and scores >= 475 on 20 fresh deterministic episodes."""

from tests.helpers import learns_and_returns_the_evaluated_model, zoo_model


def test_a3c_learns_cartpole(tmp_path):
    model = zoo_model("a3c", "CartPole-v1", tmp_path, seed=0)  # 2 workers x 8 envs
    learns_and_returns_the_evaluated_model(model, "CartPole-v1", 495, 400_000, 5000, margin=20)


def test_a3c_learns_cartpole_with_one_update_per_env(tmp_path):
    """The entry as 16 actor-learners of one env each, as in the paper (``separate_updates``)."""
    model = zoo_model("a3c", "CartPole-v1", tmp_path, seed=0, separate_updates=True)
    learns_and_returns_the_evaluated_model(model, "CartPole-v1", 495, 400_000, 5000, margin=20)
