"""The on-demand baseline: the same job, the same work, on instances that are never revoked.

"How much did spot save?" is only an honest question when both sides did the same work.  A spot
run commits steps with however many workers are active, so its steps hold fewer samples than an
on-demand step with every worker present; comparing *steps* flatters spot (issue 7, item 7).
The baseline here is therefore matched on **samples**: it trains the same workload, from the same
seed, with the same synchronisation mode, batch size, learning-rate and growth policies, on
``cluster.workers`` on-demand instances of the same type, until its committed steps hold at least
as many samples as the spot run's did (it may overshoot by less than one step).  It is billed by
the same ledger and billing policy, coordinator included, and it is *trained for real* on the
emulated provider, so its accuracy is measured, not assumed.

What changes for the baseline (:func:`on_demand_spec`):

* prices: the instance's on-demand $/h, constant; no revocations; workers billed as on-demand;
* policies that only make sense on a spot market (``Policy.spot_only``: the dynamic-bids strategy
  of ``papers/000_3c734f3ffedcac15.txt`` Sec. VI-A) are dropped; the others (``lr-scaling``,
  ``exp-growth``) run unchanged, so a growing spot fleet is compared with the same growth on
  on-demand;
* checkpoints only at the end (nothing is ever revoked).

The baseline runs in ``OUT/on-demand/`` (a run directory of its own, same schema) and needs the
emulated provider: on a real cluster it would spend real money, so callers refuse it there.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Callable

from spotwise.config import JobSpec, MarketSpec, PolicySpec, RevocationSpec, SyntheticSpec, TargetSpec
from spotwise.errors import InputError
from spotwise.rundir_files import make_run_folder
from spotwise.rundir_names import BASELINE_DIR  # noqa: F401 (re-exported; the registry names it)
from spotwise.market.world import build_market
from spotwise.policies.registry import POLICIES
from spotwise.reports.terminal_text import terminal_console



def on_demand_spec(spec: JobSpec, on_demand_per_hour: float) -> JobSpec:
    """``spec`` moved to on-demand capacity (see the module docstring); ``spec`` is not changed."""
    if not (on_demand_per_hour > 0 and math.isfinite(on_demand_per_hour)):
        raise InputError(f"no usable on-demand price ({on_demand_per_hour!r}) for {spec.cluster.instance_type}",
                         "add on_demand_per_hour to the instance in a catalog file", "cluster.instance_type")
    base = copy.deepcopy(spec)
    base.name = f"{spec.name} (on-demand baseline)"
    base.market = MarketSpec(
        synthetic=SyntheticSpec(kind="constant", price=float(on_demand_per_hour), duration_s=spec.market.synthetic.duration_s
                                if spec.market.synthetic is not None else 7 * 24 * 3600.0),
        revocation=RevocationSpec(model="none"),
        billing=spec.market.billing, min_charge_s=spec.market.min_charge_s, catalog=list(spec.market.catalog),
    )
    base.cluster.bids = None
    base.policies = [PolicySpec(p.name, dict(p.params)) for p in spec.policies if not POLICIES[p.name].spot_only]
    base.outputs.checkpoint_every = 0
    base.outputs.plots = False
    # the sample target ends the run; the step target only bounds it (one sample per step at worst)
    base.target = TargetSpec(iterations=max(1, 10 * (spec.target.iterations or 1)), loss=None)
    return base


def run_on_demand_baseline(
    spec: JobSpec,
    samples: int,
    out_dir: str | Path,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train ``spec``'s on-demand twin until it has committed ``samples`` samples; its measured result.

    Returns ``{"basis": "measured", "workers", "samples", "steps", "time_s", "cost_usd",
    "cost_breakdown", "metric", "metric_name", "final_loss", "status", "dir"}``.  Needs Ray to be
    initialised (the spot run's Ray is reused).
    """
    from spotwise.assemble import build_controller

    if samples < 1:
        raise ValueError("a baseline needs at least one sample to match")
    spot_market = build_market(spec)
    base = on_demand_spec(spec, spot_market.on_demand_price)
    base.target = TargetSpec(iterations=max(base.target.iterations or 1, samples), loss=None)
    out = Path(out_dir)
    coord = build_controller(base, out, resume=False, progress=progress, mode="emulated",
                             stop_after_samples=int(samples), worker_market="on_demand")
    summary = coord.run()
    return {
        "basis": "measured", "workers": base.cluster.workers, "samples": int(coord.counters.samples), "steps": summary.steps,
        "time_s": summary.virtual_s, "cost_usd": summary.cost_usd, "cost_breakdown": summary.cost_breakdown,
        "metric": summary.final_metric, "metric_name": summary.metric_name, "final_loss": summary.final_loss,
        "status": summary.status, "dir": str(out),
    }


def compare_on_demand(summary: Any, out_dir: str | Path, *, progress: bool = True) -> Any:
    """Run the measured on-demand baseline for a finished spot run in ``out_dir``; update its summary.

    The baseline goes to ``OUT/on-demand/``; ``summary.extra["on_demand"]`` is replaced by its
    measured result (the model estimate stays as ``summary.extra["on_demand_model"]``) and
    ``OUT/summary.json`` is rewritten.  A run that committed no sample has nothing to compare.
    """
    from spotwise.config import spec_from_dict
    from spotwise.events import write_summary
    from spotwise.control.runner import RunProgress

    samples = int(summary.extra.get("samples") or 0)
    if samples < 1:
        return summary
    spec = spec_from_dict(summary.spec, "summary.json: spec")
    out = Path(out_dir)
    per_step = spec.cluster.workers * spec.workload.batch_size
    if progress:
        terminal_console(stderr=True).print(f"on-demand baseline: the same {samples} samples on {spec.cluster.workers} on-demand workers")
    # the steps are an estimate: a step may hold fewer samples than workers x batch (n-sync, epoch ends)
    with RunProgress(math.ceil(samples / per_step), progress, estimated=True, label="on-demand") as bar:
        # a real folder in the run directory, never a link out of it (issue 30 item 2)
        measured = run_on_demand_baseline(spec, samples, make_run_folder(out, BASELINE_DIR),
                                          progress=bar.update if progress else None)
    measured["dir"] = BASELINE_DIR  # relative to the run directory
    summary.extra["on_demand_model"] = summary.extra.get("on_demand")
    summary.extra["on_demand"] = measured
    write_summary(out, summary)
    return summary
