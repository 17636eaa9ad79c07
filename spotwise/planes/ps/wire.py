"""What a worker's gradient looks like on the wire, and how the controller adds it up (issue 9).

A worker ships one of two payloads (:meth:`~spotwise.planes.ps.worker.GradientWorker.compute`):

* a dense flat ``float32`` vector (:func:`~spotwise.workloads.params.flat_grad`) -- every
  workload without sparse gradients, unchanged;
* a :class:`~spotwise.planes.serverless.significance.SparseUpdate` over the same flat layout
  (:func:`~spotwise.workloads.params.flat_grad_sparse`) -- workloads with sparse embedding
  gradients (``Workload.sparse_grads``: sparse-logreg, pmf): dense parameters contribute all their
  entries, an embedding only the rows the mini-batch touched.  A worker falls back to the dense
  vector when the sparse encoding (``int64`` index + ``float64`` value, 16 bytes an entry) would
  not be smaller than the dense one (4 bytes an entry), i.e. above 25 % density, so the payload is
  never larger than before.

The controller never densifies a contribution: :func:`accumulate` adds it, weighted, into the one
dense aggregation buffer of the step.  Both forms give bit-identical sums: the sparse values
are exact ``float32`` numbers widened to ``float64``, and they are narrowed back and scaled in
``float32`` exactly as the dense path does (``buf += w * g``), while the entries a sparse
payload leaves out are zeros the dense path would have added.
"""

from __future__ import annotations

from typing import Union

import numpy as np

from spotwise.planes.serverless.significance import SparseUpdate

#: a worker's gradient as it travels: dense flat vector or sparse update over the flat layout
Gradient = Union[np.ndarray, SparseUpdate]

#: bytes of one entry of the dense flat gradient (float32)
DENSE_ENTRY_BYTES = 4


def payload_nbytes(grad: Gradient) -> int:
    """Bytes of ``grad`` on the wire: ``grad.nbytes`` (dense) or the sparse indices + values."""
    return int(grad.nbytes)


def grad_size(grad: Gradient) -> int:
    """Length of the flat vector ``grad`` stands for."""
    return int(grad.size)


def accumulate(buf: np.ndarray, grad: Gradient, weight: float) -> None:
    """``buf += weight * grad`` in place, without densifying a sparse ``grad``.

    ``buf`` is the step's dense aggregation buffer (the parameters' dtype, float32).  A dense
    ``grad`` is added exactly as before (``buf += weight * grad``); a sparse one only at its
    indices, with the same float32 arithmetic, so both forms give the same bits.
    """
    if isinstance(grad, SparseUpdate):
        if grad.size != buf.size:
            raise ValueError(f"sparse gradient has size {grad.size}, the parameters have {buf.size}")
        if grad.indices.size:
            buf[grad.indices] += weight * grad.values.astype(buf.dtype)  # indices are unique
        return
    buf += weight * grad


def to_dense(grad: Gradient, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """A dense copy of ``grad`` (for tests and tools; the controller uses :func:`accumulate`)."""
    if isinstance(grad, SparseUpdate):
        return grad.to_dense().astype(dtype)
    return np.asarray(grad, dtype=dtype).copy()
