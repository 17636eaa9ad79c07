"""Issue 28 item 4: sampler memory independent of the dataset size (spotwise.control.permutation)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from spotwise.control import permutation as permmod
from spotwise.control.permutation import SMALL_N, EpochPermutation, epoch_permutation
from spotwise.control.sampler import EpochSampler
from spotwise.planes.collective.replica import DataCursor


def _np_perm(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


# ---------------------------------------------------------------- (a) today's order, bit for bit
@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 12345])
@pytest.mark.parametrize("seed,epoch", [(0, 0), (7, 3), (12345, 1)])
def test_small_n_is_numpy_permutation(n: int, seed: int, epoch: int) -> None:
    p = epoch_permutation(n, seed, epoch)
    ref = _np_perm(n, seed, epoch)
    assert not p.lazy and len(p) == n
    assert np.array_equal(p[0:n], ref) and p[0:n].dtype == np.int64
    for lo, hi in [(0, 1), (n // 3, n // 2 + 1), (n - 1, n), (n, n + 5)]:
        assert np.array_equal(p[lo:hi], ref[lo:hi])
    assert p[n - 1] == ref[n - 1] and p[-1] == ref[-1]


def test_boundary_n_is_still_numpy_permutation() -> None:
    n = SMALL_N
    assert n == 2**22
    p = epoch_permutation(n, 11, 2)
    assert not p.lazy
    ref = _np_perm(n, 11, 2)
    for lo in [0, 1000, n // 2, n - 300]:
        assert np.array_equal(p[lo:lo + 300], ref[lo:lo + 300])
    assert epoch_permutation(n + 1, 11, 2).lazy


def test_sampler_and_cursor_keep_todays_order() -> None:
    n, seed = 5000, 42
    s = EpochSampler(n, seed)
    got = np.concatenate([s.reserve(128).indices for _ in range(10)])
    assert np.array_equal(got, _np_perm(n, seed, 0)[:1280])
    c = DataCursor(n, seed, epoch=3, pos=100)
    assert np.array_equal(c.block(2, 50), _np_perm(n, seed, 3)[200:250])


# ---------------------------------------------------------------- (b) the bijection above SMALL_N
def test_just_above_boundary_is_a_permutation() -> None:
    n = 2**22 + 17
    p = epoch_permutation(n, 3, 0)
    assert p.lazy and len(p) == n
    chunk = 1 << 20
    full = np.concatenate([p[lo:lo + chunk] for lo in range(0, n, chunk)])
    assert full.dtype == np.int64 and full.size == n
    assert np.array_equal(np.sort(full), np.arange(n))
    assert not np.array_equal(full[:1000], np.arange(1000))  # actually shuffled
    assert np.array_equal(p[n - 5:n + 10], full[n - 5:])
    assert p[12345] == full[12345] and p[-1] == full[-1]


def test_billion_samples_slices() -> None:
    n = 10**9
    p0 = epoch_permutation(n, 5, 0)
    p1 = epoch_permutation(n, 5, 1)
    assert p0.lazy and len(p0) == n
    rng = np.random.default_rng(0)
    starts = [0, n - 4096] + [int(x) for x in rng.integers(0, n - 4096, size=4)]
    for lo in starts:
        a = p0[lo:lo + 4096]
        assert a.dtype == np.int64 and a.size == 4096
        assert a.min() >= 0 and a.max() < n
        assert np.unique(a).size == a.size
        assert np.array_equal(a, epoch_permutation(n, 5, 0)[lo:lo + 4096])  # deterministic
        assert not np.array_equal(a, p1[lo:lo + 4096])  # epochs differ
        assert not np.array_equal(a, epoch_permutation(n, 6, 0)[lo:lo + 4096])  # seeds differ
    # distinct across far-apart slices too, and roughly uniform over [0, n)
    both = np.concatenate([p0[0:50_000], p0[n // 2:n // 2 + 50_000]])
    assert np.unique(both).size == both.size
    assert abs(both.mean() / n - 0.5) < 0.01


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 17, 1000, 4097])
def test_bijection_small_domains(n: int) -> None:
    p = EpochPermutation(n, 9, 4, small_n=0)
    assert p.lazy
    full = p[0:n]
    assert np.array_equal(np.sort(full), np.arange(n))
    assert np.array_equal(p[::-3], full[::-3])
    assert np.array_equal(p[np.array([0, n - 1, -1])], full[[0, n - 1, -1]])
    with pytest.raises(IndexError):
        p[n]


def test_threshold_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(permmod, "SMALL_N", 100)
    assert epoch_permutation(101, 0, 0).lazy
    assert not epoch_permutation(100, 0, 0).lazy


# ---------------------------------------------------------------- (c) memory
def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_sampler_memory_is_independent_of_n() -> None:
    def run() -> None:
        s = EpochSampler(10**9, 1)
        blocks = [s.reserve(256) for _ in range(8)]
        for b in blocks[:5]:
            s.commit(b)
        for b in blocks[5:]:
            s.release(b)
        s.reserve(1000)
        s2 = EpochSampler.from_state(s.state())
        s2.reserve(256)

    peak = _peak_bytes(run)
    assert peak < 10 * 2**20, peak


def test_cursor_memory_is_independent_of_n() -> None:
    def run() -> None:
        c = DataCursor(10**9, 1)
        assert c.block(0, 256).size == 256
        c.advance(4, 256)
        assert c.block(3, 256).size == 256

    peak = _peak_bytes(run)
    assert peak < 10 * 2**20, peak


def test_cursor_matches_sampler_on_large_n() -> None:
    n, seed = 10**9, 3
    s = EpochSampler(n, seed)
    c = DataCursor(n, seed)
    got = [s.reserve(256).indices for _ in range(4)]
    for i, g in enumerate(got):
        assert np.array_equal(g, c.block(i, 256))


# ---------------------------------------------------------------- (d) the sampler guarantee on the bijection
def test_exactly_once_per_epoch_through_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(permmod, "SMALL_N", 1000)
    n = 5003
    s = EpochSampler(n, 17)
    assert s._perm.lazy
    rng = np.random.default_rng(1)
    for epoch in range(3):
        committed: list[np.ndarray] = []
        while s.epoch == epoch:
            blocks = [b for b in (s.reserve(int(rng.integers(1, 300))) for _ in range(int(rng.integers(1, 5))))
                      if b is not None]
            for b in blocks:
                assert b.epoch == epoch
                r = rng.random()
                if r < 0.6:
                    committed.append(b.indices)
                    s.commit(b)
                else:
                    s.release(b)
            if rng.random() < 0.1:  # a checkpoint/restore in the middle of the epoch
                s = EpochSampler.from_state(s.state())
                assert s._perm.lazy
        allc = np.concatenate(committed)
        assert np.array_equal(np.sort(allc), np.arange(n)), epoch
    assert s.epoch == 3


def test_exactly_once_just_above_real_threshold() -> None:
    n = 2**22 + 1000
    s = EpochSampler(n, 2)
    assert s._perm.lazy
    seen = np.zeros(n, dtype=np.int64)
    released = False
    while s.epoch == 0:
        a, b = s.reserve(1 << 19), s.reserve(1 << 19)
        for blk in (a, b):
            if blk is None:
                continue
            if not released and blk is b:
                s.release(blk)
                released = True
                continue
            seen[blk.indices] += 1
            s.commit(blk)
    assert (seen == 1).all()
