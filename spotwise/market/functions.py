"""The market of a serverless job: functions bought per use, never revoked by a price.

A serverless job (``cluster.kind: serverless``, ``papers/004_9dc2adb66dc8d26e.txt``) runs its
workers as functions billed per request and per GB-second (``catalog.functions``) and keeps its
store on an on-demand instance (``cluster.redis_instance``; paper 004 Table 2).  The job
controller sees that world as a :class:`~spotwise.market.job_market.Market` like any other:
:func:`function_market` makes one whose *instance* is one function of the job's size (its $/h is
``per_gb_second x GB x 3600``, constant: functions have no spot price), whose *coordinator* is the
store's instance, which is never revoked (:class:`~spotwise.market.preemption.NoRevocation`) and
billed exactly (no rounding, no minimum).  The per-request part of the price is billed by the
serverless plane's meter, invocation by invocation.
"""

from __future__ import annotations

import math

import numpy as np

from spotwise.config import JobSpec
from spotwise.market.billing import BillingPolicy
from spotwise.market.catalog import Catalog
from spotwise.market.catalog_records import InstanceType
from spotwise.market.job_market import Market
from spotwise.market.preemption import NoRevocation
from spotwise.market.series import SeriesMeta, StepSeries

#: the job's horizon when it has no deadline (wall seconds; functions never run out)
DEFAULT_HORIZON_S = 7 * 24 * 3600.0


def function_instance(spec: JobSpec, catalog: Catalog) -> InstanceType:
    """One function of ``spec``'s size as an instance type (``functions:<pricing>``, its $/h)."""
    cl = spec.cluster
    pricing = catalog.function(cl.functions)
    gb = cl.memory_mb / 1024.0
    pricing.call_cost(gb, 1.0)  # refuses a function size the platform does not offer
    per_hour = float(pricing.per_gb_second * gb * 3600.0)
    return InstanceType(name=f"functions:{pricing.name}", cloud=pricing.cloud, region=pricing.region,
                        memory_gb=gb, on_demand_per_hour=per_hour,
                        # the functions' time is measured (wall clock): the family's relative speed is 1
                        throughput={spec.workload.family: 1.0}, source=pricing.source,
                        notes="one serverless function of the job's memory size, per GB-second")


def function_market(spec: JobSpec, catalog: Catalog | None = None, horizon_s: float | None = None) -> Market:
    """The market of the serverless ``spec`` (see the module docstring)."""
    catalog = catalog or Catalog.default()
    inst = function_instance(spec, catalog)
    if horizon_s is None:
        horizon_s = max(DEFAULT_HORIZON_S, 4 * (spec.deadline_s or 0.0))
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise ValueError("horizon_s must be positive and finite")
    meta = SeriesMeta(id=f"constant:{inst.name}", kind="price", instance=inst.name, source="catalog/functions")
    prices = StepSeries(np.array([0.0]), np.array([float(inst.on_demand_per_hour or 0.0)]), float(horizon_s), meta)
    return Market(instance=inst, coordinator=catalog.instance(spec.cluster.redis_instance), prices=prices,
                  revocation=NoRevocation(), billing=BillingPolicy.exact(), catalog=catalog, horizon_s=float(horizon_s))
