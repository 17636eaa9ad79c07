"""Issue 30 items 9-11: user code cannot fake success or break the exit contract.

* item 9: ``sys.exit()`` (any non-Exception BaseException but Ctrl-C) out of a user policy -- its
  import, ``__init__`` or ``decide`` -- or a user workload -- its import, the function, its loss, in
  the driver, the pilot or a Ray worker actor -- is that code failing: exit 2 naming it, never the
  user's exit code (``sys.exit(0)`` faked a success with 0 steps and no summary.json);
* item 10: what ``decide`` returns is checked in one place (:mod:`spotwise.policies.decision_checks`)
  for every executor: ``None``, ``Resize(workers=nan)`` and their kin exit 2; a diverged or
  vector loss exits 2 in the pilot of ``plan``/``simulate`` too (``check_loss``, the diverged rule);
* item 11: ``simulate`` refuses a market that cannot progress, as ``run`` does (exit 2).

The policies and workloads live in ``tests/user_policies/misbehaving_policies.py``,
``tests/user_policies/exits_on_import.py`` and ``tests/user_workloads/misbehaving.py``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import spotwise
from spotwise.errors import InputError
from spotwise.policies.base import (
    Decision,
    Migrate,
    Noop,
    Observation,
    Rebid,
    Resize,
    SetLearningRate,
    SwitchMarket,
    SwitchSync,
)

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
POLICIES_DIR = HERE / "user_policies"
WORKLOADS_DIR = HERE / "user_workloads"


@pytest.fixture()
def user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The misbehaving modules importable, as PYTHONPATH would make them; each test imports them afresh."""
    monkeypatch.syspath_prepend(str(POLICIES_DIR))
    monkeypatch.syspath_prepend(str(WORKLOADS_DIR))
    for mod in ("misbehaving_policies", "exits_on_import", "misbehaving"):
        monkeypatch.delitem(sys.modules, mod, raising=False)


def sim_spec(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "usercode", "seed": 2,
                         "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
                         "target": {"iterations": 20}, "deadline": "1h",
                         "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                         "market": {"revocation": {"model": "lifetime", "mttf_s": 600, "mttr_s": 30}},
                         "outputs": {"checkpoint_every": 0, "plots": False}}
    d.update(over)
    return d


def workload_spec(name: str, **params: Any) -> dict[str, Any]:
    return {"name": "wl", "seed": 3,
            "workload": {"name": name, "params": params, "batch_size": 8, "lr": 0.05, "eval_every": 1000,
                         "step_time_s": 1.0},
            "target": {"iterations": 8}, "deadline": "1h",
            "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
            "market": {"synthetic": {"kind": "constant", "price": 0.07}},
            "outputs": {"checkpoint_every": 0, "plots": False}}


def write(tmp_path: Path, doc: dict[str, Any], name: str = "spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def simulate_cli(cli: Any, tmp_path: Path, doc: dict[str, Any], *extra: str) -> tuple[int, str, str]:
    return cli("simulate", str(write(tmp_path, doc)), "--out", str(tmp_path / "sim"), "--pilot-steps", "30", *extra)


def local_run(doc: dict[str, Any], out: Path) -> Any:
    """``spotwise run`` without Ray: the controller with in-process workers (the numerics of the actors)."""
    from spotwise.config import spec_from_dict
    from spotwise.assemble import build_controller
    from spotwise.market.world import build_market
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    spec = spec_from_dict(doc)
    job = build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                        compute=LocalCompute(worker_args_for(spec)))
    return job.run()


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def obs(step: int = 1) -> Observation:
    return Observation(step=step, t=10.0, active=2, provisioned=2, max_workers=4, reference_workers=2, base_lr=0.1,
                       lr=0.1, sync="full")


# ============================================================================ item 9: sys.exit
@pytest.mark.parametrize(("ref", "params", "says"), [
    ("misbehaving_policies:ExitsInDecide", {"code": 0}, "called sys.exit(0) in decide at step"),
    ("misbehaving_policies:ExitsInDecide", {"code": 7, "at": 3}, "called sys.exit(7) in decide at step 3"),
    ("misbehaving_policies:ExitsWhenBuilt", {}, "called sys.exit(0) when built"),
    ("exits_on_import:Never", {}, "called sys.exit(0) while importing exits_on_import"),
    ("misbehaving_policies:RaisesBaseException", {}, "raised _Escape in decide"),
])
def test_a_policy_calling_sys_exit_exits_2_naming_it(user_path: None, cli: Any, tmp_path: Path, ref: str,
                                                     params: dict[str, Any], says: str) -> None:
    """Before: ``sys.exit(0)`` in decide ended ``simulate`` with exit 0 after 0 of 20 steps."""
    code, _, err = simulate_cli(cli, tmp_path, sim_spec(policies=[{"name": ref, "params": params}]))
    assert code == 2, (code, err)
    assert says in err and ref in err, err
    if "SystemExit" in says or "sys.exit" in says:
        assert "do not call sys.exit()" in err and "SystemExit" in err, "the fix and the user's traceback are shown"


def test_a_policy_calling_sys_exit_keeps_what_was_committed(user_path: None, cli: Any, tmp_path: Path) -> None:
    code, _, err = simulate_cli(cli, tmp_path, sim_spec(policies=[{"name": "misbehaving_policies:ExitsInDecide",
                                                                   "params": {"at": 5}}]))
    assert code == 2, err
    ev = events(tmp_path / "sim")
    assert max(e["step"] for e in ev if e["kind"] == "step") == 5
    assert [e["step"] for e in ev if e["kind"] == "checkpoint"][-1] == 5


def test_a_real_ctrl_c_in_decide_still_passes_through(user_path: None) -> None:
    """Only user failures are caught: a KeyboardInterrupt (Ctrl-C, SIGTERM) stays one (exit 130/143)."""
    from spotwise.policies.user import guard
    from spotwise.signals import Terminated

    class Interrupted(spotwise.Policy):
        name = "interrupted"

        def decide(self, o: Observation) -> list[Decision]:
            raise Terminated()

    with pytest.raises(KeyboardInterrupt):
        guard(Interrupted()).decide(obs())


def test_a_workload_calling_sys_exit_makes_plan_exit_2_not_its_code(user_path: None, cli: Any, tmp_path: Path) -> None:
    """Before: ``sys.exit(3)`` in the workload function made ``plan`` (its in-process pilot) exit 3."""
    code, _, err = cli("plan", str(write(tmp_path, workload_spec("misbehaving:exits_when_called", code=3))))
    assert code == 2, err
    assert "misbehaving:exits_when_called called sys.exit(3) when called" in err and "do not call sys.exit()" in err


def test_a_workload_calling_sys_exit_in_its_loss_makes_plan_exit_2(user_path: None, cli: Any, tmp_path: Path) -> None:
    code, _, err = cli("plan", str(write(tmp_path, workload_spec("misbehaving:exits_in_loss", after=3))))
    assert code == 2, err
    assert "called sys.exit(0) in its loss" in err


def test_a_workload_calling_sys_exit_fails_the_run_with_an_input_error(user_path: None, tmp_path: Path) -> None:
    """The controller's own workload (driver side) and the workers' (in-process here) both blame the workload."""
    from spotwise.workloads.user import UserWorkloadError

    with pytest.raises(UserWorkloadError, match=r"called sys.exit\(3\) when called"):
        local_run(workload_spec("misbehaving:exits_when_called", code=3), tmp_path / "a")
    with pytest.raises(UserWorkloadError, match=r"called sys.exit\(0\) in its loss"):
        local_run(workload_spec("misbehaving:exits_in_loss", after=3), tmp_path / "b")


def test_a_user_optimizer_module_calling_sys_exit_is_an_input_error(user_path: None) -> None:
    from spotwise.training.recipe import optimizer_class

    with pytest.raises(InputError, match=r"optimizer exits_on_import:Never called sys.exit\(0\) while importing"):
        optimizer_class("exits_on_import:Never")


@pytest.mark.timeout(600)
def test_a_workload_calling_sys_exit_in_a_ray_worker_is_exit_2_not_a_lost_node(ray_session: Any, cli: Any, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """In a Ray actor ``sys.exit`` would end the actor: the run saw a lost node, started a new
    worker, and so on.  The worker reports the workload's failure instead: ``spotwise run`` exits 2.
    (In-process on the session's Ray: the actors import the workload from the driver's working
    directory, as a user's would from theirs; one worker.)"""
    monkeypatch.chdir(HERE.parent)
    doc = workload_spec("tests.user_workloads.misbehaving:exits_in_loss", after=3)
    doc["target"]["iterations"] = 6
    doc["cluster"]["workers"] = 1
    out = tmp_path / "ray"
    code, _, err = cli("run", str(write(tmp_path, doc)), "--out", str(out))
    assert code == 2, err[-3000:]
    assert "tests.user_workloads.misbehaving:exits_in_loss called sys.exit(0) in its loss" in err, err[-3000:]
    ev = events(out)
    assert not [e for e in ev if e.get("reason") == "node-lost"], "the workload's failure is not a lost node"


# ============================================================================ item 10: decisions and losses
def test_a_policy_returning_none_exits_2(user_path: None, cli: Any, tmp_path: Path) -> None:
    """docs/policies.md: a decide that returns something else than a list of decisions is exit 2."""
    code, _, err = simulate_cli(cli, tmp_path, sim_spec(policies=[{"name": "misbehaving_policies:ReturnsNone"}]))
    assert code == 2, err
    assert "misbehaving_policies:ReturnsNone" in err and "returned None, not a list of decisions" in err
    assert "return []" in err


@pytest.mark.parametrize("workers", ["nan", "inf", 2.5])
def test_a_policy_resizing_to_a_bad_number_exits_2(user_path: None, cli: Any, tmp_path: Path, workers: Any) -> None:
    """Before: ``Resize(workers=nan)`` was accepted and the run ended ``no-capacity`` with exit 0."""
    doc = sim_spec(policies=[{"name": "misbehaving_policies:ResizesTo", "params": {"workers": workers}}])
    code, _, err = simulate_cli(cli, tmp_path, doc)
    assert code == 2, err
    assert "misbehaving_policies:ResizesTo" in err and "whose workers is" in err and "whole number" in err


def test_the_sweep_checks_decisions_too(user_path: None, tmp_path: Path) -> None:
    """The sweep engine runs the same guarded policy: None is refused there as well (it was read as [])."""
    from misbehaving_policies import ReturnsNone  # type: ignore[import-not-found]

    with pytest.raises(InputError, match="returned None, not a list of decisions"):
        spotwise.sweep(sim_spec(), spec_market=True, horizon="2d", starts="12h", history="1h", strategies=[ReturnsNone()])


def _d(cls: type[Decision], **fields: Any) -> Decision:
    """A decision with fields its constructor would refuse or never see (a frozen dataclass set behind it)."""
    d = cls(reason="r", **({"lr": 0.1} if cls is SetLearningRate else {}))
    for k, v in fields.items():
        object.__setattr__(d, k, v)
    return d


@pytest.mark.parametrize("bad", [
    None, "Noop", [None], [Noop(reason="ok"), "x"], {"d": Noop(reason="ok")},
    [_d(Resize, workers=math.nan)], [_d(Resize, workers=math.inf)], [_d(Resize, workers=-1)], [_d(Resize, workers=2.5)],
    [_d(Resize, workers="4")], [_d(Resize, workers=True)], [_d(Resize, workers=None)],
    [_d(Rebid, bids=())], [_d(Rebid, bids=(0.1, math.nan))], [_d(Rebid, bids=(math.inf,))], [_d(Rebid, bids="0.1")],
    [_d(SetLearningRate, lr=math.inf)], [_d(SetLearningRate, lr=math.nan)], [_d(SetLearningRate, lr="0.1")],
    [_d(SwitchSync, sync="bogus")], [_d(SwitchSync, sync="n-sync", sync_n=0)], [_d(SwitchSync, sync="n-sync", sync_n=1.5)],
    [_d(SwitchMarket, market="idle")], [_d(Migrate, instance_type="")], [_d(Migrate, instance_type="p3", region=3)],
    [_d(Noop, reason=None)],
], ids=lambda v: repr(v)[:40])
def test_every_bad_decision_is_refused_in_one_place(bad: Any) -> None:
    from spotwise.policies.decision_checks import BadDecision, checked_decisions

    with pytest.raises(BadDecision) as e:
        checked_decisions(bad)
    assert e.value.fix


def test_good_decisions_pass_and_whole_numbers_are_normalised() -> None:
    from spotwise.policies.decision_checks import checked_decisions

    out = checked_decisions((Resize(reason="a", workers=np.int64(3)), _d(Resize, workers=2.0), Noop(reason="n"),
                             Rebid(reason="b", bids=(np.float64(0.1), 1)), SetLearningRate(reason="c", lr=0.05),
                             SwitchSync(reason="s", sync="n-sync", sync_n=2), SwitchMarket(reason="m", market="on-demand"),
                             Migrate(reason="g", instance_type="c5.xlarge", region="us-east-1")))
    assert [type(d).__name__ for d in out] == ["Resize", "Resize", "Noop", "Rebid", "SetLearningRate", "SwitchSync",
                                               "SwitchMarket", "Migrate"]
    assert out[0].workers == 3 and type(out[0].workers) is int and out[1].workers == 2 and type(out[1].workers) is int
    assert out[3].bids == (0.1, 1.0) and checked_decisions([]) == []


def test_the_sync_modes_a_policy_may_name_are_the_controllers() -> None:
    from spotwise.control.sync import SYNC_STRATEGIES
    from spotwise.policies.decision_checks import SYNC_MODES

    assert tuple(SYNC_MODES) == tuple(SYNC_STRATEGIES)


def test_a_vector_loss_in_the_plan_pilot_exits_2_naming_its_shape(user_path: None, cli: Any, tmp_path: Path) -> None:
    """Before: a loss that turned into a vector after the build-time probe made ``plan`` exit 1."""
    code, _, err = cli("plan", str(write(tmp_path, workload_spec("misbehaving:vector_loss", after=3))))
    assert code == 2, err
    assert "returned a tensor of shape (16,), not a scalar" in err


def test_a_vector_loss_in_the_serverless_footprint_exits_2_naming_its_shape(user_path: None) -> None:
    """The serverless planner's footprint probe called ``.backward()`` on whatever the loss returned (exit 1)."""
    from spotwise.config import spec_from_dict
    from spotwise.planner.plan.serverless import measure_footprint

    spec = spec_from_dict(workload_spec("misbehaving:vector_loss", after=1))
    with pytest.raises(InputError, match=r"returned a tensor of shape \(8,\), not a scalar"):
        measure_footprint(spec.workload, spec.seed)


def test_a_nan_loss_in_the_plan_pilot_exits_2_as_diverged(user_path: None, cli: Any, tmp_path: Path) -> None:
    """Before: the pilot's plain-SGD loop kept the NaN losses and the fit dropped them."""
    code, _, err = cli("plan", str(write(tmp_path, workload_spec("misbehaving:nan_loss", after=12))))
    assert code == 2, err
    assert "the pilot's loss is nan at step 12: training diverged" in err


def test_a_diverging_built_in_workload_stops_simulate_in_its_pilot(cli: Any, tmp_path: Path) -> None:
    doc = sim_spec()
    doc["workload"]["lr"] = 1000000.0
    code, _, err = simulate_cli(cli, tmp_path, doc)
    assert code == 2, err
    assert "training diverged" in err


def test_a_nan_or_vector_loss_stops_a_run_with_exit_2_after_a_checkpoint(user_path: None, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"the loss is nan at step 4: training diverged") as e:
        local_run(workload_spec("misbehaving:nan_loss", after=4), tmp_path / "nan")
    assert "checkpoint holds step 3" in str(e.value)
    ck = [x for x in events(tmp_path / "nan") if x["kind"] == "checkpoint"]
    assert ck and ck[-1]["step"] == 3 and ck[-1]["why"] == "nonfinite"
    with pytest.raises(InputError, match=r"shape \(8,\), not a scalar"):
        local_run(workload_spec("misbehaving:vector_loss", after=4), tmp_path / "vec")


# ============================================================================ item 11: no progress
def test_simulate_refuses_a_market_that_cannot_progress(cli: Any, tmp_path: Path) -> None:
    """Before: ``q: 1.0, rejoin_p: 0`` ended ``simulate`` with 0 steps and exit 0 (``run`` exits 2)."""
    doc = sim_spec(market={"revocation": {"model": "bernoulli", "q": 1.0, "rejoin_p": 0}})
    code, stdout, err = simulate_cli(cli, tmp_path, doc, "--json")
    assert code == 2, err
    assert "makes progress impossible" in err and "market.revocation.q" in err
    assert stdout.strip() == ""
    with pytest.raises(spotwise.InputError, match="makes progress impossible"):
        spotwise.simulate(doc)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_diverged_serverless_step_exits_2_after_a_checkpoint_of_the_last_good_one(cli: Any, tmp_path: Path) -> None:
    """Before: a function whose gradient was not finite raised, the supervisor re-invoked it, it raised
    again -- the run hung until killed.  Now the function commits no change and a NaN loss, the
    driver applies nothing of the step, checkpoints the last good one and exits 2.  (`spotwise run`
    in-process: the functions are processes of their own either way.)"""
    import shutil

    import yaml

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    spec = {"name": "sl-nan", "workload": {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 1e30,
                                           "eval_every": 1000, "params": {"n_users": 300, "n_items": 400,
                                                                          "n_ratings": 20000, "rank": 8}},
            "target": {"iterations": 40}, "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
            "outputs": {"checkpoint_every": 1000, "plots": False}}
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(spec))
    code, _, err = cli("run", str(path), "--out", str(out))
    assert code == 2, err[-2000:]
    assert "training diverged" in err and "Traceback" not in err, err[-2000:]
    rows = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["kind"] == "step"]
    ck = [r for r in rows if r["kind"] == "checkpoint"]
    assert ck and ck[-1]["why"] == "nonfinite" and ck[-1]["step"] == max(steps)
    assert all(math.isfinite(r["loss"]) for r in rows if r["kind"] == "step")
