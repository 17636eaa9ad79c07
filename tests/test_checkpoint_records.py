"""Every record a resume reads from a run directory is checked (issue 54): an unknown key, a missing key, a wrong
type, NaN or infinity, a negative count -- each refused with exit 2's error naming the record, never a
TypeError / KeyError (exit 1) and never silently a wrong value (a counter restarting at 0, a sampler of
another data set, a timeline that does not give the availability the checkpoint says).

* load time (:func:`spotwise.control.checkpoint.check_state` -> :mod:`spotwise.control.checkpoint_records`):
  every class of damage on every record of a real checkpoint -- the checkpoint is rejected naming why (a
  resume falls back to an older one, or exits 2 listing the reasons);
* resume time (:meth:`~spotwise.control.checkpointing.Checkpointer.restore`): what only the resuming job can
  tell (its data set, workers, market timeline), and a consumer's own error (an optimizer's state) -> InputError;
* the planes' own records (``plane_carried``, ``round_draws``, a serverless ``schedule`` and ``ledger``);
* the event log a resume appends to.

Before issue 54 most of these were exit 1 (``KeyError: 'n'`` from the sampler, ``ValueError`` from the
timeline, ``IndexError`` from ``place``) and several were taken silently (a missing counter as 0, unknown
keys anywhere, a timeline with no ``market``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import spotwise
from spotwise.errors import InputError

SPEC: dict[str, Any] = {
    "name": "records", "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 4},
    "target": {"iterations": 8},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
    # a market timeline (a week of it: a long lifetime keeps it short to build) and open intervals in the ledger
    "market": {"synthetic": {"kind": "constant", "price": 0.07},
               "revocation": {"model": "lifetime", "mttf_s": 3600, "mttr_s": 60, "notice_s": 1.5}},
    "outputs": {"checkpoint_every": 4, "plots": False},
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A modelled run (no Ray): checkpoints at steps 4 and 8."""
    out = tmp_path_factory.mktemp("records") / "run"
    spotwise.simulate(copy.deepcopy(SPEC), out, plots=False)
    return out


@pytest.fixture()
def state(finished: Path) -> dict[str, Any]:
    """The step-4 checkpoint's state, as spotwise wrote it."""
    return torch.load(finished / "checkpoints" / "step-00000004.pt", weights_only=True)


# ------------------------------------------------------------------ load time: every record, every class
#: one field of every record a resume reads (a path into the state), and the record named in the refusal
FIELDS: dict[str, tuple[tuple[Any, ...], str]] = {
    "step": (("step",), "step"), "lr": (("lr",), "lr"), "T": (("T",), "T"),
    "sampler.cursor": (("sampler", "cursor"), "sampler"), "sampler.pending": (("sampler", "pending"), "sampler"),
    "sampler.n": (("sampler", "n"), "sampler"), "dur_rng": (("dur_rng",), "dur_rng"),
    "available": (("available", 0), "available"), "provisioned": (("provisioned",), "provisioned"),
    "market": (("market",), "market"), "expansions": (("expansions",), "expansions"),
    "timeline.popped": (("timeline", "popped"), "timeline"), "timeline.t": (("timeline", "t"), "timeline"),
    "place": (("place", 0), "place"), "worker_market": (("worker_market",), "worker_market"),
    "sync": (("sync",), "sync"), "counters.joins": (("counters", "joins"), "counters"),
    "counters.idle_s": (("counters", "idle_s"), "counters"), "cost.total": (("cost", "total"), "cost"),
    "cost.by_category": (("cost", "by_category", "coordinator"), "cost"),
    "cost.by_market": (("cost", "by_market"), "cost"),
    "ledger.settled": (("ledger", "settled", "total"), "ledger.settled"),
    "ledger.open.t0": (("ledger", "open", 0, "t0"), "ledger.open"),
    "ledger.open.policy": (("ledger", "open", 0, "policy", "minimum_s"), "ledger.open"),
    "carried.last_loss": (("carried", "last_loss"), "carried.last_loss"),
    "carried.last_eval": (("carried", "last_eval", "loss"), "carried.last_eval"),
    "carried.recoveries_ms": (("carried", "recoveries_ms"), "carried.recoveries_ms"),
    "plane_carried": (("plane_carried",), "plane_carried"),
}
#: what each class of damage puts in a field (None: the field removed)
DAMAGE: dict[str, Any] = {"missing": None, "wrong-type": "12", "nan": float("nan"), "inf": float("inf"), "negative": -1}
#: a field where a class of damage is a valid value (a loss may be negative; a removed map entry is absent money)
VALID = {("carried.last_loss", "negative"),
         ("carried.last_eval", "missing"), ("carried.last_eval", "negative"), ("available", "missing")}
#: records that are maps: an unknown key is refused in each
MAPS = ("", "sampler", "timeline", "counters", "cost", "ledger", "ledger.open.0", "ledger.open.0.policy",
        "ledger.settled", "carried")


def _node(state: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = state
    for k in path:
        node = node[k]
    return node


def _damaged(state: dict[str, Any], path: tuple[Any, ...], damage: str) -> dict[str, Any]:
    parent = _node(state, path[:-1])
    if DAMAGE[damage] is None:
        parent.pop(path[-1])
    elif damage == "wrong-type" and isinstance(parent[path[-1]], str):
        parent[path[-1]] = 12  # a text field: a number is its wrong type
    else:
        parent[path[-1]] = DAMAGE[damage]
    return state


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_damaged_record_is_refused_naming_it(state: dict[str, Any], field: str, damage: str) -> None:
    from spotwise.control.checkpoint import check_state

    path, record = FIELDS[field]
    assert check_state(state) is None, "spotwise's own checkpoint must pass"
    problem = check_state(_damaged(state, path, damage))
    if (field, damage) in VALID:
        assert problem is None or record in problem
        return
    assert problem is not None and record.split(".")[0] in problem, (field, damage, problem)


@pytest.mark.parametrize("where", MAPS)
def test_an_unknown_key_in_any_record_is_refused(state: dict[str, Any], where: str) -> None:
    from spotwise.control.checkpoint import check_state

    node = _node(state, tuple(int(k) if k.isdigit() else k for k in where.split(".")) if where else ())
    node["made_up"] = 1
    problem = check_state(state)
    assert problem is not None and "made_up" in problem, (where, problem)


def test_a_model_state_is_all_there_or_refused() -> None:
    """A real model's checkpoint holds its state_dict, its optimizer's state and torch's generator: one of them
    missing would resume with a fresh optimizer or another random stream, silently."""
    from _checkpoints import valid_state

    from spotwise.control.checkpoint import check_state

    full = valid_state(3, model={"w": torch.zeros(2)}, train_extra={}, rng={"torch": torch.get_rng_state(), "numpy_iter": ""})
    assert check_state(full) is None
    for key in ("model", "train_extra", "rng"):
        assert f"it lacks {key}" in (check_state({k: v for k, v in full.items() if k != key}) or "")
    for bad, why in ((("rng", "torch"), torch.zeros(3)), (("model", "w"), "x"), (("rng", "numpy_iter"), "{}")):
        st = copy.deepcopy(full)
        st[bad[0]][bad[1]] = why
        assert bad[0] in (check_state(st) or ""), bad


def test_a_serverless_checkpoints_slots_agree_with_its_schedule() -> None:
    """The slots a serverless checkpoint holds (``available``, the ledger's ``open``) are those its schedule keeps:
    a slot dropped from one of them would resume a smaller pool (or count a new join), silently."""
    from spotwise.config import spec_from_dict
    from spotwise.planes.serverless.function_billing import restored_ledger
    from spotwise.planes.serverless.plane import ServerlessPlane
    from spotwise.planes.serverless.totals import fresh_counters

    spec = spec_from_dict({"name": "sl", "workload": {"name": "pmf", "family": "pmf", "batch_size": 8, "lr": 1.0,
                                                      "params": {"n_users": 10, "n_items": 10, "n_ratings": 100, "rank": 2}},
                           "target": {"iterations": 3}, "cluster": {"kind": "serverless", "workers": 2}})
    state = {"kind": "serverless", "schedule": json.dumps({"join": {"0": 0, "1": 0}, "leave": {"0": None, "1": None}}),
             "plane_carried": {"counters": fresh_counters()}, "available": [0, 1], **_serverless_ledger()}
    ServerlessPlane(spec).restore_state(state)
    assert restored_ledger(state)[2] == [0, 1]
    with pytest.raises(InputError, match="the checkpoint's available"):
        ServerlessPlane(spec).restore_state({**state, "available": [1]})
    with pytest.raises(InputError, match="the checkpoint's ledger.open"):
        restored_ledger({**state, **_serverless_ledger(open=[{"instance_id": "worker-1"}])})


# ------------------------------------------------------------------ resume time: what the job tells, end to end
@pytest.fixture(scope="module")
def resume() -> Any:
    """Resume a modelled run as ``spotwise simulate`` builds it (the controller's restore, no Ray); its error
    model (a pilot of the workload) is made once."""
    from spotwise.config import spec_from_dict
    from spotwise.planner.plan import error_model_for
    from spotwise.sim import simulate as sim

    spec = sim.round_spec(spec_from_dict(copy.deepcopy(SPEC)))
    model, g_star, *_ = error_model_for(spec, None, 200)
    n_train = sim.train_size_of(spec, None)

    def build(out: Path) -> Any:
        market = sim.build_market(spec)
        st = sim.ModelledState(model, n_train, g_star)
        compute = sim.ModelledCompute(st)
        provider = sim.EmulatedProvider(market.revocation, spec.cluster.workers, market.horizon_s, spec.seed,
                                        compute=compute)
        return sim.build_controller(spec, out, market=market, provider=provider, compute=compute, state=st,
                                    mode="simulate", resume=True)

    return build


def _planted(finished: Path, tmp_path: Path, change: Any) -> Path:
    """A copy of the run whose step-4 checkpoint (the only one left) is ``change``d, checksums matching."""
    out = tmp_path / "run"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".spotwise.lock"))
    ck = out / "checkpoints"
    st = torch.load(ck / "step-00000004.pt", weights_only=True)
    change(st)
    torch.save(st, ck / "step-00000004.pt")
    (ck / "step-00000008.pt").unlink()
    entry = {"file": "step-00000004.pt", "step": 4, "sha256": hashlib.sha256((ck / "step-00000004.pt").read_bytes()).hexdigest()}
    (ck / "manifest.json").write_text(json.dumps({"checkpoints": [entry]}))
    return out


def _set(path: tuple[Any, ...], value: Any) -> Any:
    return lambda st: _node(st, path[:-1]).__setitem__(path[-1], value)


RESUME_TIME = {
    "another data set": (_set(("sampler", "n"), 7), "sampler"),
    "another seed": (_set(("sampler", "seed"), 6), "sampler"),
    "more workers than the job has": (_set(("provisioned",), 50), "provisioned"),
    "a timeline past its end": (_set(("timeline", "popped"), 10**6), "market position"),
    "slots its timeline does not give": (_set(("available",), [0]), "market position"),
    "a generator of another kind": (_set(("dur_rng",), json.dumps({"bit_generator": "MT19937", "state": {}})), "dur_rng"),
}


@pytest.mark.parametrize("case", list(RESUME_TIME))
def test_a_record_that_does_not_fit_the_resuming_job_exits_2(finished: Path, tmp_path: Path, case: str,
                                                              resume: Any) -> None:
    change, record = RESUME_TIME[case]
    out = _planted(finished, tmp_path, change)
    with pytest.raises(InputError) as ei:
        resume(out)
    assert record in str(ei.value), str(ei.value)
    assert resume(_planted(finished, tmp_path / "ok", lambda st: None)).step == 4  # the unchanged one resumes


@pytest.mark.parametrize("wall", ["NaN", "Infinity", "-5", "1e300"])
def test_an_event_log_whose_last_wall_time_is_not_seconds_is_refused(finished: Path, tmp_path: Path, wall: str,
                                                                      resume: Any) -> None:
    """The log a resume appends to: a NaN wall time made every later event unwritable (exit 1)."""
    out = _planted(finished, tmp_path, lambda st: None)
    events = out / "events.jsonl"
    lines = events.read_text().splitlines()
    last = json.loads(lines[-1])
    lines[-1] = json.dumps(last).replace(f'"wall": {json.dumps(last["wall"])}', f'"wall": {wall}')
    events.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="wall time"):
        resume(out)


# ------------------------------------------------------------------ the planes' own records
def _serverless_ledger(**over: Any) -> dict[str, Any]:
    led = {"settled": {"total": 0.5, "by_category": {"service": 0.2, "function": 0.3}, "by_market": {"on_demand": 0.2},
                       "by_instance": {"redis": 0.2}}, "function_seconds": 12.5,
           "open": [{"instance_id": "worker-0"}, {"instance_id": "worker-1"}]}
    led.update(over)
    return {"ledger": led}


@pytest.mark.parametrize("over", [
    {"bogus": 1}, {"function_seconds": float("nan")}, {"function_seconds": -1.0}, {"function_seconds": "1"},
    {"open": [{"instance_id": "worker-0", "x": 1}]}, {"open": [{"instance_id": "redis"}]},
    {"open": [{"instance_id": "worker-0"}, {"instance_id": "worker-0"}]}, {"open": "worker-0"},
    {"settled": {"total": 0.5, "by_category": {"function": 0.1}}}, {"settled": {"total": -0.5}},
    {"settled": {"total": 0.5, "by_region": {}}}, {"settled": {"by_category": {}}},
], ids=lambda o: json.dumps(o)[:40])
def test_a_serverless_ledger_is_checked(over: dict[str, Any]) -> None:
    from spotwise.planes.serverless.function_billing import restored_ledger

    assert restored_ledger(_serverless_ledger())[1:] == (12.5, [0, 1])
    with pytest.raises(InputError, match="the checkpoint's ledger"):
        restored_ledger(_serverless_ledger(**over))
    with pytest.raises(InputError, match="the checkpoint's ledger"):
        restored_ledger({"ledger": {k: v for k, v in _serverless_ledger()["ledger"].items() if k != next(iter(over))}}
                        if next(iter(over)) in ("function_seconds", "open", "settled") else _serverless_ledger(**over))


@pytest.mark.parametrize("counters", [
    {"bogus": 1}, {"invocations": None}, {"invocations": -1}, {"invocations": 1.5}, {"invocations": True},
    {"invocations": float("inf")}, "missing",
], ids=str)
def test_the_serverless_counters_a_checkpoint_carries_are_checked(counters: Any) -> None:
    from spotwise.planes.serverless.totals import COUNTERS, restored_counters

    good = dict.fromkeys(COUNTERS, 3)
    assert restored_counters({"plane_carried": {"counters": good}}) == good
    bad = {k: v for k, v in good.items() if k != "lost"} if counters == "missing" else {**good, **counters}
    bad = {k: v for k, v in bad.items() if v is not None}
    with pytest.raises(InputError, match="the checkpoint's plane_carried"):
        restored_counters({"plane_carried": {"counters": bad}})
    with pytest.raises(InputError, match="the checkpoint's plane_carried"):
        restored_counters({"plane_carried": {"counters": good, "extra": 1}})


@pytest.mark.parametrize("schedule", [
    {"join": {"0": 0, "1": 0}, "leave": {"0": None, "1": None}, "x": {}},  # unknown key
    {"join": {"0": 0}, "leave": {"0": None, "1": None}},  # a slot missing
    {"join": {"0": 0, "1": 0, "2": 0}, "leave": {"0": None, "1": None, "2": None}},  # a slot the job lacks
    {"join": {"0": "0", "1": 0}, "leave": {"0": None, "1": None}},  # wrong type
    {"join": {"0": -1, "1": 0}, "leave": {"0": None, "1": None}},  # negative
    {"join": {"0": 5, "1": 0}, "leave": {"0": 3, "1": None}},  # leaves before it joins
    {"join": {"0": 0, "1": 0}, "leave": {"0": 1.5, "1": None}},  # not a step
    "not json", 7,
], ids=lambda s: json.dumps(s)[:50])
def test_a_serverless_schedule_is_checked(schedule: Any) -> None:
    from spotwise.planes.serverless.schedule import Schedule

    ok = Schedule.restored(json.dumps({"join": {"0": 0, "1": 0}, "leave": {"0": 6, "1": None}}), 2)
    assert ok.members(5) == [0, 1] and ok.members(6) == [1]
    with pytest.raises(InputError, match="the checkpoint's schedule"):
        Schedule.restored(schedule if isinstance(schedule, (str, int)) and schedule != 7 else
                          (schedule if schedule == 7 else json.dumps(schedule)), 2)


@pytest.mark.parametrize("plane_carried, field", [
    ({"phases": {"ms": {"compute": float("nan")}}}, "phases"), ({"metrics": {"acc": "high"}}, "metrics"),
    ({"join_ms": [-1.0]}, "join_ms"), ({"regroups": -1}, "regroups"), ({"rolled_back_steps": 1.5}, "rolled_back_steps"),
    ({"regroup_ms": "5"}, "regroup_ms"), ({"bogus": 1}, "bogus"), ({"phases": {}}, "phases"),
    ({"phases": None}, "phases"), ("not a map", "plane_carried"), ("missing", "metrics"),
])
def test_the_collective_totals_a_checkpoint_carries_are_checked(plane_carried: Any, field: str) -> None:
    from spotwise.planes.collective.totals import CollectiveTotals

    good = CollectiveTotals(regroups=2, join_ms=[5.0]).state()
    assert CollectiveTotals.from_state({"plane_carried": good}) == CollectiveTotals(regroups=2, join_ms=[5.0])
    bad = ({k: v for k, v in good.items() if k != "metrics"} if plane_carried == "missing" else
           plane_carried if isinstance(plane_carried, str) else {**good, **plane_carried})
    with pytest.raises(InputError, match="the checkpoint's") as ei:
        CollectiveTotals.from_state({"plane_carried": bad})
    assert field in str(ei.value)


def test_the_ps_planes_totals_and_the_collective_round_draws_are_required() -> None:
    from spotwise.control.phases import PhaseTotals
    from spotwise.planes.collective.data_plane import CollectivePlane
    from spotwise.planes.ps.plane import ParameterServerPlane

    ps = ParameterServerPlane.__new__(ParameterServerPlane)  # restore_state reads only the state
    for bad in ({}, {"plane_carried": {}}, {"plane_carried": {"phases": PhaseTotals().state(), "x": 1}}):
        with pytest.raises(InputError, match="the checkpoint's plane_carried"):
            ps.restore_state(bad)
    ps.restore_state({"plane_carried": {"phases": PhaseTotals().state()}})
    assert ps.phases == PhaseTotals()
    with pytest.raises(InputError, match="the checkpoint's round_draws"):
        CollectivePlane.restore_state(CollectivePlane.__new__(CollectivePlane), {"plane_carried": {}})


def test_a_consumers_error_over_a_record_is_exit_2_naming_it() -> None:
    """What a record's consumer finds beyond its form (an optimizer state of another model): exit 2, not exit 1."""
    from spotwise.control.carried import reading

    for exc in (ValueError("loaded state dict contains a parameter group that doesn't match"), KeyError("state"),
                TypeError("x"), IndexError("y"), RuntimeError("Invalid mt19937 state")):
        with pytest.raises(InputError, match="the checkpoint's train_extra cannot be restored"):
            with reading("train_extra"):
                raise exc
    with pytest.raises(ZeroDivisionError):  # not the record's fault: a bug, exit 1 as before
        with reading("train_extra"):
            raise ZeroDivisionError()
