"""Move the job to another zone or instance type when prices diverge (paper 003 Sec. 3.2.3).

``papers/003_c06237e546a4f08e.txt`` Sec. 3.2.3 ("dynamic" in Figure 5) "continually picks the
cheapest instance ... through training as prices change".  Online, a move pays off only if the
saving over the remaining work at the prices in force now exceeds what the move costs: ``d``
seconds (:attr:`Observation.restart_s`) on the new capacity without progress, plus the checkpoint
shipped when the region changes (Sec. 3.2.1, Table 2).  This is the rule of
:mod:`spotwise.planner.placement.over_time`'s ``dynamic`` strategy, as a policy the executors act on
(:class:`~spotwise.policies.base.Migrate`).

With ``k`` workers, ``H`` hours of compute left at the current place, current price ``p`` and a
candidate with price ``p'`` and relative speed ``s``::

    stay  = k p H
    move  = k p' (H / s + d / 3600) + egress

The policy moves when ``stay - move > min_saving * stay`` (default 5 %: prices on these markets
wobble by a few percent, and a move on noise would buy nothing) and the deadline slack covers the
restart with the guard's margin to spare.  When the job is idle on spot (its place has no
capacity) any place with available spot beats waiting, so the cheapest available one is chosen
regardless of the saving threshold.  Only places quoting available spot are candidates.

Pure: the decision is a function of the observation alone.
"""

from __future__ import annotations

from typing import ClassVar

from spotwise.policies.base import Decision, Migrate, Observation, PlaceQuote, Policy
from spotwise.policies.schema import check_price_migration


class PriceMigration(Policy):
    name: ClassVar[str] = "price-migration"
    spot_only: ClassVar[bool] = True
    uses_places: ClassVar[bool] = True

    def __init__(self, min_saving: float = 0.05, checkpoint_gb: float = 0.1, egress_per_gb: float = 0.09,
                 slack_restarts: float = 3.0) -> None:
        check_price_migration(min_saving, checkpoint_gb, egress_per_gb, slack_restarts)
        self.min_saving = float(min_saving)
        self.checkpoint_gb = float(checkpoint_gb)
        self.egress_per_gb = float(egress_per_gb)
        self.slack_restarts = float(slack_restarts)

    def _move_cost(self, obs: Observation, q: PlaceQuote, hours_left: float, k: int, here_region: str) -> float:
        egress = self.checkpoint_gb * self.egress_per_gb if q.region and here_region and q.region != here_region else 0.0
        return k * q.price * (hours_left / q.speed + obs.restart_s / 3600.0) + egress

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.market != "spot" or obs.place is None or not obs.places:
            return []
        left_s = obs.work_left_s
        if left_s is None or left_s <= 0:
            return []
        if obs.deadline_s is not None:
            slack = (obs.deadline_s - obs.t) - left_s
            if slack < self.slack_restarts * obs.restart_s + obs.next_decision_s:
                return []  # no slack for a restart: the deadline guard owns the job now
        here = next((q for q in obs.places if (q.zone, q.instance) == obs.place), None)
        others = [q for q in obs.places if (q.zone, q.instance) != obs.place and q.available]
        if not others:
            return []
        k = max(obs.provisioned, 1)
        hours = left_s / 3600.0
        region = here.region if here is not None else ""
        best = min(others, key=lambda q: (self._move_cost(obs, q, hours, k, region), q.zone, q.instance))
        move = self._move_cost(obs, best, hours, k, region)
        idle = obs.active == 0 and (here is None or not here.available)
        if idle:
            return [Migrate(reason=f"no spot capacity at {obs.place[0]}; {best.zone} has it at {best.price:.4f} $/h",
                            instance_type=best.instance, region=best.zone)]
        if here is None:
            return []
        stay = k * here.price * hours
        if stay - move > self.min_saving * stay:
            return [Migrate(reason=f"{best.zone}/{best.instance} at {best.price:.4f} $/h saves "
                                   f"{stay - move:.2f} $ over the {hours:.1f} h left ({(stay - move) / stay:.0%}), move included",
                            instance_type=best.instance, region=best.zone)]
        return []
