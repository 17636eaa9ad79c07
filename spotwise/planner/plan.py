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
* ``on-demand`` -- the same workers on on-demand instances;
* ``serverless`` -- the same workers as functions exchanging updates through a Redis node
  (paper 004, MLLess; :mod:`spotwise.planner.serverless`), offered for ``cluster.kind:
  serverless`` specs and for workloads with sparse gradients (``pmf``, ``sparse-logreg``) whose
  model fits the function's memory.  Its P(deadline) is 1 or 0 (functions are not revoked by
  price).  A serverless spec names no VM: its VM row is ``on-demand`` on ``cluster.instance_type``
  if set, else on a default CPU instance (:func:`spotwise.planner.serverless.default_vm_instance`,
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
  ``deadline_probability`` (:mod:`spotwise.planner.deadline`).
* **cost** -- plan costs are priced like a run's :class:`~spotwise.market.billing.Ledger`: the
  coordinator (an on-demand instance for the whole expected time) is included, continuously
  running instances are billed with the market's billing policy (per-second granularity and the
  minimum charge), and the minimum charge of each spot interval cut short by a revocation is
  added in expectation (:func:`_spot_billing_extra`).
* **traces** -- a trace must be of the spec's instance type and region (else
  :class:`InputError`, exit 2).  The job starts at ``market.start`` if the spec sets it, else
  one deadline before the last point of the trace (the last deadline-long window is held out as
  the job's future); the price model and the zone choice use only data strictly before that start
  (``extra["plan_start"]``).
* **pilot** -- a degenerate pilot fit (:attr:`spotwise.planner.pilot.PilotFit.problems`) is
  reported and replaced by the assumed error model of :func:`spotwise.planner.pilot.assumed_error_model`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.series import StepSeries
from spotwise.market.world import Market, build_market
from spotwise.planner import serverless as sv
from spotwise.planner.deadline import Phase, effective_epoch, phases_deadline_probability
from spotwise.planner.prices import MIN_TRACE_POINTS, PriceModel
from spotwise.theory.bounds import ErrorModel, error_bound, iterations_for_error
from spotwise.theory.cost import expected_cost_uniform, expected_time_uniform
from spotwise.theory.runtime import MiniBatchTimeLaw, RuntimeModel

Objective = Literal["cost", "time"]
SECONDS_PER_HOUR = 3600.0
#: ``--pilot-steps`` default; the pilot may run at most ``max(DEFAULT_PILOT_STEPS, target.iterations)``
#: steps (a pilot longer than the job it calibrates is pointless), or ``MAX_PILOT_STEPS_NO_TARGET``
#: when the target is a loss.
DEFAULT_PILOT_STEPS = 200
MAX_PILOT_STEPS_NO_TARGET = 10_000
_ERR_TOL = 1e-9


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
    #: P(completion time <= deadline) under the price model (:mod:`spotwise.planner.deadline`); None if infeasible
    deadline_probability: float | None = None

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1:
            raise ValueError("an alternative needs workers >= 1 and iterations >= 1")
        if self.deadline_probability is not None and not 0.0 <= self.deadline_probability <= 1.0:
            raise ValueError(f"deadline_probability must lie in [0, 1], got {self.deadline_probability!r}")

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
    deadline_probability: float | None = None

    def __post_init__(self) -> None:
        if self.deadline_probability is not None and not 0.0 <= self.deadline_probability <= 1.0:
            raise ValueError(f"deadline_probability must lie in [0, 1], got {self.deadline_probability!r}")

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
    #: seconds for which the price stays put (epoch of :mod:`spotwise.planner.deadline`)
    epoch_s: float = 1.0
    #: the price history the model was built on (a trace before the job's start), for run lengths
    history: StepSeries | None = None
    #: the job's start as a UNIX time when planning on a trace
    plan_start: float | None = None
    error_source: str = "caller"
    pilot_problems: tuple[str, ...] = ()
    #: the serverless option's setup (None: not offered for this spec)
    serverless: sv.ServerlessSetup | None = None
    #: the spec's cluster kind; for "serverless" the VM fields above describe the comparison VM
    kind: str = "vm"
    #: which VM the VM rows of a serverless spec use, and why
    vm_note: str = ""
    #: the comparison VM's throughput for the family was derived (not in the catalog)
    vm_throughput_derived: bool = False
    #: the spec's own strategy priced on its market's churn (:mod:`spotwise.planner.churn`); None on a
    #: market without revocations
    churn: Any = None
    #: churn estimates by (workers, iterations), shared by copies of these inputs (``--plot``)
    churn_cache: dict[tuple[int, int], Any] = field(default_factory=dict)
    #: why the spec's own run cannot finish on its market (no capacity), if so
    churn_problem: str = ""

    @property
    def coordinator_price(self) -> float:
        return float(self.market.coordinator.on_demand_per_hour or 0.0)

    @property
    def on_demand_billing(self) -> BillingPolicy:
        """The Ledger's policy for on-demand instances: the market's, without the revocation rule."""
        p = self.market.billing
        return BillingPolicy(p.name, p.granularity_s, p.minimum_s, False, p.price_rule)


# ------------------------------------------------------------------------------------ models
def runtime_model(spec: JobSpec, market: Market, samples: int = 20000) -> tuple[RuntimeModel, str]:
    m = market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    s = float(spec.cluster.straggler)
    delta = float(spec.cluster.sync_overhead_s)
    if s >= 1.0:
        return RuntimeModel.exponential(1.0 / m, delta), f"mini-batch time Exp(mean {m:.3g} s) + Delta {delta:g} s (eq. 14)"
    rng = np.random.default_rng([spec.seed, 17])
    draws = np.asarray(MiniBatchTimeLaw(m, s).draw(rng, samples))
    return (RuntimeModel.empirical(draws, delta),
            f"mini-batch time {m:.3g} s x ((1 - {s:g}) + {s:g} Exp(1)) + Delta {delta:g} s, empirical law")


def _trace_candidates(spec: JobSpec, traces: list[str], where: str) -> list[StepSeries]:
    """The price series of ``traces`` for the spec's instance type (and region, if the spec names one).

    Raises :class:`InputError` naming both sides when the traces hold another instance type or
    another region: planning a p3.2xlarge job on p2.xlarge prices is not a plan.
    """
    from spotwise.market.traces import load_traces

    prices = [s for s in load_traces(traces) if s.kind == "price"]
    if not prices:
        raise InputError("the traces hold no price series", "pass a spot price trace (see `spotwise traces show`)", where)
    inst = spec.cluster.instance_type
    typed = [s for s in prices if s.meta.instance == inst]
    if not typed:
        have = sorted({s.meta.instance or "(unnamed)" for s in prices})
        raise InputError(f"the traces hold prices of {', '.join(have)}, but the spec's cluster.instance_type is {inst}",
                         f"pass a trace of {inst}, or set cluster.instance_type to {have[0]} if that is the machine you "
                         "mean to rent", where)
    region = spec.cluster.region
    if region:
        local = [s for s in typed if s.meta.region == region or s.meta.zone == region or s.meta.zone.startswith(region)]
        if not local:
            have = sorted({s.meta.region or s.meta.zone or "(unknown)" for s in typed})
            raise InputError(f"the traces of {inst} are from {', '.join(have)}, but the spec's cluster.region is {region}",
                             f"pass a trace of {region}, or set cluster.region to {have[0]}", where)
        typed = local
    return typed


def _plan_start(spec: JobSpec, cands: list[StepSeries], deadline: float) -> tuple[float, str]:
    """The job's start (UNIX seconds) and how it was chosen.

    ``market.start`` if the spec sets it; else one deadline before the last point of the traces:
    the last deadline-long window is the job's future, everything before it is its past.
    """
    from spotwise.market.world import _parse_start

    if spec.market.start:
        return _parse_start(spec.market.start), f"market.start {spec.market.start}"
    last = max(float(s.times[-1]) for s in cands)
    return last - deadline, "one deadline before the trace's last point (no market.start)"


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _trace_history(spec: JobSpec, cands: list[StepSeries], deadline: float, where: str) -> tuple[StepSeries, float, str]:
    """The chosen zone's prices strictly before the job's start (zone: lowest time-weighted mean of that past)."""
    start, how = _plan_start(spec, cands, deadline)
    past: list[StepSeries] = []
    for s in cands:
        if float(s.start) < start:
            h = s.slice(float(s.start), start)
            if int(np.sum(h.times < start)) >= MIN_TRACE_POINTS:
                past.append(h)
    if not past:
        n = max(int(np.sum(s.times < start)) for s in cands)
        raise InputError(f"the traces hold {n} price points before the job's start {_iso(start)} ({how}); planning uses "
                         f"only data before the start and needs at least {MIN_TRACE_POINTS}",
                         "set market.start later, or pass a trace with a longer history", where)
    best = min(past, key=lambda h: h.mean())
    src = (f"empirical CDF of {best.meta.id} before the job's start {_iso(start)} ({how}; {len(best)} points"
           + (f"; zone with the lowest mean price before the start among {len(past)}" if len(past) > 1 else "") + ")")
    return best, start, src


def price_model(spec: JobSpec, market: Market, traces: list[str], deadline: float | None = None
                ) -> tuple[PriceModel | None, float | None, str, StepSeries | None, float | None]:
    """The spot price law (or a fixed price for preemptible/on-demand markets), its history and the job's start.

    Traces (``--trace``, else ``market.traces``) go through :func:`_trace_candidates` and
    :func:`_trace_history`: only prices strictly before the job's start are used.
    """
    from spotwise.market import synthetic as syn

    src_traces, where = (traces, "--trace") if traces else (list(spec.market.traces), "market.traces")
    if src_traces:
        cands = _trace_candidates(spec, src_traces, where)
        hist, start, src = _trace_history(spec, cands, float(deadline or 0.0), where)
        if hist.max() > hist.min():
            return PriceModel.from_series(hist), None, src, hist, start
        return PriceModel.from_series(hist), None, src + "; constant price", hist, start
    synth = spec.market.synthetic
    if synth is not None and synth.kind == "uniform":
        return PriceModel.from_distribution(syn.UniformPrice(synth.low, synth.high)), None, \
            f"i.i.d. uniform on [{synth.low:g}, {synth.high:g}] $/h (spec)", None, None
    if synth is not None and synth.kind == "gaussian":
        dist = syn.TruncatedGaussianPrice(mu=synth.mean, variance=synth.variance, low=float(synth.low or 0.0))
        return PriceModel.from_distribution(dist), None, \
            f"i.i.d. Gaussian mean {synth.mean:g}, variance {synth.variance:g}, truncated at {dist.low:g} (spec)", None, None
    series: StepSeries = market.prices
    if len(series) >= 10 and series.max() > series.min():
        return PriceModel.from_series(series), None, f"empirical CDF of the spec's market ({series.meta.id})", series, None
    return None, float(series.values[0]), f"fixed price {float(series.values[0]):g} $/h ({series.meta.id})", None, None


def max_pilot_steps(spec: JobSpec) -> int:
    """The largest sensible in-process pilot: ``max(DEFAULT_PILOT_STEPS, target.iterations)``, or
    ``MAX_PILOT_STEPS_NO_TARGET`` when the target is a loss (a pilot longer than the job is the job)."""
    it = spec.target.iterations
    return max(DEFAULT_PILOT_STEPS, int(it)) if it is not None else MAX_PILOT_STEPS_NO_TARGET


def check_pilot_steps(spec: JobSpec, pilot_steps: int) -> None:
    """``InputError`` (exit 2, ``--pilot-steps``) unless ``10 <= pilot_steps <= max_pilot_steps(spec)``."""
    cap = max_pilot_steps(spec)
    if isinstance(pilot_steps, bool) or not isinstance(pilot_steps, int) or not 10 <= pilot_steps <= cap:
        raise InputError(f"--pilot-steps {pilot_steps!r} is out of range: a pilot needs at least 10 and at most {cap} steps "
                         f"(max({DEFAULT_PILOT_STEPS}, target iterations); the pilot only calibrates the error model "
                         "and must not be longer than the job)",
                         f"use e.g. --pilot-steps {DEFAULT_PILOT_STEPS} (the default), or pass --pilot RUN_DIR", "--pilot-steps")


def error_model_for(spec: JobSpec, pilot_dir: str | None, pilot_steps: int
                    ) -> tuple[ErrorModel, float, list[str], list[str], str, tuple[str, ...]]:
    """The Thm 1 constants: the pilot's fit if it passes the reliability checks, else the assumed model.

    Returns ``(model, G*, measured notes, assumed notes, source "pilot"|"assumed", the fit's problems)``.
    """
    from spotwise.planner import pilot as pl

    if pilot_dir is not None:
        fit, _ = pl.pilot_from_run(pilot_dir)
        src = f"Thm 1 constants fitted to the losses of the run in {pilot_dir}"
    else:
        fit, _ = pl.run_pilot(spec, steps=pilot_steps)
        src = f"Thm 1 constants fitted to a {pilot_steps}-step in-process pilot of {spec.workload.name}"
    assumed = [f"pilot fit: {n}" for n in fit.notes]
    if fit.reliable:
        measured = [f"{src}: beta = 1 - alpha c mu = {fit.beta:.5f}, floor {fit.F:.4g}, r2 {fit.r2:.3f}"]
        return fit.model, float(fit.g_star), measured, assumed, "pilot", ()
    model, why = pl.assumed_error_model(fit)
    measured = [f"{src}: the fit is unreliable and NOT used ({'; '.join(fit.problems)})"]
    assumed = [f"assumed error model (the pilot fit is unreliable): {why}"] + assumed
    return model, float(fit.g_star), measured, assumed, "assumed", tuple(fit.problems)


def gather_inputs(spec: JobSpec, traces: list[str] | None = None, pilot_dir: str | None = None,
                  pilot_steps: int = DEFAULT_PILOT_STEPS, error_model: ErrorModel | None = None, g_star: float = 0.0) -> Inputs:
    """The plan's inputs (:class:`Inputs`) for a VM spec, or for a serverless spec (:func:`_gather_serverless`)."""
    if spec.cluster.kind == "serverless":
        return _gather_serverless(spec, traces, pilot_dir, pilot_steps, error_model, g_star)
    return _gather(spec, traces, pilot_dir, pilot_steps, error_model, g_star)


def vm_twin(spec: JobSpec, instance_type: str, extra_catalog: list[str] | None = None) -> JobSpec:
    """A serverless spec as the VM job it is compared with: ``instance_type`` on demand, fully-synchronous,
    the same workload, workers, target, deadline and budget."""
    import dataclasses

    cl = dataclasses.replace(spec.cluster, kind="vm", instance_type=instance_type, sync="full", staleness=0)
    market = dataclasses.replace(spec.market, catalog=list(spec.market.catalog) + list(extra_catalog or []))
    return dataclasses.replace(spec, cluster=cl, market=market)


def _gather_serverless(spec: JobSpec, traces: list[str] | None, pilot_dir: str | None, pilot_steps: int,
                       error_model: ErrorModel | None, g_star: float) -> Inputs:
    """Inputs of a ``cluster.kind: serverless`` spec: the error model, J, eps and the deadline come from its
    VM twin (:func:`vm_twin`) on ``cluster.instance_type`` or the default comparison VM
    (:func:`spotwise.planner.serverless.default_vm_instance`).  When the catalog has no throughput of that
    VM for the workload's family, one is derived from the per-vCPU throughput the functions use
    (:func:`spotwise.planner.serverless.per_vcpu_throughput`), so both sides share one speed scale."""
    import tempfile
    from pathlib import Path

    import yaml

    from spotwise.market.world import load_catalog

    if traces:
        raise InputError("a serverless job has no spot market: price traces do not apply",
                         "drop --trace, or plan the job as a VM spec (cluster.kind: vm with an instance_type)", "--trace")
    cl, family = spec.cluster, spec.workload.family
    catalog = load_catalog(spec)
    fp = sv.function_pricing(catalog, cl.functions, int(cl.memory_mb))  # exit 2 before any pilot runs
    sv.redis_instance(catalog, cl.redis_instance)
    if cl.instance_type:
        inst = catalog.instance(cl.instance_type, cloud=cl.cloud, region=cl.region)
        note = f"{inst.label} on demand (cluster.instance_type)"
    else:
        inst, note = sv.default_vm_instance(catalog, family, fp, cl.memory_mb / 1024.0)
    derived: float | None = None
    if catalog._throughput_or_none(inst, family) is None:
        per_vcpu, src = sv.per_vcpu_throughput(catalog, family, None)
        if per_vcpu is None:
            raise InputError(f"no speed for the functions: {src}",
                             f"use a workload.family profiled on CPU instances, or add a CPU instance with "
                             f"'throughput: {{{family}: <speed>}}' in a market.catalog file", "workload.family")
        derived = per_vcpu * inst.vcpus
        note += (f"; its throughput for {family!r} is not in the catalog and is derived as {per_vcpu:.4g} per vCPU x "
                 f"{inst.vcpus} vCPUs = {derived:.4g} ({src})")
    with tempfile.TemporaryDirectory(prefix="spotwise-plan-") as tmp:
        extra: list[str] = []
        if derived is not None:
            entry = inst.to_dict()
            entry["throughput"] = {**entry["throughput"], family.lower(): derived}
            entry["source"] = f"{entry['source']}; throughput for {family!r} derived by spotwise plan (per vCPU)".strip("; ")
            path = Path(tmp) / "derived-throughput.yaml"
            path.write_text(yaml.safe_dump({"instances": [entry]}, sort_keys=False))
            extra = [str(path)]
        twin = vm_twin(spec, inst.name, extra)
        inp = _gather(twin, [], pilot_dir, pilot_steps, error_model, g_star, sv_spec=spec, sv_catalog=catalog, sv_vm=inst)
    assumed = (f"VM rows of this serverless spec: {note}",) + inp.assumed
    return replace(inp, kind="serverless", vm_note=note, vm_throughput_derived=derived is not None, assumed=assumed)


def _serverless_setup(sv_spec: JobSpec, catalog: Any, vm_instance: Any) -> tuple[sv.ServerlessSetup | None, list[str], list[str]]:
    """The serverless option's setup if ``sv_spec`` is offered one, with measured and assumed notes."""
    if not sv.considered(sv_spec):
        return None, [], []
    s = sv.setup(sv_spec, catalog, vm_instance)
    f = s.footprint
    measured = [f"serverless update size: {f.entries_per_update:.0f} of {f.params} entries per mini-batch of "
                f"{sv_spec.workload.batch_size} ({f.batches} seeded mini-batches of {f.workload}; "
                f"{'sparse' if f.sparse else 'dense'} gradients)"]
    if s.problem and sv_spec.cluster.kind != "serverless":
        return None, measured, [f"serverless option not offered: {s.problem} ({s.fix})"]
    return s, measured, sv.assumptions(s)


def _gather(spec: JobSpec, traces: list[str] | None = None, pilot_dir: str | None = None,
            pilot_steps: int = DEFAULT_PILOT_STEPS, error_model: ErrorModel | None = None, g_star: float = 0.0,
            sv_spec: JobSpec | None = None, sv_catalog: Any = None, sv_vm: Any = None) -> Inputs:
    """Inputs of a VM ``spec``; ``sv_spec`` (with ``sv_catalog``, ``sv_vm``) is the serverless spec it stands in for."""
    market = build_market(spec)
    # a market whose workers cannot outlive a mini-batch is refused by `run` (exit 2): the plan says so too
    from spotwise.control.progress import check_progress_possible

    check_progress_possible(spec, market)
    sv_src = spec if sv_spec is None else sv_spec
    if sv.considered(sv_src):  # a bad function pricing or size is the user's to fix before any pilot runs
        sv.function_pricing(market.catalog, sv_src.cluster.functions, int(sv_src.cluster.memory_mb))
        sv.redis_instance(market.catalog, sv_src.cluster.redis_instance)
    n = spec.cluster.workers
    traces = list(traces or [])
    if traces or spec.market.traces:  # a mismatched trace is the user's to fix before any pilot runs
        _trace_candidates(spec, traces or list(spec.market.traces), "--trace" if traces else "market.traces")
    if error_model is None and pilot_dir is None:
        check_pilot_steps(spec, pilot_steps)
    runtime, rt_src = runtime_model(spec, market)
    measured: list[str] = []
    assumed: list[str] = [f"runtime: {rt_src} (modelled from the catalog, not measured)"]
    err_source, problems = "caller", ()
    if error_model is None:
        error_model, g_star, m, a, err_source, problems = error_model_for(spec, pilot_dir, pilot_steps)
        measured += m
        assumed += a
    else:
        assumed.append("error model given by the caller")
    per_step = _contributions(spec)
    inv_n = 1.0 / per_step
    if spec.target.loss is not None:
        eps = float(spec.target.loss) - g_star
        if eps <= 0:
            raise InfeasibleError(f"target loss {spec.target.loss:g} is not above the pilot's asymptote {g_star:g}",
                                  "raise target.loss", "target.loss")
        J = _iterations_to(eps, error_model, inv_n, spec)
        measured.append(f"iterations for loss {spec.target.loss:g}: J = {J} (Corollary 2 with E[1/y] = 1/{per_step}, "
                        f"the mini-batches a step commits" + (f"; capped at target.iterations {spec.target.iterations}"
                                                              if spec.target.iterations is not None else "") + ")")
        reach = float(error_bound(J, error_model, inv_n)) * (1 + 1e-9)
        if reach > eps:  # the run stops at target.iterations before the loss
            assumed.append(f"target loss {spec.target.loss:g} is not reached within target.iterations = {J} (its Thm 1 "
                           f"bound {reach + g_star:.4g}); the run stops there, so the error target is that bound")
            eps = reach
    else:
        J = int(spec.target.iterations or 1)
        if spec.cluster.sync == "sma":
            J *= int(spec.cluster.local_steps)  # an S-MA step holds local_steps mini-batches per worker
        eps = float(error_bound(J, error_model, inv_n)) * (1 + 1e-9)
        assumed.append(f"target error eps = the Thm 1 bound after J = {J} iterations with all {n} workers ({eps:.4g})")
    if spec.cluster.sync == "adpsgd":
        assumed.append("sync adpsgd planned as S-SGD over the same mini-batches: time an upper bound (AD-PSGD waits "
                       "for a partner, not for every worker), error S-SGD's Thm 1 bound (AD-PSGD converges at S-SGD's rate, "
                       "Lian et al. 2018)")
    if spec.cluster.sync == "sma":
        assumed.append(f"sync sma planned as S-SGD over the same mini-batches ({spec.cluster.local_steps} per worker "
                       f"per step): time an upper bound (S-MA waits once per {spec.cluster.local_steps} mini-batches), "
                       "error S-SGD's Thm 1 bound")
    ER = _round_mean(runtime, n, _sync(spec), _n_sync(spec))
    setup, m_sv, a_sv = _serverless_setup(sv_src, market.catalog if sv_catalog is None else sv_catalog,
                                          market.instance if sv_spec is None else sv_vm)
    measured += m_sv
    assumed += a_sv
    sv_time: float | None = None
    if setup is not None and sv_src.cluster.kind == "serverless":
        try:
            sv_time = sv.estimate(setup, n, J).time_s
        except InfeasibleError:
            sv_time = None
    if spec.deadline_s is not None:
        deadline = float(spec.deadline_s)
    elif sv_time is not None:
        deadline = 2.0 * sv_time
        assumed.append(f"deadline = twice the serverless option's modelled time = {deadline:.0f} s (no deadline in the spec)")
    else:
        deadline = 2.0 * J * ER
        assumed.append(f"deadline = twice the uninterrupted runtime J E[R(n)] = {deadline:.0f} s (paper 000 Sec. VI)")
    prices, fixed, price_src, history, start = price_model(spec, market, traces, deadline)
    synth = spec.market.synthetic
    if history is not None:
        epoch = float(ER)  # refined per bid from the history's run lengths (effective_epoch)
        assumed.append("deadline probability: outages of the trace's history mapped to i.i.d. price epochs by "
                       "matching mean up/down run lengths (spotwise.planner.deadline)")
    elif prices is not None and synth is not None and synth.kind in ("uniform", "gaussian"):
        epoch = float(synth.interval_s)
        assumed.append(f"deadline probability: prices i.i.d. per {epoch:g} s epoch (market.synthetic.interval_s)")
    else:
        epoch = float(ER)
    assumed.append(f"costs include the coordinator ({market.coordinator.name} on-demand at "
                   f"{float(market.coordinator.on_demand_per_hour or 0.0):g} $/h for the whole expected time) and the "
                   f"billing policy {market.billing.name} (granularity {market.billing.granularity_s:g} s, minimum "
                   f"{market.billing.minimum_s:g} s per started instance, as the run's Ledger bills)")
    inp = Inputs(prices, fixed, runtime, error_model, n, J, eps, deadline, market, tuple(measured), tuple(assumed),
                 price_src, g_star, epoch, history, start, err_source, tuple(problems), serverless=setup)
    if not _has_churn(spec, market):
        return inp
    # the strategy the spec runs, on its market's churn (spotwise.planner.churn): E[1/y] decides its iterations
    # (loss target) or the error it reaches (iterations target)
    try:
        est = _churn(inp, spec, n, J)
    except InfeasibleError as e:
        return replace(inp, churn_problem=e.message)
    J_spec = J
    if spec.target.loss is not None:
        J_spec = _iterations_to(float(spec.target.loss) - g_star, error_model, est.inv_y, spec)
        est = _churn(inp, spec, n, J_spec) if J_spec != J else est
    own = float(error_bound(J_spec, error_model, est.inv_y)) * (1 + 1e-9)
    if spec.target.loss is not None and own > eps:  # J_spec is target.iterations: the run stops there
        assumed.append(f"target error eps = the Thm 1 bound the spec's own run reaches after its J = {J_spec} "
                       f"iterations on its market's churn, E[1/y] = {est.inv_y:.3g} ({own:.4g}; with all workers "
                       f"always active it would be {eps:.4g})")
        eps = own
    assumed.append(f"churn: {market.revocation.__class__.__name__} priced by replaying its active-worker process "
                   "round by round (paper 000 eq. 14-15 rounds, revocations inside rounds, restarts, idle time, "
                   "one billing minimum per started instance; spotwise.planner.churn)")
    return replace(inp, eps=eps, assumed=tuple(assumed), churn=est)


def _sync(spec: JobSpec) -> str:
    """The runtime model's sync mode; the asynchronous PS is N-batch-sync with N = 1 (one update per mini-batch)."""
    return {"full": "full", "n-sync": "n-sync", "n-batch": "n-batch", "async": "n-batch",
            # a serverless spec's VM rows run fully-synchronous (its functions are priced by spotwise.planner.serverless)
            "bsp": "full", "ssp": "full", "isp": "full",
            # the collective plane: S-SGD is fully synchronous; S-MA is planned as fully synchronous
            # per mini-batch (an upper bound on its time: it waits once per local_steps mini-batches)
            "ssgd": "full", "sma": "full", "adpsgd": "full"}[spec.cluster.sync]


def _round_mean(runtime: RuntimeModel, y: int, sync: str, n_sync: int | None) -> float:
    """Mean seconds per committed step with ``y`` active workers.

    Barrier modes: paper 000 eq. (14)-(15) (:meth:`RuntimeModel.expected`).  Continuous modes (``n-batch``;
    the asynchronous PS is ``N = 1``): the workers never wait, each finishes a mini-batch every
    ``E[r] + Delta`` seconds (it restarts after the commit), so by the renewal-reward theorem ``y``
    workers commit a step of ``N`` mini-batches every ``N (E[r] + Delta) / y`` seconds in the long run
    (eq. 42's ``N / (y mu)`` for exponential times, with the overhead); the time to the first ``N``
    completions from a common start, which :meth:`RuntimeModel.expected` gives for non-exponential
    times, is only the first step's.
    """
    if sync != "n-batch":
        return float(runtime.expected(y, sync, n_sync))  # type: ignore[arg-type]
    mean_r = 1.0 / float(runtime.mu) if runtime.kind == "exponential" else float(np.mean(runtime.samples))  # type: ignore[arg-type]
    return float(n_sync or 1) * (mean_r + float(runtime.delta)) / max(1, int(y))


def _contributions(spec: JobSpec) -> int:
    """Mini-batches a committed step holds with all workers active: ``n`` (fully synchronous), ``N``
    (N-sync, N-batch; paper 000 Thm 5-6 use ``E[1/y] = 1/N``), 1 (the asynchronous PS); the error
    recursion of a run adds ``1 / contributions`` per step (Thm 1, eq. 10)."""
    n = spec.cluster.workers
    if spec.cluster.kind == "serverless":
        return n
    if spec.cluster.sync == "async":
        return 1
    if spec.cluster.sync in ("n-sync", "n-batch") and spec.cluster.sync_n:
        return min(n, int(spec.cluster.sync_n))
    return n


def _iterations_to(eps: float, model: ErrorModel, inv_y: float, spec: JobSpec) -> int:
    """Corollary 2's iterations for ``eps``, capped at ``target.iterations`` (a run stops at whichever target
    comes first); with a cap, a loss the run cannot reach runs the cap."""
    cap = spec.target.iterations
    try:
        J = iterations_for_error(eps, model, inv_y=inv_y)
    except InfeasibleError:
        if cap is None:
            raise
        return int(cap)
    return J if cap is None else min(J, int(cap))


def _has_churn(spec: JobSpec, market: Market) -> bool:
    """Whether the spec's own workers come and go (any revocation model but none; a bid market only
    with the spec's bids)."""
    from spotwise.planner.churn import has_churn

    return spec.cluster.kind != "serverless" and has_churn(market.revocation)


def _churn(inp: Inputs, spec: JobSpec, n: int, J: int) -> Any:
    """The :class:`~spotwise.planner.churn.ChurnEstimate` of ``n`` workers for ``J`` steps on the spec's
    market (cached per inputs); :class:`InfeasibleError` when the market never lets it finish."""
    from spotwise.planner.churn import ChurnJob, estimate

    key = (int(n), int(J))
    if key in inp.churn_cache:
        return inp.churn_cache[key]
    mk = inp.market
    sync, n_sync = _sync(spec), _n_sync(spec)
    cont: tuple[float, ...] = ()
    if sync == "n-batch":
        cont = (0.0,) + tuple(_round_mean(inp.runtime, y, sync, n_sync) for y in range(1, n + 1))
    series = mk.prices
    price: float | StepSeries = series if series.max() > series.min() else float(series.values[0])
    m = mk.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    from spotwise.theory.runtime import MiniBatchTimeLaw

    job = ChurnJob(int(n), int(J), MiniBatchTimeLaw(m, float(spec.cluster.straggler)), float(spec.cluster.sync_overhead_s),
                   sync, n_sync, mk.revocation, price, inp.coordinator_price, mk.billing, float(mk.horizon_s), cont)
    reps = 16 if J <= 5000 else 8
    est = estimate(job, seed=spec.seed, replications=reps, span_s=min(float(mk.horizon_s), max(4 * inp.deadline, 3600.0)),
                   offsets=not mk.revocation.needs_rng)
    if est is None:
        raise InfeasibleError(f"the market never gives {n} worker(s) enough capacity to finish {J} steps within its "
                              f"{mk.horizon_s:.0f} s", "use a market with more capacity (bids, lifetimes, traces)",
                              "market.revocation")
    inp.churn_cache[key] = est
    return est


def _n_sync(spec: JobSpec) -> int | None:
    if spec.cluster.kind == "serverless":
        return None
    return 1 if spec.cluster.sync == "async" else spec.cluster.sync_n


# ------------------------------------------------------------------------------------ pricing like a run
def _run_moments(inp: Inputs, n: int, sync: str, n_sync: int | None) -> tuple[float, float]:
    """``(E[R(n)], Var[R(n)])`` of one iteration (eq. (14)-(15); :meth:`RuntimeModel.variance`)."""
    return _round_mean(inp.runtime, n, sync, n_sync), inp.runtime.variance(n, sync, n_sync)  # type: ignore[arg-type]


def _epoch(inp: Inputs, bid: float) -> float:
    """Epoch length of :mod:`spotwise.planner.deadline` for a top bid ``bid``."""
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
    ``P(K = k) = F^(k-1) (1 - F)`` (i.i.d. epochs, :mod:`spotwise.planner.deadline`); over the job's
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
    from spotwise.planner.bidding import thm3_bid

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
    from spotwise.planner.bidding import optimal_two_bids

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
    from spotwise.planner.bidding import optimal_workers_and_iterations

    assert inp.fixed_price is not None
    R = _round_mean(inp.runtime, inp.n, sync, n_sync)
    try:
        wp = optimal_workers_and_iterations(inp.error, eps=inp.eps, deadline=inp.deadline, runtime=R,
                                            price=inp.fixed_price, q=q)
    except (InfeasibleError, InputError) as e:
        return Alternative("preemptible-thm7", (), inp.n, inp.J, None, None, None, False, "closed-form", e.message)
    # Thm 7 chooses n* and J*; what they cost and take is priced on the market's real churn
    # (spotwise.planner.churn), like the run of the spec it would write
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
    """The spec's own workers (and bids) on its market, priced on the market's churn (:mod:`spotwise.planner.churn`):
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
    """The job's ``J`` iterations on ``n`` functions (:mod:`spotwise.planner.serverless`)."""
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
    return [_hold_to_error_target(a, inp.eps) for a in alts]


def make_plan(spec: JobSpec, *, traces: list[str] | None = None, objective: Objective = "cost", pilot_dir: str | None = None,
              pilot_steps: int = DEFAULT_PILOT_STEPS, error_model: ErrorModel | None = None,
              types: list[str] | None = None) -> Plan:
    """Compare the strategies and pick one (module docstring).  ``InputError``/``InfeasibleError`` (exit 2)
    for bad input: unknown objective, ``pilot_steps`` out of range, a trace of another instance type or
    region, or no strategy meeting the deadline, budget and error target."""
    if objective not in ("cost", "time"):
        raise InputError(f"unknown objective {objective!r}", "use cost or time", "--objective")
    if types:
        from spotwise.market.world import load_catalog
        from spotwise.sim.places import check_instance_types

        check_instance_types(load_catalog(spec), types)
    inp = gather_inputs(spec, traces, pilot_dir, pilot_steps, error_model)
    placement: dict[str, Any] | None = None
    src = list(traces or spec.market.traces)
    if inp.plan_start is not None and src:
        from spotwise.planner.trace_plan import plan_placement

        try:
            placement = plan_placement(spec, src, inp.plan_start, types=types)
        except InputError as e:  # the bid plan below stands; say why there is no placement
            placement = {"error": e.message}
        spec, inp = _plan_at_place(spec, inp, traces or [], placement.get("choice"))
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
    why = (f"lowest expected cost (${best.expected_cost:.4g}) among the strategies that meet the deadline in expectation "
           "and the error target" if objective == "cost" else f"shortest expected time ({best.expected_time_s:.0f} s) within the budget")
    if best.deadline_probability is not None:
        why += f"; P(finish by the deadline) = {best.deadline_probability:.2f}"
    if runner is not None and runner.expected_cost:
        why += (f"; next best: {runner.strategy} at ${runner.expected_cost:.4g}"
                f" ({100 * (runner.expected_cost / best.expected_cost - 1):.0f}% more)" if objective == "cost" else
                f"; next best: {runner.strategy} at {runner.expected_time_s:.0f} s")
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
                sw = next(s for s in bt["strategies"] if s["strategy"] == "spotwise")
                ch = placement["choice"]
                why += (f"; place: {ch['zone']} {ch['instance']} at {ch['spot_price']:.4g} $/h (cheapest at the start among "
                        f"{ch['candidates']}); on the {bt['windows']} past windows the spotwise strategy met the deadline "
                        f"in {sw['deadline_met']:.0%} (95% CI {sw['ci95'][0]:.0%}-{sw['ci95'][1]:.0%})")
    extra["recommendation"] = _recommendation(inp, spec, best, alts, placement)
    return Plan(best.strategy, best.bids, best.workers, best.iterations, float(best.expected_cost),
                float(best.expected_time_s), float(best.expected_error or inp.eps), objective, inp.deadline, why,
                tuple(alts), inp.measured, inp.assumed, inp.price_source, policies, extra,
                deadline_probability=best.deadline_probability)


def _price_place(inp: Inputs, spec: JobSpec) -> str:
    """The zone (or region) whose prices the plan's numbers come from."""
    if inp.history is not None:
        return inp.history.meta.zone or inp.history.meta.region or spec.cluster.region or ""
    return spec.cluster.region or inp.market.instance.region or ""


def _plan_at_place(spec: JobSpec, inp: Inputs, traces: list[str], choice: dict[str, Any] | None) -> tuple[JobSpec, Inputs]:
    """The spec and inputs at the place the placement chose (issue 18 item 2): when the trace placement picks
    another zone or instance type than the one whose prices the inputs hold, the plan is made again on
    that place's prices (same start, same error model), so the recommendation names one place."""
    import dataclasses

    if not choice or inp.history is None:
        return spec, inp
    zone, inst = str(choice["zone"]), str(choice["instance"])
    if _price_place(inp, spec) == zone and inp.market.instance.name == inst:
        return spec, inp
    cl = dataclasses.replace(spec.cluster, region=zone, instance_type=inst)
    mk = dataclasses.replace(spec.market, start=spec.market.start or _iso(float(inp.plan_start or 0.0)))
    placed = dataclasses.replace(spec, cluster=cl, market=mk)
    new = gather_inputs(placed, traces, error_model=inp.error, g_star=inp.pilot_g_star)
    note = (f"place: {zone} {inst} (the trace placement's choice at the start) instead of the spec's "
            f"{spec.cluster.region or '(any)'} {spec.cluster.instance_type}; every number of the plan is for this place")
    return placed, replace(new, measured=inp.measured, assumed=inp.assumed + (note,), error_source=inp.error_source,
                           pilot_problems=inp.pilot_problems)


def _recommendation(inp: Inputs, spec: JobSpec, best: Alternative, alts: list[Alternative],
                    placement: dict[str, Any] | None) -> dict[str, Any]:
    """The one recommendation the plan leads with: place, strategy, expected cost and time, P(deadline) with
    its interval (measured on the trace's past windows when there is a backtest, else None) and the saving
    against on-demand -- all from the same place and prices."""
    od = next((a for a in alts if a.strategy == "on-demand" and a.expected_cost is not None), None)
    ci: list[float] | None = None
    measured: float | None = None
    bt = (placement or {}).get("backtest")
    if bt:
        sw = next((x for x in bt["strategies"] if x["strategy"] == "spotwise"), None)
        if sw is not None:
            ci, measured = [float(v) for v in sw["ci95"]], float(sw["deadline_met"])
    saving = None if od is None or not od.expected_cost else 1.0 - float(best.expected_cost or 0.0) / float(od.expected_cost)
    return {"strategy": best.strategy, "place": _price_place(inp, spec), "instance": inp.market.instance.name,
            "workers": best.workers, "bids": list(best.bids), "expected_cost": best.expected_cost,
            "expected_time_s": best.expected_time_s, "deadline_probability": best.deadline_probability,
            "deadline_measured": measured, "deadline_ci95": ci,
            "on_demand_cost": None if od is None else od.expected_cost, "saving_vs_on_demand": saving,
            "price_source": inp.price_source}


def apply_plan(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    """The spec (as plain data, ready for YAML) with the plan carried out: workers, bids, iterations, policies.

    ``serverless``: the spec becomes (or stays) ``cluster.kind: serverless`` -- ISP (MLLess's default) for a
    VM spec, no spot market, only the scale-in policy.  A VM strategy on a serverless spec writes its VM
    twin (:func:`vm_twin`) on the comparison instance; :class:`InputError` when that instance's throughput
    was derived by the plan (the written spec could not run).
    """
    if plan.strategy == "serverless":
        return _apply_serverless(spec, plan)
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
    d["deadline"] = plan.deadline_s
    cl = d["cluster"]
    cl["workers"] = plan.workers
    place = plan.extra.get("place")
    if place:  # the place the plan was made for (issue 18 item 2)
        cl["region"], cl["instance_type"] = place["region"], place["instance_type"]
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
    if plan.extra.get("plan_start") and d["market"].get("traces") and not d["market"].get("start"):
        d["market"]["start"] = plan.extra["plan_start"]  # replay the trace from the start the plan assumed
    if cl.get("max_workers") is not None and cl["max_workers"] < cl["workers"]:
        cl["max_workers"] = cl["workers"]
    return d


def _apply_serverless(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    d = spec.to_dict()
    d["target"]["iterations"] = plan.iterations
    d["target"]["loss"] = None
    d["deadline"] = plan.deadline_s
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["Alternative", "Plan", "Inputs", "make_plan", "gather_inputs", "compare", "plot_cost_vs_deadline",
           "cost_vs_deadline", "runtime_model", "price_model"]
