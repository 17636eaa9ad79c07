"""``spotwise simulate`` (issue 8, part 2, first slice): the run's control logic with modelled compute and loss.

The simulator and the emulated runtime share the coordinator, market, policies and ledger, so on
the same spec and seed they must agree on everything but the numerics: virtual time, cost,
revocations, joins and committed steps are compared *exactly* (the issue's goal is 5%).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import spec_with
import yaml

from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.assemble import build_controller
from spotwise.planes.ps.worker import worker_args_for
from spotwise.sim.modelled import ModelledCompute, ModelledState
from spotwise.sim.simulate import simulate_job
from spotwise.theory.bounds import ErrorModel, error_bound

pytestmark = pytest.mark.timeout(180)

SPOT: dict[str, Any] = {
    "name": "sim-vs-run",
    "seed": 2,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 60},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", "sync": "full",
                "bids": [0.17, 0.17, 0.09, 0.09], "straggler": 0.5},
    "market": {"synthetic": {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 5, "seed": 1},
               "revocation": {"model": "bid"}},
    "policies": [{"name": "lr-scaling"}],
    "outputs": {"checkpoint_every": 25, "plots": False},
}
MODEL = ErrorModel(alpha=0.1, c=1.0, mu=0.3, L=1.0, M=8.0, G1=2.3)


@pytest.fixture()
def no_ray(ray_unimportable: None) -> None:
    """The simulator and the in-process emulation never import Ray."""


def spec(**over: Any):
    return spec_with(SPOT, **over)


def emulated(s, out: Path):
    coord = build_controller(s, out, market=build_market(s), compute=LocalCompute(worker_args_for(s)))
    return coord.run()


def simulated(s, out: Path):
    summary, _, _ = simulate_job(s, out, pilot_steps=40)
    return summary


@pytest.mark.parametrize("over", [{}, {"cluster__sync": "n-sync", "cluster__sync_n": 2},
                                  {"cluster__sync": "n-batch", "cluster__sync_n": 3}, {"cluster__sync": "async"}],
                         ids=["full", "n-sync", "n-batch", "async"])
def test_simulation_matches_the_emulated_run_in_time_cost_and_churn(no_ray, tmp_path: Path, over: dict) -> None:
    s = spec(**over)
    run = emulated(s, tmp_path / "run")
    sim = simulated(s, tmp_path / "sim")
    assert run.revocations > 0, "the market must revoke for this comparison to mean anything"
    assert (sim.steps, sim.status, sim.revocations, sim.joins) == (run.steps, run.status, run.revocations, run.joins)
    assert sim.virtual_s == pytest.approx(run.virtual_s, rel=1e-9)
    assert sim.cost_usd == pytest.approx(run.cost_usd, rel=1e-9)
    assert sim.cost_breakdown["by_category"] == pytest.approx(run.cost_breakdown["by_category"], rel=1e-9)
    assert sim.extra["samples"] == run.extra["samples"]
    actives = lambda out: [e["active"] for e in read_events(out / "events.jsonl", kinds=["step"])]  # noqa: E731
    assert actives(tmp_path / "sim") == actives(tmp_path / "run")
    assert sim.mode == "simulate" and run.mode == "emulated"


def test_modelled_loss_follows_the_thm1_recursion(no_ray, tmp_path: Path) -> None:
    """No revocations, full sync with 4 workers: y_j = 4, so e_J is eq. (10) in closed form."""
    s = spec(market={"synthetic": {"kind": "constant", "price": 0.07}}, cluster__bids=None, target__iterations=50)
    state = ModelledState(MODEL, n_train=32 * 100)  # whole rounds: no short step at an epoch end
    compute = ModelledCompute(state)
    coord = build_controller(s, tmp_path / "sim", market=build_market(s), compute=compute, state=state, mode="simulate")
    summary = coord.run()
    assert summary.steps == 50
    assert state.error == pytest.approx(error_bound(50, MODEL, 1 / 4), rel=1e-5)
    losses = [e["loss"] for e in read_events(tmp_path / "sim" / "events.jsonl", kinds=["step"])]
    # each step reports the loss at the parameters its mini-batches were computed at: e_1 .. e_50
    assert losses[0] == pytest.approx(MODEL.G1, rel=1e-6)
    assert losses[-1] == pytest.approx(error_bound(49, MODEL, 1 / 4), rel=1e-5)
    assert np.all(np.diff(losses) < 0)


def test_fewer_active_workers_mean_a_higher_modelled_loss(no_ray) -> None:
    a, b = ModelledState(MODEL, 10), ModelledState(MODEL, 10)
    for _ in range(600):  # beta^600 ~ 1e-8: at the floor
        a.apply(np.zeros(1), 0.1, 4)
        b.apply(np.zeros(1), 0.1, 2)
    assert a.error == pytest.approx(MODEL.floor(1 / 4), rel=1e-3) and b.error == pytest.approx(MODEL.floor(1 / 2), rel=1e-3)


def test_simulate_cli_json_and_run_directory(no_ray, cli, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SPOT))
    out = tmp_path / "sim"
    code, stdout, err = cli("simulate", str(path), "--out", str(out), "--pilot-steps", "40", "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["mode"] == "simulate" and summary["steps"] == 60 and summary["status"] == "completed"
    assert summary["extra"]["loss_model"]["kind"].startswith("paper 000 Thm 1")
    assert (out / "events.jsonl").is_file() and (out / "summary.json").is_file()
    header = read_events(out / "events.jsonl")[0]
    assert header["mode"] == "simulate"
    # a second simulation into the same directory needs --overwrite, as a run does
    code, _, err = cli("simulate", str(path), "--out", str(out), "--pilot-steps", "40")
    assert code == 2 and "already holds a run" in err


def test_simulate_a_user_workload_needs_a_pilot_and_its_size(no_ray, cli, tmp_path: Path) -> None:
    d = copy.deepcopy(SPOT)
    d["workload"]["name"] = "some_module_that_does_not_exist:build"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(d))
    code, _, err = cli("simulate", str(path), "--out", str(tmp_path / "sim"))
    assert code == 2 and "--pilot DIR" in err and "--train-size" in err
