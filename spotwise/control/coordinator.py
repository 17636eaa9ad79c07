"""Compatibility names: the job controller and its helpers under their old module path.

The controller that used to live here is :class:`~spotwise.control.controller.JobController`
(``Coordinator`` is the same class); its helpers moved to modules named for what they hold:
:mod:`spotwise.control.progress` (``NoProgressError``, ``check_progress_possible``, ...),
:mod:`spotwise.control.rundir_io` (``load_run_spec``, ``has_checkpoint``),
:mod:`spotwise.planes.ps.worker` (``worker_args_for``), :mod:`spotwise.control.records` (``Task``,
``Contribution``, ``Counters``) and :mod:`spotwise.control.market_actions` (``DEFAULT_RESTART_S``).
Import from those in new code; this module only re-exports them.
"""

from __future__ import annotations

from spotwise.control.controller import JobController
from spotwise.control.market_actions import DEFAULT_RESTART_S, LEDGER_MARKET
from spotwise.control.progress import (
    MIN_ROUND_SUCCESS,
    NoProgressError,
    check_progress_possible,
    mini_batch_survival,
    progress_fix,
)
from spotwise.capacity.raystart import ensure_ray
from spotwise.control.records import Contribution, Counters, Task
from spotwise.control.rundir_io import SPEC_FILE, has_checkpoint, load_run_spec
from spotwise.planes.ps.worker import worker_args_for

#: the job controller under its old name
Coordinator = JobController

__all__ = [
    "DEFAULT_RESTART_S", "LEDGER_MARKET", "MIN_ROUND_SUCCESS", "SPEC_FILE", "Contribution", "Coordinator", "Counters",
    "JobController", "NoProgressError", "Task", "check_progress_possible", "ensure_ray", "has_checkpoint",
    "load_run_spec", "mini_batch_survival", "progress_fix", "worker_args_for",
]
