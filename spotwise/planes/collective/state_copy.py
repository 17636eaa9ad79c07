"""The controller's copy of the members' training state on the collective plane (issue 28).

The members hold the state; the controller keeps a copy of one step for checkpoints, for a
generation no member can source (the run's start, a resume, every member lost) and for the final
model.  :class:`StateCopy` receives the replicas the leader offers (headers through the store, the
state fetched from the member by an actor call: :meth:`~spotwise.planes.collective.plane.PlaneControl.pop_replicas`),
adopts the one of a given step -- the flat vector *and* the optimizer, grad-scaler and integer-buffer
state -- and asks the leader for one when it needs it now.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from spotwise.control.dataplane import PlaneHost
from spotwise.planes.collective.records import Replicas
from spotwise.training import tensor_tree
from spotwise.training.state import decode_extra, encode_extra

if TYPE_CHECKING:  # type only
    from spotwise.planes.collective.plane import PlaneControl

#: how long the controller waits for a requested replica (seconds), and its polling interval
REPLICA_WAIT_S = 30.0
POLL_S = 0.001
#: the longest pause between two looks at the store while no record arrives (the pause grows from
#: POLL_S by half each idle look: a polling loop at 1 ms took ~15 % of a core beside 4 members on 2 cores)
POLL_MAX_S = 0.008


class StateCopy:
    """Replicas received from the members and the one adopted as the controller's (module docstring)."""

    def __init__(self, ctl: "PlaneControl", job: Callable[[], PlaneHost]) -> None:
        self.ctl = ctl
        self._job = job
        self.replicas = Replicas()

    def member(self, w: int) -> Any:
        """The actor (or in-process object) of member ``w``, or None once it is gone."""
        return self._job().members.get(w)

    def hand_over(self, members: list[int], gen: int, epoch: int, pos: int) -> None:
        """Give ``members`` the controller's state for generation ``gen`` (no member can source it).

        A fresh run's first generation (``gen`` 0 at step 0) sends a digest in place of the parameters:
        the members built the same initial model from the same workload and seed, so no copy of the
        model lands in every member's memory and nothing moves; a member whose own parameters differ
        fails that generation (saying so) and the next one hands the vector over."""
        job = self._job()
        extra = job.state.extra_state()
        head: dict[str, Any] = {"step": job.step, "epoch": epoch, "pos": pos}
        vec: np.ndarray | None = job.params
        if gen == 0 and job.step == 0:
            head["digest"], vec = tensor_tree.digest(job.params), None
        self.ctl.hand_over([job.members[w] for w in members], gen, head, vec, encode_extra(extra) if extra else b"")

    def receive(self) -> None:
        self.replicas.receive(self.ctl.pop_replicas(self.member))

    def adopt_at(self, step: int) -> bool:
        """Take the members' replica of ``step`` as the controller's state, if one arrived."""
        got = self.replicas.adopt(step)
        if got is None:
            return False
        params, extra = got
        job = self._job()
        fm = getattr(job.state, "fm", None)
        if fm is not None and params.size == fm.M < job.params.size:  # frozen parameters: not offered, ours kept
            import torch

            fm.unpack_moving(torch.from_numpy(np.ascontiguousarray(params, dtype=np.float32)))
        else:
            job.params = params
        if extra:
            job.state.load_extra_state(decode_extra(extra))
        return True

    def stop_diverged(self, why: str, sampler_state: dict[str, Any]) -> None:
        """The members halted at a step whose loss or gradient is not finite: checkpoint the last good
        step (the halted leader serves the replica request) and stop the run (exit 2)."""
        from spotwise.control.sampler import EpochSampler

        job = self._job()
        if self.replicas.step == job.step or self.fetch(job.step, lambda: False):
            job.sampler = EpochSampler.from_state(sampler_state)
            job.checkpointer.take("nonfinite")
        job.nonfinite(why, checkpoint=False)

    def fetch(self, step: int, give_up: Callable[[], bool]) -> bool:
        """Ask the leader for its replica and adopt it if it is of ``step`` (within :data:`REPLICA_WAIT_S`)."""
        self.ctl.request_replica()
        deadline = time.monotonic() + REPLICA_WAIT_S
        while time.monotonic() < deadline:
            self.receive()
            if self.adopt_at(step):
                return True
            if give_up():
                return False
            time.sleep(POLL_S)
        return False
