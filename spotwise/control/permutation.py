"""Seeded epoch permutations whose memory does not grow with the dataset (issue 28 item 4).

An epoch of :class:`~spotwise.control.sampler.EpochSampler` (and of the collective plane's
:class:`~spotwise.planes.collective.replica.DataCursor`) is a seeded permutation of ``0..n-1``
that is consumed in contiguous slices ``perm[lo:hi]``.  :func:`epoch_permutation` returns it as an
:class:`EpochPermutation`, which evaluates such a slice in ``O(hi - lo)`` time and memory:

* ``n <= SMALL_N`` (``2**22`` = 4,194,304 samples, 32 MB of int64): the permutation is
  ``np.random.default_rng([seed, epoch]).permutation(n)``, built once and sliced -- bit-for-bit the
  order every earlier run (paper reproductions, tests comparing runs) used.
* ``n > SMALL_N``: the permutation is a seeded **pseudo-random bijection** on ``[0, n)`` evaluated
  lazily, *not* numpy's Fisher-Yates shuffle (so it is not the order ``permutation(n)`` would
  give).  Position ``i`` maps to ``P(i)``, where ``P`` is a balanced 4-round Feistel network on the
  smallest even-bit domain ``[0, 4**k) >= n`` (each half ``k`` bits; the round function is the
  splitmix64 multiply-xorshift finaliser of ``half ^ round_key``, the ``k`` high bits kept), with
  cycle-walking: encrypt again while the value is ``>= n``.  A Feistel network is a bijection on
  its domain whatever the round function, and cycle-walking restricts a bijection of the domain to
  one of ``[0, n)`` (the walk from ``i < n`` ends at the next element of ``i``'s cycle that is
  ``< n``, and distinct starts end at distinct values), so **every index ``0..n-1`` still appears
  exactly once per epoch**, which is all the sampler guarantee needs.  The domain is less than
  ``4 n``, so a walk takes fewer than 4 encryptions on average.  The round keys are drawn from
  ``np.random.default_rng([seed, epoch])``, so the order is a deterministic function of
  ``(n, seed, epoch)`` (the same on every process and after a restart) and differs between epochs
  and seeds.  The state is those 4 keys: a 1-billion-sample dataset costs a few hundred bytes of
  sampler state, plus ``O(hi - lo)`` scratch while a slice is evaluated.

``SMALL_N`` is read at call time, so tests can lower it to exercise the bijection on small ``n``.

``ordered=True`` (a streaming source, :class:`~spotwise.workloads.user.StreamDataset`): the
identity order ``0..n-1`` whatever the seed and epoch -- spotwise does not shuffle a stream, so
the sampler guarantee becomes "every stream position of a pass is in exactly one committed step,
in stream order".  ``salt`` (the serverless plane's sample stream) seeds the order with
``default_rng([seed, salt, epoch])`` instead, so another consumer's orders are independent of the
sampler's; ``None`` (the default) keeps every earlier order bit-for-bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Largest ``n`` served by numpy's full ``permutation(n)`` (today's exact order); above, the lazy
#: bijection.  Read by :func:`epoch_permutation` at call time (tests monkeypatch it).
SMALL_N = 2**22

#: Feistel rounds (4 rounds of a pseudo-random function give a strong pseudo-random permutation).
ROUNDS = 4

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


class EpochPermutation:
    """The permutation of ``0..n-1`` for one ``(seed, epoch)``: ``len(p) == n``; ``p[lo:hi]`` is
    an int64 array of positions ``lo..hi-1`` (any slice, an int, or an integer array of positions
    also works).  Deliberately no ``__array__``: nothing converts it to a full array by accident.
    """

    __slots__ = ("n", "seed", "epoch", "ordered", "_full", "_keys", "_half", "_mask", "_shift")

    def __init__(self, n: int, seed: int, epoch: int, *, small_n: int | None = None, ordered: bool = False,
                 salt: int | None = None) -> None:
        n = int(n)
        if n < 0:
            raise ValueError(f"a permutation of {n} elements")
        if n > 2**62:
            raise ValueError(f"a permutation of {n} elements is beyond int64 positions")
        self.n, self.seed, self.epoch = n, int(seed), int(epoch)
        self.ordered = bool(ordered)
        limit = SMALL_N if small_n is None else int(small_n)
        self._full: np.ndarray | None = None
        self._keys: tuple[np.uint64, ...] = ()
        self._half = self._mask = self._shift = np.uint64(0)
        if self.ordered:  # the identity: a stream is read in its own order
            return
        rng = np.random.default_rng([self.seed, self.epoch] if salt is None else [self.seed, int(salt), self.epoch])
        if n <= limit:
            self._full = rng.permutation(n)
            return
        half = 1
        while 4**half < n:
            half += 1
        self._keys = tuple(np.uint64(k) for k in rng.integers(0, 2**64, size=ROUNDS, dtype=np.uint64))
        self._half = np.uint64(half)
        self._mask = np.uint64((1 << half) - 1)
        self._shift = np.uint64(64 - half)

    @property
    def lazy(self) -> bool:
        """Whether this is the Feistel bijection (``n > SMALL_N``) rather than a full array."""
        return self._full is None and not self.ordered

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        kind = "identity" if self.ordered else "bijection" if self.lazy else "array"
        return f"EpochPermutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, {kind})"

    def __getitem__(self, key: Any) -> Any:
        if self._full is not None:
            return self._full[key]
        pos, scalar = self._positions(key)
        out = pos if self.ordered else self._at(pos.astype(np.uint64))  # ordered: position i is sample i
        return out[0] if scalar else out

    def _positions(self, key: Any) -> tuple[np.ndarray, bool]:
        """The int64 positions ``key`` (a slice, an int or an integer array, numpy's rules) selects,
        and whether it was a single int."""
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            return np.arange(start, stop, step, dtype=np.int64), False
        scalar = isinstance(key, (int, np.integer))
        idx = np.asarray([int(key)] if scalar else key)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"a permutation is indexed by a slice, an int or integers, not {idx.dtype}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + self.n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise IndexError(f"index {int(key) if scalar else ''} out of range for a permutation of {self.n}".replace("  ", " "))
        return idx, scalar

    # ------------------------------------------------------------------ the bijection
    def _round(self, r: np.ndarray, key: np.uint64) -> np.ndarray:
        """splitmix64's finaliser of ``r ^ key``, its top ``half`` bits."""
        z = r ^ key
        z ^= z >> _S30
        z *= _C1
        z ^= z >> _S27
        z *= _C2
        z ^= z >> _S31
        return z >> self._shift

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        """The Feistel network on ``[0, 4**half)`` (uint64 in, uint64 out)."""
        left = x >> self._half
        right = x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._round(right, key)
        return (left << self._half) | right

    def _at(self, pos: np.ndarray) -> np.ndarray:
        """``P(pos)`` for uint64 positions in ``[0, n)``: encrypt, then cycle-walk into ``[0, n)``."""
        y = self._encrypt(pos)
        n = np.uint64(self.n)
        todo = np.flatnonzero(y >= n)
        while todo.size:
            z = self._encrypt(y[todo])
            y[todo] = z
            todo = todo[z >= n]
        return y.astype(np.int64)


def epoch_permutation(n: int, seed: int, epoch: int, ordered: bool = False, *,
                      salt: int | None = None) -> EpochPermutation:
    """The seeded permutation of ``0..n-1`` for ``epoch`` (module docstring): numpy's
    ``default_rng([seed, epoch]).permutation(n)`` for ``n <= SMALL_N``, the lazy Feistel
    bijection above; the identity when ``ordered`` (a stream); ``salt`` seeds
    ``default_rng([seed, salt, epoch])`` instead."""
    return EpochPermutation(n, seed, epoch, small_n=SMALL_N, ordered=ordered, salt=salt)
