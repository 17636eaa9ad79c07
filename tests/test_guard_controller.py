"""The Uniform Progress guard in the job controller (the run's control logic) and in the sweep engine.

One policy object, two executors: the controller with modelled compute (what ``spotwise simulate``
and, with real workers, ``spotwise run`` execute) on a bid market replayed from a price trace, and
the event-driven sweep engine on the same trace.  During an outage the controller must keep
consulting its policies (an idle job commits no step), so that the guard can switch to
on-demand; both executors must then finish at the same time for the same money.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotwise.config import spec_from_dict
from spotwise.market.catalog import Catalog
from spotwise.market.series import iso8601
from spotwise.market.traces import load_traces
from spotwise.market.world import build_market
from spotwise.planner.plan import error_model_for
from spotwise.assemble import build_controller
from spotwise.capacity.provider import EmulatedProvider
from spotwise.sim.modelled import ModelledCompute, ModelledState
from spotwise.sim.sweep.places import build_places
from spotwise.sim.sweep.engine import Strategy, SweepJob, run_window

H = 3600.0
T0 = 1_580_000_000.0
BID = 1.0


@pytest.fixture(scope="module")
def loss_model():
    spec = spec_from_dict({"name": "pilot", "workload": {"name": "mlp-digits", "family": "resnet50"}, "target": {"iterations": 10},
                           "cluster": {"instance_type": "p3.2xlarge"}, "market": {"synthetic": {"kind": "constant", "price": 1.0}}})
    return error_model_for(spec, None, 20)


def _trace(tmp: Path) -> Path:
    # spot 0.9 $/h for 30 min, then 5.0 (above the 1.0 bid) for 8 h, then 0.9 again
    pts = [(T0 - 2 * H, 0.9), (T0 + 0.5 * H, 5.0), (T0 + 8.5 * H, 0.9), (T0 + 40 * H, 0.9)]
    recs = [{"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": f"{p:.4f}", "Timestamp": iso8601(t).replace("Z", ".000Z")} for t, p in pts]
    path = tmp / "p3.json"
    path.write_text(json.dumps({"SpotPriceHistory": recs}))
    return path


def _controller(tmp: Path, trace: Path, policies: list, loss_model) -> object:
    spec = spec_from_dict({
        "name": "guard", "seed": 0, "workload": {"name": "mlp-digits", "family": "resnet50", "step_time_s": 9.6 * 10},
        "target": {"iterations": 360}, "deadline": "6h",  # 1 h of compute (10 s steps) due in 6 h
        "cluster": {"instance_type": "p3.2xlarge", "workers": 1, "region": "us-east-1a", "coordinator_instance": "c5.large",
                    "straggler": 0, "sync_overhead_s": 0, "bids": BID, "data_plane": "ps"},  # modelled PS workers
        "market": {"traces": [str(trace)], "start": iso8601(T0), "revocation": {"model": "bid", "notice_s": 0}},
        "policies": policies})
    market = build_market(spec)
    state = ModelledState(loss_model[0], 1797, loss_model[1])
    compute = ModelledCompute(state)
    provider = EmulatedProvider(market.revocation, 1, market.horizon_s, 0, compute=compute)
    return build_controller(spec, tmp / "run", market=market, provider=provider, compute=compute, state=state, mode="simulate",
                         restart_s=120).run()


def test_controller_guard_switches_to_on_demand_in_an_outage_and_matches_the_sweep(tmp_path: Path, loss_model) -> None:
    trace = _trace(tmp_path)
    s = _controller(tmp_path, trace, [{"name": "uniform-progress"}], loss_model)
    assert s.status == "completed" and s.virtual_s <= 6 * H
    kinds = [e["kind"] for e in map(json.loads, (tmp_path / "run" / "events.jsonl").read_text().splitlines())]
    assert "market_switch" in kinds and s.cost_breakdown["by_market"].get("on_demand", 0) > 0
    # the sweep engine, same trace, same policy, same restart and no delay on start/rejoin (as the emulated provider)
    place = build_places(load_traces(str(trace)), Catalog.default(), "resnet50", "p3.2xlarge")[0][0]
    job = SweepJob(work_s=H, deadline_s=6 * H, restart_s=120, start_s=0, rejoin_s=0, coordinator_per_hour=0.085, iterations=360)
    r = run_window(job, [place], place, T0, Strategy("guard", bid=BID, policies=("uniform-progress",)), tick_s=10.0)
    assert r.deadline_met and r.market_switches == 1
    assert r.finish_s == pytest.approx(s.virtual_s, rel=0.01)
    assert r.cost == pytest.approx(s.cost_usd, rel=0.01)


def test_controller_without_the_guard_waits_out_the_outage_and_misses(tmp_path: Path, loss_model) -> None:
    s = _controller(tmp_path, _trace(tmp_path), [], loss_model)
    assert s.status == "completed" and s.virtual_s > 6 * H  # it waited 8 h for the price to fall
    assert s.cost_breakdown["by_market"].get("on_demand", 0) == pytest.approx(s.cost_breakdown["by_category"]["coordinator"])
