"""One window of a trace sweep: one job, one strategy, one start -- the executor that acts on the
policies' decisions (:mod:`spotwise.sim.sweep.engine` runs it from every start).

The job is ``workers`` = N nodes of data-parallel training (issue 31).  At a spot place at time
``t`` the place can give ``k`` spot nodes (:meth:`Place.nodes_at`: ``min(count, N)`` on a count
series such as SkyPilot's 16-node traces, N or 0 on a 0/1 series, N without a capacity trace;
none while the spot price is above the bid).  The job holds up to ``k`` spot nodes and, when a
policy asked for them (:class:`~spotwise.policies.base.TopUp`), on-demand nodes that fill what
spot does not give, up to N; on the on-demand market it holds N on-demand nodes.  Below
``min_workers`` nodes (1 for an elastic job, N for a gang) it holds nothing and waits.

Every node acquired spends a (re)start -- ``start_s`` for the job's first, ``restart_s`` after a
switch of market or a move, ``rejoin_s`` for a node joining at the same place -- billed, not
computing; the nodes already computing go on (spotwise trains through a join or a revocation in
place: nothing committed is lost).  The job progresses at ``speed * rate(a)`` where ``a`` is the
number of nodes computing (:meth:`SweepJob.rate`: paper 000 eq. 14-15's sample throughput of
``a`` of N workers).  On-demand nodes that a spot node replaces are released when the spot node
is ready (make-before-break).  For N = 1, or on a 0/1 series, this is the all-or-nothing model of
Can't Be Late (NSDI'24) that earlier sweeps used, and gives the same results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from spotwise.market.billing import Ledger
from spotwise.planner.bids import thm3_bid
from spotwise.policies.base import Decision, Migrate, Observation, PlaceQuote, Policy, SwitchMarket, TopUp
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import Strategy, SweepJob, WindowResult

_EPS = 1e-6


@dataclass
class _Node:
    iid: str
    market: str  # "spot" or "on_demand"
    ready_at: float


class WindowRun:
    """One job, one strategy, one start: the executor of the sweep (acts on decisions)."""

    def __init__(self, job: SweepJob, places: Sequence[Place], home: Place, start: float, strategy: Strategy,
                 policies: Sequence[Policy], tick_s: float, horizon: float) -> None:
        self.job, self.places, self.strategy, self.policies = job, list(places), strategy, list(policies)
        self.t0 = start
        self.t = start
        self.horizon = horizon
        self.tick_s = tick_s
        self.cands = [p for p in self.places if p.covers(start, min(start + job.deadline_s, horizon))]
        if strategy.start == "cheapest":
            pool = self.cands or [home]
            # hold-out: the prices in force at the start, per unit of progress; ties -> home, then name
            self.place = min(pool, key=lambda p: (p.spot_price(start) / p.speed, p is not home, p.id))
        else:
            self.place = home
        self.market = strategy.market
        self.topup = 0                 # on-demand nodes asked for beside the spot ones (TopUp)
        self.keep = False              # ... and kept once started (TopUp.keep)
        self.ledger = Ledger(job.billing)
        self.ledger.start("coordinator", start, job.coordinator_per_hour, category="coordinator", market="on_demand")
        self.left = float(job.work_s)  # compute seconds at home speed on N nodes
        self.pending = "start"         # the kind of the next acquisition: start, rejoin or restart
        self.nodes: list[_Node] = []
        self.serial = 0
        self.moves = self.switches = self.revocations = 0
        # node-seconds divided by N (full-job equivalents; the whole job's seconds for N = 1 or a gang)
        self.od_s = self.spot_s = 0.0
        self.restart_spot_s = self.restart_od_s = self.idle_s = 0.0
        self.egress = 0.0
        self._bids: dict[int, float] = {}
        self.uses_places = any(getattr(p, "uses_places", False) for p in self.policies)

    # ---------------------------------------------------------------- market
    def bid(self, place: Place) -> float:
        key = id(place)
        if key not in self._bids:
            rule = self.strategy.bid
            if isinstance(rule, (int, float)):
                b = float(rule)
            elif rule == "none":
                b = math.inf
            elif rule == "on-demand":
                b = place.on_demand_per_hour
            else:
                lo = max(place.price.start, self.t0 - self.job.history_s)
                if lo >= self.t0:
                    b = place.spot_price(self.t0)  # no history: the price in force
                else:
                    hist = place.price.slice(lo, self.t0)
                    step_s = self.job.work_s / self.job.iterations / place.speed
                    b = thm3_bid(lambda q: float(hist.quantile(q)), self.job.iterations, step_s, self.job.deadline_s).bid
            self._bids[key] = b
        return self._bids[key]

    def spot_nodes(self, place: Place | None = None) -> int:
        """Spot nodes ``place`` (default: the job's) can give now: 0 while its price is above the bid."""
        p = self.place if place is None else place
        n = self.job.workers
        if self.strategy.bid == "none":
            return n  # no bid limit and never revoked: the optimistic estimate, availability traces included
        if p.spot_price(self.t) > self.bid(p):
            return 0
        return p.nodes(self.t, n)

    def wanted(self) -> tuple[int, int]:
        """``(spot, on-demand)`` nodes the job should hold now."""
        n = self.job.workers
        if self.market == "on-demand":
            return 0, n
        k = self.spot_nodes()
        ready_spot = min(k, sum(1 for x in self.nodes if x.market == "spot" and x.ready_at <= self.t + _EPS))
        od = min(self.topup, n - ready_spot)  # fill what spot does not give yet (make-before-break)
        if self.keep:
            held_od = sum(1 for x in self.nodes if x.market == "on_demand")
            od = max(od, min(held_od, self.topup))
            k = min(k, n - od)  # spot fills what the kept on-demand nodes leave
        if k + od < self.job.min_nodes:
            return 0, 0  # below min_workers: wait
        return k, od

    def _acquire(self, market: str, count: int) -> None:
        if count <= 0:
            return
        kind, self.pending = self.pending, "rejoin"
        delay = float({"start": self.job.start_s, "rejoin": self.job.rejoin_s}.get(kind, self.job.restart_s))  # type: ignore[arg-type]
        for _ in range(count):
            self.serial += 1
            iid = f"n{self.serial}"
            if market == "spot":
                self.ledger.start(iid, self.t, self.place.price, market="spot")
            else:
                self.ledger.start(iid, self.t, self.place.on_demand_per_hour, market="on_demand")
            self.nodes.append(_Node(iid, market, self.t + delay))

    def _release(self, market: str | None, count: int, reason: str) -> None:
        """Release ``count`` nodes of ``market`` (``None``: any), the ones still starting first, then the newest."""
        mine = [x for x in self.nodes if market is None or x.market == market]
        mine.sort(key=lambda x: (x.ready_at > self.t + _EPS, x.ready_at), reverse=True)
        for x in mine[:count]:
            self.ledger.stop(x.iid, self.t, reason)
            self.nodes.remove(x)

    def release_all(self, reason: str) -> None:
        self._release(None, len(self.nodes), reason)

    def reconcile(self) -> bool:
        """Hold what :meth:`wanted` says; True when spot nodes were lost (the place gives fewer than
        the job holds: a revocation -- every decision releases the nodes it gives up itself)."""
        revoked = False
        for _ in range(3):  # a spot node ready at once lets an on-demand one go in the same instant
            ws, wo = self.wanted()
            hs = sum(1 for x in self.nodes if x.market == "spot")
            ho = len(self.nodes) - hs
            if (ws, wo) == (hs, ho):
                break
            if hs > ws:
                revoked = True
                self._release("spot", hs - ws, "revoked")
            if ho > wo:
                self._release("on_demand", ho - wo, "released")
            self._acquire("spot", ws - hs)
            self._acquire("on_demand", wo - ho)
        return revoked

    @property
    def ready(self) -> int:
        return sum(1 for x in self.nodes if x.ready_at <= self.t + _EPS)

    @property
    def rate(self) -> float:
        return self.job.rate(self.ready)

    @property
    def running(self) -> bool:
        return self.rate > 0

    # ---------------------------------------------------------------- decisions
    def observation(self) -> Observation:
        job = self.job
        it = job.iterations
        step_s = job.work_s / it / self.place.speed
        done_frac = 1.0 - self.left / job.work_s
        quotes: tuple[PlaceQuote, ...] = ()
        need = job.min_nodes
        if self.uses_places:
            qs = []
            for p in self.cands:
                price = p.spot_price(self.t)
                k = self.spot_nodes(p)
                qs.append(PlaceQuote(p.zone, p.instance.name, price, p.speed / self.place.speed,
                                     k >= need, p.region, p.streak(self.t, need),
                                     p.availability_before(self.t, job.history_s, need), k))
            quotes = tuple(qs)
        n = job.workers
        k = self.spot_nodes()
        ready = self.ready
        return Observation(
            step=min(it, int(done_frac * it + 1e-9)), t=self.t - self.t0, active=ready if self.running else 0,
            provisioned=n if (self.nodes or self.market == "spot") else 0, max_workers=n, reference_workers=n,
            base_lr=1.0, lr=1.0, sync="full", price=self.place.spot_price(self.t), cost_so_far=self.ledger.total(self.t),
            deadline_s=job.deadline_s, target_iterations=it, market=self.market, spot_available=k >= need,
            step_s=step_s, restart_s=job.restart_s, place=self.place.key, places=quotes,
            on_demand_price=self.place.on_demand_per_hour, next_decision_s=self.tick_s,
            warming=len(self.nodes) - ready, spot_nodes=k, min_workers=need,
            on_demand_nodes=sum(1 for x in self.nodes if x.market == "on_demand") if self.market == "spot" else 0,
            node_rates=job.rates or (), on_demand_kept=self.keep,
        )

    def act(self, d: Decision) -> None:
        if isinstance(d, SwitchMarket) and d.market != self.market:
            self.release_all("released")
            self.market = d.market
            self.switches += 1
            self.pending = "restart"  # the next nodes restore the checkpoint on new machines
            self.reconcile()
        elif isinstance(d, Migrate):
            target = next((p for p in self.cands if p.instance.name == d.instance_type and d.region in (p.zone, p.region)), None)
            if target is None or target is self.place:
                return
            self.release_all("released")
            if target.region != self.place.region:
                self.egress += self.job.checkpoint_gb * self.job.egress_per_gb
            self.place = target
            self.moves += 1
            self.pending = "restart"
            self.reconcile()
        elif isinstance(d, TopUp):
            self.topup = min(int(d.on_demand), self.job.workers)
            self.keep = bool(d.keep)
            if self.market == "spot":
                self.reconcile()

    def _consult(self) -> None:
        for pol in self.policies:
            for d in pol.decide(self.observation()):
                self.act(d)

    # ---------------------------------------------------------------- the loop
    def _account(self, dt: float) -> None:
        n = self.job.workers
        if not self.nodes:
            self.idle_s += dt
            return
        for x in self.nodes:
            warming = x.ready_at > self.t + _EPS
            if x.market == "spot":
                self.spot_s += dt / n
                self.restart_spot_s += dt / n if warming else 0.0
            else:
                self.od_s += dt / n
                self.restart_od_s += dt / n if warming else 0.0

    def run(self) -> WindowResult:
        job = self.job
        place0 = self.place
        self.reconcile()
        next_tick = self.t0
        finish: float | None = None
        while True:
            if self.t >= next_tick - _EPS:
                self._consult()
                next_tick = next_tick + self.tick_s if self.policies else math.inf  # no policy: no decisions
            cands = [next_tick, self.horizon]
            if self.market == "spot":
                cands.append(self.place.next_change(self.t))
            # a policy that reads the places hears of capacity elsewhere when it changes, while it
            # waits for capacity or pays on-demand (where a move or a return to spot would pay)
            # (with no other place there is nothing elsewhere to hear of)
            watch = self.uses_places and len(self.cands) > 1 and (not self.running or self.market == "on-demand")
            if watch:
                cands.append(min(p.next_change(self.t) for p in self.cands) if self.cands else math.inf)
            starting = [x.ready_at for x in self.nodes if x.ready_at > self.t + _EPS]
            if starting:
                cands.append(min(starting))
            speed = self.place.speed * self.rate
            if speed > 0:
                cands.append(self.t + self.left / speed)
            t_next = max(min(cands), self.t)
            dt = t_next - self.t
            self._account(dt)
            if speed > 0:
                self.left -= dt * speed
            self.t = t_next
            if self.left <= _EPS * max(1.0, job.work_s) * 1e-3:
                self.left = 0.0
                finish = self.t - self.t0
                break
            if self.t >= self.horizon - _EPS:
                break
            before = len(self.nodes)
            if self.reconcile():
                self.revocations += 1
                next_tick = self.t  # the policies hear of a revocation at once, as in a run
            elif len(self.nodes) > before and self.policies:
                next_tick = self.t  # capacity came (back): the policies hear of it at once
            if watch and self.policies:
                next_tick = min(next_tick, self.t)
        self.release_all("finished")
        spent = self.ledger.close(self.t) + self.egress
        # a run the data ended before it finished still owes the work left: price it at on-demand
        # (plus the coordinator and one restart), so that missing the deadline never looks cheap
        finish_usd = 0.0
        if finish is None and self.left > 0:
            hours = (self.left / self.place.speed + job.restart_s) / 3600.0
            finish_usd = hours * (self.place.on_demand_per_hour * job.workers + job.coordinator_per_hour)
        met = finish is not None and finish <= job.deadline_s + _EPS
        return WindowResult(self.strategy.name, self.t0, spent + finish_usd, finish, met, place0.id, 1.0 - self.left / job.work_s,
                            self.moves, self.switches, self.revocations, self.od_s, self.spot_s,
                            None if self.strategy.market == "on-demand" else self.bid(place0),
                            spent=spent, restart_spot_s=self.restart_spot_s, restart_od_s=self.restart_od_s,
                            idle_s=self.idle_s)
