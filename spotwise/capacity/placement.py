"""Which device the workers train on and how many GPUs each worker actor asks Ray for (issue 20 item 4).

The driver decides before any worker actor starts (:func:`placement_for`: ``spotwise run`` calls
it before it starts a local Ray, the data planes when they build their worker processes, the
cluster provider before it requests any); each worker then resolves the device it is handed on its
own node (:func:`spotwise.workloads.device.resolve_device`).

One worker per GPU: a worker actor asks for ``num_gpus=1`` when the job's instance type has GPUs
in the catalog (``accelerator_count``, :mod:`spotwise.market.catalog_records`) and the device is not
the CPU; Ray then gives its process one GPU (``CUDA_VISIBLE_DEVICES``).  The rules, from
``cluster.device``:

=========  =======================================================================================
``cpu``    every worker on its CPU, no GPU requested.
``auto``   GPUs only where they exist: with a GPU instance type and GPU resources in the Ray
           cluster, ``num_gpus=1`` per worker and each worker takes CUDA if its process sees it (else
           its CPU); otherwise the CPU, no GPU requested.
``cuda``   a GPU instance type is required (InputError otherwise); with GPU resources in the Ray
           cluster ``num_gpus=1`` per worker; without them, the workers use the CUDA of the node they
           run on if this node has one, and the job exits 2 before any actor starts if it has none.
=========  =======================================================================================

With ``num_gpus=1`` the job's workers must fit the cluster's GPUs (one each), or the emulated
provider would wait forever for actors Ray cannot place: InputError (exit 2) before any starts.
Standby actors hold a GPU each too, so the standby pool shrinks to the GPUs the workers leave free
(:meth:`Placement.standby`).  A migration to another instance type keeps the placement the job
started with.
Outside Ray (in-process workers, tests) the machine's own CUDA devices stand for the cluster's GPUs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.workloads.device import NO_CUDA, no_cuda_error


@dataclass(frozen=True)
class Placement:
    """The driver's decision: ``device`` each worker resolves (``cpu``, ``auto`` or ``cuda``) and the
    GPUs each worker actor asks Ray for (``num_gpus``: 0 or 1)."""

    device: str
    num_gpus: int
    #: GPUs of one instance of the job's type in the catalog
    instance_gpus: int
    #: GPU resources the Ray cluster has (or the CUDA devices of this machine outside Ray)
    cluster_gpus: float

    def actor_options(self) -> dict[str, Any]:
        """Ray actor options for a worker (``{"num_gpus": 1}`` or nothing)."""
        return {"num_gpus": self.num_gpus} if self.num_gpus else {}

    def standby(self, spec: JobSpec, standby: int) -> int:
        """How many standby actors to keep: a standby actor holds its GPU too, so with GPUs only as
        many as the GPUs the job's workers leave free (the pool starts before the workers: more
        would take GPUs the workers then wait for)."""
        if not self.num_gpus:
            return int(standby)
        return max(0, min(int(standby), int(self.cluster_gpus) - peak_workers(spec)))


def peak_workers(spec: JobSpec) -> int:
    """The most workers the job may run at once (``max_workers`` for growth policies)."""
    return max(int(spec.cluster.workers), int(spec.cluster.max_workers or 0))


def ray_gpus() -> float | None:
    """GPU resources of the connected Ray cluster; ``None`` when Ray is not running in this process
    (Ray is not imported for that: code paths without Ray stay without it)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return float(ray.cluster_resources().get("GPU", 0.0))


def instance_gpus(spec: JobSpec) -> int:
    """GPUs of one instance of ``spec``'s instance type in its catalog (0 for a CPU type)."""
    from spotwise.market.world import load_catalog

    cl = spec.cluster
    return int(load_catalog(spec).instance(cl.instance_type, cloud=cl.cloud, region=cl.region).accelerator_count)


def placement_for(spec: JobSpec, cluster_gpus: float | None = None, cuda_available: bool | None = None,
                  gpus_per_instance: int | None = None, autoscale: bool = False) -> Placement:
    """Where ``spec``'s workers train (module docstring); InputError (exit 2) when it cannot be honoured.

    ``autoscale``: the cluster's autoscaler brings the nodes (and their GPUs) when the workers ask
    for them, so the GPUs the cluster has now decide nothing: a GPU instance type asks for one GPU
    per worker (``auto`` and ``cuda``).

    ``cluster_gpus`` (default: the Ray cluster's GPU resources, or this machine's CUDA devices
    outside Ray), ``cuda_available`` (default ``torch.cuda.is_available()`` on this node) and
    ``gpus_per_instance`` (default: the catalog's) are for tests.
    """
    import torch

    cl = spec.cluster
    if cuda_available is None:
        cuda_available = bool(torch.cuda.is_available())
    if cluster_gpus is None:
        cluster_gpus = ray_gpus()
        if cluster_gpus is None:
            cluster_gpus = float(torch.cuda.device_count()) if cuda_available else 0.0
    if cl.device == "cpu" or cl.kind != "vm":  # functions have no GPU (config refuses device: cuda there)
        return Placement("cpu", 0, 0, cluster_gpus)
    per_instance = instance_gpus(spec) if gpus_per_instance is None else int(gpus_per_instance)
    if per_instance < 1:
        if cl.device == "cuda":
            raise InputError(f"cluster.device is cuda but instance type {cl.instance_type!r} has no GPU in the catalog",
                             "pick a GPU instance type (e.g. p3.2xlarge, one V100), or use device: auto or cpu")
        return Placement("cpu", 0, per_instance, cluster_gpus)
    if autoscale:
        return Placement(cl.device, 1, per_instance, cluster_gpus)
    if cluster_gpus < 1:
        if cl.device == "auto":
            return Placement("cpu", 0, per_instance, cluster_gpus)
        if not cuda_available:
            raise no_cuda_error(f"{NO_CUDA[0]} and the Ray cluster has no GPU resources")
        if cl.data_plane == "collective" and peak_workers(spec) > 1:
            raise InputError("cluster.device is cuda but the Ray cluster has no GPU resources: the collective members "
                             "would share this node's GPU, and NCCL needs one GPU per member",
                             "start Ray with its GPUs (ray start --num-gpus N), or use device: auto or cpu")
        return Placement("cuda", 0, per_instance, cluster_gpus)
    if peak_workers(spec) > cluster_gpus:
        raise InputError(f"{peak_workers(spec)} workers (cluster.workers / max_workers) on {cl.instance_type} take one GPU "
                         f"each but the Ray cluster has {cluster_gpus:g} GPUs",
                         f"lower cluster.workers (and max_workers) to at most {int(cluster_gpus)}, add GPU nodes, "
                         "or use device: cpu", "cluster.workers")
    return Placement(cl.device, 1, per_instance, cluster_gpus)


def coordinator_device(spec: JobSpec, cuda_available: bool | None = None) -> str:
    """Where the parameter-server plane's coordinator applies the optimizer (issue 40 item 4): ``"cuda"`` when
    the job's workers train on GPUs (``device: cuda``, or ``auto`` with a GPU instance type) and this process
    sees a CUDA device, else ``"cpu"``.  The collective plane's coordinator applies nothing (its members
    step), so it stays on the CPU; so does a serverless job's.  ``cuda_available`` is for tests."""
    import torch

    cl = spec.cluster
    if cl.kind != "vm" or cl.device == "cpu" or cl.data_plane != "ps":
        return "cpu"
    if not (bool(torch.cuda.is_available()) if cuda_available is None else cuda_available):
        return "cpu"
    if cl.device == "cuda":
        return "cuda"
    try:
        return "cuda" if instance_gpus(spec) > 0 else "cpu"
    except (InputError, KeyError, ValueError):  # an instance type the catalog lacks: no GPU known
        return "cpu"
