"""Starting Ray (local) or connecting to a cluster, with the settings the project uses everywhere.

A local Ray's object store is sized to the memory this process may use (issue 38 item 3): Ray maps
30 % of the machine's RAM into the raylet, the driver and every worker, so under ``ulimit -v``
(RLIMIT_AS) the run died with a C stack dump.  :func:`object_store_mib` takes the least of the
address-space headroom (``ulimit -v`` minus what a process of a run maps besides the store,
:data:`RUN_VMEM_MIB`), the cgroup's ``memory.max`` (v2) / ``memory.limit_in_bytes`` (v1) and the
physical memory, keeps Ray's 75 MiB minimum, and refuses (exit 2, naming the limit and what to set)
when a limit is too small to run Ray at all -- before Ray starts.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotwise.envvars import check_numeric_env, env_is_set, env_number
from spotwise.errors import InputError
from spotwise.signals import reinstall as reinstall_sigterm
from spotwise.watchdog import Watchdog, children


#: the only interface a local Ray listens on
LOOPBACK = "127.0.0.1"
#: resident memory of one worker actor (docs/benchmarks.md, "Memory per worker actor": ~300 MiB RSS)
WORKER_RSS_MIB = 300
#: memory kept for the driver (coordinator ~400 MiB), Ray's own daemons and the OS
RESERVED_MIB = 1536
#: environment variable overriding the local worker-actor limit
MAX_LOCAL_WORKERS_ENV = "SPOTWISE_MAX_LOCAL_WORKERS"
#: environment variable setting the local Ray's object store (MiB)
OBJECT_STORE_ENV = "SPOTWISE_OBJECT_STORE_MB"
#: Ray's smallest object store (``ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES``)
RAY_MIN_OBJECT_STORE_MIB = 75
#: Ray's default share of the memory for its object store
OBJECT_STORE_SHARE = 0.3
#: virtual memory (``ulimit -v``) the largest process of a local run (the driver; a worker with PyTorch
#: is close) maps besides the object store.  Measured with Ray 2.60 / torch 2.13 on a 2-core Linux box and
#: a 75 MiB store: a tiny run passes at ``ulimit -v`` 2.25 GiB and dies at 2 GiB (the driver's ``mmap``
#: of the store fails: a C stack dump).  Thread stacks and malloc arenas grow it on machines with more
#: cores, so it is a floor, not an exact figure
RUN_VMEM_MIB = 2304
#: virtual memory the raylet maps besides its object store (measured with Ray 2.60: VmSize 2,332,836 kB with a
#: 2,000 MiB store, i.e. ~280 MiB besides it).  The raylet can map the store a second time (plasma's fallback
#: allocation when the store fills, e.g. while a resumed collective run hands its state over: the review's
#: ``ulimit -v 8000000`` run died in the raylet's ``mmap``), so under ``ulimit -v`` the store is at most half of
#: what the limit leaves the raylet (issue 54 item 6)
RAYLET_VMEM_MIB = 320
#: virtual memory the CLI needs to load a spec and import PyTorch before Ray starts (measured: 840 MiB is too
#: little -- ``import ray`` fails to map ``_raylet.so`` --, 1 GiB reaches the Ray check)
DRIVER_VMEM_MIB = 1152
#: Ray system settings of every Ray spotwise starts (a local one here; a cluster's head in the emitted
#: launch files, ``ray start --head --system-config``).  ``free_objects_period_milliseconds``: Ray
#: frees the object-store memory of objects nobody references in batches, by default once a second;
#: until then a new object gets fresh memory.  A replica moves to the coordinator in 32 MiB chunks
#: fetched one after the other (``CollectiveMember.take_replica``), so with the default every chunk of
#: every offer landed in new object-store pages -- counted in the member's resident memory, which grew
#: by the whole state at each offer (measured: +300 MiB per offer of a 300 MiB state, up to the store's
#: size) -- where with frees every 5 ms two chunks' pages are reused (+64 MiB in all).
#: ``tests/test_ray_memory.py`` shows both
RAY_SYSTEM_CONFIG: dict[str, int] = {"free_objects_period_milliseconds": 5}


def ray_system_config_json() -> str:
    """:data:`RAY_SYSTEM_CONFIG` as the JSON ``ray start --system-config`` takes (no spaces, no quotes
    to escape inside single quotes)."""
    import json

    return json.dumps(RAY_SYSTEM_CONFIG, separators=(",", ":"))


#: ``ray_constants.REQUIRE_SHM_SIZE_THRESHOLD`` (10**10 bytes) in MiB
_RAY_SHM_THRESHOLD_MIB = 1e10 / 2**20
_CGROUP_V2 = Path("/sys/fs/cgroup")
_CGROUP_V1_LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")


def _machine_memory_mib() -> float | None:
    """Total physical memory in MiB (``/proc/meminfo`` or ``sysconf``); None if unknown."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def local_worker_limit() -> int:
    """How many worker actors the local emulated provider may run on this machine.

    ``$SPOTWISE_MAX_LOCAL_WORKERS`` when set (InputError unless a whole number from 1 to 100000), else
    ``(memory - RESERVED_MIB) // WORKER_RSS_MIB`` (at least 1; 64 if the memory is unknown).
    """
    if env_is_set(MAX_LOCAL_WORKERS_ENV):
        return int(env_number(MAX_LOCAL_WORKERS_ENV))  # InputError outside 1 .. 100000
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
    env_set = env_is_set(MAX_LOCAL_WORKERS_ENV)
    basis = f"{MAX_LOCAL_WORKERS_ENV} allows" if env_set else f"{have}, so it holds"
    raise InputError(
        f"{need} worker actors (cluster.workers / max_workers {peak} + standby {standby}) at ~{WORKER_RSS_MIB} MiB each "
        f"need ~{need * WORKER_RSS_MIB / 1024:.1f} GiB on the local emulated provider; {basis} at most {limit}",
        f"lower cluster.workers (and max_workers / standby) to fit, run on a Ray cluster with --ray-address, or set "
        f"{MAX_LOCAL_WORKERS_ENV}=N to change the limit",
        "cluster.workers",
    )


@dataclass(frozen=True)
class MemoryLimits:
    """The memory limits of this process in MiB (``None``: none / unknown)."""

    #: ``ulimit -v`` (RLIMIT_AS, soft): each process's virtual memory
    address_space: float | None
    #: the cgroup's memory limit (``memory.max`` / ``memory.limit_in_bytes``): every process of the container together
    cgroup: float | None
    #: the machine's physical memory
    physical: float | None
    #: free space of /dev/shm, where Ray keeps its store (above ~10 GB it refuses a store larger than this)
    shm: float | None = None

    def store_cap(self) -> float | None:
        """The largest store Ray takes without refusing: Ray's own cap, ``max(10 GB, 95 % of /dev/shm)``."""
        return None if self.shm is None else max(_RAY_SHM_THRESHOLD_MIB, 0.95 * self.shm)


def _cgroup_limit_mib() -> float | None:
    """This process's cgroup memory limit in MiB (v2 ``memory.max`` of its own cgroup, else the root's; v1
    ``memory.limit_in_bytes``); ``None`` when unlimited or unreadable."""
    paths: list[Path] = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                rel = line[3:].strip().lstrip("/")
                if rel:
                    paths.append(_CGROUP_V2 / rel / "memory.max")
    except OSError:
        pass
    paths += [_CGROUP_V2 / "memory.max", _CGROUP_V1_LIMIT]
    for path in paths:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw == "max":
            return None
        try:
            value = int(raw)
        except ValueError:
            continue
        return None if value >= 1 << 60 else value / 2**20  # v1 writes "unlimited" as ~2**63
    return None


def memory_limits() -> MemoryLimits:
    """The limits that apply to this process now (:class:`MemoryLimits`)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        soft = resource.RLIM_INFINITY
    address_space = None if soft == resource.RLIM_INFINITY or soft < 0 else soft / 2**20
    try:
        st = os.statvfs("/dev/shm")
        shm: float | None = st.f_bavail * st.f_frsize / 2**20
    except OSError:
        shm = None
    return MemoryLimits(address_space=address_space, cgroup=_cgroup_limit_mib(), physical=_machine_memory_mib(), shm=shm)


def _ulimit_error(limit_mib: float, need_mib: float, what: str) -> InputError:
    need_kib = int(need_mib * 1024)
    return InputError(
        f"the virtual-memory limit (ulimit -v, RLIMIT_AS) is {limit_mib:.0f} MiB; {what} needs at least "
        f"{need_mib:.0f} MiB per process (measured: the driver and each worker map ~{RUN_VMEM_MIB} MiB with PyTorch "
        f"and Ray, plus Ray's object store of at least {RAY_MIN_OBJECT_STORE_MIB} MiB)",
        f"raise it before starting spotwise: `ulimit -v {need_kib}` or `ulimit -v unlimited` (limit memory with a "
        f"cgroup instead, e.g. `systemd-run --scope -p MemoryMax=8G`, which limits resident memory, not mappings)",
        "ulimit -v")


def check_driver_memory(limits: MemoryLimits | None = None) -> None:
    """InputError (exit 2) when ``ulimit -v`` is too small even to load a spec and import PyTorch
    (:data:`DRIVER_VMEM_MIB`); run by ``spotwise run`` / ``demo`` before anything is imported."""
    limits = limits or memory_limits()
    if limits.address_space is not None and limits.address_space < DRIVER_VMEM_MIB:
        raise _ulimit_error(limits.address_space, max(DRIVER_VMEM_MIB, RUN_VMEM_MIB + RAY_MIN_OBJECT_STORE_MIB),
                            "a spotwise run")


def object_store_mib(limits: MemoryLimits, env_mib: float | None = None) -> int | None:
    """The local Ray's object store in MiB: ``env_mib`` (``$SPOTWISE_OBJECT_STORE_MB``) if it fits the limits,
    else :data:`OBJECT_STORE_SHARE` of the least of the cgroup limit and the physical memory, at most the
    ``ulimit -v`` headroom (the limit minus :data:`RUN_VMEM_MIB`) and at least Ray's
    :data:`RAY_MIN_OBJECT_STORE_MIB`; ``None`` (Ray's own default) when no limit below the machine's memory
    applies.  InputError (exit 2) naming the limit and what to set when it is too small to run Ray at all."""
    headroom = None if limits.address_space is None else limits.address_space - RUN_VMEM_MIB
    if headroom is not None and headroom < RAY_MIN_OBJECT_STORE_MIB:
        assert limits.address_space is not None
        raise _ulimit_error(limits.address_space, RUN_VMEM_MIB + RAY_MIN_OBJECT_STORE_MIB, "a local Ray run")
    known = [m for m in (limits.cgroup, limits.physical) if m is not None]
    memory = min(known) if known else None
    cgroup_binds = limits.cgroup is not None and (limits.physical is None or limits.cgroup < limits.physical)
    need = RESERVED_MIB + RAY_MIN_OBJECT_STORE_MIB  # the driver, Ray's daemons and the smallest store
    if cgroup_binds and memory is not None and memory < need:
        raise InputError(
            f"this container's memory limit (cgroup memory.max / memory.limit_in_bytes) is {memory:.0f} MiB; a local Ray "
            f"run needs at least {need} MiB (the driver and Ray's daemons ~{RESERVED_MIB} MiB, Ray's object store at least "
            f"{RAY_MIN_OBJECT_STORE_MIB} MiB, ~{WORKER_RSS_MIB} MiB per worker)",
            "raise the container's memory limit (docker run --memory, Kubernetes resources.limits.memory), or run on a "
            "Ray cluster with --ray-address", "memory.max")
    if env_mib is not None:
        if headroom is not None and limits.address_space is not None:
            most = min(headroom, raylet_store_cap(limits.address_space) or headroom)
            if env_mib > most:
                need = max(env_mib + RUN_VMEM_MIB, 2 * env_mib + RAYLET_VMEM_MIB)
                raise InputError(
                    f"{OBJECT_STORE_ENV}={env_mib:g} does not fit the virtual-memory limit (ulimit -v "
                    f"{limits.address_space:.0f} MiB): each process of the run maps the store besides its own "
                    f"~{RUN_VMEM_MIB} MiB, and the raylet may map it twice",
                    f"set {OBJECT_STORE_ENV} to at most {most:.0f}, or raise the limit to at least "
                    f"`ulimit -v {int(need * 1024)}`", OBJECT_STORE_ENV)
        if memory is not None and env_mib > memory:
            raise InputError(f"{OBJECT_STORE_ENV}={env_mib:g} is more than the memory this process may use ({memory:.0f} MiB)",
                             f"set it to at most {int(memory * OBJECT_STORE_SHARE)} (Ray's default share) or unset it",
                             OBJECT_STORE_ENV)
        cap = limits.store_cap()
        if cap is not None and env_mib > cap:
            raise InputError(f"{OBJECT_STORE_ENV}={env_mib:g} is more than /dev/shm holds ({limits.shm:.0f} MiB free); Ray "
                             "refuses a store that large", f"set it to at most {int(cap)}, or enlarge /dev/shm (docker run "
                             "--shm-size)", OBJECT_STORE_ENV)
        return int(env_mib)
    if headroom is None and not cgroup_binds:
        return None  # Ray's default: 30 % of the memory, capped by /dev/shm
    size = OBJECT_STORE_SHARE * memory if memory is not None else float(headroom or RAY_MIN_OBJECT_STORE_MIB)
    if headroom is not None:
        size = min(size, headroom, raylet_store_cap(limits.address_space))
    cap = limits.store_cap()
    if cap is not None:
        size = min(size, cap)
    return int(max(RAY_MIN_OBJECT_STORE_MIB, size))


def raylet_store_cap(address_space_mib: float | None) -> float | None:
    """The largest object store (MiB) the raylet can map twice beside its own :data:`RAYLET_VMEM_MIB` under a
    ``ulimit -v`` of ``address_space_mib`` (None: no such limit)."""
    return None if address_space_mib is None else (address_space_mib - RAYLET_VMEM_MIB) / 2


def local_object_store_bytes() -> int | None:
    """:func:`object_store_mib` for this process and ``$SPOTWISE_OBJECT_STORE_MB``, in bytes (``None``: Ray's default)."""
    env = env_number(OBJECT_STORE_ENV) if env_is_set(OBJECT_STORE_ENV) else None
    mib = object_store_mib(memory_limits(), env)
    return None if mib is None else mib * 2**20


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start (or connect to) Ray with the settings the project uses everywhere.

    Without ``address`` a local Ray is started that listens on 127.0.0.1 only (GCS, raylet,
    workers; no dashboard): Ray's token auth is disabled for it, so it must not be reachable from
    other machines.  Raises ``RuntimeError`` if Ray nevertheless comes up on another address.
    Its object store is sized to the memory limits (:func:`object_store_mib`; InputError, exit 2,
    before Ray starts when one is too small).  The local head's processes die with this driver, also one
    killed with SIGKILL (:func:`_watch_local_head`).  With ``address`` it connects to that cluster (InputError if nothing answers there); securing a
    cluster is left to Ray's own authentication and network isolation (README, "Security").
    """
    check_numeric_env()  # a bad SPOTWISE_* number exits 2 before Ray starts (the CLI checked them already)
    # exit 2 if a memory limit is too small for a local Ray -- before `import ray`, which alone maps ~300 MiB
    store = None if address else local_object_store_bytes()
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
    if store is not None:
        kwargs["object_store_memory"] = store
    kwargs["_system_config"] = dict(RAY_SYSTEM_CONFIG)
    before = children()
    try:
        _init_loopback(ray, num_cpus=num_cpus or os.cpu_count() or 1, **kwargs)
    finally:
        reinstall_sigterm()
        _watch_local_head(sorted(children() - before))  # a failed start's processes too, while they last


#: the watchdog of the local Ray head this process started (kept: its pipe closing is the driver's death)
_HEAD_WATCHDOG: Watchdog | None = None


def _watch_local_head(daemons: list[tuple[int, int]]) -> None:
    """Ray's daemons and everything they start die with this driver, also when it is killed with SIGKILL
    (issue 54 item 7): Ray's parent-death signal ends only ``gcs_server`` and the ``raylet``; the raylet's
    children (its agents, the worker processes holding the members) were re-parented to init and stayed.
    A :class:`~spotwise.watchdog.Watchdog` of the processes ``ray.init`` started (``daemons``, the children
    this process gained meanwhile) kills them and what descends from them when the driver dies; after an
    in-process ``ray.shutdown()`` it ends by itself.  A cluster reached by address is never watched."""
    global _HEAD_WATCHDOG
    if daemons:  # an earlier head's watchdog, if any, is dropped: its pipe closes and it ends what is left of that head
        _HEAD_WATCHDOG = Watchdog(roots=daemons)


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
