"""The model side of a job: its parameters, how a committed step changes them, how they are evaluated.

The coordinator owns one :class:`TrainingState` and nothing else about the model, so the same
control logic drives real training and the simulator:

* :class:`TorchState` -- the workload's PyTorch model as one flat float32 vector; a committed
  step applies ``params -= lr * g`` with ``g`` the sample-weighted mean of the contributions'
  gradients (the atomic update of ``papers/001_30a454edd897cf47.txt`` Sec. 3.2); evaluation runs
  the model on the workload's test split.
* :class:`spotwise.sim.modelled.ModelledState` -- no model at all: the expected error follows
  the recursion of ``papers/000_3c734f3ffedcac15.txt`` Thm 1 (the simulator's loss model).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch

from spotwise.workloads.params import flat_params, set_flat_params


class TrainingState(ABC):
    """Parameters (``params``, a flat float32 vector a checkpoint stores), update and evaluation."""

    params: np.ndarray
    #: samples in the training split (the epoch sampler's size)
    n_train: int
    #: name of the evaluation metric (``None`` if there is none besides the loss)
    metric_name: str | None

    @property
    @abstractmethod
    def can_evaluate(self) -> bool:
        """Whether :meth:`evaluate` has something to evaluate on."""

    @abstractmethod
    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        """Commit one step: ``grad`` is the sample-weighted mean gradient of ``contributions`` results."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """``{"loss": ..., metric_name: ...}`` at the current parameters."""


class TorchState(TrainingState):
    """A PyTorch workload (:mod:`spotwise.workloads`) trained for real."""

    def __init__(self, workload: Any) -> None:
        self.workload = workload
        self.model = workload.build_model()
        self.params = flat_params(self.model).detach().numpy().astype(np.float32).copy()
        self.n_train = len(workload.train)
        self.metric_name = workload.metric_name

    @property
    def can_evaluate(self) -> bool:
        return self.workload.test is not None

    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        self.params -= np.float32(lr) * grad

    def evaluate(self) -> dict[str, float]:
        if self.workload.test is None:
            return {}
        set_flat_params(self.model, torch.from_numpy(self.params))
        self.model.eval()
        res = self.workload.evaluate(self.model, self.workload.test)
        self.model.train()
        return {k: float(v) for k, v in res.items()}
