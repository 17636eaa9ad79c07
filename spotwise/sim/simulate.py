"""``spotwise simulate``: a job on its market in virtual time, with modelled compute and loss.

:func:`simulate_job` runs the coordinator of ``spotwise run`` -- the same policies, market,
revocation model, ledger, event log, checkpoints and run directory -- with
:class:`~spotwise.sim.modelled.ModelledCompute` (no processes, no Ray) and
:class:`~spotwise.sim.modelled.ModelledState` (the Thm 1 error recursion of
``papers/000_3c734f3ffedcac15.txt`` as the loss).  Time, cost, revocations and joins are the
emulated run's for the same spec and seed (the same virtual clock and the same mini-batch time law
draws); the loss is the model's.  The loss model's constants come from ``--pilot DIR`` (a run of
this job) or an in-process pilot of a built-in workload (:func:`spotwise.planner.plan.error_model_for`).

A ``module:function`` workload is never imported here (it is code: README, "Security"); simulate
it with ``--pilot DIR`` and ``--train-size N`` (the number of training samples), which is all the
simulator needs to know about it.
"""

from __future__ import annotations

import copy

from pathlib import Path
from typing import Any, Callable

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.events import RunSummary, write_summary
from spotwise.market.world import build_market
from spotwise.assemble import build_controller
from spotwise.control.progress import check_progress_possible
from spotwise.capacity.provider import EmulatedProvider
from spotwise.sim.modelled import ModelledCompute, ModelledState


def train_size_of(spec: JobSpec, train_size: int | None) -> int:
    """The training-set size: ``train_size`` (checked) if given, else the built-in workload's, which builds
    it (reads its dataset, through spotwise's safe readers); a ``module:function`` workload is never imported."""
    if train_size is not None:
        if train_size < 1:
            raise InputError(f"--train-size must be >= 1, got {train_size}", "give the number of training samples",
                             "--train-size")
        return int(train_size)
    if ":" in spec.workload.name:
        raise InputError("simulate does not import a module:function workload, so it cannot know its dataset size",
                         "pass --train-size N (its number of training samples) and --pilot DIR (a run of the job)",
                         "workload.name")
    from spotwise.elastic.describe import workload_for

    return len(workload_for(spec.workload, spec.seed).train)


def check_simulable(spec: JobSpec, pilot_dir: str | None = None) -> None:
    """Raise InputError (exit 2) for a spec the round simulator does not model, before any work starts."""
    if spec.cluster.kind == "serverless":
        raise InputError("simulate models VM clusters (rounds of paper 000 eq. 14-15); a serverless job is not simulated",
                         "price it with `spotwise plan` (the serverless planner, papers/004) or train it with "
                         "`spotwise run`", "cluster.kind")
    if spec.workload.restart is not None:
        raise InputError("simulate models in-place training; restart mode's restarts (start-up, steps redone from the "
                         "script's checkpoints) are not modelled yet", "simulate the spec without workload.restart "
                         "(a lower bound on its time and cost), or run it with `spotwise launch ... --restart`",
                         "workload.restart")
    if spec.cluster.data_plane == "collective" and spec.cluster.sync != "ssgd":
        raise InputError(f"simulate models synchronous rounds; the collective strategy {spec.cluster.sync!r} is not modelled yet",
                         "simulate the job with cluster.sync: ssgd (an S-SGD step is timed as fully synchronous SGD, "
                         "paper 000 eq. 14), or run it with `spotwise run`", "cluster.sync")
    if ":" in spec.workload.name and pilot_dir is None:
        raise InputError("simulate does not import a module:function workload, so it needs a measured loss model",
                         "pass --pilot DIR (a run directory of this job) and --train-size N", "workload.name")


def round_spec(spec: JobSpec) -> JobSpec:
    """The spec the round simulator runs: an S-SGD job of the collective plane is timed as fully
    synchronous SGD rounds (paper 000 eq. 14 -- the slowest of the members' mini-batches plus the
    commit overhead, as :func:`~spotwise.planes.collective.round_time.draw_round` draws an S-SGD step)
    on the parameter server's machinery, whose workers the simulator models without processes."""
    if spec.cluster.data_plane != "collective":
        return spec
    out = copy.deepcopy(spec)
    out.cluster.data_plane, out.cluster.sync = "ps", "full"
    return out


def simulate_job(
    spec: JobSpec,
    out_dir: str | Path,
    *,
    pilot_dir: str | None = None,
    pilot_steps: int = 200,
    train_size: int | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[RunSummary, list[str], list[str]]:
    """Simulate ``spec`` into ``out_dir``; returns the summary and the loss model's measured/assumed notes."""
    from spotwise.planner.plan import error_model_for

    check_simulable(spec, pilot_dir)
    spec = round_spec(spec)
    market = build_market(spec)
    check_progress_possible(spec, market)  # as `spotwise run` does: a market that cannot progress exits 2 (issue 30 item 11)
    n_train = train_size_of(spec, train_size)
    model, g_star, measured, assumed, _, _ = error_model_for(spec, pilot_dir, pilot_steps)
    state = ModelledState(model, n_train, g_star)
    compute = ModelledCompute(state)
    max_workers = max(spec.cluster.workers, spec.cluster.max_workers or spec.cluster.workers)
    provider = EmulatedProvider(market.revocation, max_workers, market.horizon_s, spec.seed, compute=compute)
    coord = build_controller(spec, out_dir, market=market, provider=provider, compute=compute, state=state,
                             mode="simulate", progress=progress)
    summary = coord.run()
    summary.extra["loss_model"] = {"kind": "paper 000 Thm 1 recursion", "beta": model.beta, "G1": model.G1,
                                   "g_star": g_star, "measured": measured, "assumed": assumed}
    write_summary(out_dir, summary)
    return summary, measured, assumed
