"""SIGTERM during a run: a final checkpoint of the last committed step, then exit 143 (issue 30 item 5).

systemd, Kubernetes and SkyPilot stop a process with SIGTERM and kill it a grace period later.
Raised at once (as Ctrl-C is), the interrupt lands anywhere -- in the middle of a round, of a
commit or of a checkpoint -- so the run lost every step since its last periodic checkpoint (a
serverless run with none yet lost all of them).  Instead, while :class:`FinalCheckpoint` is
active around the controller's loop, SIGTERM only marks the termination pending
(:func:`spotwise.signals.deferred_sigterm`); the loop asks :meth:`FinalCheckpoint.requested`
between two iterations -- no step half-committed -- and then:

1. the plane ends its members' work as at a normal end (:meth:`DataPlane.stop`: the collective
   plane gathers the members' records and replica of their last step, the serverless plane stops
   its functions), so the controller holds the state of the last step in the event log;
2. that step is checkpointed (``checkpoint`` event, ``why: "sigterm"``) unless a checkpoint of it
   exists already;
3. :class:`~spotwise.signals.Terminated` is raised: the controller's cleanup runs and the CLI
   exits 143; ``spotwise run --resume OUT`` continues from the checkpoint.

All of it within :data:`spotwise.signals.FINAL_CHECKPOINT_S` seconds of the signal, or the run
stops without the final checkpoint, saying so (exit 143 still).
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Protocol

from spotwise.signals import Terminated, deferred_sigterm, termination_handled, termination_pending


class _Stoppable(Protocol):
    def stop(self) -> None: ...
    def before_finish(self) -> None: ...


class _LastCheckpoint(Protocol):
    last_step: int


class TerminatingJob(Protocol):
    """What :class:`FinalCheckpoint` needs of the job: its step, its plane's end, a checkpoint."""

    @property
    def step(self) -> int: ...
    @property
    def plane(self) -> _Stoppable: ...
    @property
    def checkpointer(self) -> _LastCheckpoint: ...

    def checkpoint(self, why: str) -> None: ...


class FinalCheckpoint:
    """``with FinalCheckpoint(job) as term: while not (term.requested() or job.done()): ...``
    (see the module docstring)."""

    def __init__(self, job: TerminatingJob) -> None:
        self.job = job
        self._defer: contextlib.AbstractContextManager[None] = deferred_sigterm()

    def __enter__(self) -> "FinalCheckpoint":
        self._defer.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        if exc_type is None and termination_pending():  # the loop ended with SIGTERM unanswered
            try:
                self.requested()
            except BaseException as e:
                self._defer.__exit__(type(e), e, e.__traceback__)
                raise
        return self._defer.__exit__(exc_type, exc, tb)

    def requested(self) -> bool:
        """False, or (SIGTERM pending) the final checkpoint is written and Terminated raised."""
        if not termination_pending():
            return False
        job = self.job
        job.plane.stop()
        job.plane.before_finish()
        if job.step > job.checkpointer.last_step:
            job.checkpoint("sigterm")
        if job.checkpointer.last_step != job.step:
            sys.stderr.write(f"spotwise: SIGTERM: step {job.step} could not be checkpointed; "
                             f"resume continues from step {max(job.checkpointer.last_step, 0)}\n")
        termination_handled()
        raise Terminated()
