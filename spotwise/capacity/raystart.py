"""Starting Ray (local) or connecting to a cluster, with the settings the project uses everywhere."""

from __future__ import annotations

import logging
import os
from typing import Any

from spotwise.errors import InputError
from spotwise.signals import reinstall as reinstall_sigterm


#: the only interface a local Ray listens on
LOOPBACK = "127.0.0.1"
#: resident memory of one worker actor (docs/benchmarks.md, "Memory per worker actor": ~300 MiB RSS)
WORKER_RSS_MIB = 300
#: memory kept for the driver (coordinator ~400 MiB), Ray's own daemons and the OS
RESERVED_MIB = 1536
#: environment variable overriding the local worker-actor limit
MAX_LOCAL_WORKERS_ENV = "SPOTWISE_MAX_LOCAL_WORKERS"


def _machine_memory_mib() -> float | None:
    """Total physical memory in MiB (``/proc/meminfo`` or ``sysconf``); None if unknown."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def local_worker_limit() -> int:
    """How many worker actors the local emulated provider may run on this machine.

    ``$SPOTWISE_MAX_LOCAL_WORKERS`` when set (InputError unless a positive integer), else
    ``(memory - RESERVED_MIB) // WORKER_RSS_MIB`` (at least 1; 64 if the memory is unknown).
    """
    raw = os.environ.get(MAX_LOCAL_WORKERS_ENV)
    if raw is not None and raw.strip():
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise InputError(f"{MAX_LOCAL_WORKERS_ENV}={raw!r} is not a positive integer",
                             f"set it to the number of worker actors this machine may run, e.g. {MAX_LOCAL_WORKERS_ENV}=32, "
                             "or unset it to derive the limit from the machine's memory", MAX_LOCAL_WORKERS_ENV)
        return n
    mem = _machine_memory_mib()
    if mem is None:
        return 64
    return max(1, int((mem - RESERVED_MIB) // WORKER_RSS_MIB))


def check_local_workers(cluster: Any) -> None:
    """InputError unless the local emulated provider can hold ``cluster``'s worker actors.

    Counts what it may start at once: ``max(workers, max_workers)`` (a growth policy may reach
    ``max_workers``) plus the standby actors (``standby``, default ``min(workers, 4)``).  Each costs
    about :data:`WORKER_RSS_MIB` MiB; the limit is :func:`local_worker_limit`.
    """
    workers = int(cluster.workers)
    peak = max(workers, int(cluster.max_workers or workers))
    standby = cluster.standby if cluster.standby is not None else min(workers, 4)
    need = peak + int(standby)
    limit = local_worker_limit()
    if need <= limit:
        return
    mem = _machine_memory_mib()
    have = f"this machine has {mem / 1024:.1f} GiB" if mem is not None else "this machine's memory is unknown"
    env_set = bool((os.environ.get(MAX_LOCAL_WORKERS_ENV) or "").strip())
    basis = f"{MAX_LOCAL_WORKERS_ENV} allows" if env_set else f"{have}, so it holds"
    raise InputError(
        f"{need} worker actors (cluster.workers / max_workers {peak} + standby {standby}) at ~{WORKER_RSS_MIB} MiB each "
        f"need ~{need * WORKER_RSS_MIB / 1024:.1f} GiB on the local emulated provider; {basis} at most {limit}",
        f"lower cluster.workers (and max_workers / standby) to fit, run on a Ray cluster with --ray-address, or set "
        f"{MAX_LOCAL_WORKERS_ENV}=N to change the limit",
        "cluster.workers",
    )


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start (or connect to) Ray with the settings the project uses everywhere.

    Without ``address`` a local Ray is started that listens on 127.0.0.1 only (GCS, raylet,
    workers; no dashboard): Ray's token auth is disabled for it, so it must not be reachable from
    other machines.  Raises ``RuntimeError`` if Ray nevertheless comes up on another address.
    With ``address`` it connects to that cluster (InputError if nothing answers there); securing a
    cluster is left to Ray's own authentication and network isolation (README, "Security").
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except Exception as e:  # ConnectionError and Ray's own variants
            raise InputError(f"cannot connect to the Ray cluster at {address!r} ({e.__class__.__name__})",
                             "check the address (ray status on the head node prints it) and that the cluster is up",
                             "--ray-address") from None
        finally:
            reinstall_sigterm()  # ray.init replaced the CLI's SIGTERM handler with sys.exit(15)
        return
    try:
        _init_loopback(ray, num_cpus=num_cpus or os.cpu_count() or 1, **kwargs)
    finally:
        reinstall_sigterm()


def _init_loopback(ray: Any, **kwargs: Any) -> None:
    """``ray.init`` on 127.0.0.1 only.

    Ray rewrites a loopback ``_node_ip_address`` to the machine's routable address unless its
    ``ENABLE_RAY_CLUSTER`` switch (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) is off, and its servers
    listen on every interface unless the node address is loopback.  So the switch is turned off
    for the duration of ``ray.init`` only (it is read when the node address is resolved) and the
    result is verified: a local Ray that is not on 127.0.0.1 is shut down and ``RuntimeError`` raised.
    """
    from ray._private import ray_constants

    had = hasattr(ray_constants, "ENABLE_RAY_CLUSTER")
    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(_node_ip_address=LOOPBACK, **kwargs)
    finally:
        if had:
            ray_constants.ENABLE_RAY_CLUSTER = before
    node = getattr(ray._private.worker.global_worker, "node", None)
    ip = getattr(node, "node_ip_address", None)
    if ip != LOOPBACK:
        ray.shutdown()
        raise RuntimeError(f"local Ray came up on {ip!r} instead of {LOOPBACK}; refusing to run an unauthenticated Ray "
                           "reachable from the network (this Ray version may need a different setting)")


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail fast (exit 2) on a Ray address nothing listens on, instead of Ray's minutes of retries."""
    import socket

    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"malformed Ray address {address!r}", "write HOST:PORT, e.g. 127.0.0.1:6379", "--ray-address")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise InputError(f"cannot reach the Ray cluster at {address} ({e.strerror or e.__class__.__name__})",
                         "check the address that `ray start --head` printed and that the head node is up", "--ray-address") from None
