"""Lock-free optimizers of the A3C paper (Mnih et al. 2016, supplementary §1).

All three apply a worker's accumulated gradient ``Δθ`` to the *shared* parameters ``θ`` without any locking
(Hogwild). They differ only in where their statistics live:

* :class:`SharedRMSprop` — ``g`` shared by all workers (supp. eqs. S1–S2), "Shared RMSProp".
* ``SharedRMSprop(shared=False)`` — the same update with a per-worker ``g``, the paper's "RMSProp".
* :class:`MomentumSGD` — per-worker momentum ``m_i = α m_i + (1 - α) Δθ_i``; ``θ ← θ - η m_i``.

The update rules are pure in-place functions (:func:`rmsprop_update_`, :func:`momentum_sgd_update_`), tested against
hand-computed values. The optimizer classes are ordinary ``torch.optim.Optimizer`` objects for the main process (SB3
saves, loads and schedules them); they create their state eagerly (lazily created state would end up private to each
worker process). Workers apply the same rule through :class:`WorkerOptimizer`, which is not a torch ``Optimizer``:
building one imports ``torch._dynamo`` in every worker process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from sb3_async.validation import check_float, check_nonnegative

OPTIMIZER_NAMES = ("shared_rmsprop", "rmsprop", "sgd")


def rmsprop_update_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    square_avgs: list[torch.Tensor],
    lr: float,
    alpha: float,
    eps: float,
    weight_decay: float = 0.0,
) -> None:
    r"""Supp. eqs. S1–S2, in place: :math:`g \leftarrow \alpha g + (1-\alpha)\Delta\theta^2`,
    :math:`\theta \leftarrow \theta - \eta\,\Delta\theta / \sqrt{g + \epsilon}`."""
    with torch.no_grad():
        if weight_decay != 0:
            grads = list(torch._foreach_add(grads, params, alpha=weight_decay))
        # Multi-tensor ops: one call per operation instead of one per parameter (worker updates are small and many).
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)  # eq. S1
        denominators = torch._foreach_add(square_avgs, eps)
        torch._foreach_sqrt_(denominators)
        torch._foreach_addcdiv_(params, grads, denominators, value=-lr)  # eq. S2


def momentum_sgd_update_(
    params: list[torch.Tensor], grads: list[torch.Tensor], buffers: list[torch.Tensor], lr: float, momentum: float
) -> None:
    r"""Supp. §1, in place: :math:`m \leftarrow \alpha m + (1-\alpha)\Delta\theta`,
    :math:`\theta \leftarrow \theta - \eta m`."""
    with torch.no_grad():
        torch._foreach_mul_(buffers, momentum)
        torch._foreach_add_(buffers, grads, alpha=1 - momentum)
        torch._foreach_add_(params, buffers, alpha=-lr)


class AsyncOptimizer(Optimizer):
    """Common part: eager state, export/attach of the state tensors, ``shared`` flag, one update rule."""

    #: names of the per-parameter state tensors, in the order used by :meth:`state_tensors`
    state_names: tuple[str, ...] = ()
    #: initial value of each state tensor
    initial_value: Callable[[dict[str, Any]], float] = staticmethod(lambda group: 0.0)

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any], shared: bool):
        super().__init__(params, defaults)
        self.shared = shared
        for group in self.param_groups:
            for p in group["params"]:
                for name in self.state_names:
                    self.state[p][name] = torch.full_like(p, self.initial_value(group), memory_format=torch.preserve_format)
        if shared:
            self.share_memory()

    @staticmethod
    def update_(params: list[torch.Tensor], grads: list[torch.Tensor], state: list[torch.Tensor], **hyper: Any) -> None:
        raise NotImplementedError

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def share_memory(self) -> None:
        """Move every state tensor to shared memory (in place; no-op for tensors already there)."""
        for tensor in self.state_tensors():
            tensor.share_memory_()

    def state_tensors(self) -> list[torch.Tensor]:
        """The state tensors, parameter by parameter (one per parameter for both optimizers here)."""
        return [self.state[p][name] for p in self._params() for name in self.state_names]

    def hyperparameters(self) -> dict[str, Any]:
        """The update rule's keyword arguments, learning rate excluded (single parameter group)."""
        return {key: value for key, value in self.param_groups[0].items() if key not in ("params", "lr", "initial_value")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Keep the eager (possibly shared) tensors: copy the loaded values into them in place.
        current = self.state_tensors()
        super().load_state_dict(state_dict)
        it = iter(current)
        for p in self._params():
            for name in self.state_names:
                dst = next(it)
                dst.copy_(self.state[p][name])
                self.state[p][name] = dst

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                state = [self.state[p][name] for p in params for name in self.state_names]
                hyper = {k: v for k, v in group.items() if k not in ("params", "initial_value")}
                self.update_(params, [p.grad for p in params], state, **hyper)
        return loss


class SharedRMSprop(AsyncOptimizer):
    r"""RMSProp of the A3C paper, supplementary eqs. S1–S2, applied without locks.

    .. math::
        g \leftarrow \alpha g + (1 - \alpha)\,\Delta\theta^2, \qquad
        \theta \leftarrow \theta - \eta\,\frac{\Delta\theta}{\sqrt{g + \epsilon}}

    With ``shared=True`` (default) the statistics ``g`` live in shared memory and every worker updates them
    ("Shared RMSProp", the paper's choice for all its experiments); with ``shared=False`` each worker keeps its own
    ``g`` ("RMSProp" in the paper's Figure S1). With the same hyperparameters and ``initial_square_avg=1`` a single
    process follows ``stable_baselines3.common.sb2_compat.rmsprop_tf_like.RMSpropTFLike`` step for step.

    :param params: parameters to optimize (the shared ones)
    :param lr: learning rate η (the algorithms overwrite it with their schedule before each step)
    :param alpha: decay of the squared-gradient average; 0.99 from the paper (supp. §2, "RMSProp decay factor")
    :param eps: ε, added inside the square root as in eq. S2. The paper does not give it; 1e-10 inside the root
        matches SB3's A2C (PyTorch RMSprop with ``eps=1e-5`` outside the root; docs/design.md gives the choice)
    :param initial_square_avg: initial value of ``g``. The paper does not give it; 0 as PyTorch's RMSprop (SB3's A2C);
        1 is TensorFlow's choice, and ``RMSpropTFLike``'s
    :param weight_decay: L2 penalty added to the gradient
    :param shared: whether ``g`` is shared between workers
    """

    state_names = ("square_avg",)
    initial_value = staticmethod(lambda group: group["initial_square_avg"])

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 7e-4,
        alpha: float = 0.99,
        eps: float = 1e-10,
        initial_square_avg: float = 0.0,
        weight_decay: float = 0.0,
        shared: bool = True,
    ):
        check_nonnegative("lr", lr)
        check_nonnegative("eps", eps)
        check_nonnegative("initial_square_avg", initial_square_avg)
        check_nonnegative("weight_decay", weight_decay)
        check_float("alpha", alpha, 0.0, 1.0, high_inclusive=False)
        defaults = dict(lr=lr, alpha=alpha, eps=eps, initial_square_avg=initial_square_avg, weight_decay=weight_decay)
        super().__init__(params, defaults, shared)

    @staticmethod
    def update_(params: list[torch.Tensor], grads: list[torch.Tensor], state: list[torch.Tensor], **hyper: Any) -> None:
        rmsprop_update_(params, grads, state, hyper["lr"], hyper["alpha"], hyper["eps"], hyper.get("weight_decay", 0.0))

    def hyperparameters(self) -> dict[str, Any]:
        hyper = super().hyperparameters()
        hyper.pop("initial_square_avg", None)
        return hyper


class MomentumSGD(AsyncOptimizer):
    r"""Momentum SGD of the A3C paper (supplementary §1), one momentum vector per worker.

    .. math:: m_i \leftarrow \alpha m_i + (1 - \alpha)\,\Delta\theta_i, \qquad \theta \leftarrow \theta - \eta\, m_i

    :param params: parameters to optimize (the shared ones)
    :param lr: learning rate η
    :param momentum: α; the paper does not give it, 0.9 is the usual choice
    :param shared: share the momentum between workers (the paper keeps it per worker: ``False``)
    """

    state_names = ("momentum_buffer",)

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 7e-4,
        momentum: float = 0.9,
        shared: bool = False,
    ):
        check_nonnegative("lr", lr)
        check_float("momentum", momentum, 0.0, 1.0, high_inclusive=False)
        super().__init__(params, dict(lr=lr, momentum=momentum), shared)

    @staticmethod
    def update_(params: list[torch.Tensor], grads: list[torch.Tensor], state: list[torch.Tensor], **hyper: Any) -> None:
        momentum_sgd_update_(params, grads, state, hyper["lr"], hyper["momentum"])


class WorkerOptimizer:
    """A worker's side of an :class:`AsyncOptimizer`: the same rule on the shared parameters and state.

    Shared optimizers keep a reference to the state (every worker updates the same statistics); per-worker ones copy
    it, so each worker starts from the saved statistics and then keeps its own.

    :param optimizer_class: the main process' optimizer class (``SharedRMSprop`` or ``MomentumSGD``)
    :param hyperparameters: its :meth:`AsyncOptimizer.hyperparameters`
    :param params: the shared parameters
    :param state: its :meth:`AsyncOptimizer.state_tensors`
    :param shared: whether the state is shared
    """

    def __init__(
        self,
        optimizer_class: type[AsyncOptimizer],
        hyperparameters: dict[str, Any],
        params: list[torch.Tensor],
        state: list[torch.Tensor],
        shared: bool,
    ):
        if len(state) != len(params) * len(optimizer_class.state_names):
            raise ValueError(f"Expected {len(params) * len(optimizer_class.state_names)} state tensors, got {len(state)}")
        self.optimizer_class, self.hyperparameters, self.params = optimizer_class, hyperparameters, params
        self.state = state if shared else [tensor.detach().clone() for tensor in state]

    def step(self, grads: list[torch.Tensor], lr: float) -> None:
        """Apply ``grads`` (one per shared parameter) with learning rate ``lr``."""
        self.optimizer_class.update_(self.params, grads, self.state, lr=lr, **self.hyperparameters)


def as_async_optimizer(optimizer: Optimizer) -> AsyncOptimizer:
    """``optimizer`` if it is one of the paper's optimizers, else a ``TypeError`` (workers could not apply it)."""
    if not isinstance(optimizer, AsyncOptimizer):
        raise TypeError(f"Expected SharedRMSprop or MomentumSGD, got {type(optimizer).__name__}")
    return optimizer


def make_optimizer(name: str, params: Iterable[torch.Tensor], lr: float, **kwargs: Any) -> AsyncOptimizer:
    """Build one of the paper's three optimizers by name.

    :param name: ``"shared_rmsprop"`` (paper default), ``"rmsprop"`` (per-worker statistics) or ``"sgd"``
        (momentum SGD, per-worker momentum)
    :param params: the shared parameters
    :param lr: initial learning rate
    :param kwargs: forwarded to the optimizer (``alpha``, ``eps``, ``momentum``...)
    """
    if name == "shared_rmsprop":
        return SharedRMSprop(params, lr=lr, shared=True, **kwargs)
    if name == "rmsprop":
        return SharedRMSprop(params, lr=lr, shared=False, **kwargs)
    if name == "sgd":
        return MomentumSGD(params, lr=lr, shared=False, **kwargs)
    raise ValueError(f"Invalid optimizer={name!r}: expected one of {', '.join(OPTIMIZER_NAMES)}")
