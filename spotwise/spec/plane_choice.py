"""Which data plane a job gets when its spec does not name one (``cluster.data_plane: auto``, the default).

Two planes train a job (``docs/DESIGN``): the **collective** plane, whose members all-reduce among
themselves (S-SGD on PyTorch's DDP machinery, S-MA, AD-PSGD; Spotnik,
``papers/001_30a454edd897cf47.txt`` Sec. 3.3), and the **parameter-server** plane, whose coordinator
combines every step (``papers/000_3c734f3ffedcac15.txt``, ``papers/002_a246f6afe29b4bfb.txt``: async and
N-sync modes, heterogeneous pools).  On GPUs the difference is the job's cost: measured on one H200
(issue 40), the parameter-server plane ran 0.32x (ResNet-18) and 0.09x (a 10.8M GPT) of a plain
PyTorch loop's steps per second, the collective plane 0.71x and 0.41x before its DDP step -- at 0.3x
the spot discount is gone.  So, in this order:

1. a serverless job, pools of several types, parameter-server shards or network, or a sync mode
   only the parameter server has (``n-sync``, ``n-batch``, ``async``) -> ``ps`` (what asks for it);
2. a collective sync mode (``ssgd``, ``sma``, ``adpsgd``) -> ``collective``;
3. ``cluster.device: cpu`` -> ``ps``; workers with GPUs -- ``cluster.device: cuda``,
   ``cluster.accelerators``, or an instance type the catalog lists with accelerators -> ``collective``;
4. otherwise (CPU workers) -> ``ps``, the plane the papers' CPU experiments use.

:func:`choose_data_plane` is pure: it returns the plane and a sentence saying why, which ``plan``
and ``run`` print.  A spec that names its plane keeps it.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from spotwise.errors import InputError

#: sync modes only the parameter-server plane runs
PS_ONLY_SYNC = ("n-sync", "n-batch", "async")
#: sync modes only the collective plane runs
COLLECTIVE_SYNC = ("ssgd", "sma", "adpsgd")


@functools.lru_cache(maxsize=1)
def _packaged_catalog() -> Any:
    from spotwise.market.catalog import Catalog

    return Catalog.default()


def gpus_of(instance_type: str, catalog_files: Sequence[str] = (), cloud: str | None = None) -> tuple[str, int] | None:
    """The accelerator name and count the catalog lists for ``instance_type`` (the packaged catalog,
    then the spec's ``market.catalog`` files); ``None`` for a type no catalog knows."""
    if not instance_type:
        return None
    catalog = _packaged_catalog()
    for attempt in range(2):
        try:
            it = catalog.instance(instance_type, cloud=cloud)
            return str(it.accelerator), int(it.accelerator_count)
        except InputError:
            if attempt or not catalog_files:
                return None
            try:
                for path in catalog_files:
                    catalog = catalog.extend(path)
            except InputError:  # a catalog file not readable from here: the market's build reports it
                return None
    return None


def choose_data_plane(cluster: Any, catalog_files: Sequence[str] = (), script: bool = False) -> tuple[str, str]:
    """``(plane, why)`` for a :class:`~spotwise.config.ClusterSpec` ``cluster`` (module docstring).
    ``script``: the job trains the user's own loop (``workload.script``), which only the collective
    plane runs (S-SGD; InputError for a spec that asks for anything else)."""
    c = cluster
    if script:
        if c.data_plane == "ps" or c.kind != "vm" or c.pools:
            raise InputError("a training script runs its own loop in every member, which only the collective plane "
                             "does", "remove cluster.data_plane: ps / kind: serverless / pools for a workload.script",
                             "cluster.data_plane")
        if c.sync not in ("full", "ssgd"):
            raise InputError(f"a training script's steps are synchronous (S-SGD); sync {c.sync} is not",
                             "use cluster.sync: full (or ssgd), or leave it out", "cluster.sync")
        return "collective", ("a training script (workload.script) runs its own loop in every member; they all-reduce "
                              "among themselves on PyTorch's DDP")
    if c.data_plane in ("ps", "collective"):
        return str(c.data_plane), f"cluster.data_plane: {c.data_plane} in the spec"
    if c.kind != "vm":
        return "ps", "serverless functions exchange updates through the parameter server's store"
    if c.pools:
        return "ps", ("pools of several types train on the parameter server (a collective barrier would run "
                      "every member at the slowest pool's speed)")
    if int(c.ps_shards) > 1 or c.ps_gbps is not None:
        return "ps", "cluster.ps_shards / ps_gbps describe a parameter server"
    if c.sync in PS_ONLY_SYNC:
        return "ps", f"sync {c.sync} is a parameter-server mode"
    if c.sync in COLLECTIVE_SYNC:
        return "collective", f"sync {c.sync} is a collective mode"
    if c.device == "cpu":
        return "ps", ("the workers train on CPUs (cluster.device: cpu): the parameter server combines their steps; "
                      "set cluster.data_plane: collective to all-reduce among them")
    if c.device == "cuda":
        return "collective", ("the workers train on GPUs (cluster.device: cuda): they all-reduce among themselves "
                              "on PyTorch's DDP; set cluster.data_plane: ps for a parameter server")
    if c.accelerators:
        return "collective", (f"the workers have GPUs (cluster.accelerators: {c.accelerators}): they all-reduce among "
                              "themselves on PyTorch's DDP; set cluster.data_plane: ps for a parameter server")
    gpus = gpus_of(c.instance_type, catalog_files, c.cloud)
    if gpus is not None and gpus[1] > 0:
        return "collective", (f"the workers have GPUs ({c.instance_type}: {gpus[1]} x {gpus[0]}): they all-reduce among "
                              "themselves on PyTorch's DDP; set cluster.data_plane: ps for a parameter server")
    return "ps", (f"the workers train on CPUs ({c.instance_type or 'the instance type'} has no GPU): the parameter "
                  "server combines their steps; set cluster.data_plane: collective to all-reduce among them")
