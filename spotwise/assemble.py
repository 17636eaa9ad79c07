"""Assembling a job: the data plane, the capacity provider and the billing model a spec maps to.

This module sits above both :mod:`spotwise.control` and :mod:`spotwise.planes`: it is the one place
that knows the concrete planes.  :func:`plane_for` maps ``cluster.data_plane`` to a plane (the
parameter-server plane of ``papers/000_3c734f3ffedcac15.txt`` Sec. III / ``papers/002_a246f6afe29b4bfb.txt``
Sec. II, or the collective plane of Spotnik, ``papers/001_30a454edd897cf47.txt`` Sec. 3.2-3.3);
:func:`build_controller` gives the :class:`~spotwise.control.controller.JobController` that plane,
its member processes (the plane's default :class:`~spotwise.planes.ps.compute.Compute`) and the
emulated capacity of the spec's market (:class:`~spotwise.capacity.provider.EmulatedProvider`)
unless the caller injects others; the plane says how the job is billed
(:meth:`~spotwise.control.dataplane.DataPlane.make_accounting`: instances by the hour).  A real Ray
cluster (:func:`spotwise.capacity.cluster.cluster_controller`) and a serverless job
(:func:`spotwise.planes.serverless.runner.serverless_controller`, functions per use) inject their
own provider, plane and clock through the same function.  The controller itself receives a
:class:`~spotwise.control.dataplane.DataPlane` and imports no concrete plane.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotwise.capacity.provider import EmulatedProvider, Provider
from spotwise.config import JobSpec
from spotwise.control.controller import JobController
from spotwise.control.dataplane import DataPlane
from spotwise.control.progress import check_progress_possible
from spotwise.market.job_market import Market
from spotwise.market.world import build_market
from spotwise.planes.collective.data_plane import CollectivePlane
from spotwise.planes.ps.compute import Compute
from spotwise.planes.ps.plane import ParameterServerPlane


def plane_for(spec: JobSpec) -> DataPlane:
    """The (fresh) data plane ``spec.cluster.data_plane`` names; a serverless job's controller comes
    from :func:`spotwise.planes.serverless.runner.serverless_controller` (its whole world differs)."""
    if spec.cluster.kind == "serverless":
        raise ValueError("a serverless job is built by spotwise.planes.serverless.runner.serverless_controller")
    if spec.workload.restart is not None:  # restart mode (issue 55 item 6): the script runs as torchrun runs it
        from spotwise.planes.restart.plane import RestartPlane

        return RestartPlane(spec)
    if spec.cluster.data_plane == "collective":
        return CollectivePlane(spec)
    return ParameterServerPlane()


def build_controller(spec: JobSpec, out_dir: str | Path, *, market: Market | None = None,
                     provider: Provider | None = None, compute: Compute | None = None,
                     plane: DataPlane | None = None, **options: Any) -> JobController:
    """The job controller of ``spec`` writing to ``out_dir``: ``plane`` (default :func:`plane_for`),
    ``provider`` (default: the market's emulated capacity, after refusing a hopeless market --
    :func:`~spotwise.control.progress.check_progress_possible` -- before any member process starts)
    and ``compute`` (default: the plane's member processes, with ``cluster.standby`` warm spares
    on emulated capacity); ``options`` go to :class:`~spotwise.control.controller.JobController`."""
    market = market or build_market(spec)
    plane = plane if plane is not None else plane_for(spec)
    cl = spec.cluster
    if provider is None:
        check_progress_possible(spec, market)
        standby = cl.standby if cl.standby is not None else min(cl.workers, 4)
        compute = compute or plane.default_compute(spec, standby)
        max_workers = max(cl.workers, cl.max_workers or cl.workers)
        provider = EmulatedProvider(market.revocation, max_workers, market.horizon_s, spec.seed, compute=compute)
    else:
        compute = compute or plane.default_compute(spec, 0)
    own_state = getattr(plane, "own_state", None)  # a plane whose coordinator keeps no model (restart mode)
    if own_state is not None and "state" not in options:
        options["state"] = own_state()
    return JobController(spec, out_dir, market=market, provider=provider, compute=compute, plane=plane, **options)
