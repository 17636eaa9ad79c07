"""Heterogeneous pools in one job (issue 21): several types and places, each with its own market.

Runs use the in-process data plane (:class:`LocalCompute`, no Ray) on the real mlp-digits
workload; pool speeds are the catalog's (paper 002's measured ResNet-32 speeds of the K80, P100
and V100), so a V100 mini-batch takes 1/3.179 of a K80's on the virtual clock.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import spec_with

from spotwise.config import spec_from_dict
from spotwise.assemble import build_controller
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.network import region_of
from spotwise.market.pools import PooledRevocation
from spotwise.market.preemption import ExponentialLifetime
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for

pytestmark = pytest.mark.timeout(180)

K80 = {"instance_type": "gce-k80", "workers": 2, "region": "us-east1"}
V100 = {"instance_type": "gce-v100", "workers": 2, "region": "us-east1"}
BASE: dict[str, Any] = {
    "name": "pools",
    "seed": 3,
    "workload": {"name": "mlp-digits", "family": "resnet32", "batch_size": 8, "lr": 0.1, "eval_every": 1000,
                 "step_time_s": 0.22},
    "target": {"iterations": 40},
    "cluster": {"sync": "async", "pools": [K80, V100], "coordinator_instance": "gce-ps"},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """The pools' control path needs no Ray."""


def make_spec(**over: Any):
    return spec_with(BASE, **over)


def run_local(spec, out: Path, record: list | None = None):
    compute = LocalCompute(worker_args_for(spec))
    coord = build_controller(spec, out, compute=compute)
    if record is not None:
        commit = coord.sampler.commit

        def recording(block):  # every committed block, in order
            record.append((block.epoch, block.indices.copy()))
            return commit(block)

        coord.sampler.commit = recording  # type: ignore[method-assign]
    return coord, coord.run()


def assert_every_sample_once_per_epoch(record: list, n_train: int) -> None:
    by_epoch: dict[int, list[np.ndarray]] = {}
    for epoch, idx in record:
        by_epoch.setdefault(epoch, []).append(idx)
    assert len(by_epoch) >= 2, "the run must cross an epoch for the check to mean anything"
    last = max(by_epoch)
    for epoch, parts in by_epoch.items():
        got = np.sort(np.concatenate(parts))
        assert np.unique(got).size == got.size, f"epoch {epoch}: a sample was committed twice"
        if epoch != last:
            assert np.array_equal(got, np.arange(n_train)), f"epoch {epoch}: a sample was lost"


# ---------------------------------------------------------------------------- the spec
def test_pools_fill_the_cluster_fields_and_round_trip() -> None:
    spec = make_spec()
    cl = spec.cluster
    assert (cl.instance_type, cl.workers, cl.region) == ("gce-k80", 4, "us-east1")
    assert [p.name for p in cl.pools] == ["gce-k80@us-east1", "gce-v100@us-east1"]
    again = spec_from_dict(spec.to_dict())
    assert again.cluster.pools == cl.pools and again.cluster.workers == 4


@pytest.mark.parametrize(("over", "words"), [
    ({"cluster__pools": [{"instance_type": "gce-k80", "workers": 0}]}, "at least one worker"),
    ({"cluster__pools": []}, "cluster.pools is empty"),
    ({"cluster__pools": [K80, K80]}, "two pools are named"),
    ({"cluster__instance_type": "gce-v100"}, "instance_type is set beside"),
    ({"cluster__bids": 0.3}, "bids is set beside"),
    ({"cluster__workers": 3}, "the pools hold 4"),
    ({"cluster__ps_shards": 2}, "ps_gbps is not set"),
    ({"cluster__ps_shards": 0, "cluster__ps_gbps": 8}, "[1, 64]"),
    ({"cluster__data_plane": "collective", "cluster__sync": "ssgd"}, "parameter-server plane"),
    ({"market": {"revocation": {"model": "bid"}}}, "has no bids"),
])
def test_bad_pools_are_refused_with_the_fix(over: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as e:
        make_spec(**over)
    assert words in str(e.value) + e.value.fix


def test_an_unknown_type_in_a_pool_names_the_pool() -> None:
    spec = make_spec(cluster__pools=[K80, {"instance_type": "gce-k81", "workers": 1}])
    with pytest.raises(InputError) as e:
        build_market(spec)
    assert "cluster.pools[1]" in e.value.where and "gce-k80" in str(e.value) + e.value.fix


def test_a_pool_whose_market_has_no_data_for_its_zone_is_refused(traces_dir: Path) -> None:
    east = traces_dir / "training-on-a-dime" / "logs" / "aws" / "cost" / "us-east-1"
    spec = make_spec(workload__family="resnet50", market={"traces": [str(east)], "start": "2020-02-25T00:00:00Z"},
                     cluster__pools=[{"instance_type": "p2.xlarge", "workers": 1, "zone": "us-east-1a"},
                                     {"instance_type": "p2.xlarge", "workers": 1, "zone": "us-west-2a"}])
    with pytest.raises(InputError) as e:
        build_market(spec)
    assert "us-west-2a" in str(e.value) and "us-east-1a" in e.value.fix and "cluster.pools[1]" in e.value.where


def test_pools_in_two_aws_zones_and_two_types_each_replay_their_own_trace(traces_dir: Path, tmp_path: Path) -> None:
    cost = traces_dir / "training-on-a-dime" / "logs" / "aws" / "cost"
    spec = make_spec(**{"workload__family": "resnet50", "target__iterations": 30,
                        "market": {"traces": [str(cost)], "start": "2020-02-25T00:00:00Z"},
                        "cluster__coordinator_instance": "m4.xlarge",
                        "cluster__pools": [{"instance_type": "p2.xlarge", "workers": 2, "zone": "us-east-1a"},
                                           {"instance_type": "p3.2xlarge", "workers": 1, "zone": "us-west-2a"}]})
    _, summary = run_local(spec, tmp_path / "run")
    first = {}
    for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["price"]):
        first.setdefault(e["pool"], e["price"])
    assert first == {"p2.xlarge@us-east-1a": 0.3867, "p3.2xlarge@us-west-2a": 1.0871}
    assert summary.cost_breakdown["by_category"].get("egress", 0) > 0, "us-west-2 is not the server's region"


def test_region_of_zones() -> None:
    assert region_of("us-east-1a") == "us-east-1" and region_of("us-west1-b") == "us-west1"
    assert region_of("us-central1") == "us-central1" and region_of(None) == ""


# ---------------------------------------------------------------------------- the market
def test_identical_pooled_models_give_the_single_models_timeline() -> None:
    one = ExponentialLifetime(mttf_s=30.0, mttr_s=5.0, notice_s=2.0)
    pooled = PooledRevocation([(one, 2), (one, 3)])
    a = one.events(5, 0.0, 500.0, np.random.default_rng(4))
    b = pooled.events(5, 0.0, 500.0, np.random.default_rng(4))
    assert a == b and len(a) > 20


def test_each_pool_keeps_its_own_notice() -> None:
    pooled = PooledRevocation([(ExponentialLifetime(mttf_s=3000.0, notice_s=30.0), 1),
                               (ExponentialLifetime(mttf_s=3000.0, notice_s=120.0), 1)])
    evs = pooled.events(2, 0.0, 200000.0, np.random.default_rng(1))
    gaps = {w: {round(e.revoke_at - e.t, 6) for e in evs if e.kind == "notice" and e.worker == w and e.t > 0} for w in (0, 1)}
    assert max(gaps[0]) <= 30.0 and 120.0 in gaps[1] and max(gaps[1]) <= 120.0


# ---------------------------------------------------------------------------- runs
def test_a_mixed_pool_run_equals_the_single_pool_run_when_the_pools_are_identical(tmp_path: Path) -> None:
    rev = {"model": "lifetime", "mttf_s": 3.0, "mttr_s": 1.0}
    single = spec_with({**copy.deepcopy(BASE), "cluster": {"sync": "async", "instance_type": "gce-k80", "workers": 4,
                                                             "region": "us-east1", "coordinator_instance": "gce-ps"}},
                       market={"revocation": rev})
    pooled = make_spec(market={"revocation": rev},
                       cluster__pools=[{**K80, "name": "a"}, {**K80, "name": "b"}])
    c1, s1 = run_local(single, tmp_path / "one")
    c2, s2 = run_local(pooled, tmp_path / "two")
    assert s1.revocations > 2, "the test needs revocations to compare"
    assert s1.steps == s2.steps and s1.revocations == s2.revocations
    assert np.array_equal(c1.params, c2.params)
    assert math.isclose(s1.cost_usd, s2.cost_usd, rel_tol=1e-12) and math.isclose(s1.virtual_s, s2.virtual_s)
    bp = s2.cost_breakdown["by_pool"]
    assert set(bp) == {"a", "b", "coordinator"}


@pytest.mark.parametrize(("sync", "balance"), [("async", "equal"), ("full", "throughput"), ("n-batch", "equal")])
def test_per_pool_revocations_at_random_keep_every_sample_once_per_epoch(tmp_path: Path, sync: str, balance: str) -> None:
    over: dict[str, Any] = {"cluster__sync": sync, "cluster__balance": balance}
    if sync == "n-batch":
        over["cluster__sync_n"] = 2
    spec = make_spec(**over, **{"target__iterations": 260 if sync != "full" else 80, "workload__batch_size": 16,
                        "cluster__pools": [{**K80, "revocation": {"model": "lifetime", "mttf_s": 4.0, "mttr_s": 2.0}},
                                           {**V100, "revocation": {"model": "lifetime", "mttf_s": 9.0, "mttr_s": 1.0}}]})
    record: list = []
    coord, summary = run_local(spec, tmp_path / "run", record)
    assert summary.status == "completed" and summary.steps == spec.target.iterations
    revoked = {e["worker"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["revoke"])}
    assert revoked & {0, 1} and revoked & {2, 3}, "both pools lost workers"
    assert_every_sample_once_per_epoch(record, coord.state.n_train)


def test_billing_per_pool_adds_up_to_the_total_at_each_pools_price(tmp_path: Path) -> None:
    spec = make_spec(**{"target__iterations": 60})
    coord, summary = run_local(spec, tmp_path / "run")
    bd = summary.cost_breakdown
    assert math.isclose(sum(bd["by_pool"].values()), bd["total"], rel_tol=1e-9)
    assert math.isclose(sum(bd["by_category"].values()), bd["total"], rel_tol=1e-9)
    assert math.isclose(summary.cost_usd, bd["total"], rel_tol=1e-9)
    # every interval of a pool at that pool's spot price (per-second billing, 60 s minimum)
    for pool, price in (("gce-k80@us-east1", 0.256), ("gce-v100@us-east1", 0.861)):
        ivs = [iv for iv in coord.ledger._intervals if iv.instance_id.startswith("worker-")
               and coord.speeds.pools.pool_of(int(iv.instance_id.split("-")[1])).name == pool]
        want = sum(price * max(60.0, iv.t1 - iv.t0) / 3600.0 for iv in ivs)
        assert ivs and math.isclose(bd["by_pool"][pool], want, rel_tol=1e-9)
    prices = {e.get("pool"): e["price"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["price"])}
    assert prices == {"gce-k80@us-east1": 0.256, "gce-v100@us-east1": 0.861}


def test_faster_pools_finish_sooner_in_async(tmp_path: Path) -> None:
    times = {}
    for name, pools in (("k80", [{**K80, "workers": 4}]), ("mix", [K80, V100]), ("v100", [{**V100, "workers": 4}])):
        # no commit overhead: the ratio is the workers' compute rates alone
        _, s = run_local(make_spec(cluster__pools=pools, cluster__sync_overhead_s=0.0, target__iterations=120), tmp_path / name)
        times[name] = s.virtual_s
    assert times["v100"] < times["mix"] < times["k80"]
    # async: the fleet's rate is the sum of its workers' rates (4 K80 vs 2 K80 + 2 V100: 4 / (2 + 2 * 3.179))
    assert times["mix"] / times["k80"] == pytest.approx(4 / (2 + 2 * 3.179), rel=0.25)


def test_throughput_balance_gives_fast_workers_bigger_shares_and_shorter_rounds(tmp_path: Path) -> None:
    out = {}
    for balance in ("equal", "throughput"):
        record: list = []
        coord, s = run_local(make_spec(**{"cluster__sync": "full", "cluster__balance": balance}), tmp_path / balance, record)
        out[balance] = (s, record, coord)
    eq, th = out["equal"][0], out["throughput"][0]
    assert th.virtual_s < 0.75 * eq.virtual_s, "barrier rounds no longer wait for the slow pool's full batch"
    sizes = [idx.size for _, idx in out["throughput"][1][:4]]
    assert sorted(sizes) == [4, 4, 12, 12]  # 32 samples split 1 : 1 : 3.179 : 3.179
    assert eq.extra["samples"] == th.extra["samples"] == 40 * 32, "the same work either way"


def test_pools_across_regions_are_slower_and_pay_egress(tmp_path: Path) -> None:
    west = {**V100, "region": "us-west1"}
    _, same = run_local(make_spec(**{"workload__model_mb": 14.19}), tmp_path / "same")
    _, split = run_local(make_spec(**{"workload__model_mb": 14.19, "cluster__pools": [K80, west]}), tmp_path / "split")
    assert "egress" not in same.cost_breakdown["by_category"]
    egress = split.cost_breakdown["by_category"]["egress"]
    # V100 exchanges cross: 2 x 14.19 MB each at $0.01/GB (catalog networks: gcp)
    v100_batches = split.extra["samples"] / 8 - 0  # upper bound: every mini-batch crossed
    assert 0 < egress <= v100_batches * 2 * 14.19e6 / 1e9 * 0.01 + 1e-12
    assert split.virtual_s > 1.2 * same.virtual_s


def test_parameter_server_shards_relieve_the_bottleneck_and_are_billed(tmp_path: Path) -> None:
    fast = [{**V100, "workers": 4}]
    over = {"cluster__pools": fast, "cluster__ps_gbps": 1.0, "workload__model_mb": 14.19}
    _, one = run_local(make_spec(**over), tmp_path / "one")
    _, two = run_local(make_spec(**over, cluster__ps_shards=2), tmp_path / "two")
    assert two.virtual_s < 0.7 * one.virtual_s
    coord = {k: v for k, v in two.cost_breakdown["by_instance"].items() if k.startswith("coordinator")}
    assert set(coord) == {"coordinator", "coordinator-1"}


def test_more_shards_than_parameters_are_refused() -> None:
    """A model of 10 parameters cannot be split over 64 shards (the controller's component, on a
    stand-in job holding what it reads)."""
    from spotwise.control.speeds import WorkerSpeeds

    spec = make_spec(cluster__ps_shards=64, cluster__ps_gbps=8.0)
    job = type("Job", (), {"spec": spec, "params": np.zeros(10, dtype=np.float32), "market": build_market(spec),
                           "max_workers": 4, "batch": 8})()
    with pytest.raises(InputError) as e:
        WorkerSpeeds(job)  # type: ignore[arg-type]
    assert "more shards than the model has parameters (10)" in str(e.value) and "at most 10" in e.value.fix


def test_a_resumed_pooled_run_keeps_each_pools_billing_and_every_shard(tmp_path: Path) -> None:
    """Stopped half-way and resumed: the same total as one uninterrupted run, by pool, shards included."""
    spec = make_spec(**{"target__iterations": 30, "cluster__ps_shards": 2, "cluster__ps_gbps": 8.0,
                        "cluster__pools": [K80, {**V100, "region": "us-west1"}], "workload__model_mb": 2.0})
    out = tmp_path / "run"
    first = build_controller(spec, out, compute=LocalCompute(worker_args_for(spec)), stop_after_steps=12)
    assert first.run().status == "stopped"
    again = build_controller(spec, out, compute=LocalCompute(worker_args_for(spec)), resume=True)
    summary = again.run()
    assert summary.status == "completed" and summary.steps == 30
    bd = summary.cost_breakdown
    assert set(bd["by_pool"]) == {"coordinator", "gce-k80@us-east1", "gce-v100@us-west1"}
    assert math.isclose(sum(bd["by_pool"].values()), bd["total"], rel_tol=1e-9)
    assert math.isclose(summary.cost_usd, bd["total"], rel_tol=1e-9) and bd["by_category"]["egress"] > 0
    coords = [iv for iv in again.ledger.to_dict()["intervals"] if iv["category"] == "coordinator"]
    assert {iv["instance_id"] for iv in coords} == {"coordinator", "coordinator-1"}
    assert all(iv["start"] == 0.0 for iv in coords), "the shards' intervals were reopened, not restarted"
    steps = [e["step"] for e in read_events(out / "events.jsonl", kinds=["step"])]
    assert steps == list(range(1, 31))


def test_a_fast_parameter_server_costs_nothing_and_exchanges_are_served_when_they_arrive(tmp_path: Path) -> None:
    """With a server far faster than the workers the queue must not slow anything (an exchange is served
    when it arrives, not behind slower workers' exchanges handed out before it)."""
    mix = {"cluster__sync_overhead_s": 0.0, "target__iterations": 120, "workload__model_mb": 14.19}
    _, free = run_local(make_spec(**mix), tmp_path / "free")
    _, fast = run_local(make_spec(**mix, cluster__ps_gbps=1000.0), tmp_path / "fast")
    assert fast.virtual_s == pytest.approx(free.virtual_s, rel=0.02)
    from spotwise.control.speeds import WorkerSpeeds

    job = type("Job", (), {"spec": make_spec(cluster__ps_gbps=8.0), "params": np.zeros(100, dtype=np.float32),
                           "market": build_market(make_spec()), "max_workers": 4, "batch": 8, "T": 0.0})()
    sp = WorkerSpeeds(job)  # type: ignore[arg-type]
    assert sp._serve(10.0, 1.0) == 11.0          # booked first, arrives late
    assert sp._serve(2.0, 1.0) == 3.0            # arrives earlier: served at once, in the gap
    assert sp._serve(10.5, 1.0) == 12.0          # behind the exchange already being served
    assert sp._serve(3.5, 6.0) == 9.5 and sp._serve(9.6, 1.0) == 13.0
