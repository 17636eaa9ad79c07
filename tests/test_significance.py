"""ISP significance filter, BSP/SSP rules and sparse updates (paper 004, Sec. 3, 4.1, 4.2, App. A)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.planes.serverless import (
    BSP,
    SignificanceFilter,
    SparseUpdate,
    SyncModel,
    may_proceed,
    merge_leaving_replica,
    significance_threshold,
)


def _dense(n: int, entries: dict[int, float]) -> np.ndarray:
    out = np.zeros(n)
    for i, x in entries.items():
        out[i] = x
    return out


# ---------------------------------------------------------------- threshold and accumulation


def test_threshold_is_v_over_sqrt_t() -> None:
    assert significance_threshold(1.0, 1) == 1.0
    assert significance_threshold(1.0, 4) == 0.5
    assert significance_threshold(0.7, 9) == pytest.approx(0.7 / 3)
    assert significance_threshold(0.0, 5) == 0.0
    assert SignificanceFilter(3, 2.0).threshold(16) == 0.5


def test_hand_computed_steps() -> None:
    # x = [1, 2, 4], v = 1.  Dyadic numbers so every sum is exact.
    x = np.array([1.0, 2.0, 4.0])
    f = SignificanceFilter(3, 1.0)
    # t = 1, v_1 = 1: |0.5/1| = 0.5 no; |3/2| = 1.5 yes; index 2 untouched.
    out = f.push(1, x, np.array([0.5, 3.0, 0.0]))
    assert out.indices.tolist() == [1] and out.values.tolist() == [3.0]
    assert f.residual().indices.tolist() == [0] and f.residual().values.tolist() == [0.5]
    # t = 4, v_4 = 0.5: acc = [0.75, 0.75, 1.0]; 0.75 > 0.5*1 yes; 0.75 > 1 no; 1 > 2 no.
    out = f.push(4, x, np.array([0.25, 0.75, 1.0]))
    assert out.indices.tolist() == [0] and out.values.tolist() == [0.75]
    res = f.residual()
    assert res.indices.tolist() == [1, 2] and res.values.tolist() == [0.75, 1.0]
    # t = 16, v_16 = 0.25, no new update: the shrinking threshold alone releases
    # 0.75 > 0.25*2 (index 1) but not 1.0 > 0.25*4 (strict inequality, index 2).
    out = f.push(16, x, SparseUpdate.empty(3))
    assert out.indices.tolist() == [1] and out.values.tolist() == [0.75]
    assert f.residual().indices.tolist() == [2]
    assert f.last_step == 16


def test_accumulation_across_consecutive_steps_then_reset() -> None:
    x = np.array([1.0])
    f = SignificanceFilter(1, 1.0)
    assert f.push(1, x, np.array([0.25])).nnz == 0  # 0.25 <= 1
    assert f.push(2, x, np.array([0.25])).nnz == 0  # 0.5 <= 0.707
    out = f.push(3, x, np.array([0.25]))  # 0.75 > 0.577
    assert out.values.tolist() == [0.75]
    assert f.residual().nnz == 0
    assert f.push(4, x, np.array([0.25])).nnz == 0  # restarted from zero: 0.25 <= 0.5
    assert f.residual().values.tolist() == [0.25]


def test_negative_values_use_absolute_ratio() -> None:
    f = SignificanceFilter(2, 0.5)
    out = f.push(1, np.array([-2.0, -2.0]), np.array([-1.5, 0.75]))
    # |-1.5 / -2| = 0.75 > 0.5 yes; |0.75 / -2| = 0.375 no.
    assert out.indices.tolist() == [0] and out.values.tolist() == [-1.5]


def test_cancelling_updates_are_dropped_not_pushed() -> None:
    f = SignificanceFilter(2, 10.0)
    x = np.array([1.0, 1.0])
    assert f.push(1, x, (np.array([0]), np.array([0.5]))).nnz == 0
    assert f.push(2, x, (np.array([0]), np.array([-0.5]))).nnz == 0
    assert f.residual().nnz == 0


# ---------------------------------------------------------------- x_i = 0 rule


def test_zero_parameter_nonzero_update_is_always_significant() -> None:
    f = SignificanceFilter(3, 100.0)
    x = np.array([0.0, 1.0, 0.0])
    out = f.push(1, x, np.array([1e-12, 0.5, 0.0]))
    # index 0: x = 0 and delta != 0 -> infinite ratio -> pushed; index 1: 0.5 < 100 held;
    # index 2: x = 0 but delta = 0 -> nothing to send.
    assert out.indices.tolist() == [0] and out.values.tolist() == [1e-12]
    assert f.residual().indices.tolist() == [1]


# ---------------------------------------------------------------- v = 0 is BSP (App. A)


def test_v_zero_pushes_every_nonzero_update_every_step() -> None:
    rng = np.random.default_rng(7)
    n = 50
    f = SignificanceFilter(n, 0.0)
    x = rng.normal(size=n)
    for t in range(1, 30):
        idx = rng.choice(n, size=10, replace=False)
        val = rng.normal(size=10)
        val[0] = 0.0  # an explicit zero is never sent
        x[idx] += val
        out = f.push(t, x, (idx, val))
        expected = np.zeros(n)
        expected[idx] = val
        np.testing.assert_array_equal(out.to_dense(), expected)
        assert out.nnz == 9
        assert f.residual().nnz == 0


def test_v_zero_replicas_match_serial_execution() -> None:
    # P workers, each applies its own update and every other worker's push: with v = 0 every
    # replica equals x_0 + sum of all updates (Appendix A, Corollary).
    rng = np.random.default_rng(3)
    n, workers = 20, 3
    x0 = rng.normal(size=n)
    replicas = [x0.copy() for _ in range(workers)]
    filters = [SignificanceFilter(n, 0.0) for _ in range(workers)]
    serial = x0.copy()
    for t in range(1, 15):
        updates = [rng.normal(size=n) * (rng.random(n) < 0.3) for _ in range(workers)]
        pushes = []
        for p in range(workers):
            replicas[p] += updates[p]
            serial += updates[p]
            pushes.append(filters[p].push(t, replicas[p], updates[p]))
        for p in range(workers):
            for q in range(workers):
                if q != p:
                    pushes[q].apply_to(replicas[p])
    for p in range(workers):
        np.testing.assert_allclose(replicas[p], serial, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- sparse stays sparse


def test_sparse_in_sparse_out_without_densifying() -> None:
    n = 10**12  # a dense float64 vector of this size would need 8 TB
    params = np.broadcast_to(np.float64(1.0), (n,))  # zero-stride view, no memory
    f = SignificanceFilter(n, 1.0)
    idx = np.array([5, 10**6, n - 1], dtype=np.int64)
    out = f.push(1, params, (idx, np.array([2.0, 0.5, -3.0])))
    assert isinstance(out, SparseUpdate)
    assert out.size == n
    assert out.indices.dtype == np.int64 and out.values.dtype == np.float64
    assert out.indices.tolist() == [5, n - 1]
    assert out.values.tolist() == [2.0, -3.0]
    assert out.nbytes == 2 * 16
    res = f.residual()
    assert res.indices.tolist() == [10**6] and res.nbytes == 16
    # same indices in, same indices out when everything is significant
    f0 = SignificanceFilter(n, 0.0)
    out0 = f0.push(1, params, SparseUpdate(idx, np.array([1.0, 1.0, 1.0]), n))
    np.testing.assert_array_equal(out0.indices, idx)


def test_dense_input_becomes_sparse_output() -> None:
    f = SignificanceFilter(6, 0.0)
    out = f.push(1, np.ones(6), np.array([0.0, 1.0, 0.0, 0.0, -2.0, 0.0]))
    assert out.indices.tolist() == [1, 4]
    assert out.nbytes == 32


# ---------------------------------------------------------------- nothing is lost


def test_pushed_plus_residual_equals_sum_of_updates() -> None:
    rng = np.random.default_rng(11)
    n = 40
    x = rng.normal(size=n)
    f = SignificanceFilter(n, 0.5)
    total_updates = np.zeros(n)
    total_pushed = np.zeros(n)
    for t in range(1, 60):
        kind = t % 3
        if kind == 0:
            u = rng.normal(scale=0.05, size=n)
            arg: object = u
        else:
            idx = rng.integers(0, n, size=8)  # duplicates allowed: summed
            val = rng.normal(scale=0.05, size=8)
            u = np.zeros(n)
            np.add.at(u, idx, val)
            arg = (idx, val) if kind == 1 else SparseUpdate.from_pairs(idx, val, n)
        total_updates += u
        x += u
        out = f.push(t, x, arg)  # type: ignore[arg-type]
        total_pushed += out.to_dense()
    res = f.residual()
    assert res.nnz > 0  # the test exercises held-back updates
    np.testing.assert_allclose(total_pushed + res.to_dense(), total_updates, rtol=0, atol=1e-12)
    flushed = f.flush()
    np.testing.assert_array_equal(flushed.to_dense(), res.to_dense())
    assert f.residual().nnz == 0


# ---------------------------------------------------------------- wire bytes vs v


def test_bytes_on_wire_shrink_as_v_grows() -> None:
    rng = np.random.default_rng(2024)
    n, steps, k = 300, 200, 30
    x0 = rng.normal(size=n)
    seq = [
        (rng.choice(n, size=k, replace=False), rng.normal(scale=0.1, size=k) / math.sqrt(t))
        for t in range(1, steps + 1)
    ]
    totals = []
    for v in (0.0, 0.05, 0.2, 0.7, 2.0):
        f = SignificanceFilter(n, v)
        x = x0.copy()
        sent = 0
        for t, (idx, val) in enumerate(seq, start=1):
            x[idx] += val
            sent += f.push(t, x, (idx, val)).nbytes
        totals.append(sent)
    assert totals[0] == steps * k * 16  # v = 0: everything, every step
    assert all(a >= b for a, b in zip(totals, totals[1:])), totals
    assert totals[-1] < totals[0] / 2, totals


# ---------------------------------------------------------------- SparseUpdate, merge


def test_sparse_update_helpers() -> None:
    u = SparseUpdate.from_pairs([3, 1, 3], [1.0, 2.0, 0.5], 5)
    assert u.indices.tolist() == [1, 3] and u.values.tolist() == [2.0, 1.5]
    assert u.nnz == 2 and u.nbytes == 32
    np.testing.assert_array_equal(u.to_dense(), _dense(5, {1: 2.0, 3: 1.5}))
    params = np.ones(5)
    u.apply_to(params)
    np.testing.assert_array_equal(params, [1.0, 3.0, 1.0, 2.5, 1.0])
    assert not u.indices.flags.writeable
    assert SparseUpdate.empty(4).nbytes == 0
    assert SparseUpdate.from_dense(np.array([0.0, 2.0])).indices.tolist() == [1]


def test_merge_leaving_replica_averages() -> None:
    out = merge_leaving_replica(np.array([1.0, 2.0]), np.array([3.0, -2.0]))
    np.testing.assert_array_equal(out, [2.0, 0.0])
    same = np.array([0.5, 0.25])
    np.testing.assert_array_equal(merge_leaving_replica(same, same), same)


# ---------------------------------------------------------------- BSP / SSP


def test_may_proceed_ssp_and_bsp() -> None:
    assert may_proceed(5, [5, 5, 5], 0)
    assert not may_proceed(5, [4, 5, 6], 0)
    assert may_proceed(5, [3, 5, 9], 2)
    assert not may_proceed(5, [2, 5, 9], 2)
    assert may_proceed(0, [0], 0)
    assert may_proceed(1, np.array([0, 3]), 1)
    assert BSP.staleness == 0 and BSP.name == "BSP"
    assert not BSP.may_proceed(2, [1, 2])
    ssp = SyncModel(3)
    assert ssp.name == "SSP(s=3)"
    assert ssp.may_proceed(4, [1, 7]) and not ssp.may_proceed(5, [1, 7])


# ---------------------------------------------------------------- invalid inputs


@pytest.mark.parametrize(
    "indices, values, size",
    [
        ([2, 1], [1.0, 1.0], 5),  # unsorted
        ([1, 1], [1.0, 1.0], 5),  # duplicate
        ([5], [1.0], 5),  # out of range
        ([-1], [1.0], 5),  # negative
        ([1, 2], [1.0], 5),  # length mismatch
        ([1], [float("nan")], 5),  # NaN
        ([1.0], [1.0], 5),  # float indices
        ([1], [1.0], True),  # bool size
        ([1], [1.0], -1),  # negative size
        ([[1]], [[1.0]], 5),  # 2-D
    ],
)
def test_invalid_sparse_update(indices: list, values: list, size: object) -> None:
    with pytest.raises(ValueError):
        SparseUpdate(np.asarray(indices), np.asarray(values), size)  # type: ignore[arg-type]


@pytest.mark.parametrize("size, v", [(-1, 0.5), (3, -0.1), (3, float("nan")), (3, float("inf")),
                                     (2.5, 0.5), (3, True)])
def test_invalid_filter(size: object, v: object) -> None:
    with pytest.raises(ValueError):
        SignificanceFilter(size, v)  # type: ignore[arg-type]


def test_invalid_push() -> None:
    f = SignificanceFilter(3, 0.5)
    x = np.ones(3)
    with pytest.raises(ValueError, match="step"):
        f.push(0, x, np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        f.push(1, np.ones(4), np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        f.push(1, x, np.zeros(4))
    with pytest.raises(ValueError, match="size"):
        f.push(1, x, SparseUpdate.empty(4))
    with pytest.raises(ValueError):
        f.push(1, x, [0.0, 1.0, 0.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        f.push(1, np.array([np.nan, 1.0, 1.0]), np.array([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="finite"):
        f.push(1, x, np.array([np.inf, 0.0, 0.0]))
    f.push(2, x, np.zeros(3))
    with pytest.raises(ValueError, match="strictly increasing"):
        f.push(2, x, np.zeros(3))


def test_invalid_sync_and_merge() -> None:
    with pytest.raises(ValueError):
        may_proceed(-1, [0], 0)
    with pytest.raises(ValueError):
        may_proceed(1, [], 0)
    with pytest.raises(ValueError):
        may_proceed(1, [0, -2], 0)
    with pytest.raises(ValueError):
        may_proceed(1, [0], -1)
    with pytest.raises(ValueError):
        may_proceed(1, [0.5], 0)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        SyncModel(-1)
    with pytest.raises(ValueError, match="shape"):
        merge_leaving_replica(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        merge_leaving_replica(np.zeros(2), np.array([np.nan, 0.0]))
    with pytest.raises(ValueError):
        SparseUpdate.empty(3).apply_to(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError):
        SparseUpdate.empty(3).apply_to(np.zeros(2))


def test_failed_push_leaves_filter_unchanged() -> None:
    f = SignificanceFilter(3, 10.0)
    x = np.ones(3)
    f.push(1, x, np.array([0.5, 0.0, 0.0]))
    with pytest.raises(ValueError, match="finite"):
        f.push(2, np.array([np.nan, 1.0, 1.0]), np.array([0.25, 0.0, 0.0]))
    assert f.last_step == 1
    assert f.residual().values.tolist() == [0.5]
    f.push(2, x, np.array([0.25, 0.0, 0.0]))  # step 2 is still usable
    assert f.residual().values.tolist() == [0.75]


def test_dense_filter_matches_the_sparse_filter_step_by_step():
    from spotwise.planes.serverless.significance import DenseSignificanceFilter, SignificanceFilter, SparseUpdate

    rng = np.random.default_rng(5)
    n = 500
    a, b = SignificanceFilter(n, 0.7), DenseSignificanceFilter(n, 0.7)
    x = rng.normal(size=n)
    x[:20] = 0.0  # zero parameters: always significant when touched
    for t in range(1, 60):
        idx = np.unique(rng.integers(0, n, 40))
        u = SparseUpdate(idx, rng.normal(scale=0.05, size=idx.size), n)
        x[idx] += u.values
        pa, pb = a.push(t, x, u), b.push(t, x, u)
        assert np.array_equal(pa.indices, pb.indices) and np.allclose(pa.values, pb.values)
        ra, rb = a.residual(), b.residual()
        assert np.array_equal(ra.indices, rb.indices) and np.allclose(ra.values, rb.values)
    fa, fb = a.flush(), b.flush()
    assert np.array_equal(fa.indices, fb.indices) and b.residual().nnz == 0
    c = DenseSignificanceFilter(n, 0.7)
    c.restore(ra, 59)
    assert np.array_equal(c.residual().indices, ra.indices)
    with pytest.raises(ValueError):
        c.push(59, x, u)
