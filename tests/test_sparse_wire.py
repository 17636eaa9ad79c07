"""Sparse updates stay sparse on the wire (issue 9).

A worker of a workload with sparse embedding gradients (sparse-logreg, pmf) ships a
:class:`~spotwise.planes.serverless.significance.SparseUpdate` over the flat layout instead of the dense
vector; the controller adds it into its one aggregation buffer without densifying it, the run's
numbers do not change by a bit, and ``summary.extra["grad_bytes"]`` shows what went over the wire.
Dense workloads keep shipping the dense vector.  In-process workers (LocalCompute) except for one
Ray round trip of a SparseUpdate.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with

from spotwise.config import WorkloadSpec
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.assemble import build_controller
from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.planes.ps.wire import accumulate, payload_nbytes, to_dense
from spotwise.planes.ps.worker import GradientWorker, worker_args_for
from spotwise.planes.serverless.significance import SparseUpdate
from spotwise.spec.load import to_plain
from spotwise.workloads.params import flat_grad, flat_grad_sparse, flat_params, num_params
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(180)

#: big embedding tables, few samples: a mini-batch touches a tiny fraction of the rows
BIG = {
    "sparse-logreg": {"n_samples": 1500, "hash_buckets": 100_000},
    "pmf": {"n_users": 3000, "n_items": 4000, "n_ratings": 6000, "rank": 8},
}
#: small tables (test_workloads' sizes): a batch of 256 covers most pmf rows
SMALL = {
    "mlp-digits": {},
    "sparse-logreg": {"n_samples": 2000, "hash_buckets": 20000},
    "pmf": {"n_users": 300, "n_items": 400, "n_ratings": 15000},
}

BASE: dict[str, Any] = {
    "name": "sparse-wire",
    "seed": 11,
    "workload": {"name": "sparse-logreg", "batch_size": 16, "lr": 0.5, "eval_every": 1000},
    "target": {"iterations": 12},
    "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def worker(name: str, params: dict[str, Any], batch: int = 32, seed: int = 0) -> GradientWorker:
    return GradientWorker(to_plain(WorkloadSpec(name=name, params=params, batch_size=batch)), seed)


def backward(name: str, params: dict[str, Any], batch: int, seed: int = 0) -> torch.nn.Module:
    wl = make_workload(WorkloadSpec(name=name, params=params), seed)
    model = wl.build_model()
    idx = np.random.default_rng(seed).choice(len(wl.train), size=batch, replace=False)
    wl.loss(model, wl.train.batch(idx)).backward()
    return model


# ------------------------------------------------------------------ (a) same numbers as flat_grad
@pytest.mark.parametrize("name", ["pmf", "sparse-logreg", "mlp-digits"])
def test_flat_grad_sparse_densifies_to_flat_grad(name: str) -> None:
    model = backward(name, SMALL[name], batch=64)
    u = flat_grad_sparse(model)
    dense = flat_grad(model).numpy()
    assert u.size == dense.size == num_params(model)
    np.testing.assert_array_equal(u.to_dense().astype(np.float32), dense)
    assert np.array_equal(u.to_dense(), dense.astype(np.float64)), "float32 values widen exactly"
    if name == "mlp-digits":
        assert u.nnz == dense.size, "a dense parameter contributes every entry"
    else:
        assert 0 < u.nnz < dense.size / 2, "only the touched embedding rows (plus dense parameters)"


# ------------------------------------------------------------------ (b) what a worker ships
@pytest.mark.parametrize("name", ["sparse-logreg", "pmf"])
def test_sparse_worker_ships_a_small_sparse_update(name: str) -> None:
    w = worker(name, BIG[name], batch=32)
    params = flat_params(w.model).detach().numpy()
    grad, loss, n, _, notice, _ = w.compute(params, np.arange(32))
    assert isinstance(grad, SparseUpdate) and n == 32 and np.isfinite(loss) and notice is None
    dense_bytes = 4 * w.n_params
    assert grad.size == w.n_params
    assert grad.nbytes * 10 < dense_bytes, f"{grad.nbytes} B sparse vs {dense_bytes} B dense"
    # the same numbers as the dense vector the worker used to ship
    np.testing.assert_array_equal(to_dense(grad), flat_grad(w.model).numpy())


def test_dense_worker_still_ships_the_dense_vector() -> None:
    w = worker("mlp-digits", {}, batch=16)
    params = flat_params(w.model).detach().numpy()
    grad, *_ = w.compute(params, np.arange(16))
    assert isinstance(grad, np.ndarray) and grad.dtype == np.float32 and grad.shape == (w.n_params,)


def test_sparse_worker_falls_back_to_dense_when_that_is_smaller() -> None:
    """pmf with small tables and a batch of 256: the touched rows are most of the model, and the
    16-byte sparse entries would cost more than the 4-byte dense ones."""
    w = worker("pmf", SMALL["pmf"], batch=256)
    params = flat_params(w.model).detach().numpy()
    grad, *_ = w.compute(params, np.arange(256))
    assert isinstance(grad, np.ndarray) and grad.nbytes == 4 * w.n_params
    assert flat_grad_sparse(w.model).nbytes >= grad.nbytes


def test_non_finite_sparse_gradient_still_reaches_the_controller() -> None:
    """A diverged model is not a worker crash: its non-finite loss reaches the controller (which stops
    the run with exit 2 after a checkpoint, issue 28); nothing is back-propagated through it."""
    w = worker("sparse-logreg", BIG["sparse-logreg"], batch=8)
    params = np.full(w.n_params, np.nan, dtype=np.float32)
    grad, loss, n, *_ = w.compute(params, np.arange(8))
    assert not np.isfinite(loss) and n == 8
    assert grad.size == w.n_params


def test_sparse_update_survives_pickling() -> None:
    w = worker("pmf", BIG["pmf"], batch=16)
    grad, *_ = w.compute(flat_params(w.model).detach().numpy(), np.arange(16))
    back = pickle.loads(pickle.dumps(grad))
    assert isinstance(back, SparseUpdate) and back.size == grad.size
    assert np.array_equal(back.indices, grad.indices) and np.array_equal(back.values, grad.values)


# ------------------------------------------------------------------ aggregation
def test_accumulate_sparse_equals_dense_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    size = 1000
    grads = []
    for _ in range(4):
        d = np.zeros(size, np.float32)
        idx = rng.choice(size, size=60, replace=False)
        d[idx] = rng.standard_normal(60).astype(np.float32)
        grads.append(d)
    weights = [0.1, 0.3, 0.25, 0.35]
    dense = np.zeros(size, np.float32)
    sparse = np.zeros(size, np.float32)
    for g, wt in zip(grads, weights):
        dense += wt * g  # the controller's dense commit, as it always was
        accumulate(sparse, SparseUpdate.from_dense(g), wt)
    assert np.array_equal(dense, sparse)
    mixed = np.zeros(size, np.float32)
    for i, (g, wt) in enumerate(zip(grads, weights)):
        accumulate(mixed, g if i % 2 else SparseUpdate.from_dense(g), wt)
    assert np.array_equal(dense, mixed)
    assert payload_nbytes(SparseUpdate.from_dense(grads[0])) == 60 * 16
    with pytest.raises(ValueError, match="size"):
        accumulate(np.zeros(size - 1, np.float32), SparseUpdate.from_dense(grads[0]), 1.0)


# ------------------------------------------------------------------ (c, d) whole runs
def run(spec, out: Path, revocation=None):
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    coord = build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)))
    return coord, coord.run()


def densify_on_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-issue-9 wire: every worker ships the dense flat vector."""
    monkeypatch.setattr(GradientWorker, "_gradient", lambda self, loss: (flat_grad(self.model).numpy(), float(loss)))


@pytest.mark.parametrize(("name", "sync", "n"), [
    ("sparse-logreg", "full", None),
    ("pmf", "n-sync", 2),
    ("sparse-logreg", "n-batch", 2),
    ("pmf", "async", None),
])
def test_sparse_wire_changes_no_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, sync: str,
                                       n: int | None) -> None:
    over: dict[str, Any] = {"workload__name": name, "workload__params": BIG[name], "cluster__sync": sync}
    if n is not None:
        over["cluster__sync_n"] = n
    spec = spec_with(BASE, **over)
    # a revocation mid-run: survivors' contributions, lost ones and (continuous modes) stale ones
    rev = ScriptedRevocation((outage(3, 6, [1]),))
    sparse_coord, sparse = run(spec, tmp_path / "sparse", rev)
    with monkeypatch.context() as m:
        densify_on_the_worker(m)
        dense_coord, dense = run(spec, tmp_path / "dense", rev)
    assert sparse.steps == dense.steps == 12 and sparse.status == dense.status == "completed"
    assert sparse.revocations == dense.revocations >= 1
    assert np.array_equal(sparse_coord.params, dense_coord.params), "the sparse wire changed the parameters"
    assert sparse_coord.loss_history == dense_coord.loss_history
    # (d) the wire: the same gradients, a fraction of the bytes
    sx, dx = sparse.extra, dense.extra
    assert dx["grad_bytes"] == dx["grad_bytes_dense"] > 0, "the dense wire ships 4 bytes a parameter"
    assert sx["grad_bytes_dense"] == dx["grad_bytes_dense"], "the same gradients were received"
    assert 0 < sx["grad_bytes"] * 10 < dx["grad_bytes"], (sx["grad_bytes"], dx["grad_bytes"])


def test_dense_workload_run_counts_dense_bytes(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__name="mlp-digits", workload__params={}, target__iterations=5)
    coord, summary = run(spec, tmp_path / "run")
    n_params = coord.params.size
    contributions = sum(k for _, _, _, k in coord.loss_history)
    assert summary.extra["grad_bytes"] == summary.extra["grad_bytes_dense"] == 4 * n_params * contributions


# ------------------------------------------------------------------ Ray carries it
def test_ray_carries_a_sparse_update(ray_session) -> None:
    from spotwise.planes.ps.compute import RayCompute

    spec = spec_with(BASE, workload__name="pmf", workload__params=BIG["pmf"])
    compute = RayCompute(worker_args_for(spec), standby=0, low_priority_standby=False)
    (actor,) = compute.warm_up(1)
    try:
        wl = make_workload(spec.workload, spec.seed)
        params = flat_params(wl.build_model()).detach().numpy()
        idx = np.arange(16)
        grad, loss, n, _, _, _ = compute.result(0, compute.submit(actor, compute.share(params), idx))
        local, *_ = GradientWorker(*worker_args_for(spec)).compute(params, idx)
        assert isinstance(grad, SparseUpdate) and isinstance(local, SparseUpdate) and n == 16
        assert np.array_equal(grad.indices, local.indices) and np.array_equal(grad.values, local.values)
    finally:
        compute.kill(actor)
        compute.shutdown()
