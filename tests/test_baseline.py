"""Issue 7, item 7: the on-demand comparison is like for like (same samples, measured accuracy).

Before the fix the demo compared the spot run with "the same number of *steps*" on on-demand
workers: 8 workers in every on-demand step against 4-8 active spot workers, i.e. ~38% more work on
the on-demand side, a cost that flattered spot, no on-demand accuracy, and growth policies ignored.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from spotwise.config import spec_from_dict
from spotwise.events import read_events, read_summary
from spotwise.market.world import build_market
from spotwise.control.baseline import BASELINE_DIR, compare_on_demand, on_demand_spec
from spotwise.control.runner import run_job

pytestmark = pytest.mark.timeout(240)

SPOT: dict[str, Any] = {
    "name": "spot-vs-od",
    "seed": 1,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 40},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", "standby": 0,
                "sync": "full", "bids": [0.17, 0.17, 0.09, 0.09]},
    "market": {"synthetic": {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 5, "seed": 0},
               "revocation": {"model": "bid"}},
    "policies": [{"name": "lr-scaling"}],
    "outputs": {"checkpoint_every": 20, "plots": False},
}


def spec(**over: Any):
    d = copy.deepcopy(SPOT)
    d.update(over)
    return spec_from_dict(d)


# ------------------------------------------------------------------------------ pure: the twin spec
def test_item7_on_demand_twin_keeps_the_job_and_drops_the_spot_market() -> None:
    s = spec(policies=[{"name": "lr-scaling"}, {"name": "dynamic-bids", "params": {"switch_step": 5, "workers": 4,
                                                                                   "iterations": 40}}])
    od_price = build_market(s).on_demand_price
    twin = on_demand_spec(s, od_price)
    assert twin.market.revocation.model == "none" and twin.cluster.bids is None
    assert twin.market.synthetic is not None and twin.market.synthetic.kind == "constant"
    assert twin.market.synthetic.price == pytest.approx(0.17)  # c5.xlarge on-demand
    assert twin.market.billing == s.market.billing and twin.market.min_charge_s == s.market.min_charge_s
    assert [p.name for p in twin.policies] == ["lr-scaling"]  # dynamic-bids changes bids: spot only
    assert (twin.workload, twin.seed, twin.cluster.workers, twin.cluster.sync) == (s.workload, s.seed, 4, "full")
    assert s.market.revocation.model == "bid" and s.cluster.bids is not None  # the original is untouched
    twin_market = build_market(twin)
    assert twin_market.prices.value_at(123.0) == pytest.approx(0.17)


def test_item7_growth_policies_are_kept_for_the_baseline() -> None:
    s = spec(cluster={**SPOT["cluster"], "max_workers": 8, "bids": 0.17},
             policies=[{"name": "exp-growth", "params": {"eta": 1.05}}])
    twin = on_demand_spec(s, 0.17)
    assert [p.name for p in twin.policies] == ["exp-growth"] and twin.cluster.max_workers == 8


def test_item7_bad_on_demand_price_is_an_input_error() -> None:
    from spotwise.errors import InputError

    with pytest.raises(InputError, match="on-demand price"):
        on_demand_spec(spec(), float("nan"))


# ------------------------------------------------------------------------------ a real comparison
@pytest.fixture(scope="module")
def spot_run(ray_session, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The spot run both tests below read (its summary before the measured comparison)."""
    out = tmp_path_factory.mktemp("baseline") / "run"
    return run_job(spec(), out, progress=False, plots=False), out


def test_item7_baseline_trains_the_same_samples_and_reports_its_accuracy(spot_run: tuple[Any, Path]) -> None:
    summary, out = spot_run
    assert summary.revocations > 0, "the bid market must revoke the low bidders for this test to mean anything"
    spot_samples = summary.extra["samples"]
    committed = sum(e["contributions"] for e in read_events(out / "events.jsonl", kinds=["step"]))
    assert spot_samples <= 16 * committed and spot_samples > 0

    model = summary.extra["on_demand"]
    assert model["basis"] == "model" and model["samples"] == spot_samples
    # the old estimate ran the same *steps* with all 4 workers: more samples than the spot run did
    assert model["steps"] < summary.steps

    summary = compare_on_demand(summary, out, progress=False)
    od = summary.extra["on_demand"]
    assert od["basis"] == "measured" and od["status"] == "completed"
    assert spot_samples <= od["samples"] < spot_samples + 4 * 16, "same work: at most one step's overshoot"
    assert od["metric_name"] == "accuracy" and 0.0 <= od["metric"] <= 1.0
    assert od["cost_breakdown"]["by_category"].get("coordinator", 0.0) > 0.0, "the coordinator is counted"
    assert set(od["cost_breakdown"]["by_market"]) <= {"on_demand"}, "every baseline instance is billed on-demand"
    assert summary.extra["on_demand_model"]["basis"] == "model"

    # written to disk: the summary and the baseline's own run directory (same schema)
    on_disk = read_summary(out)
    assert on_disk.extra["on_demand"]["samples"] == od["samples"]
    base_steps = read_events(out / BASELINE_DIR / "events.jsonl", kinds=["step"])
    assert [e["step"] for e in base_steps] == list(range(1, od["steps"] + 1))
    assert all(e["active"] == 4 for e in base_steps), "never revoked"
    assert read_events(out / BASELINE_DIR / "events.jsonl", kinds=["revoke"]) == []
    # time and money of the same samples with the same runtime model: 4 workers, no idle time
    assert od["time_s"] > 0 and od["cost_usd"] > 0
    assert math.isclose(od["cost_usd"], od["cost_breakdown"]["total"], rel_tol=1e-9)
    # issue 42 item 6: the report draws the baseline beside the spot run's loss-vs-money curve, and the run
    # over wall-clock time (loss, samples/s, learning rate)
    from spotwise.reports.run import load_run
    from spotwise.reports.run.plots import _on_demand_curve

    curve = _on_demand_curve(load_run(out))
    assert curve is not None and len(curve[0]) == od["steps"] and curve[0][-1] == pytest.approx(
        base_steps[-1]["cost"])
    import spotwise

    spotwise.report(out)
    assert (out / "report" / "training.png").stat().st_size > 1000
    assert "training.png" in (out / "report" / "index.html").read_text()


def test_item7_demo_table_shows_both_accuracies(spot_run: tuple[Any, Path]) -> None:
    from rich.console import Console

    from spotwise.cli import _summary_table

    _, out = spot_run
    summary = read_summary(out)  # with the measured comparison the test above ran
    if summary.extra.get("on_demand", {}).get("basis") != "measured":
        summary = compare_on_demand(summary, out, progress=False)
    con = Console(width=200, record=True)
    con.print(_summary_table(summary, out))
    text = con.export_text()
    assert "samples trained on" in text and "on-demand x4, same samples" in text
    row = next(line for line in text.splitlines() if "final accuracy" in line)
    assert row.count("0.") >= 2 and "not trained" not in row
