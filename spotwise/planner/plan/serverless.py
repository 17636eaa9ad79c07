"""The serverless option of ``spotwise plan``: the job's iterations on ``N`` function workers.

``papers/004_9dc2adb66dc8d26e.txt`` (MLLess) trains on IBM Cloud Functions that exchange their
updates through a Redis node (Sec. 3); Sec. 6 finds it 15x faster and 6.3x cheaper than PyTorch
on VMs for sparse models that converge fast (PMF, sparse logistic regression), and costlier for
dense, compute-heavy ones (Sec. 1: a function costs more per second than a VM of the same
resources, Table 2).  This module prices that option the way the serverless runtime
(:mod:`spotwise.planes.serverless.plane`) bills it, so the planner can put it beside the VM
strategies.  Every number below is a *model*, not a measurement; :func:`assumptions` lists them
for the plan's output.

Time of one step (all ``N`` workers compute one mini-batch of ``batch_size`` samples each)
-----------------------------------------------------------------------------------------
``step = compute + exchange + latency``:

* **compute** -- a function has ``FUNCTION_VCPUS = 1`` vCPU (Table 2: "Functions (1vCPU, 2GB
  RAM)").  The VM plan's mean mini-batch time is ``step_time_s / throughput(instance, family)``
  (:meth:`spotwise.market.job_market.Market.step_seconds`); a function's is ``step_time_s /
  (per-vCPU throughput x FUNCTION_VCPUS)``, where the per-vCPU throughput is
  ``throughput / vcpus`` of the comparison VM when it is a CPU instance profiled for the family
  (linear vCPU scaling: an assumption, optimistic for the VM), else the median of that ratio over
  the catalog's CPU instances profiled for the family.  Functions have no GPU: a family profiled
  only on accelerators (``resnet50`` etc. are speed-ups over a K80) has no function speed and the
  option is infeasible.  A family no catalog entry profiles at all (e.g. ``pmf``) takes one vCPU
  as its reference (``step_time_s`` is the time of a mini-batch on one function).  The straggler
  law is the VM plan's, ``m ((1 - s) + s Exp(1))`` with ``s = cluster.straggler``: BSP and ISP
  wait for the slowest of the ``N`` workers every step (``E[max]``, paper 000 eq. 14); SSP lets
  the fast ones run ahead within the staleness bound, so a step costs the mean ``m``.
* **exchange** -- MLLess is decentralised (Sec. 3.2): every worker pushes its update to Redis and
  pulls the ``N - 1`` peers' updates, and spotwise's supervisor pulls all ``N`` to keep its
  reference replica.  The Redis node's link carries ``N x N`` updates out per step, so
  ``exchange = N^2 b / store bandwidth`` (the functions' own links carry ``N`` times less and
  are not the bottleneck).  ``b`` is the wire size of one update (:mod:`spotwise.planes.serverless.store`:
  a 16-byte header and 8 bytes per entry), with the entries *measured* on the workload: the
  number of entries of :func:`~spotwise.workloads.params.flat_grad_sparse` over a few seeded
  mini-batches -- the rows a sparse model's batch touches (PMF, sparse-logreg), every parameter
  of a dense one.  ISP (Sec. 4.1) pushes only the significant entries: a fraction
  ``isp_push_fraction`` of them (default ``ISP_PUSH_FRACTION = 1/3``: Sec. 6.2 reports ISP with
  ``v = 0.7`` up to 3x faster to convergence on PMF ML-20M; an assumption, not a law -- the
  fraction depends on ``v`` and the model; ``spotwise run`` reports the measured
  ``pushed_fraction``).  ``v = 0`` is BSP (fraction 1).  The store bandwidth defaults to the
  paper's 1 Gbps NIC (Sec. 6.1).
* **latency** -- ``store_latency_s`` per step for the round trips to Redis (push, clock, pull;
  default ``DEFAULT_STORE_LATENCY_S``, a few in-datacenter round trips of ~1 ms).

Function restarts
-----------------
A function lives at most ``function_timeout_s``; spotwise's workers return at a lease of
``LEASE_FRACTION x function_timeout_s`` and are invoked again
(:data:`spotwise.planes.serverless.plane.LEASE_FRACTION`).  Every invocation starts cold
(``cold_start_s``) and rebuilds its replica from the model snapshot (``4 x params`` bytes, all
``N`` workers at once through the store): ``restart = cold_start_s + N 4 P / bandwidth``.  The
pool restarts together (BSP waits for the last), so with ``W = J x step`` seconds of work and
``L - restart`` useful seconds per lease, each worker is invoked ``k = ceil(W / (L - restart))``
times and the job takes ``T = W + k x restart``.  A restart longer than the lease is infeasible.
Function failures (a lost function is fenced and invoked again) are not modelled: the catalog
has no failure rate; each one would cost one more restart.  Neither is the scale-in auto-tuner
(Sec. 4.2): the full pool is priced for the whole job, an upper bound.

Cost (as the run's :class:`~spotwise.market.billing.Ledger` bills it)
--------------------------------------------------------------------
* workers: ``N`` workers x ``k`` invocations, each billed per request and per GB-second of its
  duration (``k - 1`` leases of ``L`` seconds and a last one of ``T - (k - 1) L``;
  :meth:`~spotwise.market.catalog.FunctionPricing.call_cost`, with the platform's rounding);
* the supervisor: one more function of the same size for the whole job (MLLess Sec. 3.1);
* the Redis node (``cluster.redis_instance``): an on-demand instance for ``T`` seconds, billed
  continuously (:meth:`~spotwise.market.billing.BillingPolicy.exact`, as the serverless run's
  Ledger does).  Paper 004 also rents a C1.4x4 for RabbitMQ; spotwise's runtime signals through
  Redis and has no such VM.

Deadline and error
------------------
Functions are not revoked by price, so the plan's ``P(finish by the deadline)`` is 1 when the
modelled time ``T <= deadline`` and 0 otherwise (a deterministic model: it ignores the variance
of the step times and function failures).  The error is the VM plan's Thm 1 bound for ``J``
iterations with ``N`` workers (``E[1/y] = 1/N``): every BSP step averages ``N`` mini-batches like
fully-synchronous SGD; ISP and SSP are taken to converge like BSP (paper 004 Theorem 1 proves ISP
converges but gives no comparable constant) -- an assumption.

When the option is offered (:func:`considered`)
----------------------------------------------
Always for ``cluster.kind: serverless``; for a VM spec when the workload has sparse gradients
(``pmf``, ``sparse-logreg``: the models paper 004 shows serverless pays for) and its function
footprint fits ``cluster.memory_mb`` (:meth:`Footprint.needed_mb`).  User workloads
(``module:function``) are not built for this on a VM spec.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from spotwise.errors import InfeasibleError, InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.catalog import Catalog, FunctionPricing, InstanceType
from spotwise.theory.runtime import MiniBatchTimeLaw

#: built-in workloads with sparse (embedding) gradients: the models paper 004 trains on functions
SPARSE_WORKLOADS: tuple[str, ...] = ("pmf", "sparse-logreg")
#: a worker returns at this fraction of the platform's timeout and is invoked again
#: (same value as :data:`spotwise.planes.serverless.plane.LEASE_FRACTION`; a test keeps them equal)
LEASE_FRACTION = 0.8
#: vCPUs of one function (paper 004 Table 2: "Functions (1vCPU, 2GB RAM)")
FUNCTION_VCPUS = 1.0
#: seconds from an invocation to the worker's first step, before the replica is rebuilt (assumed)
DEFAULT_COLD_START_S = 2.0
#: bytes/s through the Redis node: the paper's 1 Gbps NIC (Sec. 6.1, "All instances have a 1Gbps NIC")
DEFAULT_STORE_BANDWIDTH_BPS = 1e9 / 8
#: seconds of store round trips per step (push, clock, pull; ~1 ms each in one data center; assumed)
DEFAULT_STORE_LATENCY_S = 0.005
#: fraction of the computed entries ISP pushes (paper 004 Sec. 6.2: ISP v = 0.7 up to 3x faster on PMF)
ISP_PUSH_FRACTION = 1.0 / 3.0
#: MB a worker function needs besides the model: Python, PyTorch, Lithops, the Redis client (assumed)
FUNCTION_RUNTIME_MB = 300.0
#: vCPUs of the default comparison VM: paper 004's PyTorch workers are B1.4x8 (4 vCPUs)
REFERENCE_VM_VCPUS = 4
#: the store's update encoding (spotwise.planes.serverless.store): header bytes, bytes per entry (int32 + float32)
UPDATE_HEADER_BYTES = 16
_MIB = float(2**20)


# ------------------------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class Footprint:
    """What one worker function holds and pushes, measured on the workload (no training)."""

    params: int
    #: mean entries of one worker's update (one mini-batch), before any significance filter
    entries_per_update: float
    #: bytes of the training data a spotwise function builds in memory (0 if not measurable)
    dataset_bytes: int
    sparse: bool
    batches: int
    workload: str

    @property
    def entry_bytes(self) -> int:
        """Wire bytes per entry: ``int32`` index + ``float32`` value (``int64`` indices above 2^31 entries)."""
        return 8 if self.params < 2**31 else 12

    @property
    def model_bytes(self) -> int:
        """A dense ``float32`` replica / snapshot."""
        return 4 * self.params

    @property
    def needed_mb(self) -> float:
        """Memory a worker function needs: the runtime, three model-sized buffers (replica, ISP
        accumulator, one step of the peers' updates) and the data it builds."""
        return FUNCTION_RUNTIME_MB + (3 * self.model_bytes + self.dataset_bytes) / _MIB

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["needed_mb"] = self.needed_mb
        return d


def measure_footprint(workload: Any, seed: int, batches: int = 3) -> Footprint:
    """Build ``workload`` (a :class:`~spotwise.config.WorkloadSpec`) and count one update's entries.

    The entries are those of :func:`~spotwise.workloads.params.flat_grad_sparse` after one
    backward pass on ``batch_size`` seeded random samples, averaged over ``batches`` batches: the
    rows a sparse model's mini-batch touches, or every parameter of a dense model.
    """
    import torch

    from spotwise.workloads.params import flat_grad_sparse, num_params, zero_grad
    from spotwise.workloads.base import check_loss
    from spotwise.workloads.registry import make_workload

    wl = make_workload(workload, seed)
    model = wl.build_model()
    n = len(wl.train)
    rng = np.random.default_rng([int(seed), 41])
    counts: list[int] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for _ in range(max(1, int(batches))):
            idx = rng.choice(n, size=min(int(workload.batch_size), n), replace=False)
            zero_grad(model)
            check_loss(wl.loss(model, wl.train.batch(idx))).backward()  # a vector loss: exit 2 naming its shape
            counts.append(int(flat_grad_sparse(model).indices.size))
    zero_grad(model)
    data = int(sum(int(t.nbytes) for t in getattr(wl.train, "tensors", ()) if hasattr(t, "nbytes")))
    return Footprint(num_params(model), float(np.mean(counts)), data, bool(wl.sparse_grads), len(counts), str(workload.name))


def function_pricing(catalog: Catalog, name: str, memory_mb: int) -> FunctionPricing:
    """The spec's function pricing, checked to offer ``memory_mb`` (InputError, exit 2, naming the field)."""
    try:
        fp = catalog.function(name)
    except InputError:
        raise InputError(f"unknown function pricing {name!r}",
                         f"set cluster.functions to one of {', '.join(f.name for f in catalog.functions())}, "
                         "or add yours under 'functions:' in a market.catalog file", "cluster.functions") from None
    gb = memory_mb / 1024.0
    if fp.memory_gb_options and gb > fp.memory_gb_options[-1] + 1e-12:
        raise InputError(f"{fp.name} offers functions of at most {fp.memory_gb_options[-1]:g} GB, the spec asks "
                         f"{memory_mb} MB", f"set cluster.memory_mb to at most {int(fp.memory_gb_options[-1] * 1024)} "
                         f"(sizes offered: {', '.join(f'{g:g} GB' for g in fp.memory_gb_options)}), or pick another "
                         "cluster.functions", "cluster.memory_mb")
    return fp


def redis_instance(catalog: Catalog, name: str) -> InstanceType:
    try:
        it = catalog.instance(name)
    except InputError as e:
        raise InputError(f"unknown Redis instance type {name!r}", f"set cluster.redis_instance to a catalog instance such as "
                         f"M1.2x16 (paper 004 Table 2) ({e.fix})", "cluster.redis_instance") from None
    if it.on_demand_per_hour is None:
        raise InputError(f"the Redis instance {it.label} has no on-demand price", "pick a cluster.redis_instance with "
                         "on_demand_per_hour in the catalog", "cluster.redis_instance")
    return it


def _profile(catalog: Catalog, it: InstanceType, family: str) -> float | None:
    return catalog._throughput_or_none(it, family)


def _cpu_profiled(catalog: Catalog, family: str) -> list[InstanceType]:
    return [it for it in catalog.instances() if not it.accelerator and it.vcpus > 0 and _profile(catalog, it, family)]


def family_profiled_anywhere(catalog: Catalog, family: str) -> bool:
    fam = family.lower()
    return any(_profile(catalog, it, fam) for it in catalog.instances()) or \
        any(fam in {k.lower() for k in p} for p in (catalog.accelerator_profile(a) for a in
                                                     {it.accelerator for it in catalog.instances() if it.accelerator}))


def per_vcpu_throughput(catalog: Catalog, family: str, instance: InstanceType | None) -> tuple[float | None, str]:
    """Relative throughput of one vCPU on ``family`` and where it came from (None: no CPU figure).

    1. ``instance``'s own throughput / its vCPUs, if it is a CPU instance profiled for the family;
    2. else the median of that ratio over the catalog's CPU instances profiled for the family;
    3. else, if no catalog entry profiles the family at all, 1 (one vCPU is the reference);
    4. else None: the family is profiled only on accelerators, which functions do not have.
    """
    fam = family.lower()
    if instance is not None and not instance.accelerator and instance.vcpus > 0:
        v = _profile(catalog, instance, fam)
        if v:
            return v / instance.vcpus, f"{instance.name}'s throughput {v:g} / {instance.vcpus} vCPUs (linear vCPU scaling)"
    cpus = _cpu_profiled(catalog, fam)
    if cpus:
        ratios = [float(_profile(catalog, it, fam)) / it.vcpus for it in cpus]  # type: ignore[arg-type]
        return float(statistics.median(ratios)), (f"median throughput per vCPU over the catalog's CPU instances profiled for "
                                                  f"{family!r} ({', '.join(it.name for it in cpus)}; linear vCPU scaling)")
    if not family_profiled_anywhere(catalog, fam):
        return 1.0, (f"no catalog entry profiles family {family!r}: one vCPU is the reference (throughput 1), i.e. "
                     "workload.step_time_s is the time of one mini-batch on one function vCPU")
    return None, (f"family {family!r} is profiled only on accelerators (GPU speed-ups) and functions have no GPU: no "
                  f"function speed is known")


def default_vm_instance(catalog: Catalog, family: str, pricing: FunctionPricing, gb: float) -> tuple[InstanceType, str]:
    """The comparison VM of a serverless spec (which names no ``instance_type``), and why.

    Among the catalog's CPU instances with an on-demand price: the function platform's cloud
    first, then at least the function's memory per vCPU, a throughput profile for the family,
    vCPUs closest to ``REFERENCE_VM_VCPUS`` (paper 004's 4-vCPU B1.4x8 PyTorch workers), the
    lower price.  For ``ibm-functions`` at 2 GB that is B1.4x8.
    """
    fam = family.lower()
    cands = [it for it in catalog.instances() if not it.accelerator and it.vcpus > 0 and it.on_demand_per_hour]
    if not cands:
        raise InputError("the catalog has no CPU instance with an on-demand price to compare the functions with",
                         "add one in a market.catalog file, or set cluster.instance_type", "cluster.instance_type")

    def key(it: InstanceType) -> tuple[Any, ...]:
        mem = (it.memory_gb or 0.0) / it.vcpus
        return (it.cloud != pricing.cloud, mem < gb - 1e-9, _profile(catalog, it, fam) is None,
                abs(it.vcpus - REFERENCE_VM_VCPUS), float(it.on_demand_per_hour or 0.0), it.name)

    best = min(cands, key=key)
    return best, (f"{best.label} on demand ({best.vcpus} vCPUs, {best.memory_gb:g} GB, {best.on_demand_per_hour:g} $/h): "
                  f"cluster.instance_type is empty, so the VM rows use the {pricing.cloud} CPU instance closest to paper "
                  f"004's 4-vCPU PyTorch workers with at least {gb:g} GB per vCPU")


# ------------------------------------------------------------------------------------ the setup
@dataclass(frozen=True)
class ServerlessSetup:
    """Everything the serverless model needs, gathered once per plan (:func:`setup`)."""

    pricing: FunctionPricing
    memory_mb: int
    redis: InstanceType
    sync: str
    staleness: int
    significance: float
    push_fraction: float
    function_timeout_s: float
    straggler: float
    #: mean compute seconds of one mini-batch on one function (None: unknown, see ``problem``)
    compute_mean_s: float | None
    compute_source: str
    footprint: Footprint
    cold_start_s: float = DEFAULT_COLD_START_S
    store_bandwidth_Bps: float = DEFAULT_STORE_BANDWIDTH_BPS
    store_latency_s: float = DEFAULT_STORE_LATENCY_S
    #: why the option cannot run (empty: it can), and how to fix it
    problem: str = ""
    fix: str = ""

    @property
    def gb(self) -> float:
        return self.memory_mb / 1024.0

    @property
    def lease_s(self) -> float:
        return LEASE_FRACTION * self.function_timeout_s

    @property
    def update_bytes(self) -> float:
        """Wire bytes of one worker's update after the significance filter."""
        fp = self.footprint
        return UPDATE_HEADER_BYTES + fp.entry_bytes * fp.entries_per_update * self.push_fraction

    def to_dict(self) -> dict[str, Any]:
        return {"functions": self.pricing.name, "memory_mb": self.memory_mb, "redis_instance": self.redis.name,
                "redis_price": self.redis.on_demand_per_hour, "per_gb_second": self.pricing.per_gb_second,
                "per_request": self.pricing.per_request, "sync": self.sync, "staleness": self.staleness,
                "significance": self.significance, "push_fraction": self.push_fraction,
                "function_timeout_s": self.function_timeout_s, "lease_s": self.lease_s, "straggler": self.straggler,
                "compute_mean_s": self.compute_mean_s, "compute_source": self.compute_source,
                "footprint": self.footprint.to_dict(), "update_bytes": self.update_bytes, "cold_start_s": self.cold_start_s,
                "store_bandwidth_Bps": self.store_bandwidth_Bps, "store_latency_s": self.store_latency_s,
                "problem": self.problem}


def setup(spec: Any, catalog: Catalog, vm_instance: InstanceType | None, *, footprint: Footprint | None = None,
          isp_push_fraction: float = ISP_PUSH_FRACTION, cold_start_s: float = DEFAULT_COLD_START_S,
          store_bandwidth_Bps: float = DEFAULT_STORE_BANDWIDTH_BPS,
          store_latency_s: float = DEFAULT_STORE_LATENCY_S) -> ServerlessSetup:
    """The serverless setup of ``spec`` (a serverless spec, or a VM spec's functions alternative).

    A VM spec takes MLLess's defaults from its cluster fields (``memory_mb``, ``functions``,
    ``redis_instance``, ISP with ``significance``).  Raises :class:`InputError` (exit 2) for an
    unknown function pricing, a memory size the platform does not offer, or an unknown Redis type;
    a model too big for the function or a family with no CPU speed is a ``problem`` (the option is
    then infeasible, with its reason).
    """
    if not 0.0 < isp_push_fraction <= 1.0:
        raise ValueError("isp_push_fraction must lie in (0, 1]")
    cl = spec.cluster
    fp = function_pricing(catalog, cl.functions, int(cl.memory_mb))
    redis = redis_instance(catalog, cl.redis_instance)
    if cl.kind == "serverless":
        sync, staleness, v = cl.sync, int(cl.staleness), float(cl.significance)
    else:  # MLLess's default for the VM spec's alternative
        sync, staleness, v = "isp", 0, float(cl.significance)
    push = isp_push_fraction if (sync == "isp" and v > 0) else 1.0
    foot = footprint if footprint is not None else measure_footprint(spec.workload, int(spec.seed))
    per_vcpu, src = per_vcpu_throughput(catalog, spec.workload.family, vm_instance)
    problem = fix = ""
    m = None
    if per_vcpu is None:
        problem = src
        fix = (f"add a CPU instance with 'throughput: {{{spec.workload.family}: <speed>}}' in a market.catalog file, "
               "or use a family profiled on CPUs")
    else:
        m = float(spec.workload.step_time_s) / (per_vcpu * FUNCTION_VCPUS)
        src = f"{float(spec.workload.step_time_s):g} s / ({per_vcpu:.4g} per vCPU x {FUNCTION_VCPUS:g} vCPU) = {m:.4g} s; {src}"
    if foot.needed_mb > cl.memory_mb and not problem:
        problem = (f"a worker needs about {foot.needed_mb:.0f} MB ({FUNCTION_RUNTIME_MB:g} MB runtime + 3 x "
                   f"{foot.model_bytes / _MIB:.1f} MB model buffers + {foot.dataset_bytes / _MIB:.1f} MB data) but a "
                   f"function has {cl.memory_mb} MB")
        top = fp.memory_gb_options[-1] * 1024 if fp.memory_gb_options else None
        fix = ("raise cluster.memory_mb" + (f" (at most {top:.0f} on {fp.name})" if top else "") +
               " or use a smaller model; paper 004 trains models that fit 2 GB functions")
    return ServerlessSetup(fp, int(cl.memory_mb), redis, sync, staleness, v if sync == "isp" else 0.0, push,
                           float(cl.function_timeout_s), float(cl.straggler), m, src, foot, float(cold_start_s),
                           float(store_bandwidth_Bps), float(store_latency_s), problem, fix)


def considered(spec: Any) -> bool:
    """Whether ``spec`` may get a serverless option at all (before its footprint is checked)."""
    return spec.cluster.kind == "serverless" or spec.workload.name in SPARSE_WORKLOADS


# ------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class Estimate:
    """Modelled time and cost of ``iterations`` steps on ``workers`` functions (module docstring)."""

    workers: int
    iterations: int
    compute_s: float
    exchange_s: float
    latency_s: float
    step_s: float
    work_s: float
    restart_s: float
    invocations_per_worker: int
    time_s: float
    cost_workers: float
    cost_supervisor: float
    cost_redis: float
    cost: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def step_seconds(s: ServerlessSetup, workers: int) -> tuple[float, float, float]:
    """``(compute, exchange, latency)`` seconds of one step with ``workers`` functions."""
    if s.compute_mean_s is None:
        raise InfeasibleError(s.problem, s.fix, "serverless")
    law = MiniBatchTimeLaw(s.compute_mean_s, s.straggler)
    compute = law.mean if s.sync == "ssp" else law.order_stat_mean(workers, workers)
    exchange = workers * workers * s.update_bytes / s.store_bandwidth_Bps
    return float(compute), float(exchange), float(s.store_latency_s)


def estimate(s: ServerlessSetup, workers: int, iterations: int) -> Estimate:
    """Time and cost of ``iterations`` steps on ``workers`` functions; InfeasibleError if it cannot run."""
    if s.problem:
        raise InfeasibleError(s.problem, s.fix, "serverless")
    N, J = int(workers), int(iterations)
    compute, exchange, latency = step_seconds(s, N)
    step = compute + exchange + latency
    work = J * step
    restart = s.cold_start_s + N * s.footprint.model_bytes / s.store_bandwidth_Bps
    L = s.lease_s
    if restart >= L:
        raise InfeasibleError(f"a function restart takes {restart:.3g} s, longer than its lease of {L:.3g} s "
                              f"({LEASE_FRACTION:g} x function_timeout_s)", "raise cluster.function_timeout_s", "serverless")
    k = max(1, math.ceil(work / (L - restart) - 1e-12))
    T = work + k * restart
    last = T - (k - 1) * L
    per_worker = s.pricing.call_cost(s.gb, L, k - 1) + s.pricing.call_cost(s.gb, last, 1)
    cost_workers = N * per_worker
    cost_supervisor = s.pricing.call_cost(s.gb, T, 1)
    cost_redis = BillingPolicy.exact().charge(float(s.redis.on_demand_per_hour or 0.0), 0.0, T)
    notes = (f"step {step:.4g} s = compute {compute:.4g} s ({'mean' if s.sync == 'ssp' else f'E[max of {N}]'}) + "
             f"exchange {exchange:.4g} s ({N}^2 x {s.update_bytes:.0f} B / {s.store_bandwidth_Bps / 1e6:g} MB/s) + "
             f"latency {latency:g} s",
             f"{k} invocation(s) per worker (lease {L:g} s), restart {restart:.3g} s each",
             f"cost: workers ${cost_workers:.4g} + supervisor function ${cost_supervisor:.4g} + Redis "
             f"{s.redis.name} ${cost_redis:.4g}",
             "P(deadline) is 1 if the modelled time fits, else 0: functions are not revoked by price; failures and "
             "step-time variance are not modelled")
    return Estimate(N, J, compute, exchange, latency, step, work, restart, k, T, cost_workers, cost_supervisor, cost_redis,
                    cost_workers + cost_supervisor + cost_redis, notes)


def deadline_probability(time_s: float, deadline_s: float) -> float:
    """1 if the (deterministic) modelled time meets the deadline, else 0."""
    return 1.0 if time_s <= deadline_s * (1 + 1e-9) else 0.0


def assumptions(s: ServerlessSetup) -> list[str]:
    """The serverless model's assumptions, one line each, for the plan's output."""
    fp = s.footprint
    isp = (f"ISP pushes {s.push_fraction:.3g} of the entries (assumed; paper 004 Sec. 6.2: ISP v = 0.7 up to 3x "
           "faster on PMF)" if s.push_fraction < 1 else f"{s.sync.upper()} pushes every computed entry")
    return [
        f"serverless: {s.memory_mb} MB functions of {s.pricing.name} ({s.pricing.per_gb_second:g} $/GB-s, "
        f"{s.pricing.per_request:g} $/request) with {FUNCTION_VCPUS:g} vCPU each (paper 004 Table 2); supervisor = one more "
        f"function for the whole job; Redis {s.redis.name} on demand at {s.redis.on_demand_per_hour:g} $/h, billed per "
        "second (as the serverless run's Ledger bills)",
        f"serverless compute: mean mini-batch {s.compute_source}" if s.compute_mean_s is not None else
        f"serverless compute: {s.compute_source}",
        f"serverless exchange: each update {fp.entries_per_update:.0f} of {fp.params} entries (measured on "
        f"{fp.batches} mini-batches of {fp.workload}, {'sparse' if fp.sparse else 'dense'}) x {fp.entry_bytes} B; {isp}; "
        f"N^2 updates per step through the store at {s.store_bandwidth_Bps * 8 / 1e9:g} Gbit/s (paper 004 Sec. 6.1) + "
        f"{s.store_latency_s:g} s latency (assumed)",
        f"serverless restarts: cold start {s.cold_start_s:g} s (assumed) + replica reload per invocation; leases of "
        f"{LEASE_FRACTION:g} x function_timeout_s = {s.lease_s:g} s; function failures and the scale-in auto-tuner are "
        "not modelled (the full pool is priced for the whole job)",
        "serverless error: the Thm 1 bound of fully-synchronous SGD with the same workers (ISP/SSP assumed to converge "
        "like BSP); P(deadline) = 1 if the modelled time meets the deadline, else 0 (no price revocations)",
    ]


__all__ = ["Footprint", "ServerlessSetup", "Estimate", "SPARSE_WORKLOADS", "LEASE_FRACTION", "ISP_PUSH_FRACTION",
           "measure_footprint", "function_pricing", "redis_instance", "per_vcpu_throughput", "default_vm_instance",
           "setup", "considered", "estimate", "step_seconds", "deadline_probability", "assumptions",
           "family_profiled_anywhere"]
