"""Serverless (FaaS) training pieces from paper 004 (MLLess, ``papers/004_9dc2adb66dc8d26e.txt``).

Only the synchronization rules live here so far (:mod:`spotwise.planes.serverless.significance`):
the ISP significance filter (Sec. 4.1, Appendix A), BSP/SSP progress rules (Sec. 3) and the
sparse update that goes on the wire.
"""

from __future__ import annotations

from spotwise.planes.serverless.significance import (
    BSP,
    SignificanceFilter,
    SparseUpdate,
    SyncModel,
    may_proceed,
    merge_leaving_replica,
    significance_threshold,
)

__all__ = [
    "BSP",
    "SignificanceFilter",
    "SparseUpdate",
    "SyncModel",
    "may_proceed",
    "merge_leaving_replica",
    "significance_threshold",
]
