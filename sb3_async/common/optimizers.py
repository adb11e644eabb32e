"""Lock-free optimizers of the A3C paper (Mnih et al. 2016, supplementary §1).

All three optimizers apply a worker's accumulated gradient ``Δθ`` to the *shared* parameters ``θ`` without any
locking (Hogwild). They differ only in where their statistics live:

* :class:`SharedRMSprop` — ``g`` shared by all workers (supp. eqs. S1–S2), "Shared RMSProp".
* ``SharedRMSprop(shared=False)`` — the same update with a per-worker ``g``, the paper's "RMSProp".
* :class:`MomentumSGD` — per-worker momentum ``m_i = α m_i + (1 - α) Δθ_i``; ``θ ← θ - η m_i``.

Every optimizer creates its state eagerly in ``__init__`` (lazily created state would end up private to each worker
process), and exposes :meth:`state_tensors` / :meth:`attach_state_tensors` so the runtime can hand the state to the
workers: by reference when it is shared, as a private copy otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

OPTIMIZER_NAMES = ("shared_rmsprop", "rmsprop", "sgd")


def _check_positive(name: str, value: float, allow_zero: bool = True) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        accepted = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise ValueError(f"Invalid {name}={value!r}: expected {accepted}")


class _AsyncOptimizer(Optimizer):
    """Common part: eager state, export/attach of the state tensors, ``shared`` flag."""

    #: names of the per-parameter state tensors, in the order used by :meth:`state_tensors`
    state_names: tuple[str, ...] = ()

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any], shared: bool):
        super().__init__(params, defaults)
        self.shared = shared
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].update(self._init_state(p, group))
        if shared:
            self.share_memory()

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def share_memory(self) -> None:
        """Move every state tensor to shared memory (no-op for tensors already there)."""
        for tensor in self.state_tensors():
            tensor.share_memory_()

    def state_tensors(self) -> list[torch.Tensor]:
        """The state tensors, parameter by parameter, in :attr:`state_names` order."""
        return [self.state[p][name] for p in self._params() for name in self.state_names]

    def attach_state_tensors(self, tensors: list[torch.Tensor]) -> None:
        """Use ``tensors`` (from :meth:`state_tensors` of the main process' optimizer) as this optimizer's state.

        Shared optimizers keep a reference (every worker updates the same statistics); per-worker optimizers copy,
        so that each worker starts from the saved statistics and then keeps its own.
        """
        params = self._params()
        if len(tensors) != len(params) * len(self.state_names):
            raise ValueError(f"Expected {len(params) * len(self.state_names)} state tensors, got {len(tensors)}")
        it = iter(tensors)
        for p in params:
            for name in self.state_names:
                tensor = next(it)
                self.state[p][name] = tensor if self.shared else tensor.detach().clone()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Keep the eager (and possibly shared) tensors: copy the loaded values into them in place.
        current = self.state_tensors()
        super().load_state_dict(state_dict)
        it = iter(current)
        for p in self._params():
            for name in self.state_names:
                dst = next(it)
                dst.copy_(self.state[p][name])
                self.state[p][name] = dst


class SharedRMSprop(_AsyncOptimizer):
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
    :param eps: ε, added inside the square root as in eq. S2. The paper does not give it; 1e-5 as SB3's A2C
    :param initial_square_avg: initial value of ``g``; 1.0 as TensorFlow's RMSProp (and ``RMSpropTFLike``), which the
        paper's implementation used
    :param weight_decay: L2 penalty added to the gradient
    :param shared: whether ``g`` is shared between workers
    """

    state_names = ("square_avg",)

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 7e-4,
        alpha: float = 0.99,
        eps: float = 1e-5,
        initial_square_avg: float = 1.0,
        weight_decay: float = 0.0,
        shared: bool = True,
    ):
        _check_positive("lr", lr)
        _check_positive("eps", eps)
        _check_positive("initial_square_avg", initial_square_avg)
        _check_positive("weight_decay", weight_decay)
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"Invalid alpha={alpha!r}: expected 0 <= alpha < 1")
        defaults = dict(lr=lr, alpha=alpha, eps=eps, initial_square_avg=initial_square_avg, weight_decay=weight_decay)
        super().__init__(params, defaults, shared)

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {"square_avg": torch.full_like(p, group["initial_square_avg"], memory_format=torch.preserve_format)}

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            alpha, eps, lr, wd = group["alpha"], group["eps"], group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if wd == 0 else p.grad.add(p, alpha=wd)
                square_avg = self.state[p]["square_avg"]
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)  # eq. S1
                p.addcdiv_(grad, square_avg.add(eps).sqrt_(), value=-lr)  # eq. S2
        return loss


class MomentumSGD(_AsyncOptimizer):
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
        _check_positive("lr", lr)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Invalid momentum={momentum!r}: expected 0 <= momentum < 1")
        super().__init__(params, dict(lr=lr, momentum=momentum), shared)

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {"momentum_buffer": torch.zeros_like(p, memory_format=torch.preserve_format)}

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            momentum, lr = group["momentum"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p]["momentum_buffer"]
                buf.mul_(momentum).add_(p.grad, alpha=1 - momentum)
                p.add_(buf, alpha=-lr)
        return loss


def make_optimizer(name: str, params: Iterable[torch.Tensor], lr: float, **kwargs: Any) -> _AsyncOptimizer:
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
