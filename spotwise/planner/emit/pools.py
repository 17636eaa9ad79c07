"""``plan --emit`` for a spec with ``cluster.pools`` (issue 21): the recommended pool mix as a cluster file.

Ray's cluster launcher and SkyPilot launch one place per cluster (one provider region/zone, one task
resource), so a mix whose workers come from one pool is emitted as that pool's single-type cluster
(its instance type, zone or region, workers and bid), and the nodes run the planned spec (with that
pool only).  A mix of several pools is refused with exit 2 saying what to do: one cluster per pool,
or a spec whose pools share one type and place.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from spotwise.config import JobSpec
from spotwise.errors import InputError


def pool_emit_view(rec: Mapping[str, Any] | None, spec: JobSpec, plan_extra: Mapping[str, Any]) -> tuple[dict[str, Any], JobSpec]:
    """``(recommendation, spec)`` as a single-type plan of the one pool the mix uses; InputError otherwise."""
    chosen = [p for p in plan_extra.get("pools") or [] if int(p.get("workers") or 0) > 0]
    if not rec or not chosen:
        raise InputError("the plan has no pool mix to launch", "relax the deadline or budget until spotwise plan "
                         "recommends one, then emit again", "--emit")
    if len(chosen) > 1:
        names = ", ".join(f"{p['workers']}x {p['name']}" for p in chosen)
        raise InputError(f"the recommended mix spans {len(chosen)} pools ({names}); Ray's cluster launcher and SkyPilot "
                         "launch one instance type in one place per cluster",
                         "launch one cluster per pool (plan a spec per pool and emit each), or list pools that share "
                         "one type and place; spotwise run --ray-address runs the mix on a cluster you start", "--emit")
    pool = chosen[0]
    spec_pool = next(p for p in spec.cluster.pools or [] if p.name == pool["name"])
    cluster = dataclasses.replace(spec.cluster, pools=None, instance_type=spec_pool.instance_type, workers=int(pool["workers"]),
                                  region=spec_pool.place, bids=spec_pool.bids, max_workers=None)
    one = dataclasses.replace(spec, cluster=cluster)
    bid = pool.get("bid")
    view = {**dict(rec), "strategy": "pool-mix", "instance": spec_pool.instance_type, "place": spec_pool.place,
            "workers": int(pool["workers"]), "bids": [] if bid is None else [float(bid)] * int(pool["workers"]),
            "ranked_places": []}
    if not spec_pool.place:
        raise InputError(f"pool {pool['name']!r} names no region or zone to launch in",
                         "set cluster.pools[].zone or .region in the spec", "--emit")
    return view, one
