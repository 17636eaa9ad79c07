"""``spotwise run`` for ``cluster.kind: serverless``: lock the run directory, start the store, supervise.

:func:`serverless_controller` builds the job controller of a serverless spec: the shared
:class:`~spotwise.control.controller.JobController` with the serverless world injected -- the
function market (:func:`~spotwise.market.functions.function_market`), function slots as capacity
(:class:`~spotwise.capacity.functions.FunctionCapacity`), wall time, on-demand billing and the
:class:`~spotwise.planes.serverless.plane.ServerlessPlane`.

The run directory is the same as a VM run's (``spec.json``, ``events.jsonl``, checkpoints,
``summary.json``, the report), locked while the job runs.  The store is a private
``redis-server`` on 127.0.0.1 unless ``redis_url`` names one; the functions run on Lithops's
``localhost`` backend unless ``lithops_config`` names another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from spotwise.capacity.functions import FunctionCapacity
from spotwise.config import JobSpec
from spotwise.control.clock import WallClock
from spotwise.assemble import build_controller
from spotwise.control.controller import JobController
from spotwise.errors import InputError
from spotwise.events import RunSummary
from spotwise.market.catalog import Catalog
from spotwise.market.functions import function_market
from spotwise.planes.serverless.plane import ServerlessPlane
from spotwise.rundir import open_run_dir


def serverless_controller(spec: JobSpec, out_dir: str | Path, *, progress: Callable[[dict[str, Any]], None] | None = None,
                          resume: bool = False, catalog: Catalog | None = None, **plane_options: Any) -> JobController:
    """The job controller of the serverless ``spec`` (see the module docstring); ``plane_options``
    go to :class:`~spotwise.planes.serverless.plane.ServerlessPlane` (store, backend, timeouts, faults)."""
    plane = ServerlessPlane(spec, catalog=catalog, **plane_options)
    return build_controller(spec, out_dir, market=function_market(spec, catalog), provider=FunctionCapacity(spec.cluster.workers),
                            plane=plane, clock=WallClock(), mode="serverless", worker_market="on_demand",
                            progress=progress, resume=resume)


def check_serverless_spec(spec: JobSpec) -> None:
    """Refuse (exit 2) what cannot run: unknown function pricing or Redis type, a size the platform lacks, a market."""
    cl = spec.cluster
    cat = Catalog.default()
    fp = cat.function(cl.functions)
    fp.call_cost(cl.memory_mb / 1024.0, 1.0)
    cat.instance(cl.redis_instance)
    m = spec.market
    if m.traces or m.synthetic is not None or m.revocation.model != "none":
        raise InputError("a serverless cluster has no spot market: functions are not revoked by price",
                         "remove market.traces / market.synthetic / market.revocation from the spec "
                         "(function failures are handled by the supervisor)", "market")
    if any(p.name not in ("scale-in",) for p in spec.policies):
        bad = [p.name for p in spec.policies if p.name != "scale-in"]
        raise InputError(f"policies {bad} act on VM markets", "a serverless job takes the scale-in policy only", "policies")


def run_serverless(
    spec: JobSpec | None,
    out_dir: str | Path,
    *,
    redis_url: str | None = None,
    lithops_config: str | Path | None = None,
    progress: bool = True,
    plots: bool | None = None,
    overwrite: bool = False,
    heartbeat_timeout_s: float = 30.0,
    network_mbps: float = 0.0,
    resume: bool = False,
    resume_spec: JobSpec | None = None,
    trust_code: bool = False,
    allow_changes: bool = False,
) -> RunSummary:
    """Run a serverless ``spec`` into ``out_dir``; returns the summary (see the module docstring).
    ``resume_spec`` / ``trust_code``: see :func:`spotwise.control.rundir_io.load_resume_spec`."""
    from spotwise.control.runner import RunProgress, _write_plots
    from spotwise.planes.serverless.backend import LithopsBackend, load_lithops_config
    from spotwise.planes.serverless.store import connect, parse_redis_url

    out = Path(out_dir)
    if resume:
        from spotwise.control.rundir_io import load_resume_spec

        spec = load_resume_spec(out, resume_spec, trust_code, allow_changes)
    assert spec is not None
    check_serverless_spec(spec)
    url = parse_redis_url(redis_url) if redis_url else None
    if not (network_mbps >= 0 and network_mbps < float("inf")):
        raise InputError(f"--emulate-network-mbps must be >= 0, got {network_mbps}", "use e.g. 1000 (a 1 Gbit/s Redis node) or 0 (off)",
                         "--emulate-network-mbps")
    if url is not None:
        connect(url).close()  # a bad URL or password exits 2 before anything starts
    config: dict[str, Any] | None = load_lithops_config(lithops_config) if lithops_config else None
    with open_run_dir(out, "resume" if resume else ("overwrite" if overwrite else "new")):
        backend = LithopsBackend(config, max_workers=spec.cluster.workers + 2)
        with RunProgress(spec.expected_iterations(), progress, estimated=spec.target_samples() is not None) as bar:
            job = serverless_controller(spec, out, redis_url=url, backend=backend, progress=bar.update if progress else None,
                                        heartbeat_timeout_s=heartbeat_timeout_s, network_mbps=network_mbps, resume=resume)
            summary = job.run()
        _write_plots(out, spec, plots)
        return summary
