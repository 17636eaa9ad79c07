"""The commit points of a user's step (:mod:`spotwise.elastic.host`), and how a dropped step is taken back.

Each ``job.optimizer()`` call is a commit point; a job step ends at the ``step()`` that completes
the set (every point stepped since the last), so a GAN's discriminator and generator steps are one
job step.  Atomicity across them: before a point that has later ones first steps, :meth:`CommitPoints.keep_start`
copies (on the device, no host read) its optimizers' parameters and state and every registered
scheduler's state -- into the memory of the last step's copies where the shapes allow -- and
:meth:`CommitPoints.rollback` puts them back when a later point fails, on every member alike.  The
registered GradScaler's scale and growth tracker are kept at each step's start
(:meth:`CommitPoints.begin`) and put back after a dropped step, whose ``update()`` the script still
calls.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from spotwise.training.tensor_tree import clone_tree_into

#: the GradScaler tensors a dropped step must not move (device tensors: copied without a host read)
SCALER_TENSORS = ("_scale", "_growth_tracker")


class CommitPoints:
    """The optimizers of each commit point, the points stepped in the current step, and the copies
    that take it back (module docstring)."""

    def __init__(self) -> None:
        #: the optimizers of each ``job.optimizer()`` call, in order of registration
        self.groups: list[list[torch.optim.Optimizer]] = []
        self.schedulers: list[Any] = []
        #: the points stepped in the current step
        self.stepped: set[int] = set()
        self._snap: dict[int, Any] = {}
        #: the memory of the last step's copies, taken again at the next (no allocation per step)
        self._spare: dict[int, Any] = {}
        self._scaler_start: list[torch.Tensor] | None = None

    def add(self, optimizers: list[torch.optim.Optimizer]) -> int:
        self.groups.append(list(optimizers))
        return len(self.groups) - 1

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for g in self.groups for o in g]

    def begin(self, scaler: Any) -> None:
        """A step starts: no point stepped yet; the scaler's state as it begins."""
        self.stepped, self._snap = set(), {}
        self._scaler_start = _scaler_state(scaler)

    def inner(self, index: int) -> bool:
        """Whether point ``index`` is not the last of its step (another has yet to step)."""
        return len(self.stepped | {int(index)}) < len(self.groups)

    def keep_start(self, index: int) -> None:
        """Before point ``index`` first steps in a step with later points: its copies (module docstring)."""
        if index in self._snap:
            return
        group = self.groups[index]
        params = [q for o in group for g in o.param_groups for q in g["params"]]
        spare_values, spare_states = self._spare.pop(index, (None, None))
        values = clone_tree_into([q.detach() for q in params], spare_values)
        states = clone_tree_into([o.state_dict() for o in group], spare_states)
        scheds = [] if self._snap else [(s, copy.deepcopy(s.state_dict())) for s in self.schedulers]
        self._snap[index] = (params, values, states, scheds)

    def done(self) -> None:
        """The step committed: its copies' memory serves the next step's."""
        for point, (_, values, states, _) in self._snap.items():
            self._spare[point] = (values, states)
        self.stepped, self._snap = set(), {}

    def rollback(self, scaler: Any) -> None:
        """Put back what the step's earlier points changed (:meth:`keep_start`) and the scaler's state."""
        for index, (params, values, states, scheds) in self._snap.items():
            with torch.no_grad():
                for q, v in zip(params, values):
                    q.copy_(v)
            for o, sd in zip(self.groups[index], states):
                o.load_state_dict(sd)  # (it takes the copies' tensors as its own: they are not reused)
            for sched, sd in scheds:
                sched.load_state_dict(sd)
            self._spare[index] = (values, None)
        if self._snap:
            self.restore_scaler(scaler)
        self.stepped, self._snap = set(), {}

    def restore_scaler(self, scaler: Any) -> None:
        """The scaler's scale and growth tracker back to the step's start (after a dropped step)."""
        if self._scaler_start is None or scaler is None:
            return
        for name, v in zip(SCALER_TENSORS, self._scaler_start):
            t = getattr(scaler, name, None)
            if t is not None:
                t.copy_(v)


def _scaler_state(scaler: Any) -> list[torch.Tensor] | None:
    """A device copy of a GradScaler's scale and growth tracker (None: no scaler, or none yet)."""
    kept = [getattr(scaler, n, None) for n in SCALER_TENSORS] if scaler is not None else []
    if not kept or any(t is None for t in kept):
        return None
    return [t.detach().clone() for t in kept]
