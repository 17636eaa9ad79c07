"""The SkyPilot managed job of ``spotwise plan --emit skypilot=FILE`` (``sky jobs launch``; issue 20 item 3,
issue 29 item 3).

A managed job: SkyPilot relaunches it after a preemption (``resources.job_recovery``:
``EAGER_NEXT_REGION`` when the plan ranked places in several regions, else ``FAILOVER``) and
restarts it a few times after a failure (``max_restarts_on_errors``).  Every node is spot, rank 0
(the coordinator and Ray head) too, so nothing may live only on a node's disk: the spec must name
``outputs.uri`` (``s3://``, ``gs://``), where spotwise writes the events, checkpoints and summary as
the run goes, and the run (:func:`~spotwise.planner.emit.scripts.run_script`) resumes from there
when it finds a checkpoint -- otherwise :class:`InputError` (exit 2) says to set it.  ``image_id``
is left out: SkyPilot's default images carry the NVIDIA driver and a Python 3.10 conda.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.planner.emit.files import REMOTE_SPEC, Install, NodeFiles, node_files
from spotwise.planner.emit.place import RAY_PORT, cluster_name, emit_target, gce_machine
from spotwise.planner.emit.ray import ray_version
from spotwise.planner.emit.scripts import (
    GPU_PACKAGES,
    driver_check,
    run_script,
    setup_script,
    sky_ray_up,
    uri_packages,
    workload_installs,
)

#: how often SkyPilot restarts the job after it failed (not after a preemption: those are always recovered)
MAX_RESTARTS_ON_ERRORS = 3
NO_URI = ("a SkyPilot managed job runs on spot nodes whose disks do not survive a preemption, so the run directory "
          "and checkpoints must live on object storage")
NO_URI_FIX = ("set outputs.uri in the spec (e.g. outputs: {uri: s3://BUCKET/PREFIX} or gs://BUCKET/PREFIX), then emit "
              "again; or emit ray-cluster, whose coordinator is on demand")


def job_uri(spec: JobSpec) -> str:
    """The spec's ``outputs.uri``; InputError (exit 2) when it is missing.  (``file://`` is taken as a shared
    file system mounted on the nodes, e.g. a bucket SkyPilot mounts.)"""
    uri = getattr(spec.outputs, "uri", None)
    if not uri:
        raise InputError(NO_URI, NO_URI_FIX, "--emit skypilot")
    return str(uri)


def skypilot_task(rec: Mapping[str, Any] | None, spec: JobSpec, *, spec_file: str | Path = "spec.yaml",
                  install: Install | None = None, catalog: Catalog | None = None, files: NodeFiles | None = None,
                  uri: str | None = None) -> dict[str, Any]:
    """The SkyPilot managed-job task (``sky jobs launch``) of the recommended place; see the module docstring.
    ``uri``: where the run lives (default: the spec's ``outputs.uri``, required)."""
    t = emit_target(rec, spec, catalog)
    uri = uri or job_uri(spec)
    install = install or Install(None)
    files = files if files is not None else node_files(spec)
    own, req = workload_installs(spec, files)
    places = []
    for region, zone, inst in t.ranked:
        entry: dict[str, Any] = {"region": region}
        if zone:
            entry["zone"] = zone
        if t.cloud == "aws":
            entry["instance_type"] = inst.name
        else:
            machine, acc, _ = gce_machine(inst)
            entry["instance_type"] = machine
            if acc:
                entry["accelerators"] = f"{inst.accelerator.upper()}:{inst.accelerator_count}"
        places.append(entry)
    regions = {r for r, _, _ in t.ranked}
    resources: dict[str, Any] = {"cloud": t.cloud, "use_spot": t.spot,
                                 "job_recovery": {"strategy": "EAGER_NEXT_REGION" if len(regions) > 1 else "FAILOVER",
                                                  "max_restarts_on_errors": MAX_RESTARTS_ON_ERRORS}}
    if len(places) == 1:
        resources.update(places[0])
    else:
        resources["ordered"] = places
    inst = t.instance
    check = driver_check(inst.name, inst.accelerator_count, inst.accelerator) if inst.accelerator_count else ""
    run = run_script(address='"$HEAD_IP:$PORT"', notice_source=t.notice_source, autoscale=False, uri=uri,
                     ray_up=sky_ray_up(t.slots, t.nodes, RAY_PORT))
    return {
        "name": cluster_name(spec),
        "resources": resources,
        "num_nodes": t.nodes,
        "envs": {"SPOTWISE_INSTALL": install.pip_arg or "", "SPOTWISE_RAY_PORT": str(RAY_PORT)},
        "file_mounts": {REMOTE_SPEC: str(spec_file), **install.mounts, **files.mounts},
        "setup": setup_script(install, ray_version=ray_version(), gpu_check=check, from_env=True,
                              packages=uri_packages(uri) + (GPU_PACKAGES if check else ()), workload_packages=own,
                              requirements=req),
        "run": run,
    }
