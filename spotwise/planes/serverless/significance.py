"""Synchronization rules of MLLess: BSP/SSP progress and the ISP significance filter.

Paper 004 (MLLess, ``papers/004_9dc2adb66dc8d26e.txt``):

* Sec. 3 ("Synchronization"): BSP is the default model -- every worker waits for every other at
  the end of every step.  SSP [13] (stale synchronous parallel) relaxes it with a staleness
  bound ``s``: a worker at step ``t`` may go on only while the slowest worker has reached step
  ``>= t - s`` (:func:`may_proceed`, :class:`SyncModel`; BSP is ``s = 0``).
* Sec. 4.1 ("Significance Filter"), ISP (Insignificance-bounded Synchronous Parallel): each
  worker sums its local updates per parameter since that parameter's last propagation time
  ``t_{p_i}``; at step ``t`` the accumulated update ``delta_{i,t} = sum_{t'=t_{p_i}}^{t} u_{i,t'}``
  is pushed to the other workers iff::

      | delta_{i,t} / x_{i,t} | > v_t,      v_t = v / sqrt(t)      (Sec. 4.1, Theorem 1)

  where ``x_{i,t}`` is the worker's (noisy) local replica of parameter ``i``.  Pushed entries
  restart from zero; the others keep accumulating (:class:`SignificanceFilter`).
* Appendix A, Corollary: with ``v = 0`` ISP reduces to BSP -- no update is ever held back.
* Sec. 4.2 ("Eviction policy"): when a worker leaves with ``v_t > 0`` its insignificant updates
  would be lost, so each remaining worker averages its replica with the leaving one,
  ``x_p' <- (x_p + x_p') / 2`` (:func:`merge_leaving_replica`).  :meth:`SignificanceFilter.residual`
  / :meth:`SignificanceFilter.flush` expose the held-back updates for data planes that prefer to
  push them instead.

Choices the paper leaves open (documented here and tested):

* **Zero parameters.**  For ``x_i = 0`` the relative magnitude ``|delta_i / x_i|`` is infinite
  whenever ``delta_i != 0``, so any nonzero accumulated update on a zero parameter is
  significant and pushed.  The test is evaluated division-free as ``|delta_i| > v_t |x_i|``,
  which is the paper's rule for ``x_i != 0`` (up to the last rounding of the product) and gives
  exactly this rule for ``x_i = 0``.
* **Exact zeros.**  An accumulated update that is exactly ``0`` (nothing arrived, or updates
  cancelled) is never pushed -- there is nothing to send; with ``v = 0`` every *nonzero* update
  is pushed every step (BSP).
* **Sparse stays sparse.**  Updates are :class:`SparseUpdate` (sorted unique ``int64`` indices,
  ``float64`` values); dense arrays and ``(indices, values)`` pairs are accepted and converted.
  The accumulator is sparse too, so a step costs ``O(k log k)`` in the number ``k`` of touched
  parameters, never ``O(n)`` in the model size (except for reading ``params`` at those ``k``
  indices).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np

__all__ = [
    "BSP",
    "SignificanceFilter",
    "SparseUpdate",
    "SyncModel",
    "UpdateLike",
    "may_proceed",
    "merge_leaving_replica",
    "significance_threshold",
]


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_int(name: str, x: object, minimum: int) -> int:
    if not _is_int(x):
        raise ValueError(f"{name} must be an integer, got {x!r} ({type(x).__name__})")
    xi = int(x)  # type: ignore[arg-type]
    if xi < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {xi}")
    return xi


def significance_threshold(v: float, step: int) -> float:
    """The ISP threshold ``v_t = v / sqrt(t)`` at 1-based step ``t`` (paper 004, Sec. 4.1)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"v must be a real number, got {v!r}")
    vf = float(v)
    if not math.isfinite(vf) or vf < 0.0:
        raise ValueError(f"v must be finite and >= 0, got {v!r}")
    t = _check_int("step", step, 1)
    return vf / math.sqrt(t)


# --------------------------------------------------------------------------------------------
# Sparse update (what goes on the wire)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SparseUpdate:
    """A sparse additive update ``x[indices] += values`` of a length-``size`` parameter vector.

    ``indices`` are ``int64``, strictly increasing (sorted, unique) and in ``[0, size)``;
    ``values`` are finite ``float64`` of the same length.  Both are stored as read-only copies.
    Paper 004 sends only these pairs ("sparse gradients", Sec. 1 and 6); :attr:`nbytes` is the
    payload size on the wire.  Use :meth:`from_pairs` for unsorted / duplicated indices (summed),
    :meth:`from_dense` for a dense array.
    """

    indices: np.ndarray
    values: np.ndarray
    size: int

    def __post_init__(self) -> None:
        size = _check_int("size", self.size, 0)
        idx = np.asarray(self.indices)
        val = np.asarray(self.values)
        if idx.ndim != 1 or val.ndim != 1:
            raise ValueError(
                f"indices and values must be 1-D, got shapes {idx.shape} and {val.shape}"
            )
        if idx.shape != val.shape:
            raise ValueError(
                f"indices and values must have the same length, got {idx.size} and {val.size}"
            )
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        if val.size and (val.dtype == np.bool_ or not (
            np.issubdtype(val.dtype, np.floating) or np.issubdtype(val.dtype, np.integer)
        )):
            raise ValueError(f"values must be real numbers, got dtype {val.dtype}")
        idx = np.array(idx, dtype=np.int64, copy=True)
        val = np.array(val, dtype=np.float64, copy=True)
        if idx.size:
            if idx[0] < 0 or idx[-1] >= size:
                raise ValueError(f"indices must lie in [0, {size}), got min {idx.min()} max {idx.max()}")
            if np.any(np.diff(idx) <= 0):
                raise ValueError(
                    "indices must be strictly increasing (sorted, unique); "
                    "use SparseUpdate.from_pairs to sort and sum duplicates"
                )
            if not np.all(np.isfinite(val)):
                raise ValueError("values must be finite (no NaN or inf)")
        idx.setflags(write=False)
        val.setflags(write=False)
        object.__setattr__(self, "indices", idx)
        object.__setattr__(self, "values", val)
        object.__setattr__(self, "size", size)

    # -- constructors --------------------------------------------------------------------------

    @classmethod
    def empty(cls, size: int) -> SparseUpdate:
        """The update with no entries."""
        return cls(np.empty(0, np.int64), np.empty(0, np.float64), size)

    @classmethod
    def from_pairs(cls, indices: Iterable[int] | np.ndarray, values: Iterable[float] | np.ndarray,
                   size: int) -> SparseUpdate:
        """Build from unsorted ``(indices, values)``; duplicate indices are summed."""
        idx = np.asarray(indices)
        val = np.asarray(values)
        if idx.ndim != 1 or val.ndim != 1 or idx.shape != val.shape:
            raise ValueError(
                f"indices and values must be 1-D of the same length, got shapes "
                f"{idx.shape} and {val.shape}"
            )
        if idx.size == 0:
            return cls.empty(size)
        if not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        if val.dtype == np.bool_ or not (
            np.issubdtype(val.dtype, np.floating) or np.issubdtype(val.dtype, np.integer)
        ):
            raise ValueError(f"values must be real numbers, got dtype {val.dtype}")
        uniq, inv = np.unique(idx.astype(np.int64), return_inverse=True)
        summed = np.bincount(inv.ravel(), weights=val.astype(np.float64), minlength=uniq.size)
        return cls(uniq, summed, size)

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseUpdate:
        """Keep the nonzero entries of a 1-D dense array."""
        arr = np.asarray(dense)
        if arr.ndim != 1:
            raise ValueError(f"a dense update must be 1-D, got shape {arr.shape}")
        if arr.dtype == np.bool_ or not (
            np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
        ):
            raise ValueError(f"a dense update must be real numbers, got dtype {arr.dtype}")
        nz = np.flatnonzero(arr)
        return cls(nz.astype(np.int64), arr[nz].astype(np.float64), arr.size)

    # -- queries -------------------------------------------------------------------------------

    @property
    def nnz(self) -> int:
        """Number of (index, value) pairs."""
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Payload bytes on the wire: the ``int64`` indices plus the ``float64`` values."""
        return int(self.indices.nbytes + self.values.nbytes)

    def to_dense(self) -> np.ndarray:
        """A dense ``float64`` copy (for tests and debugging; data planes should not need it)."""
        out = np.zeros(self.size, dtype=np.float64)
        out[self.indices] = self.values
        return out

    def apply_to(self, params: np.ndarray) -> None:
        """In-place ``params[indices] += values``; ``params`` must be a writable float 1-D array."""
        if not isinstance(params, np.ndarray):
            raise ValueError(f"params must be a numpy array, got {type(params).__name__}")
        if params.shape != (self.size,):
            raise ValueError(f"params must have shape ({self.size},), got {params.shape}")
        if not np.issubdtype(params.dtype, np.floating):
            raise ValueError(f"params must have a floating dtype, got {params.dtype}")
        if not params.flags.writeable:
            raise ValueError("params must be writable")
        params[self.indices] += self.values


UpdateLike = Union[SparseUpdate, np.ndarray, "tuple[Sequence[int], Sequence[float]]"]
"""A :class:`SparseUpdate`, a dense 1-D array, or an ``(indices, values)`` pair."""


def _as_sparse(update: object, size: int) -> SparseUpdate:
    if isinstance(update, SparseUpdate):
        if update.size != size:
            raise ValueError(f"update has size {update.size}, expected {size}")
        return update
    if isinstance(update, tuple):
        if len(update) != 2:
            raise ValueError(f"a sparse update must be an (indices, values) pair, got {len(update)} items")
        return SparseUpdate.from_pairs(update[0], update[1], size)
    if isinstance(update, np.ndarray):
        if update.shape != (size,):
            raise ValueError(f"a dense update must have shape ({size},), got {update.shape}")
        return SparseUpdate.from_dense(update)
    raise ValueError(
        "update must be a SparseUpdate, an (indices, values) tuple or a dense numpy array, "
        f"got {type(update).__name__}"
    )


# --------------------------------------------------------------------------------------------
# ISP significance filter
# --------------------------------------------------------------------------------------------


class _FilterClock:
    """What both ISP filters share: the last step pushed and the threshold ``v_t = v / sqrt(t)``."""

    v: float
    _last_step: int

    @property
    def last_step(self) -> int:
        """The last step given to ``push`` (``0`` before the first)."""
        return self._last_step

    def threshold(self, step: int) -> float:
        """``v_t = v / sqrt(t)``."""
        return significance_threshold(self.v, step)


@dataclass
class SignificanceFilter(_FilterClock):
    """Per-worker ISP filter of paper 004 Sec. 4.1 (Theorem 1; Appendix A).

    ``size`` is the number of model parameters ``n``; ``v >= 0`` the initial threshold (the
    paper's experiments use ``v = 0.7``, Sec. 6).  Call :meth:`push` once per step ``t = 1, 2,
    ...`` (strictly increasing, gaps allowed) with the worker's local update ``u_t`` and its
    current local replica ``x_t`` (the noisy view, Appendix A Eq. 4 -- typically after applying
    ``u_t`` locally); it returns the significant accumulated entries to broadcast.  With ``v = 0``
    every nonzero update is pushed every step (BSP, Appendix A Corollary).  See the module
    docstring for the ``x_i = 0`` rule (always significant when ``delta_i != 0``).

    Invariant (nothing is lost): the sum of all pushed updates plus :meth:`residual` equals the
    sum of all local updates given to :meth:`push` (up to float rounding of the sums).
    """

    size: int
    v: float
    _acc_idx: np.ndarray = field(init=False, repr=False)
    _acc_val: np.ndarray = field(init=False, repr=False)
    _last_step: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        self.size = _check_int("size", self.size, 0)
        significance_threshold(self.v, 1)  # validates v
        self.v = float(self.v)
        self._acc_idx = np.empty(0, np.int64)
        self._acc_val = np.empty(0, np.float64)
        self._last_step = 0

    def push(self, step: int, params: np.ndarray, update: UpdateLike) -> SparseUpdate:
        """Accumulate ``update`` and return the entries to send at 1-based step ``step``.

        An accumulated entry ``delta_i`` is sent iff ``|delta_i| > v_t |params_i|`` (i.e.
        ``|delta_i / x_i| > v_t`` for ``x_i != 0``; always for ``x_i = 0``, ``delta_i != 0``).
        Sent entries restart from zero; the rest stay in :meth:`residual`.
        """
        t = _check_int("step", step, 1)
        if t <= self._last_step:
            raise ValueError(
                f"steps must be strictly increasing: got step {t} after step {self._last_step}"
            )
        if not isinstance(params, np.ndarray):
            raise ValueError(f"params must be a numpy array, got {type(params).__name__}")
        if params.shape != (self.size,):
            raise ValueError(f"params must have shape ({self.size},), got {params.shape}")
        if params.dtype == np.bool_ or not (
            np.issubdtype(params.dtype, np.floating) or np.issubdtype(params.dtype, np.integer)
        ):
            raise ValueError(f"params must be real numbers, got dtype {params.dtype}")
        u = _as_sparse(update, self.size)
        v_t = self.threshold(t)

        if u.nnz == 0:
            idx, val = self._acc_idx, self._acc_val
        elif self._acc_idx.size == 0:
            idx, val = u.indices, u.values
        else:
            cat_idx = np.concatenate([self._acc_idx, u.indices])
            cat_val = np.concatenate([self._acc_val, u.values])
            idx, inv = np.unique(cat_idx, return_inverse=True)
            # bincount adds in order of appearance: accumulator first, then the new update.
            val = np.bincount(inv.ravel(), weights=cat_val, minlength=idx.size)

        x = np.asarray(params[idx], dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("params must be finite at the updated indices")
        nonzero = val != 0.0
        significant = nonzero & (np.abs(val) > v_t * np.abs(x))
        keep = nonzero & ~significant

        self._acc_idx = np.array(idx[keep], dtype=np.int64)
        self._acc_val = np.array(val[keep], dtype=np.float64)
        self._last_step = t
        return SparseUpdate(idx[significant], val[significant], self.size)

    def residual(self) -> SparseUpdate:
        """The accumulated, not yet pushed (insignificant) updates; the filter is unchanged."""
        return SparseUpdate(self._acc_idx, self._acc_val, self.size)

    def flush(self) -> SparseUpdate:
        """Return :meth:`residual` and clear it (e.g. a worker leaving the pool, Sec. 4.2)."""
        out = self.residual()
        self._acc_idx = np.empty(0, np.int64)
        self._acc_val = np.empty(0, np.float64)
        return out


def merge_leaving_replica(local: np.ndarray, leaving: np.ndarray) -> np.ndarray:
    """Paper 004 Sec. 4.2 eviction policy: ``x_p' <- (x_p + x_p') / 2``.

    Each remaining worker ``p'`` averages its replica with the leaving worker ``p``'s replica to
    reintegrate ``p``'s insignificant updates.  Returns a new ``float64`` array.  (With ``v = 0``
    the replicas are equal under BSP and this is the identity.)
    """
    a = np.asarray(local)
    b = np.asarray(leaving)
    for name, arr in (("local", a), ("leaving", b)):
        if arr.dtype == np.bool_ or not (
            np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
        ):
            raise ValueError(f"{name} replica must be real numbers, got dtype {arr.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"replicas must have the same shape, got {a.shape} and {b.shape}")
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("replicas must be finite (no NaN or inf)")
    return 0.5 * (a + b)


# --------------------------------------------------------------------------------------------
# BSP / SSP progress rule
# --------------------------------------------------------------------------------------------


def may_proceed(my_step: int, steps_of_all: Iterable[int], staleness: int) -> bool:
    """SSP rule (paper 004 Sec. 3, citing SSP [13]): may a worker at ``my_step`` go on?

    True iff the slowest worker has reached step ``>= my_step - staleness``.  ``steps_of_all`` are
    the steps (logical clocks, ``>= 0``) of all workers in the pool, the caller's included or not.
    ``staleness = 0`` is BSP: wait until every worker has reached ``my_step``.
    """
    t = _check_int("my_step", my_step, 0)
    s = _check_int("staleness", staleness, 0)
    if isinstance(steps_of_all, (str, bytes)) or not isinstance(steps_of_all, Iterable):
        raise ValueError(f"steps_of_all must be an iterable of integers, got {steps_of_all!r}")
    steps = [_check_int("each of steps_of_all", x, 0) for x in steps_of_all]
    if not steps:
        raise ValueError("steps_of_all must not be empty")
    return min(steps) >= t - s


@dataclass(frozen=True)
class SyncModel:
    """A synchronization model given by its staleness bound (paper 004 Sec. 3).

    ``staleness = 0`` is BSP (the MLLess default); ``staleness = s > 0`` is SSP with bound ``s``.
    ISP is BSP progress plus a :class:`SignificanceFilter` on what is sent.
    """

    staleness: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "staleness", _check_int("staleness", self.staleness, 0))

    @property
    def name(self) -> str:
        return "BSP" if self.staleness == 0 else f"SSP(s={self.staleness})"

    def may_proceed(self, my_step: int, steps_of_all: Iterable[int]) -> bool:
        """:func:`may_proceed` with this model's staleness."""
        return may_proceed(my_step, steps_of_all, self.staleness)


BSP = SyncModel(0)
"""Bulk synchronous parallel: every worker waits for all others at the end of each step."""


class DenseSignificanceFilter(_FilterClock):
    """:class:`SignificanceFilter` with a dense accumulator: the same rule, for models that fit in memory.

    The sparse filter merges the accumulator with every update (a sort of both), which costs more
    CPU than the exchange it saves on a fast link; this one keeps ``delta`` as a dense ``float64``
    vector and tests ``|delta_i| > v_t |x_i|`` over the accumulated entries only (tracked as a
    boolean mask).  Same :meth:`push` / :meth:`residual` / :meth:`flush` contract and the same
    results as :class:`SignificanceFilter` (tested), at O(n) memory.
    """

    def __init__(self, size: int, v: float) -> None:
        self.size = _check_int("size", size, 0)
        significance_threshold(v, 1)
        self.v = float(v)
        self._acc = np.zeros(self.size, np.float64)
        self._held = np.zeros(self.size, np.bool_)
        self._last_step = 0

    def restore(self, residual: SparseUpdate, step: int) -> None:
        """Start from an accumulated residual (a function re-invoked after ``step`` steps)."""
        self._acc[:] = 0.0
        self._held[:] = False
        self._acc[residual.indices] = residual.values
        self._held[residual.indices] = residual.values != 0.0
        self._last_step = int(step)

    def push(self, step: int, params: np.ndarray, update: UpdateLike) -> SparseUpdate:
        t = _check_int("step", step, 1)
        if t <= self._last_step:
            raise ValueError(f"steps must be strictly increasing: got step {t} after step {self._last_step}")
        if not isinstance(params, np.ndarray) or params.shape != (self.size,):
            raise ValueError(f"params must be a numpy array of shape ({self.size},)")
        u = _as_sparse(update, self.size)
        self._acc[u.indices] += u.values
        self._held[u.indices] = True
        idx = np.flatnonzero(self._held)
        val = self._acc[idx]
        x = np.asarray(params[idx], dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("params must be finite at the updated indices")
        nonzero = val != 0.0
        significant = nonzero & (np.abs(val) > self.threshold(t) * np.abs(x))
        out_idx = idx[significant]
        out = SparseUpdate(out_idx, val[significant], self.size)
        self._acc[out_idx] = 0.0
        self._held[idx[~nonzero | significant]] = False
        self._acc[idx[~nonzero]] = 0.0
        self._last_step = t
        return out

    def residual(self) -> SparseUpdate:
        idx = np.flatnonzero(self._held)
        return SparseUpdate(idx, self._acc[idx], self.size)

    def flush(self) -> SparseUpdate:
        out = self.residual()
        self._acc[:] = 0.0
        self._held[:] = False
        return out
