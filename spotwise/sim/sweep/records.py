"""The types a trace sweep and its hindsight oracle share: the job, the strategies, the results.

:mod:`spotwise.sim.sweep.engine` (the engine) and the bounds of :mod:`spotwise.sim.bounds` both import this
module; the engine imports the bounds to report against them, the bounds never import the engine (issue 19
item 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.series import iso8601
from spotwise.policies.base import node_rate

StartRule = Literal["home", "cheapest"]
#: "none": no bid limit and no revocation at all (also not by an availability trace)
BidRule = Literal["on-demand", "thm3", "none"]


@dataclass(frozen=True)
class SweepJob:
    """What a sweep runs: ``work_s`` compute seconds at the home place on ``workers`` instances,
    due ``deadline_s`` after its start.  ``iterations`` only scales the observation's step counts
    (policies see steps, as in a run)."""

    work_s: float
    deadline_s: float
    workers: int = 1
    restart_s: float = 300.0
    coordinator_per_hour: float = 0.0
    iterations: int = 100_000
    checkpoint_gb: float = 0.1
    egress_per_gb: float = 0.09
    history_s: float = 7 * 86400.0
    billing: BillingPolicy = field(default_factory=BillingPolicy.per_second)
    name: str = "job"
    #: seconds lost by the very first start and by a rejoin after a revocation at the same place
    #: (``None``: ``restart_s``).  ``restart_s`` itself is what a switch of market or a move loses.
    #: The emulated runtime starts and rejoins at once (0, 0), which is how the fidelity benchmark
    #: sets them; a cloud instance boots and restores, which is the default.
    start_s: float | None = None
    rejoin_s: float | None = None
    #: below how many nodes the job waits instead of training (issue 31): 1 for an elastic
    #: data-parallel job (the default when ``None``), ``workers`` for a gang.  ``None`` also says
    #: the user did not choose a reading (:func:`spotwise.sim.sweep.partial.check_reading`)
    min_workers: int | None = None
    #: progress rate of ``k`` nodes relative to ``workers`` nodes, ``k = 1..workers`` (the last is
    #: 1.0): the sample throughput of paper 000 eq. 14-15 (:func:`spotwise.sim.sweep.partial.worker_rates`);
    #: ``None``: linear, ``k / workers``
    rates: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("work_s", "deadline_s", "history_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a positive number of seconds, got {v!r}", where="sweep job")
        if self.start_s is None:
            object.__setattr__(self, "start_s", self.restart_s)
        if self.rejoin_s is None:
            object.__setattr__(self, "rejoin_s", self.restart_s)
        for name in ("restart_s", "start_s", "rejoin_s", "coordinator_per_hour", "checkpoint_gb", "egress_per_gb"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InputError(f"{name} must be a number >= 0, got {v!r}", where="sweep job")
        if not isinstance(self.workers, int) or self.workers < 1 or not isinstance(self.iterations, int) or self.iterations < 1:
            raise InputError("workers and iterations must be integers >= 1", where="sweep job")
        if self.min_workers is not None and (not isinstance(self.min_workers, int) or isinstance(self.min_workers, bool)
                                             or not 1 <= self.min_workers <= self.workers):
            raise InputError(f"min_workers must be an integer from 1 to workers ({self.workers}), got {self.min_workers!r}",
                             "1 trains on whatever nodes a zone gives (elastic), workers waits for all of them (a gang)",
                             "cluster.min_workers")
        if self.rates is not None:
            r = tuple(float(x) for x in self.rates)
            if (len(r) != self.workers or not all(math.isfinite(x) and x > 0 for x in r)
                    or any(b < a - 1e-12 for a, b in zip(r, r[1:])) or abs(r[-1] - 1.0) > 1e-9):
                raise InputError(f"rates must give, for 1..{self.workers} nodes, positive non-decreasing progress rates "
                                 f"ending at 1.0, got {self.rates!r}", where="sweep job")
            object.__setattr__(self, "rates", r)
        if self.work_s + self.start_s > self.deadline_s:  # type: ignore[operator]
            from spotwise.reports.units import human_duration as hd

            raise InputError(f"{hd(self.work_s)} of work plus a {hd(self.start_s)} start cannot finish in "
                             f"the {hd(self.deadline_s)} deadline even on on-demand",
                             "extend the deadline or shrink the job", "deadline")

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job trains on (``min_workers``, 1 when not set)."""
        return 1 if self.min_workers is None else int(self.min_workers)

    def rate(self, nodes: int) -> float:
        """Progress per second on ``nodes`` nodes relative to ``workers`` nodes: 0 below ``min_nodes``
        (the job waits), ``rates[nodes - 1]`` (or ``nodes / workers``) up to ``workers``, and no more
        than 1.0 beyond (the job has ``workers`` data-parallel shards)."""
        return node_rate(nodes, self.workers, self.min_nodes, self.rates)


@dataclass(frozen=True)
class Strategy:
    """How a sweep runs the job: where it starts, what it bids, which market, which policies."""

    name: str
    start: StartRule = "home"
    #: a rule, or a fixed bid in $/h
    bid: BidRule | float = "on-demand"
    market: Literal["spot", "on-demand"] = "spot"
    #: policy names, or ``(name, params)`` pairs, from :data:`spotwise.policies.registry.POLICIES`
    #: or ``package.module:ClassName``; or Policy objects (the Python API, issue 22)
    policies: tuple[Any, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if self.start not in ("home", "cheapest"):
            raise InputError(f"strategy {self.name!r}: start must be 'home' or 'cheapest'", where="--strategies")
        if isinstance(self.bid, (int, float)) and not isinstance(self.bid, bool):
            if not (math.isfinite(self.bid) and self.bid > 0):
                raise InputError(f"strategy {self.name!r}: a fixed bid must be a positive price, got {self.bid!r}", where="--strategies")
        elif self.bid not in ("on-demand", "thm3", "none"):
            raise InputError(f"strategy {self.name!r}: bid must be 'on-demand', 'thm3' or 'none'", where="--strategies")
        if self.market not in ("spot", "on-demand"):
            raise InputError(f"strategy {self.name!r}: market must be 'spot' or 'on-demand'", where="--strategies")


#: The strategies ``--strategies`` names (``docs/benchmarks.md``, "Trace sweep" compares them).
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("on-demand", "home", "none", "on-demand", (), "on-demand at the home place"),
    Strategy("no-interruptions", "home", "none", "spot", (),
             "spot at the home place as if never revoked (the optimistic estimate)"),
    Strategy("thm3-bid", "home", "thm3", "spot", (),
             "the planner's Thm 3 bid (paper 000) from the history before the start, home place, no guard"),
    Strategy("thm3-bid+guard", "home", "thm3", "spot", ("uniform-progress",),
             "Thm 3 bid with the Uniform Progress deadline guard"),
    Strategy("spot+guard", "home", "on-demand", "spot", ("uniform-progress",),
             "spot up to the on-demand price at the home place, Uniform Progress guard"),
    Strategy("spotwise", "cheapest", "on-demand", "spot",
             (("uniform-progress", {"defer_to_places": True}), "price-migration"),
             "cheapest place at the start (hold-out), migration on price divergence, Uniform Progress guard"),
    Strategy("spotwise-avail", "cheapest", "on-demand", "spot", ("availability-guard",),
             "cheapest place at the start, then by the slack: move to the steadiest place with capacity, wait while "
             "the slack allows, on-demand only near the safety net and back to spot when it returns"),
    Strategy("hybrid", "home", "on-demand", "spot", ("hybrid-topup",),
             "the home place, Uniform Progress over node counts: train on the k spot nodes it gives, add on-demand nodes "
             "for the rest while behind the uniform progress line and at the safety net"),
)}
DEFAULT_STRATEGIES = ("on-demand", "no-interruptions", "thm3-bid", "spot+guard", "spotwise", "spotwise-avail")


def user_strategy(policy: Any) -> Strategy:
    """A user policy as a sweep strategy (issue 22): spot at the home place up to the on-demand
    price, the policy deciding; ``policy`` is a ``package.module:ClassName`` name or a Policy object."""
    if isinstance(policy, str):
        from spotwise.policies.user import check_reference, load_policy_class

        check_reference(policy)
        declared = getattr(load_policy_class(policy), "name", None)  # the table shows its declared name (issue 29)
        name = declared if isinstance(declared, str) and declared.strip() else policy
        return Strategy(name, "home", "on-demand", "spot", (policy,), f"user policy {policy}")
    from spotwise.policies.user import guard

    g = guard(policy)
    name = str(getattr(g, "name", "") or type(policy).__name__)
    return Strategy(name, "home", "on-demand", "spot", (g,), f"user policy {type(policy).__module__}:{type(policy).__qualname__}")


def strategy_names(text: str | Sequence[Any] | None, default: Sequence[str]) -> list[Any]:
    """The names (or objects) of ``--strategies``: ``default`` when not given (``None``); an empty one
    (``--strategies ''``, ``[]``) is an InputError, never "every strategy" (issue 30 item 14)."""
    if text is None:
        return list(default)
    names = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    if not [n for n in names if not isinstance(n, str) or n]:
        raise InputError("no strategies given (--strategies is empty)",
                         f"name some of {', '.join(default)} (comma-separated), or leave --strategies out for these",
                         "--strategies")
    return names


def parse_strategies(text: str | Sequence[Any] | None) -> list[Strategy]:
    """Strategies from names (built-in, or ``package.module:ClassName`` user policies), or, from the
    Python API, :class:`Strategy` and :class:`~spotwise.policies.base.Policy` objects.  ``None``: the
    default ones; an empty list or string is an InputError."""
    from spotwise.policies.base import Policy

    names = strategy_names(text, DEFAULT_STRATEGIES)
    out = []
    for n in names:
        if isinstance(n, Strategy):
            out.append(n)
            continue
        if isinstance(n, Policy) or (isinstance(n, str) and ":" in n):
            out.append(user_strategy(n))
            continue
        if n not in STRATEGIES:
            import difflib

            close = difflib.get_close_matches(n, list(STRATEGIES), n=1)
            raise InputError(f"unknown strategy {n!r}", (f"did you mean {close[0]!r}? " if close else "")
                             + f"valid names are {', '.join(STRATEGIES)}", "--strategies")
        out.append(STRATEGIES[n])
    if not out:
        raise InputError("no strategies given", f"name some of {', '.join(STRATEGIES)}", "--strategies")
    return _unique_names(out)


def _unique_names(strategies: list[Strategy]) -> list[Strategy]:
    """A user policy named like an earlier strategy gets its reference beside the name (``slack-guard
    (slack_guard:SlackGuard)``): one row per strategy, and every row tells which one it is."""
    import dataclasses

    seen: set[str] = set()
    out = []
    for s in strategies:
        if s.name in seen and s.description.startswith("user policy "):
            s = dataclasses.replace(s, name=f"{s.name} ({s.description[len('user policy '):]})")
        seen.add(s.name)
        out.append(s)
    return out


@dataclass
class WindowResult:
    """One strategy from one start."""

    strategy: str
    start: float
    cost: float
    finish_s: float | None
    deadline_met: bool
    place_start: str
    work_done: float
    moves: int = 0
    market_switches: int = 0
    revocations: int = 0
    on_demand_s: float = 0.0
    spot_s: float = 0.0
    bid: float | None = None
    oracle_cost: float | None = None
    #: what the run paid by its end; ``cost`` adds, for a run the data ended first, the work left
    #: on on-demand (``cost == spent`` for a finished run)
    spent: float | None = None
    #: the free-move lower bound of the window (:func:`spotwise.sim.bounds.oracle.free_move_bound`)
    free_cost: float | None = None
    #: the restart-aware lower bound of the window (:func:`spotwise.sim.bounds.restart.restart_bound`)
    restart_bound: float | None = None
    #: the window's hindsight schedule, when asked for (:func:`spotwise.sim.bounds.hindsight.hindsight_schedule`)
    hindsight_cost: float | None = None
    #: where the time went (issue 23 item 1): instances billed while restarting or moving (no
    #: progress), on spot and on on-demand; no instance held before the job finished (waiting)
    restart_spot_s: float = 0.0
    restart_od_s: float = 0.0
    idle_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "start": iso8601(self.start), "cost": self.cost, "finish_h": None if self.finish_s is None else self.finish_s / 3600,
                "deadline_met": self.deadline_met, "place_start": self.place_start, "work_done": self.work_done,
                "moves": self.moves, "market_switches": self.market_switches, "revocations": self.revocations,
                "on_demand_h": self.on_demand_s / 3600, "spot_h": self.spot_s / 3600, "bid": self.bid,
                "spent": self.spent, "oracle_cost": self.oracle_cost,
                "vs_oracle": None if not self.oracle_cost else self.cost / self.oracle_cost,
                "free_move_cost": self.free_cost, "vs_free_move": None if not self.free_cost else self.cost / self.free_cost,
                "restart_bound": self.restart_bound,
                "vs_restart_bound": None if not self.restart_bound else self.cost / self.restart_bound,
                "hindsight_cost": self.hindsight_cost,
                "vs_hindsight": None if not self.hindsight_cost else self.cost / self.hindsight_cost,
                "spot_compute_h": (self.spot_s - self.restart_spot_s) / 3600, "on_demand_compute_h": (self.on_demand_s - self.restart_od_s) / 3600,
                "restart_h": (self.restart_spot_s + self.restart_od_s) / 3600, "idle_h": self.idle_s / 3600}


@dataclass(frozen=True)
class OracleResult:
    start: float
    cost: float
    place: str
    spot_h: float
    on_demand_h: float


@dataclass
class StrategySummary:
    strategy: str
    windows: int
    deadline_met: float
    deadline_met_ci: tuple[float, float]
    mean_cost: float
    median_cost: float
    mean_vs_oracle: float
    cost_ratio_of_means: float
    vs_on_demand: float | None
    p95_finish_h: float | None
    unfinished: int
    mean_moves: float
    mean_on_demand_h: float
    description: str = ""
    #: against the free-move lower bound (issue 23): mean cost / mean bound, and the mean per-window ratio
    cost_ratio_free: float | None = None
    mean_vs_free: float | None = None
    #: mean hours per window: spot computing, on-demand computing, restarts/moves billed, idle
    breakdown_h: dict[str, float] | None = None
    #: against the restart-aware lower bound: mean cost / mean bound
    cost_ratio_restart: float | None = None
    #: against the hindsight schedule (when the sweep built it): mean cost / its mean
    cost_ratio_hindsight: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SweepResult:
    job: SweepJob
    starts: list[float]
    rows: list[WindowResult]
    oracle: list[OracleResult]
    summaries: list[StrategySummary]
    worker_iterations: float
    wall_s: float
    places: int
    #: the free-move lower bound per window (issue 23 item 0)
    free: list[OracleResult] = field(default_factory=list)
    #: the restart-aware lower bound per window ($; :mod:`spotwise.sim.bounds.restart`)
    restart: list[float] = field(default_factory=list)
    #: the hindsight schedule's cost per window, when asked for (:mod:`spotwise.sim.bounds.hindsight`)
    hindsight: list[float] = field(default_factory=list)
    #: the home places swept (``zone/type``), trace series skipped, files written (filled by the API)
    homes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        best = min(self.summaries, key=lambda s: s.mean_cost, default=None)
        head = f"SweepResult({len(self.starts)} windows, {len(self.summaries)} strategies"
        return head + (f"; cheapest: {best.strategy} ${best.mean_cost:.4g}, P(deadline) {best.deadline_met:.1%})" if best else ")")

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "windows": len(self.starts), "places": self.places, "first_start": iso8601(self.starts[0]) if self.starts else None,
            "last_start": iso8601(self.starts[-1]) if self.starts else None,
            "job": {"work_h": self.job.work_s / 3600, "deadline_h": self.job.deadline_s / 3600, "workers": self.job.workers,
                    "min_workers": self.job.min_nodes, "rates": list(self.job.rates) if self.job.rates else None,
                    "restart_s": self.job.restart_s, "coordinator_per_hour": self.job.coordinator_per_hour},
            "oracle_mean_cost": float(np.mean([o.cost for o in self.oracle])) if self.oracle else None,
            "free_move_mean_cost": float(np.mean([o.cost for o in self.free])) if self.free else None,
            "restart_bound_mean_cost": float(np.mean(self.restart)) if self.restart else None,
            "hindsight_mean_cost": float(np.mean(self.hindsight)) if self.hindsight else None,
            "oracle_breakdown_h": {"spot": float(np.mean([o.spot_h for o in self.oracle])),
                                   "on_demand": float(np.mean([o.on_demand_h for o in self.oracle]))} if self.oracle else None,
            "strategies": [s.to_dict() for s in self.summaries],
            "worker_iterations": self.worker_iterations, "wall_s": self.wall_s,
            "worker_iterations_per_s": self.worker_iterations / self.wall_s if self.wall_s > 0 else None,
        }
        if rows:
            d["rows"] = [r.to_dict() for r in self.rows]
        return d
