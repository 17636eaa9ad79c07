"""The serverless data plane: MLLess (``papers/004_9dc2adb66dc8d26e.txt``) on Lithops functions and Redis.

* :mod:`~spotwise.planes.serverless.plane` -- the data plane under the job controller (the
  supervisor of Sec. 3.1): invocations, the merge loop into the reference replica, the schedule;
  it holds
  :mod:`~spotwise.planes.serverless.job_store` (the job's Redis side and the private server),
  :mod:`~spotwise.planes.serverless.invocations` (the worker functions) and
  :mod:`~spotwise.planes.serverless.function_billing` (function time and money).
* :mod:`~spotwise.planes.serverless.function` -- the worker function; :mod:`~spotwise.planes.serverless.backend`
  -- Lithops; :mod:`~spotwise.planes.serverless.store` -- Redis server, URLs, update encodings, keys.
* :mod:`~spotwise.planes.serverless.significance` -- the ISP significance filter (Sec. 4.1,
  Appendix A), BSP/SSP progress rules (Sec. 3) and the sparse update on the wire (re-exported here);
  :mod:`~spotwise.planes.serverless.schedule` -- membership per step and the sample stream.
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
