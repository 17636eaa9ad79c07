"""User optimizers (``workload.optimizer.name: bad_optimizers:Class``) that a user gets wrong (issue 38).

Each is the user's fault and must exit 2 naming ``workload.optimizer``, with the user's traceback
where their own code raised.  ``not_a_class``, ``NotAnOptimizer`` and ``NUMBER`` are no Optimizer
classes at all.  ``RaisesOnBigParams`` passes the load-time check (a step on a throwaway 2 x 2
parameter) and fails at its first real step: what the planes' first-step rule catches.
"""

from __future__ import annotations

from typing import Any

import torch


class RaisesInStep(torch.optim.Optimizer):
    """Its ``step`` always raises."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        raise ZeroDivisionError("the user's step divides by zero")


class RaisesWhenBuilt(torch.optim.Optimizer):
    """Its constructor raises."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        raise KeyError("the user's constructor looks up a missing key")


class RaisesOnBigParams(torch.optim.SGD):
    """Plain SGD that raises at a step over any parameter of more than 4 entries: the load-time
    check's throwaway parameter (2 x 2) passes, a real model's first step fails."""

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.numel() > 4:
                    raise RuntimeError(f"the user's step cannot handle a parameter of shape {tuple(p.shape)}")
        return super().step(closure)


def not_a_class(params: Any, lr: float = 1e-3) -> torch.optim.Optimizer:
    """A factory function, not an Optimizer class."""
    return torch.optim.SGD(params, lr=lr)


class NotAnOptimizer:
    """A class that does not subclass torch.optim.Optimizer."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        self.params = list(params)


NUMBER = 3
