"""The job spec: typed, validated dataclasses, loaded from YAML at the CLI edge.

A spec says *what* to train (workload, target, deadline, budget), *on what* (cluster: instance
type, workers, synchronisation mode, bids), *in which world* (market: real trace files or a
synthetic generator, the revocation model, billing), *with which online policies*, and *where the
results go*.  Everything is validated when the spec is built; every error names the field (dotted
path) and says how to fix it (DESIGN.md, "Errors").

Synchronisation modes are those of ``papers/000_3c734f3ffedcac15.txt`` Sec. III (fully-sync,
N-sync, N-batch-sync SGD) and the asynchronous parameter server of
``papers/002_a246f6afe29b4bfb.txt`` Sec. II.  Synthetic price distributions default to the ones
of paper 000 Sec. VI (uniform on [0.2, 1]; Gaussian with mean 0.6 and variance 0.175, redrawn
every 4 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from spotwise.errors import InputError
from spotwise.usercode import refuse_unsafe_reference
from spotwise.inputfiles import read_input_text
from spotwise.remote.uri import check_uri
from spotwise.safeparse import check_bounds, load_yaml
from spotwise.policies.schema import validate_policies
from spotwise.spec.resolve import data_plane_why, resolve_epochs, resolve_family, resolve_paths, settle_data_plane  # noqa: F401
from spotwise.spec.packages import check_packages, check_requirements
from spotwise.spec.script import check_script_workload
from spotwise.spec.restart_mode import RestartSpec, check_restart_job
from spotwise.spec.target import TargetSpec  # noqa: F401  (re-exported)
from spotwise.spec.checks import MAX_SEED, MAX_SPEC_WORKERS, check_worker_counts, _non_negative, _plain_text, _positive, _seed, check_sinks  # noqa: F401  (re-exported)
from spotwise.spec.market import MarketSpec, PoolMarketSpec, PoolSpec, RevocationSpec, SyntheticSpec  # noqa: F401
from spotwise.spec.pools import Balance, check_pool_markets, check_pools
from spotwise.spec.hardware import resolve_hardware
from spotwise.spec.load import Duration, build, to_plain
from spotwise.training.optimizers import OptimizerSet, parse_optimizer
from spotwise.training.recipe import BUILTIN_RECIPES, LoaderSpec, OptimizerSpec, Precision, ScheduleSpec

SyncMode = Literal["full", "n-sync", "n-batch", "async", "bsp", "ssp", "isp", "ssgd", "sma", "adpsgd"]
ClusterKind = Literal["vm", "serverless"]
DataPlane = Literal["auto", "ps", "collective"]
#: where a worker trains (issue 20 item 4): ``auto`` -- a GPU when the worker has one, else the CPU
Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
#: sync modes of each cluster kind: the parameter-server modes on VMs, MLLess's on functions
VM_SYNC_MODES = ("full", "n-sync", "n-batch", "async")
SERVERLESS_SYNC_MODES = ("bsp", "ssp", "isp")
#: sync modes of the collective data plane (Spotnik, papers/001_30a454edd897cf47.txt Sec. 3.3)
COLLECTIVE_SYNC_MODES = ("ssgd", "sma", "adpsgd")
SYNC_MODES: tuple[str, ...] = ("full", "n-sync", "n-batch", "async")
#: issue 42 item 2: the throughput family a built-in workload is (the catalog's GPU types list these)
IMPLIED_FAMILIES: dict[str, str] = {"resnet18-cifar": "resnet18", "gpt-bytes": "transformer"}
BUILTIN_WORKLOADS: tuple[str, ...] = ("mlp-digits", "cnn-digits", "sparse-logreg", "pmf", "cnn-cifar10", "resnet18-cifar", "gpt-bytes")
Cloud = Literal["aws", "gcp", "azure", "ibm", "local"]

#: allowed ``cluster.group_timeout_s`` (issue 18 item 10).  It is gloo's collective timeout *and*
#: the members' rendezvous (store connect) timeout: an S-SGD all-reduce waits for the slowest
#: peer's mini-batch, so a timeout shorter than a step declares healthy peers lost.  Measured on
#: the 2-core dev machine (2-3 members, mlp-digits, 16 steps): 0.001 s -> 14 regroups and a
#: spurious revocation; below 1 ms the store's connect timeout rounds to 0 ms and no group ever
#: forms (status no-capacity, 0 steps).  1 s leaves a margin for a loaded machine; above an hour a
#: frozen peer would stall the whole job that long.
GROUP_TIMEOUT_RANGE_S = (1.0, 3600.0)

#: most local SGD steps between two S-MA averagings: a committed step holds ``local_steps``
#: mini-batches per member, so 1e6 made one step outlast the market (status no-capacity, 0 steps)
MAX_LOCAL_STEPS = 1000


@dataclass
class WorkloadSpec:
    """What to train.

    ``name`` is a built-in workload (``mlp-digits``, ``cnn-digits``, ``sparse-logreg``, ``pmf``)
    or ``module:function`` returning model, loss and dataset.  ``family`` keys the instance
    catalog's throughput profiles (e.g. ``resnet50``, ``transformer``, ``mlp``).

    ``script`` (issue 41): the user's own training script (``train.py``, relative to the spec's
    folder) run in every member with ``args``; it trains through :mod:`spotwise.elastic`.  ``name``
    is then ``script``.
    """

    name: str = ""
    #: unset: the built-in's own (:data:`IMPLIED_FAMILIES`) where the instance type has a profile for it, else mlp
    family: str | None = None
    batch_size: int = 32
    #: base learning rate: an optimizer's ``lr``, else this (into a built-in's default recipe too), else 0.05
    lr: float = None  # type: ignore[assignment]  # settled to a float in __post_init__
    dataset: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    step_time_s: Duration = 1.0
    eval_every: int = 50
    #: issue 21: MB on the wire per model copy when the run stands in for a larger model (default:
    #: the model's own float32 size); an exchange moves it twice
    model_mb: float | None = None
    #: issue 28: the training recipe (``spotwise/training/recipe.py``; docs/workloads.md): any
    #: ``torch.optim`` optimizer, a schedule in committed samples, clipping, accumulation, precision;
    #: without ``optimizer`` the update is the papers' plain SGD
    optimizer: dict[str, Any] | list[dict[str, Any]] | str | None = None
    schedule: ScheduleSpec | None = None
    grad_clip_norm: float | None = None
    accumulate: int = 1
    precision: Precision = "fp32"
    loader: LoaderSpec = field(default_factory=LoaderSpec)
    #: issue 41: the user's training script and its command-line arguments
    script: str | None = None
    args: list[str] = field(default_factory=list)
    #: issue 42: the workload's own pip requirements and requirements file, installed by emitted setups
    packages: list[str] = field(default_factory=list)
    requirements: str | None = None
    #: issue 55 item 6: restart mode (spotwise/spec/restart_mode.py): the script runs unmodified, as torchrun runs it
    restart: RestartSpec | None = None

    def __post_init__(self) -> None:
        self.packages, self.requirements = check_packages(self.packages), check_requirements(self.requirements)
        if self.script is not None:
            check_script_workload(self)
        if self.optimizer is None and self.name in BUILTIN_RECIPES:  # the built-in realistic workloads' recipes
            rec = BUILTIN_RECIPES[self.name]
            self.optimizer = dict(rec["optimizer"])
            if self.lr is not None:  # the spec's base rate over the recipe's (it used to be replaced silently)
                self.optimizer["lr"] = self.lr
            if self.schedule is None and "schedule" in rec:
                self.schedule = ScheduleSpec(**rec["schedule"])
            if self.grad_clip_norm is None:
                self.grad_clip_norm = rec.get("grad_clip_norm")
        if self.optimizer is not None:
            if isinstance(self.optimizer, str):
                self.optimizer = {"name": self.optimizer}
            opt = parse_optimizer(self.optimizer)  # a list: several optimizers over parts of the model (issue 41)
            if opt.lr is not None:
                self.lr = opt.lr  # the optimizer's lr is the base rate
        if self.lr is None:
            self.lr = 0.05
        if self.grad_clip_norm is not None and not 0 < self.grad_clip_norm < math.inf:
            raise InputError(f"must be a positive number, got {self.grad_clip_norm!r}", "use e.g. 1.0", "grad_clip_norm")
        if isinstance(self.accumulate, bool) or not 1 <= self.accumulate <= 4096:
            raise InputError(f"must be in 1..4096, got {self.accumulate!r}", "micro-batches per mini-batch, e.g. 4", "accumulate")
        if self.accumulate > self.batch_size:
            raise InputError(f"accumulate ({self.accumulate}) is larger than batch_size ({self.batch_size})",
                             "a worker's mini-batch is split into `accumulate` micro-batches: use accumulate <= batch_size",
                             "accumulate")
        _positive(self.step_time_s, "step_time_s", "give the virtual seconds one mini-batch takes on an instance of relative throughput 1, e.g. 1.0")
        _positive(self.eval_every, "eval_every", "evaluate on held-out data every N >= 1 committed steps")
        if not self.name and self.script is None:
            raise InputError("names no workload", "set workload.name (a built-in such as mlp-digits, or "
                             "'package.module:function') or workload.script (your train.py)", "name")
        if self.script is None and self.name == "script":
            raise InputError("workload.name is 'script' but workload.script is missing",
                             "add workload.script: train.py (your training script)", "name")
        if self.script is None and self.name not in BUILTIN_WORKLOADS and ":" not in self.name:
            raise InputError(
                f"unknown workload {self.name!r}",
                f"use one of {', '.join(BUILTIN_WORKLOADS)} or 'package.module:function' for your own",
                "name",
            )
        if ":" in self.name:
            mod, _, fn = self.name.partition(":")
            if not mod or not fn or not all(p.isidentifier() for p in mod.split(".")) or not fn.isidentifier():
                raise InputError(f"malformed workload reference {self.name!r}", "write it as 'package.module:function'", "name")
            refuse_unsafe_reference(self.name, "workload", "name")
        if self.family is None:  # unset: the workload's own family, settled against the catalog (resolve_family)
            self.__dict__["_family_implied"] = True
            self.family = IMPLIED_FAMILIES.get(self.name, "mlp")
        if not isinstance(self.family, str) or not self.family:
            raise InputError("must not be empty", "name the model family used for throughput profiles, e.g. 'mlp'", "family")
        _positive(self.batch_size, "batch_size", "use a positive mini-batch size per worker, e.g. 32")
        _positive(self.lr, "lr", "use a positive base learning rate, e.g. 0.05")
        if self.model_mb is not None and not (0 < self.model_mb < 1e6):
            raise InputError(f"must be in (0, 1e6) MB, got {self.model_mb!r}", "the model's size on the wire, e.g. 14.19 "
                             "(ResNet-32, paper 002 Table II)", "model_mb")

    @property
    def plain_sgd_recipe(self) -> bool:
        """Whether the update is the papers' plain SGD (no optimizer, schedule, clipping, precision)."""
        return (self.optimizer is None and self.schedule is None and self.grad_clip_norm is None
                and self.precision == "fp32" and self.accumulate == 1)

    @property
    def optimizer_spec(self) -> OptimizerSpec | OptimizerSet | None:
        """``optimizer`` parsed (checked when the spec was built): one optimizer, or several over parts of the model."""
        if self.optimizer is None:
            return None
        if isinstance(self.optimizer, list):
            return OptimizerSet.parse(self.optimizer, check=False)
        return OptimizerSpec.parse(self.optimizer, check=False)


@dataclass
class ClusterSpec:
    """What to provision.

    ``sync``: ``full`` waits for every active worker; ``n-sync`` commits the first ``sync_n``
    workers' gradients and cancels the rest; ``n-batch`` commits the first ``sync_n`` mini-batches
    while workers keep going (paper 000 Sec. III); ``async`` is an asynchronous parameter server
    (paper 002).  ``bids``: one bid for all workers or one per worker ($/h); required by the
    ``bid`` revocation model.  ``max_workers`` caps growth policies (paper 000 Remark 3).
    ``device``: where workers train -- ``auto`` (a GPU when the instance type has one and the
    worker sees CUDA, else the CPU), ``cpu``, or ``cuda`` (refused when there is no GPU; see
    :mod:`spotwise.capacity.placement`).
    """

    instance_type: str = ""
    workers: int = 1
    max_workers: int | None = None
    #: issue 31: below how many nodes the job waits instead of training (1 elastic, ``workers`` a
    #: gang); unset: 1, and a sweep on a multi-node trace asks which reading applies
    min_workers: int | None = None
    sync: SyncMode = "full"
    sync_n: int | None = None
    bids: list[float] | float | None = None
    coordinator_instance: str | None = None
    #: issue 29: SkyPilot's notation ``NAME:COUNT`` (e.g. ``V100:1``): picks ``instance_type`` from the catalog
    #: (:mod:`spotwise.spec.hardware`)
    accelerators: str | None = None
    cloud: Cloud | None = None
    region: str | None = None
    straggler: float = 0.3
    sync_overhead_s: Duration = 0.05
    standby: int | None = None
    kind: ClusterKind = "vm"
    memory_mb: int = 2048
    functions: str = "ibm-functions"
    redis_instance: str = "M1.2x16"
    staleness: int = 0
    significance: float = 0.7
    function_timeout_s: Duration = 600.0
    #: issue 40 item 4: ``auto`` is collective where the workers have GPUs (:mod:`spotwise.spec.plane_choice`)
    data_plane: DataPlane = "auto"
    local_steps: int = 4
    group_timeout_s: Duration = 5.0
    replica_every: int = 20
    #: issue 40 item 3: the share of training time periodic replica offers may take (they are spaced
    #: out beyond replica_every when they would take more); null: exactly every replica_every steps
    replica_budget: float | None = 0.02
    device: Device = "auto"
    #: issue 21: heterogeneous pools (several types / places in one job; the single-type form is one pool)
    pools: list[PoolSpec] | None = None
    #: issue 21: barrier modes give each worker an equal batch, or one proportional to its speed
    balance: Balance = "equal"
    #: issue 21: parameter-server shards (paper 002 Fig. 6), each an on-demand coordinator
    ps_shards: int = 1
    #: issue 21: the parameter server's network in Gbit/s; set, every exchange queues there
    #: (``spotwise.control.speeds``); unset, exchanges are part of the mini-batch time
    ps_gbps: float | None = None

    def __post_init__(self) -> None:
        for name in ("region", "instance_type", "coordinator_instance"):  # they reach generated YAML and shell (--emit)
            _plain_text(getattr(self, name), name, "write the name on one line, e.g. us-east-1b or p3.2xlarge")
        check_pools(self)
        self._check_device()
        self._check_kind()
        self._check_data_plane()
        if not 0.0 <= self.straggler <= 1.0:
            raise InputError(f"must lie in [0, 1], got {self.straggler}", "0 = no straggler noise, 1 = purely exponential step times (paper 000 eq. 14)", "straggler")
        _non_negative(self.sync_overhead_s, "sync_overhead_s", "the parameter server's update-and-push time, e.g. 0.05")
        _non_negative(self.standby, "standby", "use 0 to start every joining worker on demand")
        if not self.instance_type and self.kind == "vm" and not self.accelerators:
            raise InputError("required field is missing", "name an instance type from the catalog, e.g. 'c5.xlarge', or "
                             "the accelerators, e.g. accelerators: V100:1 (or set cluster.kind: serverless to train on "
                             "functions)", "instance_type")
        check_worker_counts(self)
        if self.sync in ("n-sync", "n-batch"):
            if self.sync_n is None:
                raise InputError(f"sync mode {self.sync!r} needs sync_n", "set cluster.sync_n (the N of N-sync), e.g. half the workers", "sync_n")
            _positive(self.sync_n, "sync_n", "use N >= 1")
            if self.sync == "n-sync" and self.sync_n > self.workers:
                raise InputError(
                    f"n-sync with N={self.sync_n} needs at least {self.sync_n} workers but the cluster has {self.workers}",
                    f"lower sync_n to at most {self.workers} or raise workers", "sync_n",
                )
        elif self.sync_n is not None:
            raise InputError(f"sync_n only applies to n-sync and n-batch, not {self.sync!r}", "remove sync_n or change sync", "sync_n")
        if self.bids is not None:
            bids = [self.bids] if isinstance(self.bids, float) else list(self.bids)
            if isinstance(self.bids, list) and len(bids) != self.workers:
                raise InputError(
                    f"{len(bids)} bids for {self.workers} workers",
                    "give one bid for all workers (a number) or exactly one per worker (a list)", "bids",
                )
            for b in bids:
                if not (b > 0 and math.isfinite(b)):
                    raise InputError(f"bid {b!r} is not a positive price", "bids are maximum prices in $/hour, e.g. 0.6", "bids")

    def _check_data_plane(self) -> None:
        """``data_plane: collective`` (issue 10): workers all-reduce among themselves (Spotnik)."""
        if self.data_plane not in ("auto", "ps", "collective"):
            raise InputError(f"unknown data plane {self.data_plane!r}", "use auto (collective on GPUs, else ps), ps (a "
                             "parameter server: the coordinator combines every step) or collective (workers all-reduce "
                             "among themselves)", "data_plane")
        if self.data_plane == "collective":
            if self.kind != "vm":
                raise InputError("the collective data plane runs on VMs", "remove cluster.data_plane or set cluster.kind: vm",
                                 "data_plane")
            if self.sync == "full":
                self.sync = "ssgd"  # fully synchronous on the collective plane is S-SGD
            if self.sync not in COLLECTIVE_SYNC_MODES:
                raise InputError(f"sync {self.sync!r} is a parameter-server mode",
                                 f"the collective data plane syncs with one of {', '.join(COLLECTIVE_SYNC_MODES)} "
                                 "(ssgd: all-reduced gradients; sma: model averaging every local_steps; adpsgd: pairwise "
                                 "gossip averaging)", "sync")
            _positive(self.replica_every, "replica_every", "steps between parameter copies sent to the coordinator, e.g. 20")
            if self.replica_budget is not None and not 0 < self.replica_budget < 1:  # NaN fails too
                raise InputError(f"must lie in (0, 1), got {self.replica_budget!r}", "the share of training time "
                                 "replica offers may take, e.g. 0.02; null offers exactly every replica_every steps",
                                 "replica_budget")
        elif self.sync in COLLECTIVE_SYNC_MODES and self.data_plane == "ps":
            raise InputError(f"sync {self.sync!r} is a collective mode", "set cluster.data_plane: collective, or use "
                             "full, n-sync, n-batch or async with the parameter server", "sync")
        if int(self.local_steps) != self.local_steps or not 1 <= self.local_steps <= MAX_LOCAL_STEPS:
            raise InputError(f"must be an integer >= 1 and <= {MAX_LOCAL_STEPS}, got {self.local_steps!r}",
                             "local SGD steps between two model averagings (sync: sma), e.g. 4", "local_steps")
        lo, hi = GROUP_TIMEOUT_RANGE_S
        if not lo <= self.group_timeout_s <= hi:  # NaN fails too
            raise InputError(f"must lie in [{lo:g}, {hi:g}] seconds, got {self.group_timeout_s!r}",
                             f"use e.g. 5: seconds after which a frozen peer fails a collective; at least {lo:g} "
                             "(it must outlast a step's compute and a gloo rendezvous), at most "
                             f"{hi:g} (a frozen peer stalls the job this long)", "group_timeout_s")

    def _check_device(self) -> None:
        """``device``: one of :data:`DEVICES`; functions have no GPU, so a serverless job cannot ask for one."""
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}", "valid values are auto (a GPU when the worker has one, "
                             "else the CPU), cpu or cuda", "device")
        if self.device == "cuda" and self.kind == "serverless":
            raise InputError("serverless functions have no GPU: a serverless cluster trains on CPUs",
                             "remove cluster.device (or use auto or cpu), or set cluster.kind: vm with a GPU instance "
                             "type such as p3.2xlarge", "device")

    def _check_kind(self) -> None:
        """The fields of the other cluster kind are refused, not silently ignored."""
        if self.kind == "serverless":
            if self.sync == "full":
                self.sync = "isp"  # MLLess's default (papers/004_9dc2adb66dc8d26e.txt Sec. 4.1)
            if self.sync not in SERVERLESS_SYNC_MODES:
                raise InputError(f"sync {self.sync!r} is a VM (parameter-server) mode",
                                 f"a serverless cluster syncs with one of {', '.join(SERVERLESS_SYNC_MODES)}", "sync")
            for name in ("bids", "max_workers", "sync_n", "standby", "coordinator_instance"):
                if getattr(self, name) is not None:
                    raise InputError(f"{name} does not apply to a serverless cluster",
                                     f"remove cluster.{name} (functions are billed per call; the scale-in policy shrinks the pool)", name)
            if not 128 <= self.memory_mb <= 10240:
                raise InputError(f"memory_mb {self.memory_mb} is outside 128-10240 MB", "use a function size such as 2048 (MLLess used 2 GB)", "memory_mb")
            if not self.staleness >= 0:
                raise InputError(f"must be >= 0, got {self.staleness}", "use 0 (BSP) or a small bound such as 2", "staleness")
            if self.sync != "ssp" and self.staleness:
                raise InputError(f"staleness applies to sync: ssp, not {self.sync!r}", "remove cluster.staleness or use sync: ssp", "staleness")
            if self.sync == "ssp" and self.staleness < 1:
                raise InputError("sync: ssp needs a staleness bound >= 1", "set cluster.staleness, e.g. 2 (0 would be BSP)", "staleness")
            if not (0.0 <= self.significance < 100.0):
                raise InputError(f"significance v must be in [0, 100), got {self.significance}", "use MLLess's v = 0.7 (0 = BSP)", "significance")
            _positive(self.function_timeout_s, "function_timeout_s", "use the platform's limit, e.g. 600 (IBM) or 900 (AWS Lambda)")
        elif self.sync in SERVERLESS_SYNC_MODES:
            raise InputError(f"sync {self.sync!r} is a serverless mode", "set cluster.kind: serverless, or use full, n-sync, n-batch or async on VMs", "sync")

    def bid_list(self) -> list[float] | None:
        """One bid per worker, or None if no bids were given (pools: every pool's, in pool order)."""
        if self.pools:
            per = [p.bid_list() for p in self.pools]
            return None if all(b is None for b in per) else [x for p, b in zip(self.pools, per) for x in (b or [0.0] * p.workers)]
        if self.bids is None:
            return None
        if isinstance(self.bids, float):
            return [self.bids] * self.workers
        return list(self.bids)


@dataclass
class PolicySpec:
    """An online policy by registry name, with its parameters (e.g. ``lr-scaling``, ``exp-growth``)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("must not be empty", "name a policy, e.g. 'lr-scaling'", "name")


@dataclass
class OutputSpec:
    """Where results go and how often to checkpoint (``checkpoint_every`` committed steps; 0 = only on notice).
    ``uri``: ``s3://bucket/prefix``, ``gs://...`` or ``file:///...``: ``spotwise run`` mirrors its run
    directory there as it goes (:mod:`spotwise.remote`); ``spotwise run --resume URI`` continues it anywhere."""

    dir: str | None = None
    plots: bool = True
    checkpoint_every: int = 100
    log_every: int = 1
    uri: str | None = None
    #: issue 41 item 6: where else the run's metrics go (``tensorboard``: OUT/tensorboard/)
    sinks: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.uri is not None:
            self.uri = check_uri(self.uri, "uri")
        check_sinks(list(self.sinks))  # (a non-list is refused by the spec's builder)
        _non_negative(self.checkpoint_every, "checkpoint_every", "use 0 to checkpoint only on revocation notices")
        _positive(self.log_every, "log_every", "log every N >= 1 steps")


@dataclass
class JobSpec:
    """A whole job: ``workload`` trained to ``target`` by ``deadline_s`` within ``budget_usd``."""

    name: str
    workload: WorkloadSpec
    target: TargetSpec
    cluster: ClusterSpec
    market: MarketSpec = field(default_factory=MarketSpec)
    policies: list[PolicySpec] = field(default_factory=list)
    outputs: OutputSpec = field(default_factory=OutputSpec)
    deadline: Duration | None = None
    budget_usd: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("must not be empty", "give the job a name", "name")
        _plain_text(self.name, "name", "give the job a name on one line of printable text, e.g. resnet-spot")
        _seed(self.seed, "seed")
        if self.deadline is not None:
            _positive(self.deadline, "deadline", "use a positive deadline such as '2h'")
        _positive(self.budget_usd, "budget_usd", "use a positive budget in USD, or remove it")
        check_pool_markets(self)
        if self.market.revocation.model == "bid" and self.cluster.bids is None and not self.cluster.pools:
            raise InputError(
                "the bid revocation model needs bids",
                "set cluster.bids (a $/h bid for all workers, or one per worker), or let `spotwise plan` choose them",
                "cluster.bids",
            )
        validate_policies(self.policies)  # unknown names / bad params fail at load time, no policy is built
        if self.cluster.max_workers is None and any(p.name == "exp-growth" for p in self.policies):
            raise InputError("exp-growth needs a cap", "set cluster.max_workers (paper 000 Remark 3 caps the growth)", "cluster.max_workers")
        self._check_recipe()
        check_restart_job(self)

    def samples_per_step(self) -> int:
        """Samples a step commits at full strength: workers x batch (S-MA: times ``local_steps``)."""
        c = self.cluster
        workers = sum(p.workers for p in c.pools) if c.pools else c.workers
        per_step = max(1, int(workers)) * int(self.workload.batch_size)
        if c.data_plane == "collective" and c.sync == "sma":
            per_step *= int(c.local_steps)
        return per_step

    def target_samples(self) -> int | None:
        """The committed samples that end the job (:meth:`TargetSpec.samples_to_commit`)."""
        return self.target.samples_to_commit()

    def planned_samples(self) -> int | None:
        """Samples the job commits: :meth:`target_samples`, or ``target.iterations`` x :meth:`samples_per_step`
        (full strength); ``None`` with neither.  A schedule's default length."""
        samples = self.target_samples()
        if samples is not None:
            return samples
        if self.target.iterations is None:
            return None
        return int(self.target.iterations) * self.samples_per_step()

    def expected_iterations(self) -> int | None:
        """The job's length in steps as the planner counts it: ``target.iterations``, or the steps
        ``target.samples`` takes at full strength (rounded up); ``None`` with neither."""
        samples = self.target_samples()
        if self.target.iterations is not None or samples is None:
            return None if self.target.iterations is None else int(self.target.iterations)
        return max(1, -(-samples // self.samples_per_step()))

    def _check_recipe(self) -> None:
        """The training recipe against the job (issue 28): the schedule's length, fp16's device."""
        w = self.workload
        t = self.target
        if w.schedule is not None and not ((t.epochs is not None or t.hours is not None or t.tokens is not None)
                                           and self.planned_samples() is None):
            # (target.epochs / tokens / hours: checked once they are samples / iterations, resolve_epochs / _hardware)
            planned = self.planned_samples()
            sched = w.schedule.resolved(planned)
            if planned is not None and sched.total is not None and sched.total > planned:
                why = next((f"target.{k}" for k in ("samples", "epochs", "tokens") if getattr(t, k) is not None),
                           f"target.iterations {t.iterations} x {planned // int(t.iterations or 1):,} samples a step")
                raise InputError(f"the schedule spans {sched.total:,} samples but the job commits {planned:,} ({why})",
                                 f"shorten workload.schedule.total to at most {planned:,}, or remove it (it then spans the job)", "workload.schedule.total")
            if sched.warmup and sched.total is not None and sched.warmup >= sched.total:
                raise InputError(f"the warm-up ({sched.warmup:,} samples) is as long as the whole schedule ({sched.total:,})",
                                 "shorten workload.schedule.warmup", "workload.schedule.warmup")
        if w.precision == "fp16":
            if self.cluster.kind == "serverless" or self.cluster.device == "cpu":
                raise InputError("precision fp16 needs CUDA (float16 autocast with a GradScaler); this job trains on CPUs",
                                 "use precision: bf16 on CPUs, or device: cuda on a GPU instance type", "workload.precision")
        if self.cluster.kind == "serverless" and not w.plain_sgd_recipe:
            raise InputError("serverless functions train with the papers' plain SGD (paper 004's sparse updates)",
                             "remove workload.optimizer / schedule / grad_clip_norm / precision for a serverless job, or "
                             "use cluster.kind: vm", "workload.optimizer")
        opt = w.optimizer_spec
        if opt is not None and ":" not in opt.name and self.optimizer_steps_on_cpu():
            # a torch.optim class steps once on a throwaway parameter where it will step: SparseAdam,
            # differentiable, capturable on a CPU exit 2 here (a module:Class is imported only by `run`)
            opt.first_step("cpu")

    def optimizer_steps_on_cpu(self) -> bool:
        """Whether the recipe's optimizer steps on a CPU whatever the machine: the parameter-server
        plane's coordinator applies every update on its CPU, and ``device: cpu`` trains there.
        (Collective members step where they train: ``device`` auto/cuda is known when a run places them.)"""
        c = self.cluster
        return c.kind == "vm" and (c.data_plane == "ps" or c.device == "cpu")

    @property
    def deadline_s(self) -> float | None:
        return None if self.deadline is None else float(self.deadline)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


def spec_from_dict(data: Any, source: str = "spec", *, resolve: bool = True) -> JobSpec:
    """Build a :class:`JobSpec` from parsed YAML/JSON; errors name ``source`` and the field.  ``resolve``:
    also turn ``cluster.accelerators`` / ``target.hours`` into the concrete fields (:mod:`spotwise.spec.hardware`)."""
    check_bounds(data, source, "the spec")  # a dict from the Python API or spec.json: no nesting bombs
    if isinstance(data, dict) and "output" in data:  # ``output:`` is another name of ``outputs:``
        if "outputs" in data:
            raise InputError("both output: and outputs: are given", "keep one of them (output: is another name of "
                             "outputs:)", f"{source}: output")
        data = {("outputs" if k == "output" else k): v for k, v in data.items()}
    try:
        spec = build(JobSpec, data)
        if resolve:
            settle_data_plane(spec)
            resolve_family(spec)
            resolve_hardware(spec)
            resolve_family(spec)
            if spec.target.hours is not None:
                spec._check_recipe()  # the schedule against the iterations target.hours became
        return spec
    except InputError as e:
        e.where = f"{source}: {e.where}" if e.where and not e.where.startswith(source) else (e.where or source)
        e.args = (e.message,)
        raise


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """A spec file's parsed YAML mapping, read as untrusted input: a missing, non-regular, oversized or
    non-UTF-8 file, bad YAML (duplicate keys, nesting deeper than 64, 5000-digit integers) or a
    non-mapping is an :class:`InputError` (exit 2)."""
    p = Path(path)
    if not p.exists():
        raise InputError("file not found", "check the path to the spec (examples are in examples/)", str(p))
    if p.is_dir():
        raise InputError("is a directory, not a spec file", "pass a YAML file such as examples/demo.yaml", str(p))
    text = read_input_text(p, "spec file", "pass a readable UTF-8 YAML file such as examples/demo.yaml")
    data = load_yaml(text, str(p), "spec file")
    if not isinstance(data, dict):
        raise InputError("the spec must be a YAML mapping", "start from examples/demo.yaml", str(p))
    return data


def load_spec(path: str | Path, data: dict[str, Any] | None = None) -> JobSpec:
    """Load and validate a YAML job spec.  Relative paths inside it are resolved against its folder.
    ``data``: the file's mapping as :func:`read_spec_file` read it, changed by the caller (``spotwise
    launch`` names the script); its paths are still the file's.

    Raises :class:`InputError` (exit 2) for a bad file, bad YAML, every invalid field and every input
    file it names that is missing, not a regular file or too large (:mod:`spotwise.spec.input_paths`).  Loading never imports a user workload module.
    """
    p = Path(path)
    spec = spec_from_dict(read_spec_file(p) if data is None else data, str(p), resolve=False)
    try:
        resolve_paths(spec, p.parent)  # and every file it names checked (issue 54 item 9)
        settle_data_plane(spec)  # after the paths (a market.catalog file is relative to the spec)
        resolve_family(spec)  # the built-in's own family where its instance type has a profile (issue 42 item 2)
        resolve_hardware(spec)
        resolve_family(spec)
        if spec.target.hours is not None:
            spec._check_recipe()  # the schedule against the iterations target.hours became (issue 42 item 2)
    except InputError as e:
        e.where = f"{p}: {e.where}" if e.where else str(p)
        raise
    return spec
