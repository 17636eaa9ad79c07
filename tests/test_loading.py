"""Batches built ahead by DataLoader workers (issue 28 item 4): the same batches as the direct path,
a fallback on a wrong prediction, the dataset's own exceptions, no worker left behind, and the
collective member's predicted blocks."""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from spotwise.planes.collective.group import GroupFailed
from spotwise.planes.collective.member import CollectiveMember, Plan
from spotwise.workloads.base import TensorIndexedDataset
from spotwise.workloads.loading import BlockLoader, micro_batches
from spotwise.workloads.user import GuardedDataset, MapDatasetAdapter, UserWorkloadError
from _load import bound
from _reads import count_device_reads

pytestmark = pytest.mark.timeout(180)


def children() -> set[int]:
    """This process's child processes now (a session's Ray processes included: compare with a baseline)."""
    return {c.pid for c in psutil.Process().children(recursive=True)}


class Squares(torch.utils.data.Dataset):
    """A map-style dataset (one ``__getitem__`` per index); index 13 is broken when ``broken``."""

    def __init__(self, n: int = 60, broken: bool = False) -> None:
        self.n, self.broken = n, broken

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.broken and i == 13:
            raise ValueError(f"sample {i} is corrupt")
        return torch.full((3,), float(i * i)), torch.tensor(i % 4)


def same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_workers_give_exactly_the_direct_batches_and_stop_with_the_loader() -> None:
    before = children()
    for ds in (TensorIndexedDataset(torch.randn(50, 4), torch.arange(50)), MapDatasetAdapter(Squares())):
        rng = np.random.default_rng(0)
        blocks = [rng.permutation(len(ds))[:int(rng.integers(1, 9))] for _ in range(25)]
        loader = BlockLoader(ds, num_workers=2, prefetch=2)
        loader.expect(iter(blocks))
        assert loader.active and len(children() - before) == 2
        for blk in blocks:
            assert same(loader.batch(blk), ds.batch(blk))
        assert loader.stats == {"prefetched": 25, "direct": 0, "dropped": 0}
        loader.close()
        assert not loader.active and not children() - before, "no worker process outlives the loader"


def test_a_worker_never_runs_the_destructors_of_garbage_it_inherited(tmp_path: Path) -> None:
    """Garbage in a reference cycle (e.g. a previous generation's gloo process group) is collected in the
    parent before the workers are forked, not in a worker (where a gloo group's destructor blocked forever)."""
    marker = tmp_path / "pids"

    class Cycle:
        def __del__(self) -> None:
            with open(marker, "a") as f:
                f.write(f"{os.getpid()}\n")

    gc.disable()  # the cycle is garbage nobody has collected yet when the workers start
    try:
        c = Cycle()
        c.me = c
        del c
        ds = MapDatasetAdapter(Squares())
        loader = BlockLoader(ds, num_workers=1, prefetch=1)
        loader.expect(iter([np.arange(5)]))  # the worker is forked here
        assert marker.exists() and marker.read_text().split() == [str(os.getpid())], "collected in the parent, first"
        assert same(loader.batch(np.arange(5)), ds.batch(np.arange(5)))
        loader.close()
    finally:
        gc.enable()
    gc.collect()
    assert marker.read_text().split() == [str(os.getpid())], "collected once, never in the worker"


def test_a_request_that_was_not_expected_falls_back_to_the_direct_path() -> None:
    ds = MapDatasetAdapter(Squares())
    blocks = [np.arange(i, i + 5) for i in range(0, 50, 5)]
    loader = BlockLoader(ds, num_workers=2, prefetch=1)

    def endless():
        while True:
            yield from blocks

    loader.expect(endless())
    assert same(loader.batch(blocks[0]), ds.batch(blocks[0]))
    odd = np.array([7, 3, 3])
    assert same(loader.batch(odd), ds.batch(odd))  # the mismatch: the DataLoader is dropped
    assert not loader.active and loader.stats["dropped"] == 1
    assert same(loader.batch(blocks[1]), ds.batch(blocks[1]))  # direct until the next expect
    loader.expect(iter(blocks[2:]))
    assert loader.active and same(loader.batch(blocks[2]), ds.batch(blocks[2]))
    loader.close()
    # num_workers 0: no DataLoader at all
    plain = BlockLoader(ds, num_workers=0)
    plain.expect(iter(blocks))
    assert not plain.active and same(plain.batch(blocks[3]), ds.batch(blocks[3]))


def test_an_exception_in_a_worker_is_the_datasets_own() -> None:
    before = children()
    broken = GuardedDataset(MapDatasetAdapter(Squares(broken=True)), "mod:broken")
    blocks = [np.arange(0, 10), np.arange(10, 20), np.arange(20, 30)]
    with pytest.raises(UserWorkloadError) as direct:
        broken.batch(blocks[1])
    loader = BlockLoader(broken, num_workers=2, prefetch=2)
    loader.expect(iter(blocks))
    assert same(loader.batch(blocks[0]), broken.batch(blocks[0]))
    with pytest.raises(UserWorkloadError) as via:
        loader.batch(blocks[1])
    assert via.value.what == direct.value.what and "sample 13 is corrupt" in via.value.what
    assert "ValueError" in via.value.details  # the user's traceback, from the direct call
    assert same(loader.batch(blocks[2]), broken.batch(blocks[2]))  # the next block still comes prefetched
    assert loader.stats["prefetched"] == 2
    loader.close()
    # a plain dataset raises its plain exception
    raw = MapDatasetAdapter(Squares(broken=True))
    loader = BlockLoader(raw, num_workers=1)
    loader.expect(iter(blocks[1:]))
    with pytest.raises(ValueError, match="sample 13 is corrupt"):
        loader.batch(blocks[1])
    loader.close()
    assert not children() - before


def test_micro_batches_are_forward_backwards_split() -> None:
    idx = np.arange(10)
    assert [p.tolist() for p in micro_batches(idx, 3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [p.tolist() for p in micro_batches(idx[:2], 4)] == [[0], [1]]
    assert micro_batches(idx[:0], 2) == [] and micro_batches(idx, 1)[0] is not None


# ---------------------------------------------------------------- the collective member
class _Store:
    def queue_push(self, *a: Any) -> None:
        pass

    def add(self, key: str, value: int) -> int:
        return 0

    def get(self, key: str) -> bytes:
        return b"the test ends the generation"

    def set(self, key: str, value: Any) -> None:
        pass


class _Group:
    """A generation that always 'completes' its collectives locally (each member sums only itself),
    and fails at the lease: enough to drive :meth:`CollectiveMember._train` in-process.  S-SGD's
    DDP wrapper gets a real one-member gloo group (its all-reduce is the identity too)."""

    store = _Store()
    gen = 0
    _pg: Any = None

    def process_group(self) -> Any:
        if self._pg is None:
            from datetime import timedelta

            import torch.distributed as dist

            from spotwise.planes.collective.group import as_process_group, gloo_device

            store = dist.HashStore()
            opts = dist.ProcessGroupGloo._Options()
            opts._timeout = timedelta(seconds=30)
            opts._devices = [gloo_device("127.0.0.1")]
            self._pg = as_process_group(dist.ProcessGroupGloo(store, 0, 1, opts), store, 0, 1)
        return self._pg

    def allreduce(self, t: torch.Tensor) -> None:
        pass

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, peer: int, tag: int = 0) -> None:
        recv.copy_(send)

    def failed(self) -> bool:
        return True

    def reach(self) -> float:
        return 0.0  # one process: every member is at the step gate

    def abandon(self) -> None:
        pass


def _train(num_workers: int, strategy: str, accumulate: int, steps: int) -> CollectiveMember:
    wl = {"name": "mlp-digits", "batch_size": 8, "lr": 0.05, "accumulate": accumulate,
          "loader": {"num_workers": num_workers, "prefetch": 2}}
    m = CollectiveMember(wl, seed=1)
    m.member, m._fault, m._timing = 1, None, {}
    n = m.cursor.n
    m.cursor.pos = n - 150  # the generation crosses an epoch's end
    plan = Plan(gen=0, members=(0, 1, 2), source=-1, strategy=strategy, local_steps=3, batch=40, lease=steps,
                max_step=steps)
    with pytest.raises(GroupFailed):
        m._train(_Group(), plan)
    assert m.step == steps
    return m


@pytest.mark.parametrize("strategy,accumulate", [("ssgd", 1), ("sma", 2), ("adpsgd", 1)])
def test_a_member_with_loader_workers_trains_exactly_as_without(strategy: str, accumulate: int) -> None:
    before = children()
    plain = _train(0, strategy, accumulate, 4)
    assert plain.replica.loader is None
    loaded = _train(1, strategy, accumulate, 4)
    assert torch.equal(plain.replica.flat, loaded.replica.flat)
    assert (plain.cursor.epoch, plain.cursor.pos) == (loaded.cursor.epoch, loaded.cursor.pos) and plain.cursor.epoch == 1
    stats = loaded.replica.loader.stats
    assert stats["direct"] == 0 and stats["dropped"] == 0 and stats["prefetched"] > 0, \
        "every batch was predicted (epoch wrap, the S-MA order h*k + r, micro-batches)"
    loaded.replica.reset_loader()  # what a regroup does
    assert not loaded.replica.loader.active
    loaded.replica.close()
    assert not children() - before


def test_a_collective_job_with_loader_workers_in_ray_actors_equals_one_process(ray_session: Any, tmp_path) -> None:
    """Two member actors whose batches come from forked DataLoader workers train exactly as one
    process with the global batch (S-SGD, plain SGD)."""
    from _specs import single_process_sgd, spec_with

    from spotwise.assemble import build_controller
    from spotwise.market.world import build_market

    spec = spec_with({
        "name": "loader", "seed": 5,
        "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.05, "eval_every": 1000,
                     "loader": {"num_workers": 1, "prefetch": 2}},
        "target": {"iterations": 12},
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                    "data_plane": "collective", "standby": 0, "group_timeout_s": bound(5)},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 0, "plots": False},
    })
    from spotwise.planes.ps.worker import worker_args_for

    args = worker_args_for(spec)  # what the member actors are built from: the loader spec travels
    probe = CollectiveMember(args[0], args[1])
    assert probe.replica.loader is not None and probe.replica.loader.num_workers == 1
    probe.replica.close()
    job = build_controller(spec, tmp_path / "run", market=build_market(spec, horizon_s=7 * 24 * 3600.0))
    summary = job.run()
    assert summary.status == "completed" and summary.steps == 12
    assert np.max(np.abs(job.params - single_process_sgd(spec, 12, 16))) < 1e-5


class _FailingGroup(_Group):
    """A generation whose all-reduce fails (a peer was lost mid-round)."""

    def allreduce(self, t: torch.Tensor) -> None:
        raise GroupFailed("a peer was lost")


def test_a_failed_sma_round_restores_the_optimizer_state_it_began_with() -> None:
    """S-MA retries a failed round from where it began: parameters *and* optimizer moments (the
    optimizer's state_dict holds its live tensors: a snapshot of it must be a copy, else the retry
    starts from moments the failed round already moved)."""
    from spotwise.planes.collective.steps import sma_step

    wl = {"name": "mlp-digits", "batch_size": 8, "lr": 0.01, "optimizer": {"name": "AdamW", "lr": 0.01}}
    m = CollectiveMember(wl, seed=1)
    rep = m.replica
    sma_step(_Group(), rep, m.cursor, k=1, r=0, b=8, H=2, lr=0.01)  # moments exist
    flat0 = rep.flat.clone()
    moments0 = {i: {n: t.clone() for n, t in s.items()} for i, s in rep.updater.optimizer.state_dict()["state"].items()}
    with pytest.raises(GroupFailed):
        sma_step(_FailingGroup(), rep, m.cursor, k=1, r=0, b=8, H=3, lr=0.01)
    assert torch.equal(rep.flat, flat0)
    now = rep.updater.optimizer.state_dict()["state"]
    for i, s in moments0.items():
        for n, t in s.items():
            assert torch.equal(now[i][n], t), (i, n)
    m.replica.close()


def test_sma_local_steps_read_nothing_from_the_device_but_the_rounds_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40 item 2: an S-MA round reads the device once (its loss and sample count after the
    all-reduce), whatever its number of local steps -- no loss read or finite check per local step."""
    from spotwise.planes.collective.steps import sma_step

    reads = count_device_reads(monkeypatch)

    def round_reads(H: int) -> tuple[int, float]:
        wl = {"name": "mlp-digits", "batch_size": 8, "lr": 0.05,
              "optimizer": {"name": "SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}
        m = CollectiveMember(wl, seed=1)
        sma_step(_Group(), m.replica, m.cursor, k=1, r=0, b=8, H=1, lr=0.05)  # state exists
        reads["n"] = 0
        loss, _ = sma_step(_Group(), m.replica, m.cursor, k=1, r=0, b=8, H=H, lr=0.05)
        m.replica.close()
        return reads["n"], loss

    one, loss1 = round_reads(1)
    five, loss5 = round_reads(5)
    assert one == five, f"reads grow with the local steps: {one} for 1, {five} for 5"
    assert one <= 2 and math.isfinite(loss1) and math.isfinite(loss5)


@pytest.mark.parametrize("kind", ["flat-ssgd", "adpsgd"])
def test_flat_ssgd_and_adpsgd_steps_read_the_device_once(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Issue 40 item 2: S-SGD's flat step (an epoch's short last step, sparse gradients) and an AD-PSGD
    step read the device once -- the loss, the sample count and whether the gradient is finite in one
    copy -- with micro-batches and a recipe's optimizer (no read per micro-batch, no separate finite check);
    a gradient that is not finite still stops the step, on that one read, with nothing applied."""
    import types

    from spotwise.planes.collective.replica import Replica
    from spotwise.planes.collective.steps import Diverged, adpsgd_step, ssgd_step

    monkeypatch.setattr(Replica, "can_bucket", property(lambda self: False))
    # (SGD with momentum: torch's own single-tensor Adam reads its CPU step counter, which is not a device read)
    wl = {"name": "mlp-digits", "batch_size": 8, "lr": 0.05, "accumulate": 4,
          "optimizer": {"name": "SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}
    m = CollectiveMember(wl, seed=1)
    rep, plan = m.replica, types.SimpleNamespace(members=[0], batch=8, gen=0)

    def step() -> float:
        if kind == "flat-ssgd":
            return ssgd_step(_Group(), rep, m.cursor, k=1, r=0, b=8, lr=0.01)[0]
        return adpsgd_step(_Group(), rep, m.cursor, plan, 0, 0, lr=0.01)[0]

    step()  # the optimizer's state exists
    reads = count_device_reads(monkeypatch)
    before = rep.flat.clone()
    loss = step()
    assert reads["n"] == 1 and math.isfinite(loss) and not torch.equal(rep.flat, before)
    # a gradient with an infinity (a finite loss): refused on the same read, the replica untouched
    real = Replica.gradient_on_device

    def poisoned(self: Any, *a: Any, **k: Any) -> Any:
        out = real(self, *a, **k)
        self.buf[0] = float("inf")
        return out

    monkeypatch.setattr(Replica, "gradient_on_device", poisoned)
    before = rep.flat.clone()
    reads["n"] = 0
    with pytest.raises(Diverged, match="NaN or infinite"):
        step()
    assert reads["n"] == 1 and torch.equal(rep.flat, before)
    m.replica.close()
