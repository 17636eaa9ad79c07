"""The place ``spotwise plan --emit`` launches (issue 20 item 3, issue 29 item 3): the recommendation
read as cloud, region/zone, instance type, worker count and bids (:func:`emit_target`), the GCE
machine of a catalog entry (:func:`gce_machine`) and the head node -- the coordinator that ``plan``
and ``simulate`` bill, :func:`spotwise.market.coordinator.coordinator_for` (:func:`head_instance`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.market.catalog_records import InstanceType

EMIT_KINDS = ("ray-cluster", "skypilot")
EMIT_CLOUDS = ("aws", "gcp")
RAY_PORT = 6379
#: GCE images (Deep Learning VM families); GPU nodes get the NVIDIA driver from the image's install-nvidia-driver hook
GCP_CPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cpu"
GCP_GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu121-debian-11-py310"
GCP_PROJECT_PLACEHOLDER = "REPLACE-WITH-YOUR-GCP-PROJECT-ID"
_GCE_ACCELERATORS = {"K80": "nvidia-tesla-k80", "P4": "nvidia-tesla-p4", "P100": "nvidia-tesla-p100",
                     "V100": "nvidia-tesla-v100", "T4": "nvidia-tesla-t4", "A100": "nvidia-tesla-a100",
                     "L4": "nvidia-l4", "H100": "nvidia-h100-80gb"}
#: GCE machine families: a catalog name that starts with one is a real machine type, used as it is
_GCE_MACHINE = re.compile(r"^(n1|n2|n2d|n4|e2|c2|c2d|c3|c3d|c4|m1|m2|m3|a2|a3|g2|t2a|t2d|h3|z3|custom)-[a-z0-9-]+$")
_GCE_BUILTIN_GPU = ("a2-", "a3-", "g2-")
_N1_SIZES = (1, 2, 4, 8, 16, 32, 64, 96)
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)([a-z])?$")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)(?:-([a-z]))?$")


# ------------------------------------------------------------------------------------- the place
@dataclass(frozen=True)
class EmitTarget:
    """Where and what to launch, from the plan's recommendation (:func:`emit_target`)."""

    cloud: str
    region: str
    zone: str  # "" when the plan names a region only (AWS)
    instance: InstanceType
    workers: int
    initial_workers: int  # the planned spec's cluster.workers: the slots the job asks for at its start
    slots: int  # spotwise workers per node (one per GPU on a multi-GPU type, else one)
    spot: bool
    bids: tuple[float, ...]
    #: fall-back places, best first, this place first: (region, zone, instance type)
    ranked: tuple[tuple[str, str, InstanceType], ...]
    strategy: str
    notes: tuple[str, ...] = field(default=())

    @property
    def nodes(self) -> int:
        return math.ceil(self.workers / self.slots)

    @property
    def notice_source(self) -> str:
        return self.cloud  # spotwise's notice watchers: aws (spot instance-action) and gcp (preempted)


def _split_place(cloud: str, place: str) -> tuple[str, str]:
    """(region, zone) of a plan's place; GCP needs a zone, so a bare GCP region gets its ``-b`` zone."""
    if cloud == "aws":
        m = _AWS_ZONE.match(place)
        if m:
            return m.group(1), place if m.group(2) else ""
    else:
        m = _GCP_ZONE.match(place)
        if m:
            return m.group(1), place if m.group(2) else f"{m.group(1)}-b"
    raise InputError(f"the plan's place {place!r} is not an {cloud.upper()} region or zone",
                     f"set cluster.region to an {cloud.upper()} zone (e.g. {'us-east-1b' if cloud == 'aws' else 'us-central1-a'})",
                     "--emit")


def emit_target(rec: Mapping[str, Any] | None, spec: JobSpec, catalog: Catalog | None = None) -> EmitTarget:
    """The place to launch from the plan's recommendation (``plan.extra["recommendation"]``).

    :class:`InputError` (exit 2) when there is nothing to launch: no recommendation, a serverless
    recommendation or spec, no region, or an instance type of a cloud other than AWS and GCP.
    """
    if spec.cluster.kind == "serverless":
        raise InputError("a serverless spec runs on functions: there is no VM cluster to launch",
                         "drop --emit (spotwise run runs a serverless spec as it is), or plan a spec with cluster.kind: vm",
                         "--emit")
    if not rec:
        raise InputError("the plan has no recommended place", "relax the deadline or budget until spotwise plan recommends "
                         "one, then emit again", "--emit")
    strategy = str(rec.get("strategy", ""))
    if strategy == "serverless":
        raise InputError("the plan recommends serverless functions: there is no VM cluster to launch",
                         "drop --emit and run the planned spec (plan --write-spec FILE) with spotwise run: functions need "
                         "no cluster", "--emit")
    if catalog is None:
        from spotwise.market.world import load_catalog

        catalog = load_catalog(spec)
    inst = catalog.instance(str(rec["instance"]), cloud=spec.cluster.cloud)
    if inst.cloud not in EMIT_CLOUDS:
        raise InputError(f"the recommended instance type {inst.name} is on {inst.cloud}; --emit writes AWS and GCP clusters",
                         "plan for an AWS or GCP instance type (cluster.instance_type, or --types with --trace)", "--emit")
    place = str(rec.get("place") or "")
    if not place:
        raise InputError("the plan names no region or zone to launch in",
                         f"set cluster.region in the spec (e.g. {'us-east-1b' if inst.cloud == 'aws' else 'us-central1-a'}), "
                         "or plan with --trace so that spotwise picks the zone", "--emit")
    region, zone = _split_place(inst.cloud, place)
    notes: list[str] = []
    if inst.cloud == "gcp" and not _GCP_ZONE.match(place).group(2):  # type: ignore[union-attr]
        notes.append(f"the plan names the region {region}; zone {zone} was chosen: change availability_zone/zone if it "
                     "lacks the instance type")
    if inst.cloud == "gcp":
        notes += gce_machine(inst)[2]
    workers = int(rec["workers"])
    if workers < 1:
        raise InputError("the plan has no workers", "plan again", "--emit")
    slots = inst.accelerator_count if inst.accelerator_count > 1 else 1
    slots = min(slots, workers)
    if slots > 1:
        notes.append(f"{inst.name} has {inst.accelerator_count} GPUs: one spotwise worker per GPU, {slots} per node "
                     f"(the plan priced one {inst.name} per worker, so this cluster costs less and each worker has one GPU)")
    initial = workers // 2 if strategy == "dynamic" else workers  # apply_plan: the dynamic strategy starts with half
    ranked: list[tuple[str, str, InstanceType]] = [(region, zone, inst)]
    for r in rec.get("ranked_places") or []:
        try:
            other = catalog.instance(str(r["instance"]), cloud=inst.cloud)
            reg, zn = _split_place(inst.cloud, str(r["zone"]))
        except (InputError, KeyError):
            continue  # another cloud's place, or a type the catalog lacks: not a fall-back of this cluster
        if (reg, zn, other.name) not in {(a, b, c.name) for a, b, c in ranked}:
            ranked.append((reg, zn, other))
    return EmitTarget(cloud=inst.cloud, region=region, zone=zone, instance=inst, workers=workers,
                      initial_workers=max(1, initial), slots=slots, spot=strategy != "on-demand",
                      bids=tuple(float(b) for b in rec.get("bids") or ()), ranked=tuple(ranked), strategy=strategy,
                      notes=tuple(notes))


# ------------------------------------------------------------------------------------- machines
def gce_machine(inst: InstanceType) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(GCE machine type, guest accelerators, notes) for a catalog entry: a real machine type as it is;
    spotwise's GCE servers of paper 002 (``gce-v100``...) as the nearest n1-standard shape plus their GPU."""
    notes: list[str] = []
    if _GCE_MACHINE.match(inst.name):
        machine = inst.name
    else:
        vcpus = next((n for n in _N1_SIZES if n >= max(1, inst.vcpus)), _N1_SIZES[-1])
        machine = f"n1-standard-{vcpus}"
        notes.append(f"{inst.name} ({inst.vcpus} vCPUs, {inst.memory_gb} GB in the catalog) runs as {machine}"
                     + (f" with {inst.accelerator_count} {inst.accelerator}" if inst.accelerator_count else ""))
    acc: list[dict[str, Any]] = []
    if inst.accelerator_count and not machine.startswith(_GCE_BUILTIN_GPU):
        name = _GCE_ACCELERATORS.get(inst.accelerator.upper(), f"nvidia-{inst.accelerator.lower()}")
        acc = [{"acceleratorType": name, "acceleratorCount": int(inst.accelerator_count)}]
    return machine, acc, notes


def head_instance(spec: JobSpec, t: EmitTarget, catalog: Catalog | None = None) -> InstanceType:
    """The head node (coordinator): on demand, the instance plan/simulate bill
    (:func:`~spotwise.market.coordinator.coordinator_for`: ``cluster.coordinator_instance``, else the
    cheapest on-demand CPU instance of the worker's cloud)."""
    from spotwise.market.coordinator import coordinator_for, default_coordinator

    if catalog is None:
        from spotwise.market.world import load_catalog

        catalog = load_catalog(spec)
    head = coordinator_for(spec, catalog)
    if head.cloud != t.cloud:  # a plan over other types (--types, --trace) recommends another cloud than the spec's
        head = default_coordinator(catalog, t.cloud, t.region)
    return head


def cluster_name(spec: JobSpec) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-") or "job"
    return f"spotwise-{base}"[:40].rstrip("-")

