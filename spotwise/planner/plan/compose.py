"""``spotwise plan``: from a job spec (and optionally price traces) to a recommended plan.

The planner puts together the three models the theorems of ``papers/000_3c734f3ffedcac15.txt``
need, says where each came from, compares the strategies of its Sec. VI-A and picks one:

* **prices** -- ``F(p)``: the spec's synthetic distribution (exact), or the time-weighted
  empirical CDF of a trace (``--trace`` or ``market.traces``);
* **runtime** -- the per-iteration runtime law: a worker's mini-batch takes
  ``m ((1 - s) + s Exp(1))`` with ``m = step_time_s / throughput`` (catalog) and straggler
  coefficient ``s`` -- exponential (eq. 14-15) when ``s = 1``, else its empirical law -- plus
  ``Delta = sync_overhead_s``;
* **error** -- the constants of Thm 1 fitted to a pilot's losses (:mod:`spotwise.planner.estimate.pilot`):
  a previous run (``--pilot DIR``) or a short in-process pilot.

Alternatives (each with expected cost, time and error, or the reason it is infeasible):

* ``no-interruptions`` -- bid above the highest price: never revoked (Sec. VI-A's benchmark);
* ``one-bid`` -- the optimal uniform bid (Thm 3);
* ``two-bids`` -- the optimal two bids, half the workers in each group (Thm 4);
* ``dynamic`` -- Sec. VI-A's dynamic strategy: start with half the workers, and after 80 % of the
  iterations add the rest and re-optimise the bid for the remaining iterations and deadline (the
  uniform bid of Thm 3 is re-solved; the paper re-solves Thm 4);
* ``on-demand`` -- the same workers on on-demand instances;
* ``serverless`` -- the same workers as functions exchanging updates through a Redis node
  (paper 004, MLLess; :mod:`spotwise.planner.plan.serverless`), offered for ``cluster.kind:
  serverless`` specs and for workloads with sparse gradients (``pmf``, ``sparse-logreg``) whose
  model fits the function's memory.  Its P(deadline) is 1 or 0 (functions are not revoked by
  price).  A serverless spec names no VM: its VM row is ``on-demand`` on ``cluster.instance_type``
  if set, else on a default CPU instance (:func:`spotwise.planner.plan.serverless.default_vm_instance`,
  B1.4x8 for IBM functions), said in the plan's ``extra["vm_comparison"]`` and assumptions.

With ``objective="cost"`` the cheapest plan that meets the deadline (and budget) in expectation
is chosen; with ``"time"`` the fastest within the budget.  Costs are in USD (prices are $/h and
runtimes seconds, so the Lemma 2 cost is divided by 3600).

Honesty rules (issue 7):

* **error** -- every alternative's own Thm 1 bound must be ``<= eps``; one that misses it is
  infeasible (reason given) and never recommended.  The dynamic strategy runs as many iterations
  as its two-phase Thm 1 recursion needs to reach ``eps`` (Corollary 2 applied to the phase
  sequence), not the static strategy's ``J``: with half the workers for 80 % of the iterations
  and the same ``J`` it would do about half the work and miss the target, which is what made it
  look cheaper than on-demand even at prices equal to on-demand.
* **deadline** -- "meets the deadline" is in expectation; every alternative also carries
  ``deadline_probability`` (:mod:`spotwise.planner.estimate.deadline`).
* **cost** -- plan costs are priced like a run's :class:`~spotwise.market.billing.Ledger`: the
  coordinator (an on-demand instance for the whole expected time) is included, continuously
  running instances are billed with the market's billing policy (per-second granularity and the
  minimum charge), and the minimum charge of each spot interval cut short by a revocation is
  added in expectation (:func:`~spotwise.planner.plan.strategies._spot_billing_extra`).
* **traces** -- a trace must be of the spec's instance type and region (else
  :class:`InputError`, exit 2).  The job starts at ``market.start`` if the spec sets it, else
  one deadline before the last point of the trace (the last deadline-long window is held out as
  the job's future); the price model and the zone choice use only data strictly before that start
  (``extra["plan_start"]``).
* **pilot** -- a degenerate pilot fit (:attr:`spotwise.planner.estimate.pilot.PilotFit.problems`) is
  reported and replaced by the assumed error model of :func:`spotwise.planner.estimate.pilot.assumed_error_model`.

Where the parts live (this module makes the plan, writes it into a spec and plots it;
:mod:`spotwise.planner.plan` re-exports its entry points):

* :mod:`spotwise.planner.plan.records` -- :class:`Alternative`, :class:`Plan`, :class:`Inputs` and the constants;
* :mod:`spotwise.planner.estimate.models` -- the price model (traces included) and the runtime model;
* :mod:`spotwise.planner.plan.inputs` -- the error model from a pilot and :func:`gather_inputs`;
* :mod:`spotwise.planner.plan.rounds` -- sync modes, mean step time, iterations and the churn estimate;
* :mod:`spotwise.planner.plan.strategies` -- the alternatives above, priced like a run, and :func:`compare`;
* :mod:`spotwise.planner.plan.place` -- the plan at the trace placement's place, and its recommendation;
* :mod:`spotwise.planner.plan.pools` -- a spec with ``cluster.pools``: how many workers (and bids) from each pool
  (paper 003 Sec. 4.3's LP over the pools, rounded by exact evaluation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.estimate.models import _iso, price_model, runtime_model
from spotwise.planner.plan import serverless as sv
from spotwise.planner.plan.inputs import gather_inputs, vm_twin
from spotwise.planner.plan.place import _plan_at_place, _recommendation
from spotwise.planner.plan.records import (
    DEFAULT_PILOT_STEPS,
    Alternative,
    Inputs,
    Objective,
    Plan,
)
from spotwise.planner.plan.rounds import _n_sync, _round_mean, _sync
from spotwise.planner.plan.strategies import compare
from spotwise.spec.load import duration_text
from spotwise.theory.bounds import ErrorModel


def make_plan(spec: JobSpec, *, traces: list[str] | None = None, objective: Objective = "cost", pilot_dir: str | None = None,
              pilot_steps: int = DEFAULT_PILOT_STEPS, error_model: ErrorModel | None = None,
              types: list[str] | None = None) -> Plan:
    """Compare the strategies and pick one (module docstring).  ``InputError``/``InfeasibleError`` (exit 2)
    for bad input: unknown objective, ``pilot_steps`` out of range, a trace of another instance type or
    region, or no strategy meeting the deadline, budget and error target."""
    if objective not in ("cost", "time"):
        raise InputError(f"unknown objective {objective!r}", "use cost or time", "--objective")
    if spec.cluster.pools is not None:  # issue 21 item 4: the pool mix (spotwise.planner.plan.pools)
        from spotwise.planner.plan.pools import check_pool_plan_args, plan_pool_mix

        check_pool_plan_args(traces, types)
        return plan_pool_mix(spec, gather_inputs(spec, None, pilot_dir, pilot_steps, error_model), objective)
    if types:
        from spotwise.market.world import load_catalog
        from spotwise.sim.sweep.places import check_instance_types

        check_instance_types(load_catalog(spec), types)
    inp = gather_inputs(spec, traces, pilot_dir, pilot_steps, error_model)
    placement: dict[str, Any] | None = None
    src = list(traces or spec.market.traces)
    if inp.plan_start is not None and src:
        from spotwise.planner.placement.history import plan_placement

        try:
            placement = plan_placement(spec, src, inp.plan_start, types=types)
        except InputError as e:  # the bid plan below stands; say why there is no placement
            placement = {"error": e.message}
        spec, inp = _plan_at_place(spec, inp, traces or [], placement.get("choice"))
    alts = compare(inp, spec)
    budget = spec.budget_usd
    ok = [a for a in alts if a.feasible and a.expected_cost is not None and (budget is None or a.expected_cost <= budget)]
    if not ok:
        from spotwise.planner.plan.constraints import infeasible_message

        raise InfeasibleError(*infeasible_message(alts, inp.deadline, budget), "plan")  # what binds, by how much
    key = (lambda a: (a.expected_cost, a.expected_time_s)) if objective == "cost" else (lambda a: (a.expected_time_s, a.expected_cost))
    target_p = float(spec.target.deadline_probability)
    sure = [a for a in ok if a.deadline_probability is None or a.deadline_probability >= target_p]
    best = min(sure or ok, key=key)  # type: ignore[arg-type]
    others = sorted((a for a in (sure or ok) if a is not best), key=key)  # type: ignore[arg-type]
    runner = others[0] if others else None
    why = (f"lowest expected cost (${best.expected_cost:.4g}) among the strategies that meet the error target and "
           "the deadline with the target probability" if objective == "cost" else f"shortest expected time ({best.expected_time_s / 3600:.3g} h) within the budget")
    if best.deadline_probability is not None:
        why += f"; P(finish by the deadline) = {best.deadline_probability:.2f}"
        why += (f" (target {target_p:.2f})" if sure else f", and none reaches the target {target_p:.2f}: relax the "
                "deadline or lower target.deadline_probability")
    unsure = sorted((a for a in ok if sure and a not in sure and a.expected_cost < best.expected_cost), key=key)  # type: ignore[operator,arg-type]
    if unsure:
        why += "; cheaper but below the target: " + ", ".join(
            f"{a.strategy} ${a.expected_cost:.4g} (P {a.deadline_probability:.2f})" for a in unsure)
    if runner is not None and runner.expected_cost:
        why += (f"; next best: {runner.strategy} at ${runner.expected_cost:.4g}"
                f" ({100 * (runner.expected_cost / best.expected_cost - 1):.0f}% more)" if objective == "cost" else
                f"; next best: {runner.strategy} at {runner.expected_time_s / 3600:.3g} h")
    policies: tuple[dict[str, Any], ...] = ()
    if best.strategy == "dynamic":
        policies = (dynamic_policy_params(inp, spec, best.iterations),)
    extra: dict[str, Any] = {"instance": inp.market.instance.name, "eps": inp.eps, "sync": spec.cluster.sync,
                             "on_demand_price": _on_demand_or_none(inp), "coordinator": inp.market.coordinator.name,
                             "coordinator_price": inp.coordinator_price, "billing": inp.market.billing.name,
                             "error_model_source": inp.error_source,
                             "pilot_reliable": None if inp.error_source == "caller" else not inp.pilot_problems,
                             "pilot_problems": list(inp.pilot_problems), "kind": inp.kind}
    if inp.kind == "serverless":
        extra["vm_comparison"] = inp.vm_note
        extra["vm_throughput_derived"] = inp.vm_throughput_derived
    if inp.serverless is not None:
        try:
            est: dict[str, Any] | None = sv.estimate(inp.serverless, inp.n, inp.J).to_dict()
        except InfeasibleError:
            est = None
        extra["serverless"] = {**inp.serverless.to_dict(), "estimate": est}
    if inp.plan_start is not None:
        extra["plan_start"] = _iso(inp.plan_start)
        if placement is not None:
            extra["placement"] = placement
            extra["place"] = {"region": spec.cluster.region, "instance_type": spec.cluster.instance_type}
            bt = placement.get("backtest")
            if bt:
                sw = bt["strategies"][0]  # the leading strategy (placement.history.BACKTEST_STRATEGIES)
                ch = placement["choice"]
                why += (f"; place: {ch['zone']} {ch['instance']} at {ch['spot_price']:.4g} $/h (cheapest at the start among "
                        f"{ch['candidates']}); on the {bt['windows']} past windows the {sw['strategy']} strategy met the deadline "
                        f"in {sw['deadline_met']:.0%} (95% CI {sw['ci95'][0]:.0%}-{sw['ci95'][1]:.0%}) at "
                        f"${sw['mean_cost']:.4g} mean cost")
    extra["recommendation"] = _recommendation(inp, spec, best, alts, placement)
    tested = _tested_plan(spec, inp, alts, placement, objective, extra)
    if tested is not None:  # issue 29 item 2: the backtest's best strategy leads, the model's table stays beside it
        return tested
    return Plan(best.strategy, best.bids, best.workers, best.iterations, float(best.expected_cost),
                float(best.expected_time_s), float(best.expected_error or inp.eps), objective, inp.deadline, why,
                tuple(alts), inp.measured, inp.assumed, inp.price_source, policies, extra,
                deadline_probability=best.deadline_probability)

def _tested_plan(spec: JobSpec, inp: Inputs, alts: list[Alternative], placement: dict[str, Any] | None, objective: str,
                 extra: dict[str, Any]) -> Plan | None:
    """The plan of the best backtested strategy (:mod:`spotwise.planner.plan.recommend`), or ``None`` without a backtest."""
    from spotwise.planner.plan.recommend import choose_tested

    bt = (placement or {}).get("backtest")
    if not bt:
        return None
    one = next((a for a in alts if a.strategy == "one-bid" and a.feasible and a.bids), None)
    od_price = float((placement or {}).get("choice", {}).get("on_demand_price") or _on_demand_or_none(inp) or 0.0)
    ch = choose_tested(bt, float(spec.target.deadline_probability), objective, spec.budget_usd, int(spec.cluster.workers),
                       od_price, one.bids[0] if one else None)
    if ch is None:
        return None
    e = ch.entry
    od = next((x for x in bt["strategies"] if x["strategy"] == "on-demand"), None)
    finish_h = e.get("mean_finish_h")
    time_s = float(finish_h) * 3600.0 if finish_h is not None else float(inp.deadline)
    model = extra["recommendation"]
    rec = {**model, "strategy": ch.strategy, "bids": list(ch.bids), "policies": [dict(p) for p in ch.policies],
           "expected_cost": float(e["mean_cost"]), "expected_cost_interval": [float(e["p5_cost"]), float(e["p95_cost"])],
           "expected_time_s": time_s, "deadline_probability": float(e["deadline_met"]),
           "deadline_measured": float(e["deadline_met"]), "deadline_ci95": [float(v) for v in e["ci95"]],
           "meets_target": ch.meets_target, "target_deadline_probability": float(spec.target.deadline_probability),
           "on_demand_cost": None if od is None else float(od["mean_cost"]),
           "saving_vs_on_demand": None if not od or not od["mean_cost"] else 1.0 - float(e["mean_cost"]) / float(od["mean_cost"]),
           "basis": "backtest", "windows": bt.get("windows"), "model_strategy": model.get("strategy")}
    ex = {**extra, "recommendation": rec, "trace_paths": list((placement or {}).get("traces") or []), "tested": {"strategy": ch.strategy, "policies": [dict(p) for p in ch.policies],
                                                    "on_demand": ch.on_demand}}
    iterations = int(spec.expected_iterations() or next((a.iterations for a in alts if a.strategy == "on-demand"), 1))
    err = next((a.expected_error for a in alts if a.strategy == "on-demand" and a.expected_error is not None), inp.eps)
    return Plan("on-demand" if ch.on_demand else ch.strategy, ch.bids, int(spec.cluster.workers), iterations,
                float(e["mean_cost"]), time_s, float(err or inp.eps), objective, inp.deadline, ch.why, tuple(alts),
                inp.measured, inp.assumed, inp.price_source, ch.policies, ex, deadline_probability=float(e["deadline_met"]))


def apply_plan(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    """The spec (as plain data, ready for YAML) with the plan carried out: workers, bids, iterations, policies.

    ``serverless``: the spec becomes (or stays) ``cluster.kind: serverless`` -- ISP (MLLess's default) for a
    VM spec, no spot market, only the scale-in policy.  A VM strategy on a serverless spec writes its VM
    twin (:func:`vm_twin`) on the comparison instance; :class:`InputError` when that instance's throughput
    was derived by the plan (the written spec could not run).  A job whose length is in samples, epochs
    or tokens keeps it (no ``target.iterations`` is set).
    """
    d = _applied(spec, plan)
    t = spec.target
    if t.samples is not None or t.epochs is not None or t.tokens is not None:
        d["target"]["iterations"] = None  # the job's length stays in the user's unit: the plan's steps estimate it
    return d


def _applied(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    if plan.strategy == "serverless":
        return _apply_serverless(spec, plan)
    if plan.strategy == "pool-mix":
        from spotwise.planner.plan.pools import apply_pool_mix

        return apply_pool_mix(spec, plan)
    if spec.cluster.kind == "serverless":
        inst = str(plan.extra.get("instance", ""))
        if plan.extra.get("vm_throughput_derived"):
            raise InputError(f"the recommended {plan.strategy} plan runs on {inst}, whose throughput for family "
                             f"{spec.workload.family!r} the catalog lacks (the plan derived it per vCPU), so the written "
                             "spec could not run",
                             f"add {inst} with 'throughput: {{{spec.workload.family}: <speed>}}' in a market.catalog file "
                             "and plan again, or drop --write-spec", "--write-spec")
        spec = vm_twin(spec, inst)
    d = spec.to_dict()
    d["target"]["iterations"] = plan.iterations
    d["target"]["loss"] = None
    d["deadline"] = duration_text(plan.deadline_s)
    cl = d["cluster"]
    cl["workers"] = plan.workers
    place = plan.extra.get("place")
    if place:  # the place the plan was made for (issue 18 item 2)
        cl["region"], cl["instance_type"] = place["region"], place["instance_type"]
    rev = d["market"]["revocation"]
    tested = plan.extra.get("tested")
    if tested and not tested.get("on_demand"):  # a backtested strategy (issue 29 item 2): its bid rule and policies
        cl["bids"] = [float(b) for b in plan.bids] or None
        if cl["bids"] and rev["model"] in ("none", "bid"):
            rev["model"] = "bid"
        own = {str(p["name"]) for p in tested.get("policies", [])}
        d["policies"] = [p for p in d["policies"] if p["name"] not in own] + [dict(p) for p in tested.get("policies", [])]
        if plan.extra.get("trace_paths") and not d["market"].get("traces"):  # replay the traces the strategy was tested on
            d["market"]["traces"], d["market"]["synthetic"] = list(plan.extra["trace_paths"]), None
    elif plan.strategy in ("no-interruptions", "one-bid", "two-bids"):
        cl["bids"] = [float(b) for b in plan.bids]
        rev["model"] = "bid"
    elif plan.strategy == "dynamic":
        n1 = sum(1 for b in plan.bids[: plan.workers // 2])
        cl["workers"], cl["max_workers"] = n1, plan.workers
        cl["bids"] = [float(b) for b in plan.bids[:n1]]
        rev["model"] = "bid"
        d["policies"] = [p for p in d["policies"] if p["name"] != "dynamic-bids"] + [dict(p) for p in plan.policies]
    elif plan.strategy == "on-demand":
        cl["bids"] = None
        rev["model"] = "none"
        d["market"]["traces"] = []
        d["market"]["synthetic"] = {"kind": "constant", "price": float(plan.extra.get("on_demand_price", 0.0)) or 1.0}
    else:  # fixed-price / preemptible-thm7: the market stays as it is
        cl["bids"] = None if rev["model"] != "bid" else cl["bids"]
    if plan.extra.get("plan_start") and d["market"].get("traces") and not d["market"].get("start"):
        d["market"]["start"] = plan.extra["plan_start"]  # replay the trace from the start the plan assumed
    if cl.get("max_workers") is not None and cl["max_workers"] < cl["workers"]:
        cl["max_workers"] = cl["workers"]
    return d


def _apply_serverless(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    d = spec.to_dict()
    d["target"]["iterations"] = plan.iterations
    d["target"]["loss"] = None
    d["deadline"] = duration_text(plan.deadline_s)
    cl = d["cluster"]
    if cl.get("kind") != "serverless":  # a VM spec's functions alternative: MLLess's defaults
        cl.update(kind="serverless", sync="isp", sync_n=None, bids=None, max_workers=None, standby=None,
                  coordinator_instance=None, staleness=0)
        d["market"].update(traces=[], synthetic=None, start=None, revocation={"model": "none"})
        d["policies"] = [p for p in d["policies"] if p["name"] == "scale-in"]
    cl["workers"] = plan.workers
    return d


def _on_demand_or_none(inp: Inputs) -> float | None:
    try:
        return inp.market.on_demand_price
    except InputError:
        return None


def dynamic_policy_params(inp: Inputs, spec: JobSpec, iterations: int, switch: float = 0.8) -> dict[str, Any]:
    """The ``dynamic-bids`` policy that carries out the dynamic strategy in a run."""
    synth = spec.market.synthetic
    price: dict[str, Any]
    if synth is not None and synth.kind in ("uniform", "gaussian"):
        price = {"kind": synth.kind, "low": synth.low, "high": synth.high, "mean": synth.mean, "variance": synth.variance}
    else:
        assert inp.prices is not None
        qs = np.linspace(0.0, 1.0, 201)
        price = {"kind": "quantiles", "values": [float(inp.prices.ppf(q)) for q in qs]}
    return {"name": "dynamic-bids", "params": {
        "switch_step": int(round(switch * iterations)), "workers": inp.n, "iterations": iterations, "deadline_s": inp.deadline,
        "mean_round_s": float(_round_mean(inp.runtime, inp.n, _sync(spec), _n_sync(spec))), "price": price}}


def cost_vs_deadline(spec: JobSpec, inp: Inputs, deadlines: np.ndarray) -> dict[str, list[float | None]]:
    """Expected cost of each strategy as the deadline varies (for ``--plot``)."""
    out: dict[str, list[float | None]] = {}
    for theta in deadlines:
        sub = Inputs(**{**inp.__dict__, "deadline": float(theta)})
        for a in compare(sub, spec):
            out.setdefault(a.strategy, []).append(a.expected_cost if a.feasible else None)
    return out


def plot_cost_vs_deadline(spec: JobSpec, plan: Plan, inp: Inputs, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_min = min(a.expected_time_s for a in plan.alternatives if a.strategy == "no-interruptions" and a.expected_time_s) \
        if any(a.strategy == "no-interruptions" for a in plan.alternatives) else plan.expected_time_s / 2
    deadlines = np.linspace(t_min * 1.001, max(plan.deadline_s, t_min) * 3, 40)
    curves = cost_vs_deadline(spec, inp, deadlines)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, ys in curves.items():
        y = np.array([np.nan if v is None else v for v in ys], dtype=float)
        ax.plot(deadlines / 3600.0, y, label=name, linewidth=1.6)
    ax.axvline(plan.deadline_s / 3600.0, color="grey", linestyle=":", label="spec deadline")
    ax.set_xlabel("deadline (h)")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"{spec.name}: expected cost vs deadline ({plan.price_source})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from spotwise.outputfiles import write_figure

    try:
        write_figure(fig, path, "--plot", dpi=110)
    finally:
        plt.close(fig)
    return path


__all__ = ["Alternative", "Plan", "Inputs", "make_plan", "gather_inputs", "compare", "plot_cost_vs_deadline",
           "cost_vs_deadline", "runtime_model", "price_model"]
