"""The paper's optimizers: hand-computed values, SB3's RMSpropTFLike, shared state, worker side."""

import math

import pytest
import torch
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

from sb3_async.common.optimizers import (
    MomentumSGD,
    SharedRMSprop,
    WorkerOptimizer,
    make_optimizer,
    momentum_sgd_update_,
    rmsprop_update_,
)


def test_rmsprop_update_hand_computed():
    # eq. S1: g = 0.9 * 0 + 0.1 * grad^2 ; eq. S2: theta -= 0.1 * grad / sqrt(g + 0.01)
    param, grad, square_avg = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.0]), torch.zeros(2)
    rmsprop_update_([param], [grad], [square_avg], lr=0.1, alpha=0.9, eps=0.01)
    assert square_avg.tolist() == pytest.approx([0.025, 0.1])
    assert param.tolist() == pytest.approx([1.0 - 0.1 * 0.5 / math.sqrt(0.035), -2.0 - 0.1 * 1.0 / math.sqrt(0.11)])
    # second step uses the updated statistics: g = 0.9 * 0.025 + 0.1 * 0.25
    rmsprop_update_([param], [grad], [square_avg], lr=0.1, alpha=0.9, eps=0.01)
    assert square_avg[0].item() == pytest.approx(0.9 * 0.025 + 0.1 * 0.25)


def test_momentum_sgd_update_hand_computed():
    # m = 0.9 * m + 0.1 * grad ; theta -= 0.5 * m
    param, grad, buf = torch.tensor([1.0]), torch.tensor([2.0]), torch.zeros(1)
    momentum_sgd_update_([param], [grad], [buf], lr=0.5, momentum=0.9)
    assert buf.item() == pytest.approx(0.2) and param.item() == pytest.approx(1.0 - 0.1)
    momentum_sgd_update_([param], [grad], [buf], lr=0.5, momentum=0.9)
    assert buf.item() == pytest.approx(0.38) and param.item() == pytest.approx(0.9 - 0.19)


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


@pytest.mark.parametrize("alpha,eps", [(0.99, 1e-5), (0.9, 0.1)])
def test_matches_rmsprop_tf_like_step_for_step(alpha, eps):
    ours_net, ref_net = _net(0), _net(0)
    ours = SharedRMSprop(ours_net.parameters(), lr=1e-2, alpha=alpha, eps=eps, initial_square_avg=1.0)
    ref = RMSpropTFLike(ref_net.parameters(), lr=1e-2, alpha=alpha, eps=eps)
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        x, y = torch.randn(32, 4, generator=generator), torch.randn(32, 2, generator=generator)
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        for p, q in zip(ours_net.parameters(), ref_net.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_state_is_eager_and_shared():
    net = _net(0)
    shared = SharedRMSprop(net.parameters())
    assert len(shared.state_tensors()) == len(list(net.parameters()))
    assert all(t.is_shared() for t in shared.state_tensors())  # before any step
    private = make_optimizer("rmsprop", _net(0).parameters(), lr=1e-3)
    assert not private.shared and not any(t.is_shared() for t in private.state_tensors())
    assert isinstance(make_optimizer("sgd", _net(0).parameters(), lr=1e-3), MomentumSGD)


def test_worker_optimizer_shares_or_copies_state():
    params = [torch.zeros(3)]
    grads = [torch.ones(3)]
    for shared in (True, False):
        main = SharedRMSprop(params, lr=0.1, shared=shared)
        worker = WorkerOptimizer(SharedRMSprop, main.hyperparameters(), params, main.state_tensors(), shared)
        worker.step(grads, lr=0.1)
        moved = main.state_tensors()[0].sum().item() != 0
        assert moved == shared


def test_load_state_dict_keeps_shared_tensors():
    net = _net(0)
    opt = SharedRMSprop(net.parameters(), lr=0.1)
    before = opt.state_tensors()
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    other = SharedRMSprop(net.parameters(), lr=0.1)
    kept = other.state_tensors()
    other.load_state_dict(saved)
    assert all(a is b for a, b in zip(kept, other.state_tensors()))
    for a, b in zip(before, other.state_tensors()):
        torch.testing.assert_close(a, b)
    assert all(t.is_shared() for t in other.state_tensors())


@pytest.mark.parametrize(
    "kwargs,name",
    [(dict(lr=-1.0), "lr"), (dict(lr=float("nan")), "lr"), (dict(alpha=1.0), "alpha"), (dict(eps=-1.0), "eps")],
)
def test_bad_hyperparameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SharedRMSprop(_net(0).parameters(), **kwargs)


def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match="optimizer='adam'"):
        make_optimizer("adam", _net(0).parameters(), lr=1e-3)
