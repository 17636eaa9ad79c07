"""Modelled compute and loss: what the simulator plugs into the coordinator instead of PyTorch and Ray.

The simulator runs the *same* coordinator as ``spotwise run`` -- membership, sampler, atomic
commits, policies, market, ledger, event log, checkpoints -- on the same virtual clock with the same
mini-batch time law draws, so its time, cost, revocations and joins are those the emulated run of
the same spec and seed would have.  Only the numerics are modelled:

* :class:`ModelledState` -- the expected error ``e_j = E[G(w_j) - G*]`` follows the recursion in
  the proof of ``papers/000_3c734f3ffedcac15.txt`` Thm 1 (eq. 10)::

      e_{j+1} = beta e_j + (alpha^2 L M / 2) / y_j,    e_1 = G1,   beta = 1 - alpha c mu

  where ``y_j`` is the number of mini-batches the committed step ``j`` holds (its contributions).
  The reported loss is ``G* + e_j``.  The constants come from a pilot fit or the planner's
  assumed model (:mod:`spotwise.planner.estimate.pilot`).  The learning rate of the run (e.g. changed by
  ``lr-scaling``) does not enter: the model's ``alpha`` is the step size the constants were fitted for.
* :class:`ModelledCompute` -- workers are tokens; a call returns at once with an empty gradient
  and the loss at the parameters it was started with (stale for n-batch / async, as in a real run).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spotwise.planes.ps.compute import Compute, Result, WorkerLost
from spotwise.control.state import TrainingState
from spotwise.theory.bounds import ErrorModel


class ModelledState(TrainingState):
    """The Thm 1 error recursion as the model (see the module docstring); ``params`` is ``[e_j]``."""

    def __init__(self, model: ErrorModel, n_train: int, g_star: float = 0.0) -> None:
        if n_train < 1:
            raise ValueError("n_train must be >= 1")
        self.model = model
        self.g_star = float(g_star)
        self.n_train = int(n_train)
        self.metric_name = None
        self.params = np.array([model.G1], dtype=np.float32)
        self._k = model.alpha**2 * model.L * model.M / 2.0

    @property
    def error(self) -> float:
        return float(self.params[0])

    @property
    def loss(self) -> float:
        return self.g_star + self.error

    @property
    def can_evaluate(self) -> bool:
        return True

    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        if contributions < 1:
            raise ValueError("a committed step holds at least one contribution")
        e = self.model.beta * float(self.params[0]) + self._k / contributions
        self.params = np.array([e], dtype=np.float32)

    def evaluate(self) -> dict[str, float]:
        return {"loss": self.loss}


class _Token:
    __slots__ = ("alive",)

    def __init__(self) -> None:
        self.alive = True


class ModelledCompute(Compute):
    """Workers without processes; each call's result is the modelled loss (module docstring)."""

    def __init__(self, state: ModelledState) -> None:
        self.state = state
        self.spawned = 0
        self.killed = 0
        self._grad = np.zeros(1, dtype=np.float32)

    def warm_up(self, n: int) -> list[Any]:
        self.spawned += n
        return [_Token() for _ in range(n)]

    def acquire(self) -> Any:
        self.spawned += 1
        return _Token()

    def kill(self, worker: Any) -> None:
        worker.alive = False
        self.killed += 1

    def share(self, params: np.ndarray) -> Any:
        return None

    def submit(self, worker: Any, params: Any, indices: np.ndarray) -> Any:
        return (worker, self.state.loss, int(len(indices)))

    def result(self, slot: int, pending: Any) -> Result:
        worker, loss, n = pending
        if not worker.alive:
            raise WorkerLost(slot)
        return self._grad, loss, n, 0.0, None, None

    def gather(self, pending: dict[int, Any]) -> dict[int, Result]:
        try:
            return {w: self.result(w, p) for w, p in pending.items()}
        except WorkerLost:
            return {}
