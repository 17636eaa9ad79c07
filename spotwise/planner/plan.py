"""``spotwise plan``: from a job spec (and optionally price traces) to a recommended plan.

The planner puts together the three models the theorems of ``papers/000_3c734f3ffedcac15.txt``
need, says where each came from, compares the strategies of its Sec. VI-A and picks one:

* **prices** -- ``F(p)``: the spec's synthetic distribution (exact), or the time-weighted
  empirical CDF of a trace (``--trace`` or ``market.traces``);
* **runtime** -- the per-iteration runtime law: a worker's mini-batch takes
  ``m ((1 - s) + s Exp(1))`` with ``m = step_time_s / throughput`` (catalog) and straggler
  coefficient ``s`` -- exponential (eq. 14-15) when ``s = 1``, else its empirical law -- plus
  ``Delta = sync_overhead_s``;
* **error** -- the constants of Thm 1 fitted to a pilot's losses (:mod:`spotwise.planner.pilot`):
  a previous run (``--pilot DIR``) or a short in-process pilot.

Alternatives (each with expected cost, time and error, or the reason it is infeasible):

* ``no-interruptions`` -- bid above the highest price: never revoked (Sec. VI-A's benchmark);
* ``one-bid`` -- the optimal uniform bid (Thm 3);
* ``two-bids`` -- the optimal two bids, half the workers in each group (Thm 4);
* ``dynamic`` -- Sec. VI-A's dynamic strategy: start with half the workers, and after 80 % of the
  iterations add the rest and re-optimise the bid for the remaining iterations and deadline (the
  uniform bid of Thm 3 is re-solved; the paper re-solves Thm 4);
* ``on-demand`` -- the same workers on on-demand instances.

With ``objective="cost"`` the cheapest plan that meets the deadline (and budget) in expectation
is chosen; with ``"time"`` the fastest within the budget.  Costs are in USD (prices are $/h and
runtimes seconds, so the Lemma 2 cost is divided by 3600).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.market.series import StepSeries
from spotwise.market.world import Market, build_market
from spotwise.planner.prices import PriceModel
from spotwise.theory.bounds import ErrorModel, error_bound, error_bound_sequence, iterations_for_error
from spotwise.theory.cost import expected_cost_uniform, expected_time_uniform
from spotwise.theory.runtime import RuntimeModel

Objective = Literal["cost", "time"]
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Alternative:
    strategy: str
    bids: tuple[float, ...]
    workers: int
    iterations: int
    expected_cost: float | None
    expected_time_s: float | None
    expected_error: float | None
    feasible: bool
    method: str
    reason: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1:
            raise ValueError("an alternative needs workers >= 1 and iterations >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    strategy: str
    bids: tuple[float, ...]
    workers: int
    iterations: int
    expected_cost: float
    expected_time_s: float
    expected_error: float
    objective: str
    deadline_s: float
    why: str
    alternatives: tuple[Alternative, ...]
    measured: tuple[str, ...]
    assumed: tuple[str, ...]
    price_source: str
    policies: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bids"] = list(self.bids)
        d["alternatives"] = [a.to_dict() for a in self.alternatives]
        d["policies"] = list(self.policies)
        return d


@dataclass(frozen=True)
class Inputs:
    """The three models and the job's numbers, with their provenance."""

    prices: PriceModel | None
    fixed_price: float | None
    runtime: RuntimeModel
    error: ErrorModel
    n: int
    J: int
    eps: float
    deadline: float
    market: Market
    measured: tuple[str, ...]
    assumed: tuple[str, ...]
    price_source: str
    pilot_g_star: float = 0.0


# ------------------------------------------------------------------------------------ models
def runtime_model(spec: JobSpec, market: Market, samples: int = 20000) -> tuple[RuntimeModel, str]:
    m = market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    s = float(spec.cluster.straggler)
    delta = float(spec.cluster.sync_overhead_s)
    if s >= 1.0:
        return RuntimeModel.exponential(1.0 / m, delta), f"mini-batch time Exp(mean {m:.3g} s) + Delta {delta:g} s (eq. 14)"
    rng = np.random.default_rng([spec.seed, 17])
    draws = m * ((1 - s) + s * rng.exponential(1.0, size=samples))
    return (RuntimeModel.empirical(draws, delta),
            f"mini-batch time {m:.3g} s x ((1 - {s:g}) + {s:g} Exp(1)) + Delta {delta:g} s, empirical law")


def price_model(spec: JobSpec, market: Market, traces: list[str]) -> tuple[PriceModel | None, float | None, str]:
    """The spot price law, or a fixed price for preemptible/on-demand markets."""
    from spotwise.market import synthetic as syn

    if traces:
        from spotwise.market.traces import load_traces
        from spotwise.market.world import _pick

        series = _pick(load_traces(traces), "price", spec)
        return PriceModel.from_series(series), None, f"empirical CDF of {series.meta.id} ({len(series)} points)"
    synth = spec.market.synthetic
    if synth is not None and synth.kind == "uniform":
        return PriceModel.from_distribution(syn.UniformPrice(synth.low, synth.high)), None, \
            f"i.i.d. uniform on [{synth.low:g}, {synth.high:g}] $/h (spec)"
    if synth is not None and synth.kind == "gaussian":
        dist = syn.TruncatedGaussianPrice(mu=synth.mean, variance=synth.variance, low=float(synth.low or 0.0))
        return PriceModel.from_distribution(dist), None, \
            f"i.i.d. Gaussian mean {synth.mean:g}, variance {synth.variance:g}, truncated at {dist.low:g} (spec)"
    series: StepSeries = market.prices
    if len(series) >= 10 and series.max() > series.min():
        return PriceModel.from_series(series), None, f"empirical CDF of the spec's market ({series.meta.id})"
    return None, float(series.values[0]), f"fixed price {float(series.values[0]):g} $/h ({series.meta.id})"


def _error_model(spec: JobSpec, pilot_dir: str | None, pilot_steps: int) -> tuple[ErrorModel, float, list[str], list[str]]:
    from spotwise.planner import pilot as pl

    if pilot_dir is not None:
        fit, _ = pl.pilot_from_run(pilot_dir)
        src = f"Thm 1 constants fitted to the losses of the run in {pilot_dir}"
    else:
        fit, _ = pl.run_pilot(spec, steps=pilot_steps)
        src = f"Thm 1 constants fitted to a {pilot_steps}-step in-process pilot of {spec.workload.name}"
    measured = [f"{src}: beta = 1 - alpha c mu = {fit.beta:.5f}, floor {fit.F:.4g}, r2 {fit.r2:.3f}"]
    return fit.model, float(fit.g_star), measured, [f"pilot fit: {n}" for n in fit.notes]


def gather_inputs(spec: JobSpec, traces: list[str] | None = None, pilot_dir: str | None = None,
                  pilot_steps: int = 200, error_model: ErrorModel | None = None, g_star: float = 0.0) -> Inputs:
    market = build_market(spec)
    n = spec.cluster.workers
    runtime, rt_src = runtime_model(spec, market)
    prices, fixed, price_src = price_model(spec, market, list(traces or []))
    measured: list[str] = []
    assumed: list[str] = [f"runtime: {rt_src} (modelled from the catalog, not measured)"]
    if error_model is None:
        error_model, g_star, m, a = _error_model(spec, pilot_dir, pilot_steps)
        measured += m
        assumed += a
    else:
        assumed.append("error model given by the caller")
    inv_n = 1.0 / n
    if spec.target.loss is not None:
        eps = float(spec.target.loss) - g_star
        if eps <= 0:
            raise InfeasibleError(f"target loss {spec.target.loss:g} is not above the pilot's asymptote {g_star:g}",
                                  "raise target.loss", "target.loss")
        J = iterations_for_error(eps, error_model, inv_y=inv_n)
        measured.append(f"iterations for loss {spec.target.loss:g}: J = phi^-1(eps) = {J} (Corollary 2, E[1/y] = 1/{n})")
    else:
        J = int(spec.target.iterations or 1)
        eps = float(error_bound(J, error_model, inv_n)) * (1 + 1e-9)
        assumed.append(f"target error eps = the Thm 1 bound after J = {J} iterations with all {n} workers ({eps:.4g})")
    ER = runtime.expected(n, _sync(spec), _n_sync(spec))
    if spec.deadline_s is not None:
        deadline = float(spec.deadline_s)
    else:
        deadline = 2.0 * J * ER
        assumed.append(f"deadline = twice the uninterrupted runtime J E[R(n)] = {deadline:.0f} s (paper 000 Sec. VI)")
    return Inputs(prices, fixed, runtime, error_model, n, J, eps, deadline, market, tuple(measured), tuple(assumed),
                  price_src, g_star)


def _sync(spec: JobSpec) -> str:
    """The runtime model's sync mode; the asynchronous PS is N-batch-sync with N = 1 (one update per mini-batch)."""
    return {"full": "full", "n-sync": "n-sync", "n-batch": "n-batch", "async": "n-batch"}[spec.cluster.sync]


def _n_sync(spec: JobSpec) -> int | None:
    return 1 if spec.cluster.sync == "async" else spec.cluster.sync_n


# ------------------------------------------------------------------------------------ strategies
def _uniform(inp: Inputs, n: int, J: int, deadline: float, sync: str, n_sync: int | None) -> tuple[float, float, float]:
    """(bid, E[time], E[cost USD]) of the Thm 3 bid for J iterations within ``deadline``."""
    assert inp.prices is not None
    R = inp.runtime.expected(n, sync, n_sync)
    level = J * R / deadline
    if level > 1.0 + 1e-12:
        raise InfeasibleError(f"the deadline {deadline:.0f} s is shorter than the uninterrupted runtime {J * R:.0f} s",
                              f"allow at least {J * R:.0f} s, or use fewer iterations or faster instances", "deadline")
    b = _bid_at(inp.prices, min(level, 1.0))
    F = float(inp.prices.cdf(b))
    return b, float(expected_time_uniform(J, R, F)), float(expected_cost_uniform(J, n, R, inp.prices, b)) / SECONDS_PER_HOUR


def _bid_at(prices: PriceModel, level: float) -> float:
    """Smallest bid with ``F(b) >= level`` (for traces: a price level of the trace)."""
    b = float(prices.ppf(level))
    if prices.cdf(b) < level - 1e-12:
        levels = prices.levels()
        if levels is not None:
            ok = [v for v in levels if prices.cdf(v) >= level - 1e-12]
            b = float(min(ok)) if ok else float(prices.upper)
    return b


def _alt_no_interruptions(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    assert inp.prices is not None
    R = inp.runtime.expected(inp.n, sync, n_sync)
    b = float(inp.prices.upper)
    t = inp.J * R
    cost = inp.J * inp.n * R * float(inp.prices.mean()) / SECONDS_PER_HOUR
    ok = t <= inp.deadline
    return Alternative("no-interruptions", (b,) * inp.n, inp.n, inp.J, cost, t, inp.eps, ok, "closed-form",
                       "" if ok else f"uninterrupted runtime {t:.0f} s exceeds the deadline {inp.deadline:.0f} s",
                       ("bid above the highest price: never revoked, pays the mean price",))


def _alt_one_bid(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    try:
        b, t, c = _uniform(inp, inp.n, inp.J, inp.deadline, sync, n_sync)
    except InfeasibleError as e:
        return Alternative("one-bid", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    method = "closed-form" if inp.prices is not None and inp.prices.iid else "numerical"
    notes = () if method == "closed-form" else ("trace prices: the smallest trace price level meeting F(b) >= J E[R]/theta",)
    return Alternative("one-bid", (b,) * inp.n, inp.n, inp.J, c, t, inp.eps, True, method,
                       f"Thm 3: F(b*) = J E[R(n)] / theta = {inp.J} x {inp.runtime.expected(inp.n, sync, n_sync):.3g} s / {inp.deadline:.0f} s",
                       notes)


def _alt_two_bids(inp: Inputs) -> Alternative:
    from spotwise.planner.bidding import optimal_two_bids

    n_high = max(1, inp.n // 2)
    if inp.n < 2:
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, "closed-form", "two bids need >= 2 workers")
    try:
        bp = optimal_two_bids(inp.prices, inp.runtime, inp.error, n=inp.n, n_high=n_high, eps=inp.eps,  # type: ignore[arg-type]
                              deadline=inp.deadline, iterations=inp.J)
    except (InfeasibleError, InputError) as e:
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    if bp.status == "infeasible":
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, bp.method, bp.reason, bp.notes)
    return Alternative("two-bids", tuple(bp.bids), inp.n, bp.iterations, bp.expected_cost / SECONDS_PER_HOUR,
                       bp.expected_time, bp.expected_error, True, bp.method,
                       f"Thm 4 with {n_high} high and {inp.n - n_high} low bids ({bp.status})" + (f": {bp.reason}" if bp.reason else ""),
                       bp.notes)


def _dynamic_error(inp: Inputs, n1: int, J: int, switch: float) -> float:
    J1 = max(1, int(round(switch * J)))
    return error_bound_sequence(inp.error, np.array([1.0 / n1] * J1 + [1.0 / inp.n] * (J - J1)))


def _alt_dynamic(inp: Inputs, sync: str, n_sync: int | None, switch: float = 0.8) -> Alternative:
    """Sec. VI-A: n/2 workers for the first 80 % of the iterations, then n with the bid re-optimised.

    As in the paper, the dynamic strategy runs the same J iterations as the others.  Its Thm 1
    bound is higher (fewer workers early means E[1/y] = 2/n for most iterations), and the plan
    reports that bound as its expected error; the paper (Fig. 4) and our measurements
    (docs/benchmarks.md, ``bidding_paper000``) find it reaches the same accuracy at the same J.
    """
    n1 = max(1, inp.n // 2)
    if n1 == inp.n:
        return Alternative("dynamic", (), inp.n, inp.J, None, None, None, False, "closed-form", "needs >= 2 workers to grow")
    J = inp.J
    J1 = max(1, int(round(switch * J)))
    J2 = J - J1
    R1 = inp.runtime.expected(n1, sync, n_sync)
    R2 = inp.runtime.expected(inp.n, sync, n_sync)
    # split the deadline in proportion to the uninterrupted runtimes of the two phases
    theta1 = inp.deadline * (J1 * R1) / (J1 * R1 + J2 * R2)
    try:
        b1, t1, c1 = _uniform(inp, n1, J1, theta1, sync, n_sync)
        b2, t2, c2 = _uniform(inp, inp.n, J2, inp.deadline - t1, sync, n_sync) if J2 > 0 else (b1, 0.0, 0.0)
    except InfeasibleError as e:
        return Alternative("dynamic", (), inp.n, J, None, None, None, False, "closed-form", e.message)
    err = _dynamic_error(inp, n1, J, switch)
    notes = ("the error is the Thm 1 recursion with E[1/y] = 1/workers in each phase",)
    if err > inp.eps * (1 + 1e-9):
        notes += (f"its Thm 1 bound {err:.4g} is above the target {inp.eps:.4g}: the paper runs the same J and "
                  "reaches the same accuracy (Fig. 4); so do our runs (docs/benchmarks.md)",)
    return Alternative("dynamic", (b1,) * n1 + (b2,) * (inp.n - n1), inp.n, J, c1 + c2, t1 + t2, err,
                       t1 + t2 <= inp.deadline * (1 + 1e-9), "closed-form",
                       f"{n1} workers bid {b1:.4g} for {J1} iterations, then {inp.n} workers re-bid {b2:.4g} for the "
                       f"remaining {J2} within the remaining deadline (Thm 3 re-solved)", notes)


def _alt_on_demand(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    R = inp.runtime.expected(inp.n, sync, n_sync)
    t = inp.J * R
    od = inp.market.on_demand_price
    ok = t <= inp.deadline
    return Alternative("on-demand", (), inp.n, inp.J, inp.J * inp.n * R * od / SECONDS_PER_HOUR, t, inp.eps, ok, "closed-form",
                       f"{inp.n} x {inp.market.instance.name} at {od:g} $/h" + ("" if ok else ", misses the deadline"))


def _alt_fixed_price(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    assert inp.fixed_price is not None
    R = inp.runtime.expected(inp.n, sync, n_sync)
    t = inp.J * R
    return Alternative("fixed-price", (), inp.n, inp.J, inp.J * inp.n * R * inp.fixed_price / SECONDS_PER_HOUR, t, inp.eps,
                       t <= inp.deadline, "closed-form", f"{inp.n} workers at the fixed price {inp.fixed_price:g} $/h")


def _revocation_q(spec: JobSpec, inp: Inputs, sync: str, n_sync: int | None) -> float | None:
    """Per-iteration preemption probability q for Thm 7 (None when the market is not preemptible)."""
    r = spec.market.revocation
    if r.model == "bernoulli":
        return float(r.q or 0.0)
    if r.model == "lifetime":
        rev = inp.market.revocation
        mean_life = float(getattr(rev, "capped_mean_s", 0.0) or getattr(rev, "mttf_s", 0.0) or 0.0)
        if mean_life > 0:
            R = inp.runtime.expected(inp.n, sync, n_sync)
            return float(min(0.99, 1.0 - math.exp(-R / mean_life)))  # P(a lifetime ends within one iteration)
    return None


def _alt_preemptible(inp: Inputs, spec: JobSpec, sync: str, n_sync: int | None, q: float) -> Alternative:
    from spotwise.planner.bidding import optimal_workers_and_iterations

    assert inp.fixed_price is not None
    R = inp.runtime.expected(inp.n, sync, n_sync)
    try:
        wp = optimal_workers_and_iterations(inp.error, eps=inp.eps, deadline=inp.deadline, runtime=R,
                                            price=inp.fixed_price, q=q)
    except (InfeasibleError, InputError) as e:
        return Alternative("preemptible-thm7", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    return Alternative("preemptible-thm7", (), wp.n_workers, wp.iterations, wp.expected_cost / SECONDS_PER_HOUR,
                       wp.expected_time, wp.expected_error, wp.expected_time <= inp.deadline * (1 + 1e-9), wp.method,
                       f"Thm 7: n* = {wp.n_workers} preemptible workers (preempted with q = {q:.3g} per iteration), "
                       f"J* = {wp.iterations}", wp.notes)


def compare(inp: Inputs, spec: JobSpec) -> list[Alternative]:
    sync, n_sync = _sync(spec), _n_sync(spec)
    alts: list[Alternative] = []
    if inp.prices is not None:
        alts += [_alt_no_interruptions(inp, sync, n_sync), _alt_one_bid(inp, sync, n_sync)]
        if sync == "full":
            alts += [_alt_two_bids(inp), _alt_dynamic(inp, sync, n_sync)]
    else:
        alts.append(_alt_fixed_price(inp, sync, n_sync))
        q = _revocation_q(spec, inp, sync, n_sync)
        if q is not None:
            alts.append(_alt_preemptible(inp, spec, sync, n_sync, q))
    try:
        alts.append(_alt_on_demand(inp, sync, n_sync))
    except InputError:
        pass  # no on-demand price in the catalog
    return alts


def make_plan(spec: JobSpec, *, traces: list[str] | None = None, objective: Objective = "cost", pilot_dir: str | None = None,
              pilot_steps: int = 200, error_model: ErrorModel | None = None) -> Plan:
    if objective not in ("cost", "time"):
        raise InputError(f"unknown objective {objective!r}", "use cost or time", "--objective")
    inp = gather_inputs(spec, traces, pilot_dir, pilot_steps, error_model)
    alts = compare(inp, spec)
    budget = spec.budget_usd
    ok = [a for a in alts if a.feasible and a.expected_cost is not None and (budget is None or a.expected_cost <= budget)]
    if not ok:
        reasons = "; ".join(f"{a.strategy}: {a.reason or 'over budget'}" for a in alts)
        raise InfeasibleError(f"no strategy meets the deadline {inp.deadline:.0f} s" + (f" and budget ${budget:g}" if budget else ""),
                              f"relax the binding constraint ({reasons})", "plan")
    key = (lambda a: (a.expected_cost, a.expected_time_s)) if objective == "cost" else (lambda a: (a.expected_time_s, a.expected_cost))
    best = min(ok, key=key)  # type: ignore[arg-type]
    others = sorted((a for a in ok if a is not best), key=key)  # type: ignore[arg-type]
    runner = others[0] if others else None
    why = (f"lowest expected cost (${best.expected_cost:.4g}) among the strategies that meet the deadline"
           if objective == "cost" else f"shortest expected time ({best.expected_time_s:.0f} s) within the budget")
    if runner is not None and runner.expected_cost:
        why += (f"; next best: {runner.strategy} at ${runner.expected_cost:.4g}"
                f" ({100 * (runner.expected_cost / best.expected_cost - 1):.0f}% more)" if objective == "cost" else
                f"; next best: {runner.strategy} at {runner.expected_time_s:.0f} s")
    policies: tuple[dict[str, Any], ...] = ()
    if best.strategy == "dynamic":
        policies = (dynamic_policy_params(inp, spec, best.iterations),)
    return Plan(best.strategy, best.bids, best.workers, best.iterations, float(best.expected_cost),
                float(best.expected_time_s), float(best.expected_error or inp.eps), objective, inp.deadline, why,
                tuple(alts), inp.measured, inp.assumed, inp.price_source, policies,
                {"instance": inp.market.instance.name, "eps": inp.eps, "sync": spec.cluster.sync,
                 "on_demand_price": _on_demand_or_none(inp)})


def apply_plan(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    """The spec (as plain data, ready for YAML) with the plan carried out: workers, bids, iterations, policies."""
    d = spec.to_dict()
    d["target"]["iterations"] = plan.iterations
    d["target"]["loss"] = None
    d["deadline"] = plan.deadline_s
    cl = d["cluster"]
    cl["workers"] = plan.workers
    rev = d["market"]["revocation"]
    if plan.strategy in ("no-interruptions", "one-bid", "two-bids"):
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
    if cl.get("max_workers") is not None and cl["max_workers"] < cl["workers"]:
        cl["max_workers"] = cl["workers"]
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
        "mean_round_s": float(inp.runtime.expected(inp.n, _sync(spec), _n_sync(spec))), "price": price}}


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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["Alternative", "Plan", "Inputs", "make_plan", "gather_inputs", "compare", "plot_cost_vs_deadline",
           "cost_vs_deadline", "runtime_model", "price_model"]
