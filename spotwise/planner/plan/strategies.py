"""The strategies ``spotwise plan`` compares (``papers/000_3c734f3ffedcac15.txt`` Sec. VI-A), each an
:class:`~spotwise.planner.plan.records.Alternative` with its expected cost, time and error.

* ``no-interruptions`` -- bid above the highest price: never revoked (Sec. VI-A's benchmark);
* ``one-bid`` -- the optimal uniform bid (Thm 3);
* ``two-bids`` -- the optimal two bids, half the workers in each group (Thm 4);
* ``dynamic`` -- half the workers, and after 80 % of the iterations the rest with the bid re-optimised
  (Thm 3 re-solved), for as many iterations as its two-phase Thm 1 recursion needs to reach ``eps``;
* ``on-demand``, ``fixed-price`` -- the same workers at a fixed price;
* ``preemptible-thm7`` -- Thm 7's workers and iterations on a preemptible market, priced on its churn;
* ``as-specified`` -- the spec's own workers (and bids) on its market's churn;
* ``serverless`` -- the same workers as functions (paper 004, :mod:`spotwise.planner.plan.serverless`).

Costs are priced like a run's :class:`~spotwise.market.billing.Ledger` (the coordinator for the whole
expected time, the billing policy's granularity and minimum charge, and the minimum charge of each
spot interval cut short by a revocation in expectation: :func:`_spot_billing_extra`).  An alternative
whose own Thm 1 bound exceeds ``eps`` is infeasible (:func:`_hold_to_error_target`); every feasible
one carries its P(deadline) (:mod:`spotwise.planner.estimate.deadline`).  :func:`compare` lists them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.plan import serverless as sv
from spotwise.planner.estimate.deadline import Phase, effective_epoch, phases_deadline_probability
from spotwise.planner.plan.rounds import _churn, _n_sync, _round_mean, _sync
from spotwise.planner.plan.records import _ERR_TOL, SECONDS_PER_HOUR, Alternative, Inputs
from spotwise.theory.bounds import error_bound
from spotwise.theory.cost import expected_cost_uniform, expected_time_uniform


# ------------------------------------------------------------------------------------ pricing like a run
def _run_moments(inp: Inputs, n: int, sync: str, n_sync: int | None) -> tuple[float, float]:
    """``(E[R(n)], Var[R(n)])`` of one iteration (eq. (14)-(15); :meth:`RuntimeModel.variance`)."""
    return _round_mean(inp.runtime, n, sync, n_sync), inp.runtime.variance(n, sync, n_sync)  # type: ignore[arg-type]


def _epoch(inp: Inputs, bid: float) -> float:
    """Epoch length of :mod:`spotwise.planner.estimate.deadline` for a top bid ``bid``."""
    if inp.history is not None:
        return effective_epoch(inp.history, bid, inp.epoch_s)
    return inp.epoch_s


def _coordinator_cost(inp: Inputs, t: float) -> float:
    """USD of the coordinator (on-demand, never revoked) over ``[0, t)``, billed as the Ledger bills it."""
    return inp.on_demand_billing.charge(inp.coordinator_price, 0.0, t)


def _on_demand_workers_cost(inp: Inputs, n: int, price: float, t: float) -> float:
    """USD of ``n`` instances at a fixed ``price`` $/h, each running ``[0, t)`` (Ledger billing)."""
    return n * inp.on_demand_billing.charge(price, 0.0, t)


def _spot_billing_extra(inp: Inputs, bids: tuple[float, ...], t_job: float) -> float:
    """Expected USD the billing policy adds to the continuous Lemma 2 cost of spot workers with ``bids``.

    A worker bidding ``b`` (``F = F(b)``) runs in up-runs of ``K`` price epochs of ``Delta`` seconds,
    ``P(K = k) = F^(k-1) (1 - F)`` (i.i.d. epochs, :mod:`spotwise.planner.estimate.deadline`); over the job's
    expected time ``t`` it starts about ``1 + (t / Delta) F (1 - F)`` runs.  Each run ended by a
    revocation is billed ``B(K Delta)`` (:meth:`BillingPolicy.billed_seconds` with ``revoked=True``:
    the minimum charge and rounding up, or the free partial period of the per-hour rule) instead of
    ``K Delta``; the extension is charged at the price in force after the revocation,
    ``E[p | p > b]`` (a credit at ``E[p | p <= b]``).  A worker never revoked (``F = 1``) is one
    interval of ``t`` seconds billed ``B(t)`` at the mean price.
    """
    assert inp.prices is not None
    pol = inp.market.billing
    total = 0.0
    mean = float(inp.prices.mean())
    for b in sorted(set(bids)):
        count = sum(1 for x in bids if x == b)
        F = float(inp.prices.cdf(b))
        if F <= 0:
            continue
        if F >= 1 - 1e-12:
            total += count * (pol.billed_seconds(t_job) - t_job) * mean / SECONDS_PER_HOUR
            continue
        delta = _epoch(inp, b)
        pm = float(inp.prices.partial_mean(b))
        above, below = (mean - pm) / (1 - F), pm / F
        kmax = max(2, min(100_000, int(math.ceil(math.log(1e-12) / math.log(F))) if F > 0 else 2))
        extra = 0.0
        for k in range(1, kmax + 1):
            d = k * delta
            x = pol.billed_seconds(d, revoked=True) - d
            extra += F ** (k - 1) * (1 - F) * x * (above if x > 0 else below)
        runs = 1.0 + (t_job / delta) * F * (1 - F)
        total += count * runs * extra / SECONDS_PER_HOUR
    return total


# ------------------------------------------------------------------------------------ strategies
def _uniform(inp: Inputs, n: int, J: int, deadline: float, sync: str, n_sync: int | None) -> tuple[float, float, float]:
    """(bid, E[time], E[worker cost USD, Lemma 2]) of the Thm 3 bid for J iterations within ``deadline``."""
    from spotwise.planner.bids import thm3_bid

    assert inp.prices is not None
    R = _round_mean(inp.runtime, n, sync, n_sync)
    thm3 = thm3_bid(inp.prices, J, R, deadline)
    if not thm3.feasible:
        raise InfeasibleError(f"the deadline {deadline:.0f} s is shorter than the uninterrupted runtime {J * R:.0f} s",
                              f"allow at least {J * R:.0f} s, or use fewer iterations or faster instances", "deadline")
    b = thm3.bid
    F = float(inp.prices.cdf(b))
    return b, float(expected_time_uniform(J, R, F)), float(expected_cost_uniform(J, n, R, inp.prices, b)) / SECONDS_PER_HOUR


def _p_meet(inp: Inputs, phases: list[Phase]) -> float:
    return phases_deadline_probability(phases, inp.deadline)


def _alt_no_interruptions(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    assert inp.prices is not None
    R, V = _run_moments(inp, inp.n, sync, n_sync)
    b = float(inp.prices.upper)
    t = inp.J * R
    cost = inp.J * inp.n * R * float(inp.prices.mean()) / SECONDS_PER_HOUR
    cost += _spot_billing_extra(inp, (b,) * inp.n, t) + _coordinator_cost(inp, t)
    ok = t <= inp.deadline
    return Alternative("no-interruptions", (b,) * inp.n, inp.n, inp.J, cost, t, inp.eps, ok, "closed-form",
                       "" if ok else f"uninterrupted runtime {t:.0f} s exceeds the deadline {inp.deadline:.0f} s",
                       ("bid above the highest price: never revoked, pays the mean price",),
                       _p_meet(inp, [Phase(inp.J, R, V, 1.0, inp.epoch_s)]) if ok else None)


def _alt_one_bid(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    assert inp.prices is not None
    try:
        b, t, c = _uniform(inp, inp.n, inp.J, inp.deadline, sync, n_sync)
    except InfeasibleError as e:
        return Alternative("one-bid", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    method = "closed-form" if inp.prices.iid else "numerical"
    notes = () if method == "closed-form" else ("trace prices: the smallest trace price level meeting F(b) >= J E[R]/theta",)
    R, V = _run_moments(inp, inp.n, sync, n_sync)
    c += _spot_billing_extra(inp, (b,) * inp.n, t) + _coordinator_cost(inp, t)
    p = _p_meet(inp, [Phase(inp.J, R, V, float(inp.prices.cdf(b)), _epoch(inp, b))])
    return Alternative("one-bid", (b,) * inp.n, inp.n, inp.J, c, t, inp.eps, True, method,
                       f"Thm 3: F(b*) = J E[R(n)] / theta = {inp.J} x {R:.3g} s / {inp.deadline:.0f} s", notes, p)


def _alt_two_bids(inp: Inputs) -> Alternative:
    from spotwise.planner.bids import optimal_two_bids

    assert inp.prices is not None
    n_high = max(1, inp.n // 2)
    if inp.n < 2:
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, "closed-form", "two bids need >= 2 workers")
    try:
        bp = optimal_two_bids(inp.prices, inp.runtime, inp.error, n=inp.n, n_high=n_high, eps=inp.eps,
                              deadline=inp.deadline, iterations=inp.J)
    except (InfeasibleError, InputError) as e:
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    if bp.status == "infeasible":
        return Alternative("two-bids", (), inp.n, inp.J, None, None, None, False, bp.method, bp.reason, bp.notes)
    bh, bl = max(bp.bids), min(bp.bids)
    Fh, Fl = float(inp.prices.cdf(bh)), float(inp.prices.cdf(bl))
    gamma = Fl / Fh if Fh > 0 else 0.0
    Rh, Vh = _run_moments(inp, n_high, "full", None)
    Rn, Vn = _run_moments(inp, inp.n, "full", None)
    mean = (1 - gamma) * Rh + gamma * Rn  # E[R | running]: n_h or all n workers active (eq. (20))
    var = (1 - gamma) * (Vh + Rh**2) + gamma * (Vn + Rn**2) - mean**2
    cost = bp.expected_cost / SECONDS_PER_HOUR + _spot_billing_extra(inp, tuple(bp.bids), bp.expected_time)
    cost += _coordinator_cost(inp, bp.expected_time)
    p = _p_meet(inp, [Phase(bp.iterations, mean, max(var, 0.0), Fh, _epoch(inp, bh))])
    return Alternative("two-bids", tuple(bp.bids), inp.n, bp.iterations, cost, bp.expected_time, bp.expected_error, True,
                       bp.method,
                       f"Thm 4 with {n_high} high and {inp.n - n_high} low bids ({bp.status})" + (f": {bp.reason}" if bp.reason else ""),
                       bp.notes, p)


def _dynamic_error(inp: Inputs, n1: int, J: int, switch: float) -> float:
    """Thm 1 (eq. (10)) for ``J1 = round(switch J)`` iterations with ``E[1/y] = 1/n1``, then ``J - J1`` with ``1/n``.

    The recursion ``e <- beta e + alpha^2 L M v / 2`` summed in closed form per phase:
    ``e1 = error_bound(J1, 1/n1)``, ``e = beta^J2 e1 + floor(1/n) (1 - beta^J2)``.
    """
    J1 = max(1, int(round(switch * J)))
    J2 = J - J1
    e1 = float(error_bound(J1, inp.error, 1.0 / n1))
    bj = inp.error.beta ** J2
    return bj * e1 + inp.error.floor(1.0 / inp.n) * (1.0 - bj)


def dynamic_iterations(inp: Inputs, n1: int, switch: float = 0.8, cap: int = 10**8) -> int:
    """Smallest ``J >= inp.J`` whose two-phase Thm 1 bound (:func:`_dynamic_error`) is ``<= eps``.

    Corollary 2 (eq. (24)) inverts the static bound; the phase sequence has no closed-form inverse,
    so ``J`` is found by doubling and bisection (the bound decreases in ``J`` once the second phase
    dominates).  Raises :class:`InfeasibleError` when ``eps`` is at or below the floor of all ``n``
    workers (no ``J`` reaches it) or ``J`` would exceed ``cap``.
    """
    eps = inp.eps * (1 + _ERR_TOL)
    fl = inp.error.floor(1.0 / inp.n)
    if eps <= fl:
        raise InfeasibleError(f"the error target {inp.eps:.4g} is at or below the Thm 1 floor {fl:.4g} of {inp.n} workers",
                              "relax the target or add workers", "error constraint")
    ok = lambda J: _dynamic_error(inp, n1, J, switch) <= eps  # noqa: E731
    lo = max(2, inp.J)
    if ok(lo):
        return lo
    hi = lo
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            raise InfeasibleError(f"the dynamic strategy needs more than {cap} iterations to reach the error target "
                                  f"{inp.eps:.4g}", "relax the target or add workers", "error constraint")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _alt_dynamic(inp: Inputs, sync: str, n_sync: int | None, switch: float = 0.8) -> Alternative:
    """Sec. VI-A: n/2 workers for the first 80 % of the iterations, then n with the bid re-optimised.

    Unlike the paper (which runs the same J as the static strategies and reports that it reaches
    the same accuracy, Fig. 4), the plan holds every strategy to the same error target: ``J`` is the
    smallest number of iterations whose two-phase Thm 1 bound is ``<= eps``
    (:func:`dynamic_iterations`).  With the same ``J`` the strategy does about half the work of the
    static ones, misses the target, and so looks cheaper than on-demand even when spot prices equal
    the on-demand price.
    """
    assert inp.prices is not None
    n1 = max(1, inp.n // 2)
    if n1 == inp.n:
        return Alternative("dynamic", (), inp.n, inp.J, None, None, None, False, "closed-form", "needs >= 2 workers to grow")
    try:
        J = dynamic_iterations(inp, n1, switch)
    except InfeasibleError as e:
        return Alternative("dynamic", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    J1 = max(1, int(round(switch * J)))
    J2 = J - J1
    R1, V1 = _run_moments(inp, n1, sync, n_sync)
    R2, V2 = _run_moments(inp, inp.n, sync, n_sync)
    # split the deadline in proportion to the uninterrupted runtimes of the two phases
    theta1 = inp.deadline * (J1 * R1) / (J1 * R1 + J2 * R2)
    try:
        b1, t1, c1 = _uniform(inp, n1, J1, theta1, sync, n_sync)
        b2, t2, c2 = _uniform(inp, inp.n, J2, inp.deadline - t1, sync, n_sync) if J2 > 0 else (b1, 0.0, 0.0)
    except InfeasibleError as e:
        return Alternative("dynamic", (), inp.n, J, None, None, None, False, "closed-form",
                           f"{J} iterations (what its Thm 1 bound needs to reach eps = {inp.eps:.4g}) do not fit: {e.message}")
    err = _dynamic_error(inp, n1, J, switch)
    cost = c1 + c2 + _spot_billing_extra(inp, (b1,) * n1, t1) + _spot_billing_extra(inp, (b2,) * inp.n, t2)
    cost += _coordinator_cost(inp, t1 + t2)
    notes = ("the error is the Thm 1 recursion with E[1/y] = 1/workers in each phase",
             f"J = {J} iterations: the fewest whose two-phase Thm 1 bound reaches eps (static strategies: {inp.J})")
    ok = t1 + t2 <= inp.deadline * (1 + 1e-9)
    p = _p_meet(inp, [Phase(J1, R1, V1, float(inp.prices.cdf(b1)), _epoch(inp, b1)),
                      Phase(J2, R2, V2, float(inp.prices.cdf(b2)), _epoch(inp, b2))]) if ok else None
    return Alternative("dynamic", (b1,) * n1 + (b2,) * (inp.n - n1), inp.n, J, cost, t1 + t2, err, ok, "closed-form",
                       f"{n1} workers bid {b1:.4g} for {J1} iterations, then {inp.n} workers re-bid {b2:.4g} for the "
                       f"remaining {J2} within the remaining deadline (Thm 3 re-solved)", notes, p)


def _alt_on_demand(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    R, V = _run_moments(inp, inp.n, sync, n_sync)
    t = inp.J * R
    od = inp.market.on_demand_price
    ok = t <= inp.deadline
    cost = _on_demand_workers_cost(inp, inp.n, od, t) + _coordinator_cost(inp, t)
    return Alternative("on-demand", (), inp.n, inp.J, cost, t, inp.eps, ok, "closed-form",
                       f"{inp.n} x {inp.market.instance.name} at {od:g} $/h" + ("" if ok else ", misses the deadline"),
                       (), _p_meet(inp, [Phase(inp.J, R, V, 1.0, inp.epoch_s)]) if ok else None)


def _alt_fixed_price(inp: Inputs, sync: str, n_sync: int | None) -> Alternative:
    assert inp.fixed_price is not None
    R, V = _run_moments(inp, inp.n, sync, n_sync)
    t = inp.J * R
    ok = t <= inp.deadline
    cost = _on_demand_workers_cost(inp, inp.n, inp.fixed_price, t) + _coordinator_cost(inp, t)
    return Alternative("fixed-price", (), inp.n, inp.J, cost, t, inp.eps, ok, "closed-form",
                       f"{inp.n} workers at the fixed price {inp.fixed_price:g} $/h", (),
                       _p_meet(inp, [Phase(inp.J, R, V, 1.0, inp.epoch_s)]) if ok else None)


def _revocation_q(spec: JobSpec, inp: Inputs, sync: str, n_sync: int | None) -> float | None:
    """Per-iteration preemption probability q for Thm 7 (None when the market is not preemptible)."""
    r = spec.market.revocation
    if r.model == "bernoulli":
        return float(r.q or 0.0)
    if r.model == "lifetime":
        rev = inp.market.revocation
        mean_life = float(getattr(rev, "capped_mean_s", 0.0) or getattr(rev, "mttf_s", 0.0) or 0.0)
        if mean_life > 0:
            R = _round_mean(inp.runtime, inp.n, sync, n_sync)
            return float(min(0.99, 1.0 - math.exp(-R / mean_life)))  # P(a lifetime ends within one iteration)
    return None


def _alt_preemptible(inp: Inputs, spec: JobSpec, sync: str, n_sync: int | None, q: float) -> Alternative:
    from spotwise.planner.bids import optimal_workers_and_iterations

    assert inp.fixed_price is not None
    R = _round_mean(inp.runtime, inp.n, sync, n_sync)
    try:
        wp = optimal_workers_and_iterations(inp.error, eps=inp.eps, deadline=inp.deadline, runtime=R,
                                            price=inp.fixed_price, q=q)
    except (InfeasibleError, InputError) as e:
        return Alternative("preemptible-thm7", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    # a job whose length is in samples (target.samples / epochs / tokens) trains all of them: Thm 7's
    # J* (the fewest iterations its error target needs) is raised to commit them with its n* workers
    J, notes = wp.iterations, tuple(wp.notes)
    need = spec.target_samples()
    if need is not None:
        per_worker = max(1, spec.samples_per_step() // max(1, inp.n))
        J_len = -(-int(need) // (wp.n_workers * per_worker))
        if J_len > J:
            notes += (f"J raised from Thm 7's J* = {J} to {J_len}: the job's length is {need:,} samples "
                      f"({wp.n_workers} workers x {per_worker} a step)",)
            J = J_len
    wp = replace(wp, iterations=J, notes=notes)
    # Thm 7 chooses n* and J*; what they cost and take is priced on the market's real churn
    # (spotwise.planner.estimate.churn), like the run of the spec it would write
    try:
        est = _churn(inp, spec, wp.n_workers, wp.iterations)
    except InfeasibleError as e:
        return Alternative("preemptible-thm7", (), wp.n_workers, wp.iterations, None, None, None, False, wp.method, e.message)
    ok = est.time_s <= inp.deadline * (1 + 1e-9)
    err = float(error_bound(wp.iterations, inp.error, est.inv_y))
    head = (f"Thm 7: n* = {wp.n_workers} preemptible workers (preempted with q = {q:.3g} per iteration), "
            f"J* = {wp.iterations}; priced on the market's churn")
    return Alternative("preemptible-thm7", (), wp.n_workers, wp.iterations, est.cost, est.time_s, err, ok, wp.method,
                       head if ok else f"expected time {est.time_s:.0f} s exceeds the deadline {inp.deadline:.0f} s ({head})",
                       wp.notes + (est.describe(),), _churn_p_meet(est, inp.deadline) if ok else None)


def _churn_p_meet(est: Any, deadline: float) -> float:
    """P(time <= deadline) of a churn estimate: normal with the histories' mean and spread."""
    sd = float(getattr(est, "time_sd_s", 0.0))
    if sd <= 0:
        return 1.0 if est.time_s <= deadline else 0.0
    return float(0.5 * math.erfc((est.time_s - deadline) / (sd * math.sqrt(2.0))))


def _alt_as_specified(inp: Inputs) -> Alternative:
    """The spec's own workers (and bids) on its market, priced on the market's churn (:mod:`spotwise.planner.estimate.churn`):
    the strategy ``spotwise run`` / ``simulate`` of the spec carries out."""
    est = inp.churn
    if est is None:
        return Alternative("as-specified", (), inp.n, inp.J, None, None, None, False, "replayed churn", inp.churn_problem)
    err = float(error_bound(est.iterations, inp.error, est.inv_y))
    ok = est.time_s <= inp.deadline * (1 + 1e-9)
    bids = ()
    rev = inp.market.revocation
    if hasattr(rev, "bids"):
        b = rev.bids  # type: ignore[attr-defined]
        bids = tuple(float(x) for x in (b if isinstance(b, tuple) else (b,) * inp.n))[: inp.n]
    head = f"the spec as written: {inp.n} workers on its market ({type(rev).__name__}), priced on its churn"
    return Alternative("as-specified", bids, inp.n, est.iterations, est.cost, est.time_s, err, ok, "replayed churn",
                       head if ok else f"expected time {est.time_s:.0f} s exceeds the deadline {inp.deadline:.0f} s ({head})",
                       (est.describe(),), _churn_p_meet(est, inp.deadline) if ok else None)


def _hold_to_error_target(a: Alternative, eps: float) -> Alternative:
    """An alternative whose own error bound exceeds the target is infeasible (issue 7 item 10); its expected
    cost and time stay (the spec's own run, ``as-specified``, is still priced as it would run)."""
    if a.feasible and a.expected_error is not None and a.expected_error > eps * (1 + _ERR_TOL):
        return replace(a, feasible=False, deadline_probability=None,
                       reason=f"misses the error target: its Thm 1 bound {a.expected_error:.4g} exceeds eps = {eps:.4g}")
    return a


def _alt_serverless(inp: Inputs) -> Alternative:
    """The job's ``J`` iterations on ``n`` functions (:mod:`spotwise.planner.plan.serverless`)."""
    s = inp.serverless
    assert s is not None
    try:
        est = sv.estimate(s, inp.n, inp.J)
    except InfeasibleError as e:
        return Alternative("serverless", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    ok = est.time_s <= inp.deadline * (1 + 1e-9)
    mode = s.sync.upper() + (f" v={s.significance:g}" if s.sync == "isp" else f" s={s.staleness}" if s.sync == "ssp" else "")
    head = (f"{inp.n} x {s.memory_mb} MB {s.pricing.name} ({mode}) + Redis {s.redis.name}: {est.step_s:.3g} s/step, "
            f"{est.invocations_per_worker} invocation(s)/worker")
    reason = head if ok else f"modelled time {est.time_s:.0f} s exceeds the deadline {inp.deadline:.0f} s ({head})"
    return Alternative("serverless", (), inp.n, inp.J, est.cost, est.time_s, inp.eps, ok, "closed-form", reason, est.notes,
                       sv.deadline_probability(est.time_s, inp.deadline))


def compare(inp: Inputs, spec: JobSpec) -> list[Alternative]:
    sync, n_sync = _sync(spec), _n_sync(spec)
    alts: list[Alternative] = []
    if inp.kind == "serverless":  # no spot market: the functions against the same workers on demand
        try:
            alts.append(replace(_alt_on_demand(inp, sync, n_sync), notes=(f"comparison VM: {inp.vm_note}",)))
        except InputError:
            pass
        if inp.serverless is not None:
            alts.append(_alt_serverless(inp))
        return [_hold_to_error_target(a, inp.eps) for a in alts]
    if inp.prices is not None:
        alts += [_alt_no_interruptions(inp, sync, n_sync), _alt_one_bid(inp, sync, n_sync)]
        if sync == "full":
            alts += [_alt_two_bids(inp), _alt_dynamic(inp, sync, n_sync)]
        if inp.churn is not None or inp.churn_problem:
            alts.append(_alt_as_specified(inp))
    else:
        # a fixed price without revocations runs as priced; with churn the spec's own run is priced on it
        churn = inp.churn is not None or inp.churn_problem
        alts.append(_alt_as_specified(inp) if churn else _alt_fixed_price(inp, sync, n_sync))
        q = _revocation_q(spec, inp, sync, n_sync)
        if q is not None:
            alts.append(_alt_preemptible(inp, spec, sync, n_sync, q))
    try:
        alts.append(_alt_on_demand(inp, sync, n_sync))
    except InputError:
        pass  # no on-demand price in the catalog
    if inp.serverless is not None:
        alts.append(_alt_serverless(inp))
    # a job whose length is in samples (target.samples / epochs / tokens) is done when they are committed:
    # the error bound is what that length gives, shown, not a target a strategy must meet
    gate = math.inf if spec.target_samples() is not None and spec.target.loss is None else inp.eps
    return [_hold_to_error_target(a, gate) for a in alts]
