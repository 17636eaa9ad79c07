"""Validation of ``cluster.pools``, ``cluster.balance`` and ``cluster.ps_shards`` (issue 21).

A heterogeneous cluster (``papers/002_a246f6afe29b4bfb.txt`` Sec. III-G: K80, P100 and V100
servers, in one or several regions, with one or two parameter servers) is a list of pools; the
single-type form (``cluster.instance_type`` + ``cluster.workers``) is one pool.  With pools, the
cluster-wide ``instance_type``, ``workers`` and ``region`` are derived from them (the first pool's
type and place, the total of workers) so that every part of spotwise that reads them keeps working;
per-pool fields (bids, region) given at the cluster level as well are refused, not merged.
"""

from __future__ import annotations

from typing import Any, Literal

from spotwise.errors import InputError

Balance = Literal["equal", "throughput"]
#: most parameter-server shards a job may ask for (each is an on-demand coordinator instance)
MAX_PS_SHARDS = 64


def check_pools(cl: Any) -> None:
    """Validate and normalise the pool fields of a :class:`~spotwise.config.ClusterSpec` ``cl``."""
    if cl.balance not in ("equal", "throughput"):
        raise InputError(f"unknown balance {cl.balance!r}", "use equal (every worker the same batch) or throughput "
                         "(a batch proportional to the worker's catalog speed; barrier modes)", "balance")
    shards = cl.ps_shards
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_PS_SHARDS:
        raise InputError(f"must be an integer in [1, {MAX_PS_SHARDS}], got {shards!r}",
                         "split the parameters over k parameter-server shards, e.g. 2 (paper 002 Fig. 6)", "ps_shards")
    if cl.ps_gbps is not None and not (0 < cl.ps_gbps < 1e5):
        raise InputError(f"must be in (0, 1e5) Gbit/s, got {cl.ps_gbps!r}", "the parameter server's network, e.g. 8 "
                         "(GCE gives 2 Gbit/s per vCPU: a 4-vCPU server)", "ps_gbps")
    if shards > 1 and cl.ps_gbps is None:
        raise InputError("ps_shards splits the parameter server's network load, but cluster.ps_gbps is not set",
                         "set cluster.ps_gbps (the server's Gbit/s, e.g. 8) so the bottleneck the shards relieve is "
                         "modelled, or remove ps_shards", "ps_shards")
    if shards > 1 and (cl.kind != "vm" or cl.data_plane == "collective"):
        raise InputError("ps_shards applies to the parameter-server data plane", "remove cluster.ps_shards, or use "
                         "cluster.data_plane: ps on VMs", "ps_shards")
    if cl.pools is None:
        return
    pools = list(cl.pools)
    if not pools:
        raise InputError("cluster.pools is empty", "list at least one pool, or remove cluster.pools and give "
                         "cluster.instance_type and cluster.workers", "pools")
    if cl.kind != "vm":
        raise InputError("pools are instance pools: a serverless cluster has none", "remove cluster.pools, or set cluster.kind: vm", "pools")
    if cl.data_plane == "collective":
        raise InputError("pools of several types run on the parameter-server plane", "set cluster.data_plane: ps "
                         "(the collective plane's barrier would run every member at the slowest pool's speed)", "pools")
    names = [p.name for p in pools]
    for i, n in enumerate(names):
        if names.count(n) > 1:
            raise InputError(f"two pools are named {n!r}", "give each pool a distinct name (pools[].name)", f"pools[{i}].name")
    total = sum(p.workers for p in pools)
    first = pools[0]
    if cl.instance_type and cl.instance_type != first.instance_type:
        raise InputError("cluster.instance_type is set beside cluster.pools", "give the instance type in each pool "
                         "and remove cluster.instance_type", "instance_type")
    if cl.bids is not None:
        raise InputError("cluster.bids is set beside cluster.pools", "give bids in each pool (pools[].bids)", "bids")
    if cl.region and cl.region != first.place:
        raise InputError("cluster.region is set beside cluster.pools", "give the region or zone in each pool", "region")
    if cl.workers not in (1, total):
        raise InputError(f"cluster.workers is {cl.workers} but the pools hold {total}",
                         "remove cluster.workers (the pools' workers add up to the cluster's)", "workers")
    if cl.max_workers is not None and cl.max_workers != total:
        raise InputError("growth policies add workers of one type: not with pools",
                         "remove cluster.max_workers, or add workers to the pools", "max_workers")
    cl.instance_type, cl.workers, cl.region = first.instance_type, total, first.place


def check_pool_markets(spec: Any) -> None:
    """Each pool's revocation model has what it needs (bids, a trace) -- a :class:`~spotwise.config.JobSpec` check."""
    pools = spec.cluster.pools or []
    for i, p in enumerate(pools):
        rev = p.revocation or spec.market.revocation
        traces = (p.market.traces if p.market and p.market.traces else None) or spec.market.traces
        if rev.model == "bid" and p.bids is None:
            raise InputError(f"pool {p.name!r} is on the bid revocation model but has no bids",
                             "set pools[].bids (a $/h bid for the pool's workers, or one per worker)", f"cluster.pools[{i}].bids")
        if rev.model == "trace" and not traces:
            raise InputError(f"pool {p.name!r} replays an availability trace but none is given",
                             "list an availability trace under pools[].market.traces or market.traces", f"cluster.pools[{i}].market")
