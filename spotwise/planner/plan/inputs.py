"""The inputs of ``spotwise plan``: :func:`gather_inputs` builds :class:`~spotwise.planner.plan.records.Inputs`.

* **error** -- the constants of Thm 1 (``papers/000_3c734f3ffedcac15.txt``) fitted to a pilot's losses
  (:mod:`spotwise.planner.estimate.pilot`): a previous run (``--pilot DIR``) or a short in-process pilot of at
  most :func:`max_pilot_steps` steps; a degenerate fit is reported and replaced by the assumed error
  model (:func:`error_model_for`);
* **the job's numbers** -- its iterations ``J`` and error target ``eps`` (Corollary 2 for a loss
  target), its deadline (the spec's, else twice the uninterrupted runtime), the price and runtime
  models (:mod:`spotwise.planner.estimate.models`), the serverless option
  (:mod:`spotwise.planner.plan.serverless`) and the spec's own strategy on its market's churn;
* **serverless specs** -- planned through their VM twin (:func:`vm_twin`) on ``cluster.instance_type``
  or a default comparison VM (:func:`_gather_serverless`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError, InputError
from spotwise.market.world import build_market
from spotwise.planner.plan import serverless as sv
from spotwise.planner.estimate.models import _trace_candidates, price_model, runtime_model
from spotwise.planner.plan.rounds import _churn, _contributions, _has_churn, _iterations_to, _n_sync, _round_mean, _sync
from spotwise.planner.plan.records import DEFAULT_PILOT_STEPS, MAX_PILOT_STEPS_NO_TARGET, Inputs
from spotwise.theory.bounds import ErrorModel, error_bound


def max_pilot_steps(spec: JobSpec) -> int:
    """The largest sensible in-process pilot: ``max(DEFAULT_PILOT_STEPS, target.iterations)``, or
    ``MAX_PILOT_STEPS_NO_TARGET`` when the target is a loss (a pilot longer than the job is the job)."""
    it = spec.expected_iterations()
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
    from spotwise.planner.estimate import pilot as pl

    if pilot_dir is not None:
        fit, _ = pl.pilot_from_run(pilot_dir)
        src = f"Thm 1 constants fitted to the losses of the run in {pilot_dir}"
    else:
        try:
            fit, _ = pl.run_pilot(spec, steps=pilot_steps)
        except pl.PilotSkipped as e:  # issue 42 item 1: a GPU model is never trained on this CPU, nor a slow one
            refine = ("To measure your job's own curve, run it briefly on its target hardware (spotwise run SPEC --out "
                      "pilot with a small target.samples) and plan with --pilot pilot")
            shipped = _from_prior(spec, str(e), refine)
            if shipped is not None:
                return shipped
            model, why = pl.prior_error_model(float(spec.workload.lr), float(spec.cluster.workers))
            return model, 0.0, [], [f"no pilot: {e}; assumed error model: {why}. {refine}"], "assumed", (str(e),)
        src = f"Thm 1 constants fitted to a {fit.n_points}-step in-process pilot of {spec.workload.name}"
    assumed = [f"pilot fit: {n}" for n in fit.notes]
    if fit.reliable:
        measured = [f"{src}: beta = 1 - alpha c mu = {fit.beta:.5f}, floor {fit.F:.4g}, r2 {fit.r2:.3f}"]
        return fit.model, float(fit.g_star), measured, assumed, "pilot", ()
    model, why = pl.assumed_error_model(fit)
    measured = [f"{src}: the fit is unreliable and NOT used ({'; '.join(fit.problems)})"]
    assumed = [f"assumed error model (the pilot fit is unreliable): {why}"] + assumed
    return model, float(fit.g_star), measured, assumed, "assumed", tuple(fit.problems)


def _from_prior(spec: JobSpec, skipped: str, refine: str
                ) -> tuple[ErrorModel, float, list[str], list[str], str, tuple[str, ...]] | None:
    """The error model fitted to the workload's shipped measured prior (:mod:`spotwise.planner.estimate.priors`),
    or ``None`` when it has none.  Its notes say it is a prior, how it was measured, and where the job differs."""
    from spotwise.planner.estimate import pilot as pl
    from spotwise.planner.estimate.priors import differences, load_prior

    if getattr(spec.workload, "script", None) is not None:
        return None
    prior = load_prior(spec.workload.name)
    if prior is None:
        return None
    import numpy as np

    fit = pl.fit_error_model(np.asarray(prior.losses, dtype=float), prior.lr, float(prior.workers))
    diff = differences(prior, spec)
    said = (f"no pilot ({skipped}): the loss curve is {spec.workload.name}'s shipped PRIOR, not your job's -- "
            f"{prior.describe()}; " + (f"your job differs in: {'; '.join(diff)}. " if diff else
                                       "your job is the measured configuration. ") + refine)
    src = (f"loss curve: {spec.workload.name}'s shipped prior (measured once, not your job's; --pilot RUN uses "
           "yours): Thm 1 constants fitted to it")
    if fit.reliable:
        return (fit.model, float(fit.g_star),
                [f"{src}: beta = {fit.beta:.5f}, floor {fit.F:.4g}, r2 {fit.r2:.3f} at {prior.workers} workers"],
                [said] + [f"prior fit: {n}" for n in fit.notes], "prior", ())
    model, why = pl.assumed_error_model(fit)
    return (model, float(fit.g_star), [f"{src}: the fit is unreliable and NOT used ({'; '.join(fit.problems)})"],
            [said, f"assumed error model (the prior's fit is unreliable): {why}"], "assumed", tuple(fit.problems))


def gather_inputs(spec: JobSpec, traces: list[str] | None = None, pilot_dir: str | None = None,
                  pilot_steps: int = DEFAULT_PILOT_STEPS, error_model: ErrorModel | None = None, g_star: float = 0.0) -> Inputs:
    """The plan's inputs (:class:`Inputs`) for a VM spec, or for a serverless spec (:func:`_gather_serverless`)."""
    from spotwise.config import resolve_epochs

    resolve_epochs(spec)  # target.epochs in samples (the training set's size)
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
    (:func:`spotwise.planner.plan.serverless.default_vm_instance`).  When the catalog has no throughput of that
    VM for the workload's family, one is derived from the per-vCPU throughput the functions use
    (:func:`spotwise.planner.plan.serverless.per_vcpu_throughput`), so both sides share one speed scale."""
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
                        f"the mini-batches a step commits" + (f"; capped at the job's length, {spec.expected_iterations()} steps"
                                                              if spec.expected_iterations() is not None else "") + ")")
        reach = float(error_bound(J, error_model, inv_n)) * (1 + 1e-9)
        if reach > eps:  # the run stops at target.iterations before the loss
            assumed.append(f"target loss {spec.target.loss:g} is not reached within target.iterations = {J} (its Thm 1 "
                           f"bound {reach + g_star:.4g}); the run stops there, so the error target is that bound")
            eps = reach
    else:
        J = int(spec.expected_iterations() or 1)
        if spec.target_samples() is not None:
            assumed.append(f"target.samples {spec.target_samples():,}: J = {J} steps of {spec.samples_per_step():,} samples "
                           "(all workers); a step with fewer workers commits fewer samples, so the run takes more steps "
                           "than J when workers are revoked (it ends when every sample is committed)")
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
                       "matching mean up/down run lengths (spotwise.planner.estimate.deadline)")
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
    # the strategy the spec runs, on its market's churn (spotwise.planner.estimate.churn): E[1/y] decides its iterations
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
                   "one billing minimum per started instance; spotwise.planner.estimate.churn)")
    return replace(inp, eps=eps, assumed=tuple(assumed), churn=est)
