"""``spotwise plan`` on a spec with ``cluster.pools``: how many workers to take from each pool (issue 21 item 4).

Each pool (:class:`~spotwise.market.pools.Pool`) is a type, a place, a price law and a revocation model;
its size is its quota.  The plan picks ``n_j in 0..quota_j`` per pool (and a bid per pool on the ``bid``
revocation model) for the spec's deadline -- the least expected cost that meets it -- or, with
``--objective time``, the least expected time within ``budget_usd``.

**The LP** (``papers/003_c06237e546a4f08e.txt`` Sec. 4.2-4.3, :mod:`spotwise.planner.placement.lp`): one
job, one column per pool with its *cost-normalised throughput*: ``T_j = 3600 a_j / (m_j + x_j + Delta)``
mini-batches per hour per instance (``m_j = step_time_s / speed_j``, ``x_j`` a cross-region exchange,
``a_j`` the pool's expected availability) at ``c_j = a_j p_j`` $/h (``p_j`` the mean price paid while up).
Paper 003 lets a job use at most ONE instance at a time (``sum_j X[m, j] <= 1``); a data-parallel job uses
several, so the problem is built with ``gang=True``: ``X[0, j]`` is the number of pool-``j`` instances the
job uses at once, ``0 <= X <= quota`` (:class:`~spotwise.planner.placement.problem.AllocationProblem`).
The work is ``W = J * c(n)`` mini-batches (``J`` iterations of ``c(n)`` mini-batches each for the spec's
``n`` workers).  Deadline: :func:`~spotwise.planner.placement.lp.min_cost_with_slos` with
``objective="dollars"`` (Sec. 4.3, SLO ``W`` within the deadline); budget + ``time``:
:func:`~spotwise.planner.placement.lp.min_makespan_under_budget` (Sec. 4.3).  The LP's throughput is linear
in the counts, which is exact for continuous modes and only a relaxation for barrier modes (below); its
fractional counts are rounded by evaluating every integer neighbour (floor/ceil per pool) exactly.

**The exact evaluation** of a mix ``n = (n_j)`` (:func:`evaluate`):

* iterations -- ``J`` from the error model for the mix's mini-batches per step ``c(n')`` (async 1,
  n-sync/n-batch ``min(n', N)``, full ``n'``; Corollary 2 for a loss target, else ``target.iterations``);
  a mix whose Thm 1 bound misses ``eps`` is infeasible (fewer fully-synchronous workers average fewer
  gradients per step);
* seconds per step -- continuous modes (async, n-batch): every worker commits a mini-batch every
  ``m_j + x_j + Delta`` seconds, and the parameter server applies one step per ``Delta`` (it serialises
  commits), so ``rate = min(sum_j a_j n_j / (m_j + x_j + Delta), N / Delta)`` mini-batches/s (the
  machine-repairman bound, optimistic near its knee) and a step takes ``N / rate``.  Barrier modes
  (full, n-sync) with ``balance: equal``: a round waits for the ``K``-th fastest member (``K = n'`` for
  full: the slowest), ``E[X_(K)] + Delta`` with ``X_i = x_i + m_i ((1 - s) + s Exp(1))`` of every
  member, integrated numerically over the members' CDFs -- roughly ``n' * min speed`` of throughput;
  ``balance: throughput`` gives each member a batch share proportional to its speed, so every member's
  mean is ``n' * step_time_s / sum_j n_j speed_j``.  Revocations slow a barrier job by the
  throughput-weighted availability (fluid approximation: time / a);
* cost -- each pool's workers billed at their mean price while up for ``a_j * time`` (the market's
  billing policy, its minimum charge once per worker), the ``cluster.ps_shards`` on-demand coordinators
  for the whole time, and cross-region egress per mini-batch.

**Availability** of a pool: ``F(b)`` of its price law for a pool on the ``bid`` model (bids tried: the
spec's, the price law's quantiles :data:`BID_QUANTILES`), else the up-fraction of its revocation model's
``all_intervals`` over the horizon with a seeded rng (``rejoin / (q + rejoin)`` for per-iteration models).

Alternatives shown: every single-pool plan (its best count and bid), ``lp-mix`` (the LP rounded),
``all-pools`` (every pool in full) and the chosen ``pool-mix``.  :func:`apply_pool_mix` writes the mix
back into the spec (pools with 0 workers dropped).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.plan.records import SECONDS_PER_HOUR, Alternative, Inputs, Plan
from spotwise.planner.plan.rounds import _iterations_to
from spotwise.theory.bounds import error_bound

#: price quantiles tried as a bid-model pool's bid (1.0: above every price, never revoked)
BID_QUANTILES = (1.0, 0.9, 0.75, 0.5)
#: evaluate every integer mix when (mixes x bid combinations) is at most this
MAX_EXHAUSTIVE = 20_000
#: most per-pool bid combinations tried
MAX_LEVEL_COMBOS = 64


@dataclass(frozen=True)
class PoolOption:
    """One pool at one bid (a pool off the bid model has one option)."""

    index: int
    name: str
    instance: str
    quota: int
    speed: float
    compute_s: float
    region: str
    bid: float | None
    availability: float
    price: float
    on_demand: float | None
    billing: Any
    source: str


@dataclass(frozen=True)
class MixEval:
    """A mix ``counts`` of ``options`` and its expected iterations, time, cost and error (or why not)."""

    counts: tuple[int, ...]
    options: tuple[PoolOption, ...]
    iterations: int
    time_s: float | None
    cost: float | None
    error: float | None
    feasible: bool
    reason: str = ""
    by_pool: tuple[float, ...] = ()
    coordinator_cost: float = 0.0

    @property
    def workers(self) -> int:
        return int(sum(self.counts))

    def describe(self) -> str:
        parts = [f"{n}x {o.name}" + (f" (bid {o.bid:.4g})" if o.bid is not None else "")
                 for n, o in zip(self.counts, self.options) if n > 0]
        return " + ".join(parts) or "no workers"


def check_pool_plan_args(traces: list[str] | None, types: list[str] | None) -> None:
    """A pooled spec plans on its pools' own markets: ``--trace``/``--types`` are refused (exit 2)."""
    if traces or types:
        raise InputError("--trace/--types choose one instance type and place; this spec lists cluster.pools",
                         "give each pool its prices in cluster.pools[].market (traces or synthetic), and drop "
                         "--trace/--types", "--trace" if traces else "--types")


# ------------------------------------------------------------------------------------ pools' options
def _price_law(spec: JobSpec, i: int, market: Any, deadline: float) -> Any:
    """The pool's price law (``None``: a constant price)."""
    from spotwise.market.pools import pool_spec
    from spotwise.planner.bids.prices import PriceModel
    from spotwise.planner.estimate.models import price_model

    try:
        law, _, _, _, _ = price_model(pool_spec(spec, i), market, [], deadline)
        return law
    except InputError:
        s = market.prices
        return PriceModel.from_series(s) if s.max() > s.min() else None


def _availability(model: Any, slots: int, horizon: float, seed: int, i: int, J: int) -> float:
    """Expected up-fraction of one slot of the pool (module docstring)."""
    from spotwise.planner.estimate.churn import has_churn

    if not has_churn(model):
        return 1.0
    if getattr(model, "is_iteration_driven", False):
        q, r = float(getattr(model, "q", 0.0)), getattr(model, "rejoin_p", None)
        if r:
            return float(r) / (q + float(r))
        return 1.0 if q <= 0 else max(1e-6, (1.0 - (1.0 - q) ** J) / (q * J))
    rng = np.random.default_rng([int(seed), 21, int(i)])
    ivs = model.all_intervals(int(slots), 0.0, float(horizon), rng if model.needs_rng else None)
    up = sum(b - a for w in ivs for a, b in w)
    return float(up) / (slots * horizon)


def pool_options(spec: JobSpec, inp: Inputs) -> list[list[PoolOption]]:
    """Per pool, its options: one per bid tried (bid model), else one at its measured availability."""
    pools = inp.market.pools.pools  # type: ignore[union-attr]
    step = float(spec.workload.step_time_s)
    horizon = min(float(inp.market.horizon_s), max(4.0 * inp.deadline, 3600.0))
    out: list[list[PoolOption]] = []
    for i, (p, ps) in enumerate(zip(pools, spec.cluster.pools or [])):
        mk, rev = p.market, (ps.revocation or spec.market.revocation)
        base = {"index": i, "name": p.name, "instance": mk.instance.name, "quota": len(p.slots), "speed": float(p.speed),
                    "compute_s": step / float(p.speed), "region": p.region, "on_demand": mk.instance.on_demand_per_hour,
                    "billing": mk.billing}
        opts: list[PoolOption] = []
        if rev.model == "bid":
            law = _price_law(spec, i, mk, inp.deadline)
            given = [] if ps.bids is None else ([float(ps.bids)] if isinstance(ps.bids, (int, float)) else [float(b) for b in ps.bids])
            if law is None:
                price = float(mk.prices.values[0])
                opts.append(PoolOption(**base, bid=max([price] + given), availability=1.0, price=price,
                                       source=f"constant {price:g} $/h"))
            else:
                bids = sorted({float(law.ppf(q)) for q in BID_QUANTILES} | {max(given)} if given else
                              {float(law.ppf(q)) for q in BID_QUANTILES}, reverse=True)
                for b in bids:
                    a = float(law.cdf(b))
                    if a > 1e-9:
                        opts.append(PoolOption(**base, bid=b, availability=a, price=float(law.partial_mean(b)) / a,
                                               source=f"bid {b:.4g}: F(b) = {a:.3f}"))
        else:
            a = _availability(mk.revocation, len(p.slots), horizon, spec.seed, i, inp.J)
            price = float(mk.prices.mean()) if hasattr(mk.prices, "mean") else float(mk.prices.values[0])
            opts.append(PoolOption(**base, bid=None, availability=a, price=price,
                                   source=f"{rev.model}: mean {price:.4g} $/h, up {a:.3f} of the time"))
        if not opts:
            opts.append(PoolOption(**base, bid=None, availability=0.0, price=0.0, source="never up"))
        out.append(opts)
    return out


# ------------------------------------------------------------------------------------ the exact evaluation
@dataclass(frozen=True)
class MixJob:
    """What :func:`evaluate` needs about the job."""

    spec: JobSpec
    inp: Inputs
    mode: str  # "continuous" | "barrier"
    N: int | None
    delta: float
    straggler: float
    step_time_s: float
    balance: str
    shards: int
    exchange_bytes: float | None
    link: Any
    budget: float | None

    @classmethod
    def of(cls, spec: JobSpec, inp: Inputs) -> MixJob:
        cl = spec.cluster
        mode = "continuous" if cl.sync in ("async", "n-batch") else "barrier"
        N = 1 if cl.sync == "async" else (int(cl.sync_n) if cl.sync in ("n-sync", "n-batch") and cl.sync_n else None)
        mb = spec.workload.model_mb
        link = inp.market.pools.link if inp.market.pools is not None else None
        return cls(spec, inp, mode, N, float(cl.sync_overhead_s), float(cl.straggler), float(spec.workload.step_time_s),
                   cl.balance, int(cl.ps_shards), None if mb is None else 2.0 * float(mb) * 1e6, link, spec.budget_usd)

    def contributions(self, n: int) -> int:
        return n if self.N is None else min(n, self.N)


def _kth_mean(laws: list[tuple[int, float, float]], s: float, K: int) -> float:
    """``E[X_(K)]``, the K-th smallest of independent ``X = x + m ((1 - s) + s Exp(1))`` (``laws``: (count, m, x))."""
    if s <= 1e-12:
        vals = sorted(x + m for k, m, x in laws for _ in range(k))
        return float(vals[K - 1])
    hi = max(x + m * (1 - s) + 40.0 * m * s for _, m, x in laws)
    t = np.linspace(0.0, hi, 4001)
    Fs = [(k, np.where(t >= x + m * (1 - s), -np.expm1(-np.maximum(t - x - m * (1 - s), 0.0) / (m * s)), 0.0))
          for k, m, x in laws]
    total = sum(k for k, _ in Fs)
    if K >= total:
        P = np.prod([F ** k for k, F in Fs], axis=0)
    else:
        dist = np.zeros((t.size, total + 1))
        dist[:, 0] = 1.0
        for k, F in Fs:
            for _ in range(k):
                new = dist * (1.0 - F)[:, None]
                new[:, 1:] += dist[:, :-1] * F[:, None]
                dist = new
        P = dist[:, K:].sum(axis=1)
    y = 1.0 - P
    return float(np.sum((y[1:] + y[:-1]) * np.diff(t)) / 2.0)


def _ps_region(counts: tuple[int, ...], opts: tuple[PoolOption, ...]) -> str:
    by: dict[str, int] = {}
    for n, o in zip(counts, opts):
        if n > 0:
            by[o.region] = by.get(o.region, 0) + n
    return max(by, key=lambda r: by[r]) if by else ""


def step_seconds(job: MixJob, counts: tuple[int, ...], opts: tuple[PoolOption, ...]) -> tuple[float, list[float]]:
    """Expected seconds per committed step of the mix (availability included) and each pool's share of
    the mini-batches (module docstring)."""
    ps = _ps_region(counts, opts)
    x = [job.link.exchange_s(job.exchange_bytes) if job.link is not None and job.exchange_bytes and o.region != ps else 0.0
         for o in opts]
    service = 0.0
    if job.spec.cluster.ps_gbps is not None and job.exchange_bytes:
        service = 8.0 * job.exchange_bytes / (float(job.spec.cluster.ps_gbps) * 1e9 * job.shards)
    live = [(n, o, xi) for n, o, xi in zip(counts, opts, x) if n > 0]
    rates = [n * o.availability / (o.compute_s + xi + job.delta) for n, o, xi in live]
    total_rate = sum(rates)
    shares = []
    it = iter(rates)
    for n in counts:
        shares.append(next(it) / total_rate if n > 0 and total_rate > 0 else 0.0)
    if total_rate <= 0:
        return math.inf, shares
    n_all = sum(counts)
    if job.mode == "continuous":
        N = job.N or 1
        bound = N / (job.delta + N * service) if job.delta + N * service > 0 else math.inf
        return N / min(total_rate, bound), shares
    K = job.contributions(n_all)
    if job.balance == "throughput" and len(live) > 1:
        m_eq = job.step_time_s * n_all / sum(n * o.speed for n, o, _ in live)
        laws = [(n, m_eq, xi) for n, _, xi in live]
    else:
        laws = [(n, o.compute_s, xi) for n, o, xi in live]
    round_s = _kth_mean(laws, job.straggler, K) + job.delta + n_all * service
    a = sum(n * o.availability / (o.compute_s + xi + job.delta) for n, o, xi in live) / \
        sum(n / (o.compute_s + xi + job.delta) for n, o, xi in live)
    return round_s / a, shares


def evaluate(job: MixJob, counts: tuple[int, ...], opts: tuple[PoolOption, ...], cache: dict | None = None) -> MixEval:
    """Expected iterations, time, cost and error of ``counts`` workers from the pools at ``opts``."""
    inp, spec = job.inp, job.spec
    n = int(sum(counts))
    if n < 1:
        return MixEval(counts, opts, inp.J, None, None, None, False, "no workers")
    inv = 1.0 / job.contributions(n)
    if spec.target.loss is not None:
        try:
            J = _iterations_to(inp.eps, inp.error, inv, spec)
        except InfeasibleError as e:
            return MixEval(counts, opts, inp.J, None, None, None, False, e.message)
    else:
        J = inp.J
    err = float(error_bound(J, inp.error, inv))
    if err > inp.eps * (1 + 1e-6):
        return MixEval(counts, opts, J, None, None, err, False,
                       f"its Thm 1 bound {err:.4g} after {J} iterations with {n} worker(s) misses the error target "
                       f"{inp.eps:.4g} (fewer workers per step average fewer gradients)")
    key = (counts, tuple(o.availability for o in opts))
    if cache is not None and key in cache:
        step, shares = cache[key]
    else:
        step, shares = step_seconds(job, counts, opts)
        if cache is not None:
            cache[key] = (step, shares)
    if not math.isfinite(step):
        return MixEval(counts, opts, J, None, None, err, False, "its pools are never up")
    t = J * step
    by_pool = tuple(k * o.billing.charge(o.price, 0.0, o.availability * t) if k > 0 and o.availability > 0 else 0.0
                    for k, o in zip(counts, opts))
    coord = job.shards * inp.on_demand_billing.charge(inp.coordinator_price, 0.0, t)
    egress = 0.0
    if job.link is not None and job.exchange_bytes:
        ps = _ps_region(counts, opts)
        batches = J * (job.contributions(n) if job.mode == "continuous" else n)
        egress = sum(batches * sh * job.link.egress_usd(job.exchange_bytes) for sh, o in zip(shares, opts) if o.region != ps)
    cost = float(sum(by_pool) + coord + egress)
    reasons = []
    if t > inp.deadline * (1 + 1e-9):
        reasons.append(f"expected time {t:.0f} s exceeds the deadline {inp.deadline:.0f} s")
    if job.budget is not None and cost > job.budget * (1 + 1e-9):
        reasons.append(f"expected cost ${cost:.4g} exceeds the budget ${job.budget:g}")
    return MixEval(counts, opts, J, t, cost, err, not reasons, "; ".join(reasons), by_pool, coord)


# ------------------------------------------------------------------------------------ the LP and the search
def _lp_counts(job: MixJob, opts: tuple[PoolOption, ...], objective: str) -> tuple[np.ndarray | None, str]:
    """Paper 003 Sec. 4.3's LP over the pools (gang allocation; module docstring): fractional counts, or why none."""
    from spotwise.planner.placement.lp import (
        SLO,
        AllocationProblem,
        max_total_throughput,
        min_cost_with_slos,
        min_makespan_under_budget,
    )

    inp = job.inp
    use = [o for o in opts if o.availability > 0 and o.price > 0]
    if not use:
        return None, "no pool is ever up"
    T = np.array([[SECONDS_PER_HOUR * o.availability / (o.compute_s + job.delta) for o in use]])
    c = np.array([o.availability * o.price for o in use])
    prob = AllocationProblem(("job",), tuple(o.name for o in use), T, c, np.array([float(o.quota) for o in use]),
                             unit="mini-batches", gang=True)
    work = float(inp.J * job.contributions(inp.n))
    try:
        if objective == "time" and job.budget is not None:
            alloc = min_makespan_under_budget(prob, {"job": work}, float(job.budget), method="lp")
        elif objective == "time":
            alloc = max_total_throughput(prob)
        else:
            alloc = min_cost_with_slos(prob, {"job": SLO(work, inp.deadline / SECONDS_PER_HOUR)}, objective="dollars")
    except (InfeasibleError, InputError) as e:
        return None, f"the LP (paper 003 Sec. 4.3) is infeasible: {e.message}"
    x = np.zeros(len(opts))
    for o, v in zip(use, alloc.X[0]):
        x[opts.index(o)] = float(v)
    return x, alloc.policy


def _neighbours(x: np.ndarray, opts: tuple[PoolOption, ...]) -> list[tuple[int, ...]]:
    sides = [sorted({max(0, min(o.quota, math.floor(v + 1e-9))), max(0, min(o.quota, math.ceil(v - 1e-9)))})
             for v, o in zip(x, opts)]
    return [tuple(c) for c in itertools.product(*sides) if sum(c) > 0]


def _key(objective: str):
    return (lambda e: (e.cost, e.time_s)) if objective == "cost" else (lambda e: (e.time_s, e.cost))


def _best(evals: list[MixEval], objective: str) -> MixEval | None:
    ok = [e for e in evals if e.feasible]
    return min(ok, key=_key(objective)) if ok else None


def search(job: MixJob, options: list[list[PoolOption]], objective: str) -> dict[str, Any]:
    """Every mix evaluated: the best single-pool plans, the LP rounded, all pools, the best overall."""
    combos = list(itertools.product(*options))
    if len(combos) > MAX_LEVEL_COMBOS:
        combos = list(itertools.product(*[o[:2] for o in options]))[:MAX_LEVEL_COMBOS]
    quotas = [o[0].quota for o in options]
    space = math.prod(q + 1 for q in quotas)
    exhaustive = space * len(combos) <= MAX_EXHAUSTIVE
    cache: dict = {}
    k = len(options)
    singles: dict[int, list[MixEval]] = {i: [] for i in range(k)}
    lp_evals: list[MixEval] = []
    lp_notes: list[str] = []
    lp_x: dict[str, float] = {}
    every: list[MixEval] = []
    full = tuple(quotas)
    for combo in combos:
        for i in range(k):
            for n in range(1, quotas[i] + 1):
                singles[i].append(evaluate(job, tuple(n if j == i else 0 for j in range(k)), combo, cache))
        x, why = _lp_counts(job, combo, objective)
        if x is None:
            lp_notes.append(why)
        else:
            evs = [evaluate(job, c, combo, cache) for c in _neighbours(x, combo)]
            lp_evals += evs
            best_here = _best(evs, objective)
            if best_here is not None and (not lp_x or best_here is _best(lp_evals, objective)):
                lp_x = {o.name: float(v) for o, v in zip(combo, x)}
        every.append(evaluate(job, full, combo, cache))
        if exhaustive:
            every += [evaluate(job, c, combo, cache) for c in itertools.product(*[range(q + 1) for q in quotas]) if sum(c) > 0]
    pool_all = [e for e in every if e.counts == full]
    everything = every + lp_evals + [e for v in singles.values() for e in v]
    return {"singles": singles, "lp": lp_evals, "lp_x": lp_x, "lp_notes": lp_notes, "all": pool_all,
            "everything": everything, "exhaustive": exhaustive, "evaluated": len(everything)}


# ------------------------------------------------------------------------------------ the plan
def _alt(name: str, evals: list[MixEval], objective: str, inp: Inputs, fallback_reason: str = "") -> Alternative:
    best = _best(evals, objective)
    if best is None:
        near = [e for e in evals if e.time_s is not None] or evals
        e = min(near, key=lambda e: (e.time_s if e.time_s is not None else math.inf)) if near else None
        reason = fallback_reason or (e.reason if e is not None else "no mix")
        if e is not None and e.time_s is not None:
            reason = f"{e.describe()}: {e.reason}"
        return Alternative(name, (), max(1, e.workers if e else 1), max(1, e.iterations if e else inp.J), None, None, None,
                           False, "pool-mix", reason)
    return Alternative(name, _bids(best), best.workers, best.iterations, best.cost, best.time_s, best.error, True,
                       "pool-mix", best.describe())


def _bids(e: MixEval) -> tuple[float, ...]:
    return tuple(float(o.bid) for n, o in zip(e.counts, e.options) for _ in range(n) if o.bid is not None)


def _pools_extra(e: MixEval) -> list[dict[str, Any]]:
    return [{"name": o.name, "instance": o.instance, "workers": int(n), "bid": o.bid, "price_per_hour": o.price,
             "speed": o.speed, "availability": o.availability, "region": o.region,
             "expected_cost_usd": float(c)} for n, o, c in zip(e.counts, e.options, e.by_pool)]


def _infeasible(res: dict[str, Any], inp: Inputs, job: MixJob) -> InfeasibleError:
    evals = [e for e in res["everything"] if e.time_s is not None]
    if not evals:
        why = next((e.reason for e in res["everything"] if e.reason), "no mix can run")
        return InfeasibleError(f"no pool mix reaches the error target: {why}",
                               "add workers to the pools, or relax the target", "cluster.pools")
    fastest = min(evals, key=lambda e: e.time_s)  # type: ignore[arg-type, return-value]
    if fastest.time_s > inp.deadline * (1 + 1e-9):  # type: ignore[operator]
        return InfeasibleError(f"no pool mix meets the deadline {inp.deadline:.0f} s: the fastest, {fastest.describe()}, "
                               f"takes {fastest.time_s:.0f} s in expectation",
                               f"allow at least {math.ceil(fastest.time_s * 1.01):.0f} s (deadline), add workers to the "
                               "faster pools, or add a faster pool", "deadline")
    in_time = [e for e in evals if e.time_s <= inp.deadline * (1 + 1e-9)]  # type: ignore[operator]
    cheapest = min(in_time, key=lambda e: e.cost)  # type: ignore[arg-type, return-value]
    return InfeasibleError(f"no pool mix that meets the deadline fits the budget ${job.budget:g}: the cheapest, "
                           f"{cheapest.describe()}, costs ${cheapest.cost:.4g} in expectation",
                           f"raise budget_usd to at least ${cheapest.cost * 1.01:.4g}, or allow a longer deadline",
                           "budget_usd")


def plan_pool_mix(spec: JobSpec, inp: Inputs, objective: str) -> Plan:
    """The plan of a pooled spec (module docstring); :class:`InfeasibleError` (exit 2) when no mix meets the
    deadline, budget and error target, naming the fix."""
    job = MixJob.of(spec, inp)
    options = pool_options(spec, inp)
    res = search(job, options, objective)
    best = _best(res["everything"], objective)
    if best is None:
        raise _infeasible(res, inp, job)
    alts = [_alt(f"pool:{opts[0].name}", res["singles"][i], objective, inp) for i, opts in enumerate(options)]
    alts.append(_alt("lp-mix", res["lp"], objective, inp, "; ".join(res["lp_notes"])))
    alts.append(_alt("all-pools", res["all"], objective, inp))
    alts.append(Alternative("pool-mix", _bids(best), best.workers, best.iterations, best.cost, best.time_s, best.error,
                            True, "pool-mix", best.describe()))
    same = [a.strategy for a in alts[:-1] if a.feasible and a.reason == best.describe()]
    od_cost = sum(n * o.billing.charge(float(o.on_demand or 0.0), 0.0, best.time_s) for n, o in zip(best.counts, best.options)) \
        + best.coordinator_cost if all(o.on_demand for n, o in zip(best.counts, best.options) if n > 0) else None
    what = (f"lowest expected cost (${best.cost:.4g}) among the pool mixes that meet the deadline ({inp.deadline:.0f} s) in expectation "
            "and the error target" if objective == "cost" else
            f"shortest expected time ({best.time_s:.0f} s) among the pool mixes within the "
            + (f"budget ${job.budget:g}" if job.budget is not None else "deadline"))
    why = (f"pool mix {best.describe()}: {what}; {res['evaluated']} mixes evaluated "
           f"({'every integer mix' if res['exhaustive'] else 'the LP rounded, each pool alone, all pools'}), "
           "the LP of paper 003 Sec. 4.3 rounded to integer workers" + (f"; same as {', '.join(same)}" if same else ""))
    others = sorted((a for a in alts[:-1] if a.feasible and a.reason != best.describe()),
                    key=lambda a: (a.expected_cost, a.expected_time_s) if objective == "cost" else (a.expected_time_s, a.expected_cost))
    if others:
        r = others[0]
        why += (f"; next best: {r.strategy} ({r.reason}) at ${r.expected_cost:.4g}" if objective == "cost"
                else f"; next best: {r.strategy} ({r.reason}) at {r.expected_time_s:.0f} s")
    assumed = inp.assumed + (
        ("pool mix: throughputs from the catalog speeds (mini-batch time step_time_s / speed), the parameter server "
        "serialising commits (Delta each), revocations as each pool's expected availability (fluid approximation; "
        "restarts and per-interval minimum charges not counted)"),
        f"pool mix LP: paper 003 Sec. 4.3 with X = instances used at once (gang, 0 <= X <= pool size), work "
        f"{inp.J * job.contributions(inp.n)} mini-batches; "
        + ("exact for continuous modes" if job.mode == "continuous" else
           "a relaxation for barrier modes (a round waits for its slowest member: about n x min speed with balance: "
           "equal), whose integer neighbours are evaluated exactly")) \
        + (("cross-region exchanges not modelled: set workload.model_mb",) if job.link is not None and not job.exchange_bytes else ())
    from spotwise.planner.estimate.pool_odds import mix_deadline_probability

    p_deadline, p_how = mix_deadline_probability(job, best, inp.deadline, evaluate, seed=spec.seed)
    assumed = assumed + (f"P(deadline) of the mix: {p_how}",)
    chosen = [o for n, o in zip(best.counts, best.options) if n > 0]
    price_source = "; ".join(f"{opts[0].name}: {', '.join(o.source for o in opts)}" for opts in options)
    rec = {"strategy": "pool-mix", "place": None, "instance": best.describe(), "workers": best.workers,
           "bids": list(_bids(best)), "expected_cost": best.cost, "expected_time_s": best.time_s, "deadline_probability": p_deadline,
           "deadline_measured": None, "deadline_ci95": None, "on_demand_cost": od_cost,
           "saving_vs_on_demand": None if not od_cost else 1.0 - float(best.cost) / od_cost,  # type: ignore[arg-type]
           "price_source": price_source, "ranked_places": []}
    extra: dict[str, Any] = {
        "instance": chosen[0].instance, "eps": inp.eps, "sync": spec.cluster.sync, "balance": spec.cluster.balance,
        "pools": _pools_extra(best), "coordinator": inp.market.coordinator.name, "coordinator_price": inp.coordinator_price,
        "ps_shards": job.shards, "coordinator_cost_usd": best.coordinator_cost, "billing": inp.market.billing.name,
        "error_model_source": inp.error_source, "pilot_reliable": None if inp.error_source == "caller" else not inp.pilot_problems,
        "pilot_problems": list(inp.pilot_problems), "kind": "vm",
        "lp": {"counts": res["lp_x"], "notes": res["lp_notes"], "paper": "003 Sec. 4.3 (gang allocation)"},
        "mixes_evaluated": res["evaluated"], "recommendation": rec}
    return Plan("pool-mix", _bids(best), best.workers, best.iterations, float(best.cost), float(best.time_s),  # type: ignore[arg-type]
                float(best.error if best.error is not None else inp.eps), objective, inp.deadline, why, tuple(alts),
                inp.measured, assumed, price_source, (), extra, deadline_probability=p_deadline)


def apply_pool_mix(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    """The spec (plain data) with the mix applied: each pool's workers and bid; pools with 0 workers dropped."""
    d = spec.to_dict()
    d["target"]["iterations"] = plan.iterations
    d["target"]["loss"] = None
    from spotwise.spec.load import duration_text

    d["deadline"] = duration_text(plan.deadline_s)
    chosen = {p["name"]: p for p in plan.extra["pools"]}
    cl = d["cluster"]
    kept = []
    for p in cl["pools"]:
        c = chosen.get(p["name"])
        if c is None or int(c["workers"]) < 1:
            continue
        p = dict(p, workers=int(c["workers"]))
        if c.get("bid") is not None:
            p["bids"] = float(c["bid"])
        elif isinstance(p.get("bids"), list):
            p["bids"] = max(p["bids"])
        kept.append(p)
    if not kept:
        raise InputError("the plan keeps no pool", "plan again", "--write-spec")
    cl["pools"] = kept
    cl["workers"] = sum(p["workers"] for p in kept)
    cl["instance_type"] = kept[0]["instance_type"]
    cl["region"] = kept[0].get("zone") or kept[0].get("region")
    cl["max_workers"] = None
    cl["bids"] = None
    return d
