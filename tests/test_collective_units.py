"""The collective data plane's pure parts (issue 10): data cursor, plan, replica, strategies, config."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with

from spotwise.planes.collective.member import Plan, gossip_partner
from spotwise.planes.collective.plan import decode_lease, encode_lease
from spotwise.planes.collective.replica import DataCursor, Replica
from spotwise.errors import InputError
from spotwise.control.sampler import EpochSampler
from spotwise.control.sync import ADPSGD, SMA, SSGD, FullSync, make_sync
from spotwise.theory.runtime import MiniBatchTimeLaw
from spotwise.workloads.params import flat_grad, flat_params, set_flat_params
from spotwise.workloads.registry import make_workload

BASE: dict[str, Any] = {
    "name": "units",
    "seed": 4,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1},
    "target": {"iterations": 10},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", "data_plane": "collective"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
}


@pytest.mark.parametrize("local_steps", [1, 3])
def test_cursor_gives_every_sample_once_per_epoch_whatever_the_membership(local_steps: int) -> None:
    """Steps with a changing number of members (and retried steps) still cover each epoch exactly once."""
    n, b = 203, 7
    cur = DataCursor(n, seed=11)
    rng = np.random.default_rng(0)
    seen: dict[int, list[int]] = {}
    for _ in range(400):
        k = int(rng.integers(1, 9))
        if rng.random() < 0.2:  # a step that failed: nothing committed, retried with other members
            continue
        epoch = cur.epoch
        blocks = [cur.block(h * k + r, b) for h in range(local_steps) for r in range(k)]
        taken = cur.advance(local_steps * k, b)
        assert taken == sum(len(x) for x in blocks)
        seen.setdefault(epoch, []).extend(int(i) for blk in blocks for i in blk)
    full = [e for e in seen if e < cur.epoch]
    assert len(full) >= 3
    for e in full:
        assert sorted(seen[e]) == list(range(n)), f"epoch {e}: every sample exactly once"


def test_cursor_takes_what_the_epoch_sampler_reserves() -> None:
    """Without failures the collective split is the PS plane's: k consecutive reservations of b."""
    n, b, k = 97, 5, 3
    cur, smp = DataCursor(n, seed=2), EpochSampler(n, seed=2)
    for _ in range(40):
        mine = [cur.block(r, b) for r in range(k)]
        theirs = [smp.reserve(b) for _ in range(k)]
        for x, y in zip(mine, theirs):
            if y is None:
                assert len(x) == 0
            else:
                assert np.array_equal(x, y.indices)
                smp.commit(y)
        cur.advance(k, b)
        st = smp.state()
        assert (cur.epoch, cur.pos) == (st["epoch"], st["cursor"])
    # the sampler state a checkpoint stores resumes the same place
    again = EpochSampler.from_state(cur.sampler_state())
    assert again.epoch == cur.epoch and again.reserve(b) is not None


def test_plan_round_trip_and_validation() -> None:
    p = Plan(gen=3, members=(1, 4, 7), source=4, strategy="sma", local_steps=2, lr=0.1, batch=8, logged=5, lease=9)
    assert Plan.from_json(p.to_json()) == p and p.leader == 4
    assert Plan(gen=0, members=(2, 5), source=-1).leader == 2
    with pytest.raises(ValueError, match="not a member"):
        Plan(gen=0, members=(1, 2), source=3)
    with pytest.raises(ValueError, match="valid names"):
        Plan(gen=0, members=(1,), source=-1, strategy="adpsgd-typo")
    with pytest.raises(ValueError, match="distinct"):
        Plan(gen=0, members=(1, 1), source=-1)


def test_the_lease_names_the_members_revoked_inside_the_leased_step() -> None:
    assert encode_lease(12) == "12" and decode_lease(b"12") == (12, ())
    assert decode_lease(encode_lease(13, (0, 2)).encode()) == (13, (0, 2))


def test_replica_buffer_holds_the_weighted_gradient_loss_and_count() -> None:
    spec = spec_with(BASE)
    wl = make_workload(spec.workload, spec.seed)
    rep = Replica(wl)
    ref = wl.build_model()
    set_flat_params(ref, rep.flat)
    idx = np.arange(13)
    loss, n = rep.gradient(idx)
    ref.zero_grad()
    ref_loss = wl.loss(ref, wl.train.batch(idx))
    ref_loss.backward()
    assert n == 13 and loss == pytest.approx(float(ref_loss.detach()), rel=1e-6)
    assert torch.allclose(rep.buf[: rep.P], 13 * flat_grad(ref), atol=1e-6)
    assert float(rep.buf[rep.P]) == pytest.approx(13 * float(ref_loss.detach()), rel=1e-6) and float(rep.buf[rep.P + 1]) == 13
    # the parameters are views of the flat vector: an update through it moves the model
    before = flat_params(rep.model).clone()
    rep.sgd(rep.buf[: rep.P], 13.0, 0.5)
    assert torch.allclose(flat_params(rep.model), before - 0.5 * flat_grad(ref), atol=1e-6)
    assert rep.gradient(np.arange(0)) == (0.0, 0) and float(rep.buf.abs().sum()) == 0.0  # an empty block adds nothing


def test_replica_of_a_sparse_workload_densifies_its_gradient() -> None:
    spec = spec_with(BASE, workload__name="pmf", workload__batch_size=16)
    wl = make_workload(spec.workload, spec.seed)
    rep = Replica(wl)
    ref = wl.build_model()
    set_flat_params(ref, rep.flat)
    idx = np.arange(16)
    _, n = rep.gradient(idx)
    ref.zero_grad()
    wl.loss(ref, wl.train.batch(idx)).backward()
    assert torch.allclose(rep.buf[: rep.P], n * flat_grad(ref), atol=1e-5)


def test_sync_strategies_of_the_collective_plane() -> None:
    law = MiniBatchTimeLaw(2.0, 0.5)
    assert make_sync("ssgd") == SSGD() and SSGD().expected_round_s(law, 5, 0.1) == FullSync().expected_round_s(law, 5, 0.1)
    assert make_sync("sma", 1).expected_round_s(law, 5, 0.1) == pytest.approx(FullSync().expected_round_s(law, 5, 0.1))
    sma = make_sync("sma", 4)
    assert isinstance(sma, SMA) and sma.samples_per_step(3, 8) == 4 * 3 * 8 and sma.needed(3) == 3
    # E[max of k sums of H draws] + Delta, against Monte Carlo
    rng = np.random.default_rng(1)
    draws = law.draw(rng, (200_000, 6, 4)).sum(axis=2).max(axis=1)
    assert sma.expected_round_s(law, 6, 0.1) == pytest.approx(float(draws.mean()) + 0.1, rel=0.01)
    # straggler noise averages out over the local steps: per mini-batch, S-MA waits less than S-SGD
    assert sma.expected_round_s(law, 6) / 4 < SSGD().expected_round_s(law, 6)
    with pytest.raises(InputError):
        SMA(0)


def test_config_of_the_collective_plane() -> None:
    spec = spec_with(BASE)
    assert spec.cluster.data_plane == "collective" and spec.cluster.sync == "ssgd"  # full is S-SGD here
    assert spec_with(BASE, cluster__sync="sma", cluster__local_steps=2).cluster.local_steps == 2
    with pytest.raises(InputError, match="parameter-server mode"):
        spec_with(BASE, cluster__sync="async")
    with pytest.raises(InputError, match="collective mode"):
        spec_with(BASE, cluster__data_plane="ps", cluster__sync="ssgd")
    with pytest.raises(InputError, match="valid values"):
        spec_with(BASE, cluster__data_plane="ring")
    with pytest.raises(InputError, match="integer >= 1"):
        spec_with(BASE, cluster__sync="sma", cluster__local_steps=0)
    with pytest.raises(InputError):
        spec_with(BASE, cluster__group_timeout_s=0)


def test_a_collective_spec_with_the_strategy_switch_between_its_strategies() -> None:
    from spotwise.policies import make_policies

    spec = spec_with(BASE, policies=[{"name": "strategy-switch", "params": {"strategies": ["ssgd", "sma"]}}])
    (policy,) = make_policies(spec.policies)
    assert policy.strategies == ("ssgd", "sma")


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_gossip_partners_are_a_perfect_matching_every_member_agrees_on(k: int) -> None:
    for step in range(20):
        partners = [gossip_partner(3, step, k, r) for r in range(k)]
        for r, p in enumerate(partners):
            assert p is None or (p != r and partners[p] == r)
        assert sum(p is None for p in partners) == k % 2
    # the pairs change from step to step (gossip mixes every replica with every other)
    assert len({tuple(gossip_partner(3, s, 8, r) for r in range(8)) for s in range(20)}) > 5


def test_adpsgd_waits_for_a_pair_not_for_everyone() -> None:
    law = MiniBatchTimeLaw(1.0, 1.0)
    assert make_sync("adpsgd") == ADPSGD()
    assert ADPSGD().expected_round_s(law, 8, 0.1) == pytest.approx(law.order_stat_mean(2, 2) + 0.1)
    assert ADPSGD().expected_round_s(law, 8) < SSGD().expected_round_s(law, 8)
    assert ADPSGD().expected_round_s(law, 1) == pytest.approx(1.0)


def test_a_joiner_whose_first_generation_never_forms_reports_no_state() -> None:
    """A member that never held a generation's state answers a failure with -1, not its step 0: the
    coordinator must never take its fresh replica for a committed one (it rolls back instead)."""
    import threading

    from spotwise.planes.collective.group import GroupCoordinator
    from spotwise.planes.collective.member import CollectiveMember

    wl = {"name": "mlp-digits", "batch_size": 8, "lr": 0.05}
    coord = GroupCoordinator()
    coord.store.set("lease", "0")
    coord.store.set("want", "0")
    member = CollectiveMember(wl, seed=1)
    out: dict[str, Any] = {}
    # generation 0 names a second member that never comes: the rendezvous fails after 1 s
    coord.store.set("plan/0", Plan(gen=0, members=(0, 1), source=-1, lease=5).to_json())
    t = threading.Thread(target=lambda: out.update(member.run(coord.address, 0, 0, timeout_s=1.0)))
    t.start()
    assert coord.alive(0, [0], timeout_s=20.0) == {0: -1}
    # the next generation leaves it out: its loop ends
    coord.store.set("plan/1", Plan(gen=1, members=(1,), source=-1).to_json())
    t.join(20.0)
    assert not t.is_alive() and out["left"] and out["step"] == 0


def test_steps_whose_records_died_with_a_leader_carry_the_samples_the_cursor_moved(tmp_path) -> None:
    """A new leader's first record is for step 3 while the controller has logged step 0: steps 1
    and 2 are logged ``unreported`` (loss unknown) and together hold the samples the data cursor
    moved over before step 3 (they used to say 0, so the run's sample count fell short)."""
    from spotwise.assemble import build_controller
    from spotwise.events import read_events
    from spotwise.market.world import build_market
    from spotwise.planes.collective.data_plane import CollectivePlane
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    spec = spec_with(BASE, cluster__data_plane="collective", cluster__sync="ssgd", cluster__workers=2,
                     cluster__standby=0, target__iterations=10)
    job = build_controller(spec, tmp_path / "run", market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                        compute=LocalCompute(worker_args_for(spec)), plane=CollectivePlane(spec))
    try:
        plane = job.plane
        assert isinstance(plane, CollectivePlane) and job.step == 0 and plane.cursor is not None
        batch = spec.workload.batch_size
        rec = {"step": 3, "k": 2, "loss": 0.5, "samples": 2 * batch, "epoch": 0, "pos": 3 * 2 * batch,
               "wall": 0.0, "strategy": "ssgd"}
        assert plane._log_records([rec])
        steps = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["kind"] == "step"]
        assert [e["step"] for e in steps] == [1, 2, 3]
        assert [bool(e.get("unreported")) for e in steps] == [True, True, False]
        assert [e["samples"] for e in steps] == [2 * batch, 2 * batch, 2 * batch]
        assert job.counters.samples == 3 * 2 * batch
    finally:
        job._shutdown()
