"""`spotwise plan` with the serverless option (issue 9; papers/004_9dc2adb66dc8d26e.txt, MLLess).

Prices in the hand computations are the catalog's, written out (paper 004 Table 2: a 1 vCPU / 2 GB
IBM function is 3.4e-5 $/s = 1.7e-5 $/GB-s; the M1.2x16 Redis node 0.17 $/h), so a change of the
catalog or of the cost model fails here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.planner.plan import apply_plan, make_plan
from spotwise.planner.plan import serverless as sv
from spotwise.theory.bounds import ErrorModel
from tests._specs import spec_with

MODEL = ErrorModel(alpha=0.1, c=1.0, mu=0.05, L=1.0, M=2.0, G1=2.0)
IBM_PER_GB_S = 1.7e-5
REDIS_PER_H = 0.17
PMF_PARAMS = {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}

SERVERLESS = {
    "name": "sl",
    "workload": {"name": "pmf", "family": "pmf", "batch_size": 200, "lr": 5.0, "params": PMF_PARAMS, "step_time_s": 0.5},
    "target": {"iterations": 300},
    "cluster": {"kind": "serverless", "workers": 4, "memory_mb": 2048, "functions": "ibm-functions",
                "redis_instance": "M1.2x16", "sync": "isp", "significance": 0.7},
}
VM_PMF = {
    "name": "vm-pmf",
    "workload": {"name": "pmf", "family": "mlp", "batch_size": 200, "lr": 5.0, "params": PMF_PARAMS, "step_time_s": 0.5},
    "target": {"iterations": 300},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4},
    "market": {"synthetic": {"kind": "uniform", "low": 0.05, "high": 0.17, "interval_s": 60, "duration_s": "1d"}},
}
VM_MLP = {**VM_PMF, "name": "vm-mlp", "workload": {"name": "mlp-digits", "family": "mlp", "batch_size": 32, "step_time_s": 0.5}}


def by_strategy(plan):
    return {a.strategy: a for a in plan.alternatives}


def write(tmp_path: Path, d: dict, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


# ------------------------------------------------------------------------------------ the model
def test_lease_fraction_is_the_runtimes() -> None:
    from spotwise.planes.serverless.plane import LEASE_FRACTION

    assert sv.LEASE_FRACTION == LEASE_FRACTION


def test_estimate_equals_a_hand_computation_from_catalog_prices() -> None:
    """Every term of the model by hand: E[max of N] compute, N^2 updates through 1 Gbit/s, leases, prices."""
    spec = spec_with(SERVERLESS, workload__family="mlp", cluster__function_timeout_s=100.0)
    foot = sv.Footprint(params=10_000, entries_per_update=900.0, dataset_bytes=0, sparse=True, batches=1, workload="pmf")
    s = sv.setup(spec, Catalog.default(), None, footprint=foot)
    N, J = 4, 300
    # a function is 1 vCPU of the catalog's mlp profile: c5.* have 0.25 per vCPU, so m = 0.5 / 0.25 = 2 s
    m, strag = 2.0, 0.3
    compute = m * (1 - strag) + m * strag * (1 + 1 / 2 + 1 / 3 + 1 / 4)  # E[max of 4]: BSP/ISP wait for the slowest
    b = 16 + 8 * 900.0 / 3.0  # ISP pushes a third of the entries
    exchange = N * N * b / 125e6
    step = compute + exchange + 0.005
    restart = 2.0 + N * 4 * 10_000 / 125e6
    lease = 0.8 * 100.0
    k = math.ceil(J * step / (lease - restart))
    T = J * step + k * restart
    est = sv.estimate(s, N, J)
    assert est.compute_s == pytest.approx(compute, rel=1e-12)
    assert est.step_s == pytest.approx(step, rel=1e-12)
    assert est.invocations_per_worker == k and k > 1
    assert est.time_s == pytest.approx(T, rel=1e-12)
    # IBM: no request fee, no rounding; 4 workers + the supervisor for T seconds at 2 GB, and the Redis node
    hand = (N + 1) * 2.0 * IBM_PER_GB_S * T + REDIS_PER_H * T / 3600
    assert est.cost == pytest.approx(hand, rel=1e-12)
    assert est.cost_redis == pytest.approx(REDIS_PER_H * T / 3600, rel=1e-12)
    # AWS Lambda at 1 GB: $2e-7 a request (k per worker + the supervisor's), 1.66667e-5 $/GB-s, 1 ms rounding
    lam = sv.setup(spec_with(SERVERLESS, workload__family="mlp", cluster__function_timeout_s=100.0,
                             cluster__functions="aws-lambda", cluster__memory_mb=1024), Catalog.default(), None, footprint=foot)
    e2 = sv.estimate(lam, N, J)
    assert e2.time_s == pytest.approx(T, rel=1e-12)
    hand2 = (N + 1) * 1.0 * 1.66667e-5 * T + (N * k + 1) * 2e-7 + REDIS_PER_H * T / 3600
    assert e2.cost == pytest.approx(hand2, abs=(N + 1 + N * k) * 1.66667e-5 * 0.001)


def test_ssp_waits_for_the_mean_and_bsp_pushes_everything() -> None:
    foot = sv.Footprint(params=10_000, entries_per_update=900.0, dataset_bytes=0, sparse=True, batches=1, workload="pmf")
    isp = sv.setup(spec_with(SERVERLESS), Catalog.default(), None, footprint=foot)
    bsp = sv.setup(spec_with(SERVERLESS, cluster__sync="bsp"), Catalog.default(), None, footprint=foot)
    ssp = sv.setup(spec_with(SERVERLESS, cluster__sync="ssp", cluster__staleness=2), Catalog.default(), None, footprint=foot)
    assert bsp.push_fraction == 1.0 and isp.push_fraction == pytest.approx(1 / 3)
    c_isp, x_isp, _ = sv.step_seconds(isp, 4)
    c_bsp, x_bsp, _ = sv.step_seconds(bsp, 4)
    c_ssp, _, _ = sv.step_seconds(ssp, 4)
    assert c_isp == c_bsp > c_ssp == pytest.approx(0.5)  # family pmf: one vCPU is the reference, m = step_time_s
    assert x_bsp > 2.9 * x_isp


def test_plan_prices_the_serverless_row_from_catalog_prices() -> None:
    plan = make_plan(spec_with(SERVERLESS), error_model=MODEL)
    a = by_strategy(plan)["serverless"]
    assert a.feasible and a.workers == 4 and a.iterations == plan.iterations
    T = a.expected_time_s
    assert a.expected_cost == pytest.approx(5 * 2.0 * IBM_PER_GB_S * T + REDIS_PER_H * T / 3600, rel=1e-9)
    assert a.deadline_probability == 1.0
    assert plan.extra["serverless"]["estimate"]["cost"] == pytest.approx(a.expected_cost)


# ------------------------------------------------------------------------------------ when it is offered
def test_sparse_vm_spec_gets_a_serverless_row_and_a_dense_one_does_not() -> None:
    sparse = make_plan(spec_with(VM_PMF), error_model=MODEL)
    assert "serverless" in by_strategy(sparse)
    assert {"one-bid", "on-demand"} <= set(by_strategy(sparse))  # the VM strategies are still there
    assert any(m.startswith("serverless update size") for m in sparse.measured)
    logreg = make_plan(spec_with(VM_PMF, workload__name="sparse-logreg", workload__params={}), error_model=MODEL)
    assert "serverless" in by_strategy(logreg)
    dense = make_plan(spec_with(VM_MLP), error_model=MODEL)
    assert "serverless" not in by_strategy(dense) and "serverless" not in dense.extra
    dense_sl = make_plan(spec_with({**SERVERLESS, "workload": VM_MLP["workload"]}), error_model=MODEL)
    assert set(by_strategy(dense_sl)) == {"on-demand", "serverless"}


def test_sparse_model_too_big_for_the_function_gets_no_row() -> None:
    plan = make_plan(spec_with(VM_PMF, cluster__memory_mb=128), error_model=MODEL)
    assert "serverless" not in by_strategy(plan)
    assert any("serverless option not offered" in a and "128 MB" in a for a in plan.assumed)
    # a serverless spec keeps the row, infeasible with the reason
    sl = make_plan(spec_with(SERVERLESS, cluster__memory_mb=128), error_model=MODEL)
    row = by_strategy(sl)["serverless"]
    assert not row.feasible and "128 MB" in row.reason and sl.strategy == "on-demand"


def test_serverless_spec_plans_on_a_default_vm_and_says_so(cli, tmp_path: Path) -> None:
    """cluster.instance_type is empty: the VM row uses B1.4x8 (paper 004's PyTorch worker) and the plan says so."""
    path = write(tmp_path, SERVERLESS)
    code, out, err = cli("plan", str(path), "--json", "--pilot-steps", "20")
    assert code == 0, err
    doc = json.loads(out)
    strategies = {a["strategy"]: a for a in doc["alternatives"]}
    assert set(strategies) == {"on-demand", "serverless"}
    assert doc["extra"]["kind"] == "serverless" and doc["extra"]["instance"] == "B1.4x8"
    assert "B1.4x8" in doc["extra"]["vm_comparison"] and "derived" in doc["extra"]["vm_comparison"]
    assert any(a.startswith("VM rows of this serverless spec") for a in doc["assumed"])
    sl = strategies["serverless"]
    assert sl["expected_cost"] > 0 and sl["deadline_probability"] in (0.0, 1.0)
    code, out, err = cli("plan", str(path), "--pilot-steps", "20")
    assert code == 0, err
    assert "serverless" in out and "B1.4x8" in out


def test_cheaper_serverless_is_recommended_only_when_it_meets_the_deadline() -> None:
    """Against 4 x p2.xlarge (0.9 $/h) the functions are cheaper; a deadline they miss rules them out."""
    spec = spec_with(SERVERLESS, workload__family="mlp", cluster__instance_type="p2.xlarge")
    plan = make_plan(spec, error_model=MODEL)
    by = by_strategy(plan)
    assert by["serverless"].expected_cost < by["on-demand"].expected_cost
    assert plan.strategy == "serverless" and plan.deadline_probability == 1.0
    t_vm, t_sl = by["on-demand"].expected_time_s, by["serverless"].expected_time_s
    assert t_vm < t_sl
    tight = make_plan(spec_with(SERVERLESS, workload__family="mlp", cluster__instance_type="p2.xlarge",
                                deadline=(t_vm + t_sl) / 2), error_model=MODEL)
    row = by_strategy(tight)["serverless"]
    assert tight.strategy == "on-demand"
    assert not row.feasible and row.deadline_probability == 0.0 and "exceeds the deadline" in row.reason
    assert row.expected_cost < by_strategy(tight)["on-demand"].expected_cost  # cheaper, still not recommended


def test_apply_plan_writes_a_runnable_serverless_spec() -> None:
    from spotwise.planes.serverless.runner import check_serverless_spec

    spec = spec_with(SERVERLESS, workload__family="mlp", cluster__instance_type="p2.xlarge")
    plan = make_plan(spec, error_model=MODEL)
    assert plan.strategy == "serverless"
    out = spec_from_dict(apply_plan(spec, plan))
    assert out.cluster.kind == "serverless" and out.target.iterations == plan.iterations
    check_serverless_spec(out)
    # a VM spec's functions alternative becomes an MLLess spec: ISP, no spot market
    vm = spec_with(VM_PMF, cluster__bids=1.0, market__revocation={"model": "bid"})
    vm_plan = make_plan(vm, error_model=MODEL)
    forced = dataclasses.replace(vm_plan, strategy="serverless", bids=())
    conv = spec_from_dict(apply_plan(vm, forced))
    assert conv.cluster.kind == "serverless" and conv.cluster.sync == "isp" and conv.cluster.bids is None
    check_serverless_spec(conv)
    # the on-demand plan of a serverless spec on a VM whose throughput the plan derived cannot be written
    slow = make_plan(spec_with(SERVERLESS), error_model=MODEL)
    assert slow.strategy == "on-demand" and slow.extra["vm_throughput_derived"]
    with pytest.raises(InputError) as info:
        apply_plan(spec_with(SERVERLESS), slow)
    assert info.value.where == "--write-spec" and "market.catalog" in info.value.fix


# ------------------------------------------------------------------------------------ errors the user can cause
def test_unknown_function_pricing_and_memory_not_offered_exit_2(cli, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        make_plan(spec_with(SERVERLESS, cluster__functions="gcp-functions"), error_model=MODEL)
    assert info.value.where == "cluster.functions" and "ibm-functions" in info.value.fix
    with pytest.raises(InputError) as info:
        make_plan(spec_with(SERVERLESS, cluster__memory_mb=4096), error_model=MODEL)
    assert info.value.where == "cluster.memory_mb" and "2048" in info.value.fix
    # through the CLI, for a serverless spec (the CLI's spec check answers first) and for a sparse VM spec
    # (only the plan checks them there); either way exit 2 and the fix
    for d, name in ((SERVERLESS, "sl"), (VM_PMF, "vm")):
        for over, needles in (({"functions": "gcp-functions"}, ("ibm-functions",)),
                              ({"memory_mb": 4096}, ("at most 2048", "at most 2.0 GB"))):
            bad = {**d, "cluster": {**d["cluster"], **over}}
            code, out, err = cli("plan", str(write(tmp_path, bad, f"{name}-{len(needles)}.yaml")), "--json",
                                 "--pilot-steps", "20")
            assert code == 2, (name, over, out)
            assert any(n in err for n in needles), err


def test_gpu_only_family_and_traces_are_refused_for_serverless_specs(cli, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        make_plan(spec_with(SERVERLESS, workload__family="resnet50"), error_model=MODEL)
    assert info.value.where == "workload.family" and "GPU" in info.value.message
    with pytest.raises(InputError) as info:
        make_plan(spec_with(SERVERLESS), traces=["x.csv"], error_model=MODEL)
    assert info.value.where == "--trace"
