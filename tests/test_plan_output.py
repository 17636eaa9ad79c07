"""Issue 18 item 2: `plan` leads with one recommendation whose place, strategy and prices agree, then
the comparison table; the assumptions are behind --explain (and always in --json).

Before the fix, `plan examples/p3-24h-traces.yaml --trace .../aws/cost` recommended no-interruptions
priced on us-east-1b's prices (the spec's region) while naming us-east-2b (the placement's choice),
and printed some twenty "assumed:" lines before the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotwise.cli import app
from spotwise.config import load_spec
from spotwise.planner.plan import make_plan

ROOT = Path(__file__).resolve().parent.parent
TRACES = (ROOT / "../shared/data/traces").resolve()
AWS_COST = TRACES / "training-on-a-dime/logs/aws/cost"


def _need_traces() -> None:
    if not AWS_COST.exists():
        pytest.skip(f"the real AWS price traces are absent ({AWS_COST})")


def test_recommendation_names_the_place_whose_prices_it_uses() -> None:
    _need_traces()
    spec = load_spec(ROOT / "examples/p3-24h-traces.yaml")
    plan = make_plan(spec, traces=[str(AWS_COST)], pilot_steps=50)
    rec = plan.extra["recommendation"]
    choice = plan.extra["placement"]["choice"]
    assert (rec["place"], rec["instance"]) == (choice["zone"], choice["instance"])
    # the price model and the on-demand price are those of the recommended place
    assert f":{rec['place']}:" in plan.price_source, (rec["place"], plan.price_source)
    assert plan.extra["instance"] == rec["instance"]
    assert rec["strategy"] == plan.strategy and rec["expected_cost"] == pytest.approx(plan.expected_cost)
    # issue 29: the recommendation is the backtest's best strategy, its saving against on-demand on the same windows
    assert rec["basis"] == "backtest"
    od = next(e for e in plan.extra["placement"]["backtest"]["strategies"] if e["strategy"] == "on-demand")
    assert rec["saving_vs_on_demand"] == pytest.approx(1 - plan.expected_cost / od["mean_cost"])
    assert rec["deadline_ci95"] is not None and rec["deadline_ci95"][0] <= rec["deadline_measured"] <= rec["deadline_ci95"][1]
    # a spot bid of the recommended place: at least that zone's price at the start is covered by no-interruptions
    if plan.strategy == "no-interruptions":
        assert max(plan.bids) >= choice["spot_price"]


def test_cli_leads_with_the_recommendation_and_hides_assumptions_behind_explain() -> None:
    spec = str(ROOT / "examples/zhang-uniform.yaml")
    runner = CliRunner()
    plain = runner.invoke(app, ["plan", spec, "--pilot-steps", "20"], env={"COLUMNS": "200"})
    assert plain.exit_code == 0, plain.output
    lines = [ln for ln in plain.output.splitlines() if ln.strip()]
    assert lines[0].startswith("recommended:"), lines[:3]
    assert "expected cost $" in lines[1] and "P(deadline)" in lines[1]
    assert "on-demand" in lines[2]
    assert not any(ln.startswith("assumed:") for ln in lines)
    assert "--explain" in plain.output
    explained = runner.invoke(app, ["plan", spec, "--pilot-steps", "20", "--explain"], env={"COLUMNS": "200"})
    assert explained.exit_code == 0, explained.output
    assumed = [ln for ln in explained.output.splitlines() if ln.startswith("assumed:")]
    assert len(assumed) >= 3
    js = runner.invoke(app, ["plan", spec, "--pilot-steps", "20", "--json"])
    assert js.exit_code == 0, js.output
    d = json.loads(js.stdout)
    assert len(d["assumed"]) >= 3 and d["extra"]["recommendation"]["strategy"] == d["strategy"]
