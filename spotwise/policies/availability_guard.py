"""Availability guard: wait, move or buy on-demand by the slack left, on traces of real outages (issue 23).

Can't Be Late's Uniform Progress (``papers``-external: Wu et al., NSDI'24; :mod:`spotwise.policies.deadline_guard`)
buys on-demand as soon as the job is idle *and behind the uniform progress line*.  On availability
traces, where spot costs 30% of on-demand and waiting costs only the coordinator, that spends
on-demand hours that a little patience -- or a move -- would have saved: the breakdown of a sweep
(``--breakdown``) shows them as the gap to the free-move bound.  This guard keeps Uniform
Progress's safety net and hysteresis idea but decides by the *slack* (time left minus work left)
and by every place's capacity now, using only what is known at the decision:

* **running on spot**: stay; move to another place only when its price saves more than
  ``min_saving`` of the rest of the bill with the move paid (the rule of
  :class:`~spotwise.policies.migration.PriceMigration`, held here);
* **nowhere to move** (no place but this one is quoted: a single zone, or an executor that quotes
  no places): Uniform Progress's rule, with the parameters ``spot+guard`` runs it with
  (:class:`~spotwise.policies.deadline_guard.UniformProgress`, held here).  Waiting pays only
  where a move may end it: at one place it waits until ``return_restarts`` restarts of slack are
  left and then buys *more* on-demand than Uniform Progress, which left early while behind its
  line (issue 31: 1.039x Uniform Progress's cost on the SkyPilot 1-node set restricted to one
  zone, 1.024x on the 16-node set).  The rules below apply where the job can move;
* **restarting on spot** (``warming > 0`` with capacity: workers billed, not yet computing): not
  idle, so not the idle safety net with its decision gap -- leaving would abandon a paid-for
  restart.  The job leaves for on-demand only once the slack is below the paper's ``2d``
  (``safety_restarts`` restarts; Can't Be Late applies its net to an idle job only, see
  :mod:`~spotwise.policies.deadline_guard`);
* **idle on spot** (the place lost its capacity): move at once to the place with capacity whose
  expected cost per unit of progress is lowest, counting the restart the move costs against how
  long that place is likely to keep its capacity -- estimated from its *current* up-streak
  (``PlaceQuote.up_s``: a place up for hours is likelier to stay up than one that just came back)
  and its availability over the history window before now -- unless every place with capacity
  costs more per unit of progress than this one by more than ``min_saving``: then it **waits**
  for this place while the slack allows (as below).  A move there would be undone by the price
  rule as soon as this place returns, so it costs two restarts and the price difference for the
  outage's length, while waiting costs one restart (the rejoin) and the coordinator for the
  outage: whenever the price difference exceeds the coordinator's rate, waiting is cheaper
  however long the outage (on the SkyPilot ``intel_64`` trace, zones 1.14-1.85 $/h: 1.048-1.052x
  -> 1.025-1.036x the free-move bound, ``docs/benchmarks.md``); where prices are equal (the
  availability traces) moving is always cheaper -- the same restart, no idle coordinator.
  If no place has capacity, **wait**
  while the slack stays above ``net + return_restarts * d`` (``net`` = the safety net, ``safety_restarts``
  restarts ``d`` plus the longest gap between decisions), then buy on-demand;
* **on on-demand**: return to spot as soon as a place has capacity that has lasted at least
  ``min_up_s`` (not a flicker) while the slack covers the return, a loss of it at once, and the
  way back to on-demand (``slack - 2 d > net``).  Because on-demand starts ``return_restarts``
  restarts above the net, that is the case whenever spot comes back.

The safety of the deadline is the safety net's: the job leaves spot (or never waits) once the
slack would not cover ``safety_restarts`` restarts and a decision gap (idle) or ``safety_restarts``
restarts (restarting: the rest of the restart and the switch), and on-demand is never revoked.
Pure: the decision is a function of the observation alone.
"""

from __future__ import annotations

from typing import ClassVar

from spotwise.policies.base import Decision, Migrate, Observation, PlaceQuote, Policy, SwitchMarket
from spotwise.policies.deadline_guard import UniformProgress
from spotwise.policies.migration import PriceMigration
from spotwise.policies.partial_guard import is_partial, partial_decisions
from spotwise.policies.schema import check_availability_guard


class AvailabilityGuard(Policy):
    """Slack-driven waiting, moving and on-demand on real outages (see the module docstring)."""

    name: ClassVar[str] = "availability-guard"
    spot_only: ClassVar[bool] = True
    uses_places: ClassVar[bool] = True

    def __init__(self, safety_restarts: float = 2.0, return_restarts: float = 15.0, min_up_s: float = 600.0,
                 min_saving: float = 0.05, checkpoint_gb: float = 0.1, egress_per_gb: float = 0.09) -> None:
        check_availability_guard(safety_restarts, return_restarts, min_up_s, min_saving, checkpoint_gb, egress_per_gb)
        self.safety_restarts = float(safety_restarts)
        self.return_restarts = float(return_restarts)
        self.min_up_s = float(min_up_s)
        self.prices = PriceMigration(min_saving, checkpoint_gb, egress_per_gb, slack_restarts=safety_restarts + 1.0)
        #: the rule where the job cannot move (one place): Uniform Progress as ``spot+guard`` runs it
        self.uniform = UniformProgress(safety_restarts=safety_restarts)

    @staticmethod
    def expected_unit_cost(q: PlaceQuote, restart_s: float) -> float:
        """$ per hour of progress at ``q``, the restart a move there costs spread over the stay it may expect:
        its current up-streak (at least one restart), scaled by its recent availability."""
        stay = max(q.up_s if q.up_s is not None and q.up_s > 0 else 0.0, restart_s, 1.0)
        if q.availability is not None:
            stay *= max(q.availability, 0.05)
        return q.unit_price * (1.0 + restart_s / stay)

    def _best(self, qs: list[PlaceQuote], restart_s: float) -> PlaceQuote:
        return min(qs, key=lambda q: (self.expected_unit_cost(q, restart_s), -(q.up_s or 0.0), q.zone, q.instance))

    def decide(self, obs: Observation) -> list[Decision]:
        left = obs.work_left_s
        if obs.deadline_s is None or left is None or left <= 0:
            return []
        d = obs.restart_s
        net = self.safety_restarts * d + obs.next_decision_s
        od_at = net + self.return_restarts * d
        if is_partial(obs):  # several nodes on partial capacity: on-demand nodes beside spot ones (issue 31)
            return partial_decisions(obs, net, od_at, self.min_up_s, self.expected_unit_cost)
        if not any((q.zone, q.instance) != obs.place for q in obs.places):
            return self.uniform.decide(obs)  # nowhere to move: waiting only buys on-demand later (module docstring)
        slack = (obs.deadline_s - obs.t) - left
        available = [q for q in obs.places if q.available]
        if obs.market == "on-demand":
            steady = [q for q in available if q.up_s is None or q.up_s >= self.min_up_s]
            if steady and slack - 2 * d > net:
                best = self._best(steady, d)
                out: list[Decision] = [SwitchMarket(reason=f"spot capacity at {best.zone} (up {(best.up_s or 0) / 60:.0f} min) "
                                                           f"and {slack:.0f} s of slack: back to spot", market="spot")]
                if (best.zone, best.instance) != obs.place:
                    out.append(Migrate(reason=f"spot at {best.zone}", instance_type=best.instance, region=best.zone))
                return out
            return []
        if obs.active > 0:
            return self.prices.decide(obs)  # running: move only on a price difference worth the move
        if obs.warming > 0 and obs.spot_available:
            # restarting here: not idle, so not the idle net (whose margin adds the decision gap); leave the
            # paid-for restart only where the slack falls to the paper's net, 2 restarts (Uniform Progress rule 4)
            if slack < self.safety_restarts * d:
                return [SwitchMarket(reason=f"restarting on spot with {slack:.0f} s of slack, below "
                                            f"{self.safety_restarts * d:.0f} s: on-demand until the end (safety net)",
                                     market="on-demand")]
            return []
        if obs.spot_available:
            return []  # capacity is back here (the workers are about to restart): take it
        others = [q for q in available if (q.zone, q.instance) != obs.place]
        if others and slack - d > net:
            best = self._best(others, d)
            here = next((q for q in obs.places if (q.zone, q.instance) == obs.place), None)
            if (here is not None and slack > od_at
                    and best.unit_price > here.unit_price * (1.0 + self.prices.min_saving)):
                return []  # wait for this cheaper place: going there and back costs two restarts (module docstring)
            return [Migrate(reason=f"no spot capacity at {obs.place[0] if obs.place else '?'}; {best.zone} has it "
                                   f"(up {(best.up_s or 0) / 60:.0f} min, {best.price:.4g} $/h)",
                            instance_type=best.instance, region=best.zone)]
        if slack <= od_at:
            return [SwitchMarket(reason=f"no spot capacity anywhere and {slack:.0f} s of slack (on-demand at {od_at:.0f} s: "
                                        f"the safety net plus {self.return_restarts:g} restarts to come back)", market="on-demand")]
        return []  # wait: it costs the coordinator only, and the slack covers it
