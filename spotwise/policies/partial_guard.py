"""The availability guard's rules for a job of several nodes on partial capacity (issue 31).

:class:`~spotwise.policies.availability_guard.AvailabilityGuard` decides for a job that runs or
waits as a whole (Can't Be Late's model).  A job of ``N`` nodes on a count trace runs on the ``k``
nodes a zone gives (``k >= min_workers``), at ``rate(k)`` of its full width
(:meth:`Observation.rate`); what the deadline needs is full width at the safety net, and
on-demand *nodes* beside the spot ones (:class:`~spotwise.policies.base.TopUp`) give it without
a switch of market (no restart of the spot nodes, no way back to pay):

* **a zone that gives many more nodes**: move there when its progress is at least ``move_gain``
  of the job's width above this zone's (``rate`` of the nodes each gives; among equals the lowest
  expected cost per unit of progress, the guard's measure of how long a zone keeps its capacity;
  a zone up for less than ``min_up_s`` only when this one gives nothing), while the slack covers
  the move's restart above the net -- also when topped up, leaving the on-demand nodes behind:
  the other zone's spot nodes replace them.  ``move_gain = 0.5`` measured best on the SkyPilot
  16-node set among 0.25 / 0.5 / 0.75 / 0.95 (1.5x deadline: 1.120 / 1.083 / 1.085 / 1.091x the
  hindsight schedule, before the two refinements that took it to 1.032x: the ranking among
  equals and the move while topped up); with no such move at all the guard never leaves a zone
  that gives one node (1.496x);
* slack above ``od_at`` (the guard's on-demand threshold: the net plus ``return_restarts``
  restarts): spot only;
* slack at or below ``od_at``: top up with on-demand nodes that spot nodes replace when they come
  (make-before-break: a replacement costs the spot node's start, billed, and no progress);
* slack at or below the net: top up and *keep* the on-demand nodes, so a spot node revoked after
  replacing one never costs another restart; the slack then loses at most one restart ``d``,
  which the net (``2d`` and a decision gap, Can't Be Late's safety net) covers.

Pure: a function of the observation alone.
"""

from __future__ import annotations

from typing import Callable

from spotwise.policies.base import Decision, Migrate, Observation, PlaceQuote, TopUp


def is_partial(obs: Observation) -> bool:
    """Whether the executor runs the job as nodes on partial capacity (it reports the spot node count)."""
    return obs.max_workers > 1 and obs.spot_nodes is not None and obs.market == "spot"


def partial_decisions(obs: Observation, net: float, od_at: float, min_up_s: float,
                      unit_cost: Callable[[PlaceQuote, float], float], move_gain: float = 0.5) -> list[Decision]:
    """The decisions for a job of several nodes on spot (module docstring); ``unit_cost(quote, d)``:
    the expected $ per unit of progress at a place, its restart spread over the stay it may expect
    (:meth:`~spotwise.policies.availability_guard.AvailabilityGuard.expected_unit_cost`)."""
    left = obs.work_left_s
    if obs.deadline_s is None or left is None or left <= 0:
        return []
    n = obs.max_workers
    d = obs.restart_s
    slack = (obs.deadline_s - obs.t) - left
    k = min(n, obs.spot_nodes or 0)
    here = obs.rate(k)
    best: PlaceQuote | None = None

    def score(q: PlaceQuote) -> tuple[float, float]:
        # progress first; among equals the lowest expected cost per unit of progress (the steadiest)
        return (round(obs.rate(q.nodes or 0) * q.speed, 9), -unit_cost(q, d))

    for q in obs.places:
        if (q.zone, q.instance) == obs.place or q.nodes is None or not q.available:
            continue
        if here > 0 and q.up_s is not None and q.up_s < min_up_s:
            continue  # a flicker (an idle job takes it: waiting gains nothing)
        if best is None or score(q) > score(best):
            best = q
    gain = best is not None and obs.rate(best.nodes or 0) * best.speed >= here + move_gain
    keep = slack <= net
    if best is not None and gain and not obs.on_demand_kept and slack - d > net:
        # a zone that gives many more nodes: worth a restart of the job, above the threshold (spot only) and
        # below it too (its spot nodes instead of on-demand ones here), while the slack covers the move
        out: list[Decision] = [TopUp(reason="moving: no on-demand nodes to carry", on_demand=0)] if obs.on_demand_nodes else []
        return out + [Migrate(reason=f"{obs.place[0] if obs.place else '?'} gives {k} of {n} nodes, {best.zone} {best.nodes} "
                                     f"(up {(best.up_s or 0) / 60:.0f} min)", instance_type=best.instance, region=best.zone)]
    if slack <= od_at:
        if k >= n and obs.on_demand_nodes == 0:
            return []  # spot gives every node: nothing to fill (the executor fills later losses once asked)
        if obs.on_demand_nodes > 0 and (obs.on_demand_kept or not keep):
            return []  # topped up already
        why = "the safety net: keep them" if keep else f"{od_at:.0f} s threshold"
        return [TopUp(reason=f"{slack:.0f} s of slack ({why}); spot gives {k} of {n} nodes: on-demand for the rest",
                      on_demand=n, keep=keep)]
    return []
