"""Where the plan is for, and the one recommendation it leads with (issue 18 item 2).

With price traces, the trace placement (:func:`spotwise.planner.placement.history.plan_placement`) picks the
zone and instance type cheapest at the job's start; when that is another place than the one whose
prices the inputs hold, :func:`_plan_at_place` makes the plan again on that place's prices (same
start, same error model), so every number names one place (:func:`_price_place`).
:func:`_recommendation` is the plan's headline: place, strategy, expected cost and time, P(deadline)
(measured on the trace's past windows when there is a backtest) and the saving against on-demand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spotwise.config import JobSpec
from spotwise.planner.estimate.models import _iso
from spotwise.planner.plan.inputs import gather_inputs
from spotwise.planner.plan.records import Alternative, Inputs


def _price_place(inp: Inputs, spec: JobSpec) -> str:
    """The zone (or region) whose prices the plan's numbers come from."""
    if inp.history is not None:
        return inp.history.meta.zone or inp.history.meta.region or spec.cluster.region or ""
    return spec.cluster.region or inp.market.instance.region or ""


def _plan_at_place(spec: JobSpec, inp: Inputs, traces: list[str], choice: dict[str, Any] | None) -> tuple[JobSpec, Inputs]:
    """The spec and inputs at the place the placement chose (issue 18 item 2): when the trace placement picks
    another zone or instance type than the one whose prices the inputs hold, the plan is made again on
    that place's prices (same start, same error model), so the recommendation names one place."""
    import dataclasses

    if not choice or inp.history is None:
        return spec, inp
    zone, inst = str(choice["zone"]), str(choice["instance"])
    if _price_place(inp, spec) == zone and inp.market.instance.name == inst:
        return spec, inp
    cl = dataclasses.replace(spec.cluster, region=zone, instance_type=inst)
    mk = dataclasses.replace(spec.market, start=spec.market.start or _iso(float(inp.plan_start or 0.0)))
    placed = dataclasses.replace(spec, cluster=cl, market=mk)
    new = gather_inputs(placed, traces, error_model=inp.error, g_star=inp.pilot_g_star)
    note = (f"place: {zone} {inst} (the trace placement's choice at the start) instead of the spec's "
            f"{spec.cluster.region or '(any)'} {spec.cluster.instance_type}; every number of the plan is for this place")
    return placed, replace(new, measured=inp.measured, assumed=inp.assumed + (note,), error_source=inp.error_source,
                           pilot_problems=inp.pilot_problems)


def _recommendation(inp: Inputs, spec: JobSpec, best: Alternative, alts: list[Alternative],
                    placement: dict[str, Any] | None) -> dict[str, Any]:
    """The one recommendation the plan leads with: place, strategy, expected cost and time, P(deadline) with
    its interval (measured on the trace's past windows when there is a backtest, else None) and the saving
    against on-demand -- all from the same place and prices; with a trace placement also the places ranked
    best first (``ranked_places``: zone, instance, spot price, speed), which ``spotwise plan --emit`` offers as fall-backs."""
    od = next((a for a in alts if a.strategy == "on-demand" and a.expected_cost is not None), None)
    ci: list[float] | None = None
    measured: float | None = None
    bt = (placement or {}).get("backtest")
    if bt:
        sw = bt["strategies"][0] if bt["strategies"] else None  # the leading strategy (placement.history.BACKTEST_STRATEGIES)
        if sw is not None:
            ci, measured = [float(v) for v in sw["ci95"]], float(sw["deadline_met"])
    saving = None if od is None or not od.expected_cost else 1.0 - float(best.expected_cost or 0.0) / float(od.expected_cost)
    return {"strategy": best.strategy, "place": _price_place(inp, spec), "instance": inp.market.instance.name,
            "workers": best.workers, "bids": list(best.bids), "expected_cost": best.expected_cost,
            "expected_time_s": best.expected_time_s, "deadline_probability": best.deadline_probability,
            "deadline_measured": measured, "deadline_ci95": ci,
            "on_demand_cost": None if od is None else od.expected_cost, "saving_vs_on_demand": saving,
            "price_source": inp.price_source, "ranked_places": list((placement or {}).get("ranked") or [])}
