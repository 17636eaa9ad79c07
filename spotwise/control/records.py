"""The job controller's small records: a mini-batch in flight, a finished contribution, the run's counters.

:class:`Task` is a mini-batch a worker is computing (continuous modes), :class:`Contribution` a
finished one waiting to be committed, :class:`Counters` what a run counts for its summary and its
checkpoints (the job controller).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spotwise.control.sampler import Block
from spotwise.planes.ps.wire import Gradient


@dataclass
class Task:
    worker: int
    block: Block
    version: int
    start: float
    #: drawn finish time (virtual clock); ``None`` where durations are measured (wall clock)
    finish: float | None
    ref: Any


@dataclass
class Contribution:
    worker: int
    block: Block
    #: dense flat vector or sparse update, as the worker shipped it (:mod:`spotwise.planes.ps.wire`)
    grad: Gradient
    loss: float
    n: int
    staleness: int
    #: the worker's measured seconds for it (batch, forward and backward, the gradient's copy to the host)
    seconds: float = 0.0
    #: how busy the worker's GPU was (a fraction; None on the CPU or without NVML)
    busy: float | None = None


@dataclass
class Counters:
    revocations: int = 0
    joins: int = 0
    decisions: int = 0
    notices: int = 0
    aborted_steps: int = 0
    idle_s: float = 0.0
    checkpoints: int = 0
    #: samples in committed steps (what a like-for-like baseline must process too)
    samples: int = 0
    #: restarts after a market switch or a migration, and the seconds they cost (billed, no work)
    restarts: int = 0
    restart_s: float = 0.0
    #: gradient payload bytes received from workers, and what the same gradients would have cost
    #: as dense flat float32 vectors (issue 9: sparse updates stay sparse on the wire)
    grad_bytes: int = 0
    grad_bytes_dense: int = 0
    recoveries_ms: list[float] = field(default_factory=list)
