"""The recommendation is the best *tested* strategy (issue 29 item 2).

With price traces, ``spotwise plan`` replays strategies on the traces' past windows
(:func:`spotwise.planner.placement.history.plan_placement`): each has a measured P(deadline) with its 95 %
interval and a distribution of costs.  Before issue 29 the headline came from the paper-000 model
(``no-interruptions, bid 1.178 $/h``) while the backtest ranked another strategy first, and
``--write-spec`` wrote the model's fixed bid with no policies: the measured winner never ran.

:func:`choose_tested` picks, among the backtested strategies whose measured P(deadline) is at least
``target.deadline_probability`` (and whose mean cost fits ``budget_usd``), the cheapest (objective
``cost``) or the fastest (objective ``time``).  When none reaches the target, the one with the highest
measured P(deadline) is chosen and the plan says that the target was not met.  :func:`tested_settings`
says how a run carries the strategy out -- its bid rule as ``cluster.bids`` and its policies as the
spec's ``policies`` -- so :func:`spotwise.planner.plan.apply_plan` writes a spec that runs exactly
it.  The strategies themselves are :data:`spotwise.sim.sweep.records.STRATEGIES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from spotwise.sim.sweep import STRATEGIES


@dataclass(frozen=True)
class TestedChoice:
    """A backtested strategy chosen as the recommendation, with what a run needs to carry it out."""

    strategy: str
    entry: Mapping[str, Any]
    meets_target: bool
    bids: tuple[float, ...]
    policies: tuple[dict[str, Any], ...]
    on_demand: bool
    why: str

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown backtest strategy {self.strategy!r}")
        if any(not (b > 0) for b in self.bids):
            raise ValueError(f"bids must be positive, got {self.bids!r}")


def policy_dicts(strategy: str) -> tuple[dict[str, Any], ...]:
    """The sweep strategy's policies as spec entries (``{"name": ..., "params": {...}}``)."""
    out = []
    for p in STRATEGIES[strategy].policies:
        if isinstance(p, str):
            out.append({"name": p, "params": {}})
        else:
            name, params = p
            out.append({"name": str(name), "params": dict(params)})
    return tuple(out)


def tested_settings(strategy: str, workers: int, on_demand_price: float, thm3_bid: float | None) -> tuple[tuple[float, ...], bool]:
    """``(bids, on_demand)`` of a run that carries out ``strategy``: its bid rule as one bid per worker
    (``on-demand``: the place's on-demand price; ``thm3``: the Thm 3 bid; ``none``: no bid) and whether it
    runs on on-demand capacity."""
    s = STRATEGIES[strategy]
    if s.market == "on-demand":
        return (), True
    if s.bid == "on-demand":
        return (float(on_demand_price),) * workers, False
    if s.bid == "thm3":
        if thm3_bid is None:
            raise ValueError("the thm3-bid strategy needs the Thm 3 bid")
        return (float(thm3_bid),) * workers, False
    if isinstance(s.bid, (int, float)):
        return (float(s.bid),) * workers, False
    return (), False


def choose_tested(backtest: Mapping[str, Any], target_p: float, objective: str, budget: float | None, workers: int,
                  on_demand_price: float, thm3_bid: float | None) -> TestedChoice | None:
    """The recommended backtested strategy (module docstring); ``None`` when the backtest has no strategy
    a run can carry out."""
    rows: Sequence[Mapping[str, Any]] = [e for e in backtest.get("strategies") or [] if e.get("strategy") in STRATEGIES]
    if not rows:
        return None
    within = [e for e in rows if budget is None or float(e["mean_cost"]) <= budget]
    pool = within or rows
    meets = [e for e in pool if float(e["deadline_met"]) >= target_p]

    def key(e: Mapping[str, Any]) -> tuple[float, ...]:
        finish = e.get("mean_finish_h")
        t = float("inf") if finish is None else float(finish)
        c = float(e["mean_cost"])
        return (c, t, -float(e["deadline_met"])) if objective == "cost" else (t, c, -float(e["deadline_met"]))

    if meets:
        best = min(meets, key=key)
        why = (f"{best['strategy']} met the deadline in {float(best['deadline_met']):.0%} of the {backtest.get('windows')} "
               f"past windows (target {target_p:.0%}) and was the {'cheapest' if objective == 'cost' else 'fastest'} "
               f"such strategy (mean ${float(best['mean_cost']):.4g})")
        others = sorted((e for e in meets if e is not best), key=key)
        if others and objective == "cost":
            nxt = others[0]
            more = float(nxt["mean_cost"]) / float(best["mean_cost"]) - 1.0 if float(best["mean_cost"]) > 0 else 0.0
            why += f"; next: {nxt['strategy']} at ${float(nxt['mean_cost']):.4g} ({more:.0%} more)"
        missed = [e["strategy"] for e in pool if e not in meets]
        if missed:
            why += f"; below the {target_p:.0%} target: {', '.join(missed)}"
    else:
        best = max(pool, key=lambda e: (float(e["deadline_met"]), -float(e["mean_cost"])))
        why = (f"no tested strategy met the deadline in {target_p:.0%} of the past windows; {best['strategy']} came "
               f"closest ({float(best['deadline_met']):.0%}): relax the deadline or lower target.deadline_probability")
    if budget is not None and not within:
        why += f"; none of them fits the budget ${budget:g} (cheapest mean ${min(float(e['mean_cost']) for e in rows):.4g})"
    name = str(best["strategy"])
    bid = best.get("bid") if best.get("bid") is not None else thm3_bid
    bids, on_demand = tested_settings(name, workers, on_demand_price, None if bid is None else float(bid))
    return TestedChoice(name, best, bool(meets), bids, policy_dicts(name), on_demand, why)
