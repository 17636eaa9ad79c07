"""The coordinator's instance: one choice, used by every cost the job is quoted (issue 29 item 1).

The coordinator (the parameter server of the PS plane, the Ray head, the controller of the
collective plane) runs for the whole job on an **on-demand** instance: if it were revoked the job
would stop.  It needs CPUs and memory, not an accelerator.  Before issue 29 a spec without
``cluster.coordinator_instance`` billed the *worker's* type as the coordinator -- a p3.2xlarge
(V100, 3.06 $/h) as a parameter server -- while the sweep billed none and the emitted Ray head was
an m5.xlarge: one job, three costs.

:func:`coordinator_for` is the one rule: ``cluster.coordinator_instance`` when the spec names one,
else the cheapest on-demand CPU-only instance of the worker's cloud (in the job's region where the
catalog has regional entries) with at least :data:`MIN_VCPUS` vCPUs and :data:`MIN_MEMORY_GB` GB.
``plan``, ``simulate`` (one run and the sweep), ``run`` (:mod:`spotwise.market.world`) and the
emitted launch files (:mod:`spotwise.planner.emit`) all call it, so they bill and start the same
machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotwise.errors import InputError
from spotwise.market.catalog_records import InstanceType

if TYPE_CHECKING:
    from spotwise.config import JobSpec
    from spotwise.market.catalog import Catalog

#: the smallest coordinator: 2 vCPUs (one serves the workers, one runs the control loop)
MIN_VCPUS = 2
#: and 4 GB: the model, its optimizer state and one gradient buffer per worker in flight
MIN_MEMORY_GB = 4.0


def default_coordinator(catalog: "Catalog", cloud: str, region: str | None = None, *,
                        min_vcpus: int = MIN_VCPUS, min_memory_gb: float = MIN_MEMORY_GB) -> InstanceType:
    """The cheapest on-demand CPU-only instance of ``cloud`` with ``min_vcpus`` / ``min_memory_gb``.

    Entries for ``region`` win over region-agnostic ones of the same name; entries for another
    region never count (without ``region`` every entry does).  Ties break by name.  InputError when the catalog has none for the cloud.
    """
    best: dict[str, InstanceType] = {}
    for it in catalog.instances(cloud=cloud):
        if it.accelerator or it.on_demand_per_hour is None:
            continue
        if it.region and region and it.region != region and not region.startswith(it.region):
            continue
        if (it.vcpus or 0) < min_vcpus or (it.memory_gb or 0.0) < min_memory_gb:
            continue
        prev = best.get(it.name)
        if prev is None or (it.region and not prev.region):
            best[it.name] = it
    if not best:
        raise InputError(
            f"the catalog has no on-demand CPU instance of cloud {cloud!r} with >= {min_vcpus} vCPUs and "
            f">= {min_memory_gb:g} GB for the coordinator",
            "name one in cluster.coordinator_instance, or add one to a user catalog (market.catalog)",
            "cluster.coordinator_instance")
    return min(best.values(), key=lambda it: (float(it.on_demand_per_hour or 0.0), it.name))


def coordinator_for(spec: "JobSpec", catalog: "Catalog") -> InstanceType:
    """The coordinator instance of ``spec``'s job: the spec's ``cluster.coordinator_instance`` or
    :func:`default_coordinator` of the worker type's cloud and the job's region."""
    c = spec.cluster
    if c.coordinator_instance:
        inst = catalog.instance(c.coordinator_instance, cloud=c.cloud, region=c.region)
    else:
        cloud = c.cloud or catalog.instance(c.instance_type, cloud=c.cloud, region=c.region).cloud
        inst = default_coordinator(catalog, cloud, c.region)
    if inst.on_demand_per_hour is None:
        raise InputError(f"the coordinator {inst.name} has no on-demand price in the catalog",
                         "pick a cluster.coordinator_instance with an on-demand price", "cluster.coordinator_instance")
    return inst
