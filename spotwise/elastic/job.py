"""Bring your own training loop: the objects a user's ``train.py`` holds (issue 41 item 1).

A script converts in a few lines::

    import spotwise.elastic as sw
    job = sw.init()                                    # the job's elastic group, or a plain process
    model = job.model(model)                           # DDP over the group, rebuilt at each regroup
    optimizer = job.optimizer(optimizer)               # step() is the commit point
    for x, y in job.data(train_set, batch_size=32):    # exactly-once, resumable batches
        loss = F.cross_entropy(model(x.to(job.device)), y.to(job.device))
        job.backward(loss)                             # or loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        job.log(loss=loss)

A script written for ``torchrun`` keeps its ``init_process_group``, ``DDP(model)``, ``RANK`` and
``master_process`` (:mod:`spotwise.elastic.torchrun`, :mod:`spotwise.elastic.patches`): it converts
with ``from spotwise import job``, ``job.optimizer(...)``, ``job.randint`` for its random windows
and ``for iter_num in job.steps(n)`` (docs/own-loop.md).

Started by ``spotwise run SPEC`` (``workload: {script: train.py}``) the script runs in every member
of the collective plane (:mod:`spotwise.elastic.host`), in place of spotwise's own loop: the
controller, market, policies, ledger, checkpoints, report and planner are those of every job.
Started on its own (``python train.py``) it is a plain single process (:mod:`spotwise.elastic.local`)
with the same data order, so the same script is debugged on a laptop and run on spot capacity.

**Commit.** ``optimizer.step()`` is where a step commits: a small all-reduce of the step's loss,
sample count and a failure flag -- the step's one host read -- then the user's optimizers step, on
every member alike.  A step that loses a member (a revocation inside it) is dropped on every member
and ``step()`` returns ``False``: the script goes on, and its next batches are the same samples
split over the new membership, the state it steps from that of the last committed step (the
members regroup in place, Spotnik's atomic commit, ``papers/001_30a454edd897cf47.txt`` Sec. 3.2).

**Data.** ``job.data`` hands out the batches of the run's position in the epochs' seeded orders
(:mod:`spotwise.elastic.positions`); the iteration ends when the job's target (``target.samples``,
``target.iterations``, a loss, a budget) is reached, so ``for batch in job.data(...)`` is the whole
loop.  Several batches before one ``step()`` are gradient accumulation (every member must pull the
same number).  Under spotwise, the batch size is the spec's ``workload.batch_size``.

**State.** The model's parameters and buffers and the optimizers' ``state_dict`` travel with every
regroup, replica and checkpoint; anything else the script keeps (EMA weights, a teacher, a counter)
is registered with :meth:`Job.state` (an object with ``state_dict``/``load_state_dict``).
``job.step`` and ``job.samples`` count committed steps and samples: what a schedule or a log
should be a function of (they survive a resume).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Protocol

import torch

from spotwise.elastic.amp import AmpStep, agree_found_inf
from spotwise.workloads.device import to_device


class Backend(Protocol):
    """Where the objects of :class:`Job` get their behaviour: a plain process or a spotwise member."""

    launched: bool
    rank: int
    world: int
    device: torch.device
    seed: int

    def register_model(self, module: torch.nn.Module, find_unused: bool) -> int: ...
    def forward_module(self, index: int = 0) -> Any: ...
    def forward_failed(self, index: int, error: RuntimeError) -> bool: ...
    def no_sync(self, index: int | None = None) -> Any: ...
    def register_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> int: ...
    def register_data(self, dataset: Any, batch_size: int | None, collate_fn: Any, epochs: float | None,
                      loader: dict[str, Any]) -> None: ...
    def register_state(self, name: str, obj: Any) -> None: ...
    def register_scheduler(self, scheduler: Any) -> None: ...
    def next_batch(self) -> Any: ...
    def boundary(self) -> bool: ...
    def backward(self, loss: torch.Tensor) -> None: ...
    def commit(self, amp: AmpStep | None = None, index: int = 0) -> bool: ...
    def log(self, metrics: dict[str, float]) -> None: ...
    @property
    def step(self) -> int: ...
    @property
    def samples(self) -> int: ...


class ElasticModel(torch.nn.Module):
    """The user's model, called through DDP over the job's current group (module docstring).

    Its parameters, ``state_dict`` and attributes are the wrapped module's own (no ``module.``
    prefix); ``.module`` is the module itself.  ``require_backward_grad_sync = False`` and
    :meth:`no_sync` skip the gradient all-reduce of a micro-batch, as DDP's do."""

    def __init__(self, module: torch.nn.Module, backend: Backend, index: int = 0) -> None:
        super().__init__()
        self.module = module
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_index", int(index))
        object.__setattr__(self, "require_backward_grad_sync", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        target = self._backend.forward_module(self._index)
        if target is not self.module and hasattr(target, "require_backward_grad_sync"):
            target.require_backward_grad_sync = bool(self.require_backward_grad_sync)
        try:
            return target(*args, **kwargs)
        except RuntimeError as e:
            # DDP's forward runs a collective of its own (the bucket order, after its first backward
            # pass): a peer lost there fails the step -- it is dropped on every member at its commit --
            # not the user's script, whose forward pass completes on this member's replica alone
            if target is self.module or not self._backend.forward_failed(self._index, e):
                raise
            return self.module(*args, **kwargs)

    def no_sync(self) -> Any:
        """Gradients of the micro-batches inside accumulate locally (DDP's ``no_sync``)."""
        return self._backend.no_sync(self._index)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(self.module, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self.module.load_state_dict(*args, **kwargs)


class ElasticOptimizer(torch.optim.Optimizer):
    """The user's optimizer(s); :meth:`step` commits the step on every member or on none.

    A ``torch.optim.Optimizer`` to PyTorch's own code, so an LR scheduler is built on it as on the
    optimizer itself (``CosineAnnealingLR(optimizer, ...)``; register it with :meth:`Job.scheduler`)
    and ``GradScaler.step(optimizer)`` works; its ``param_groups`` and ``state`` are the wrapped
    optimizers' own.  (``Optimizer.__init__`` is not run: it would own parameters.)"""

    #: ``torch.amp.GradScaler`` hands :meth:`step` its ``found_inf`` and ``grad_scale`` (:class:`AmpStep`)
    _step_supports_amp_scaling = True

    def __init__(self, optimizers: list[torch.optim.Optimizer], backend: Backend,
                 scaler: Any = None, index: int = 0) -> None:  # noqa: D107
        from collections import OrderedDict

        self.optimizers = list(optimizers)
        self._backend = backend
        #: which of the job's commit points this is (several ``job.optimizer()`` calls: a GAN's two)
        self._index = int(index)
        #: the script's ``torch.amp.GradScaler`` (``job.optimizer(..., scaler=)``), else None
        self.scaler = scaler
        #: the wrapped optimizers' defaults (a scheduler reads them: OneCycleLR looks for momentum or betas)
        self.defaults: dict[str, Any] = {k: v for o in reversed(self.optimizers) for k, v in o.defaults.items()}
        for hooks in ("step_pre", "step_post", "state_dict_pre", "state_dict_post", "load_state_dict_pre",
                      "load_state_dict_post"):  # what Optimizer's hook registration methods expect
            setattr(self, f"_optimizer_{hooks}_hooks", OrderedDict())
        #: whether the last :meth:`step` committed (a registered scheduler steps only after one that did)
        self.last_committed = True

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every wrapped optimizer's groups (the same dicts: a learning rate set here is theirs)."""
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def state(self) -> Any:
        if len(self.optimizers) == 1:
            return self.optimizers[0].state
        merged: dict[Any, Any] = {}
        for o in self.optimizers:
            merged.update(o.state)
        return merged

    def step(self, closure: Callable[[], Any] | None = None) -> bool:  # type: ignore[override]
        """Commit the step: True if every member applied it, False if it was dropped on all (a member
        was lost; the script's next batches retry the same samples)."""
        if closure is not None:
            raise TypeError("spotwise commits a step across members: step(closure) (LBFGS) is not supported")
        amp = self._amp_step()
        self.last_committed = bool(self._backend.commit(amp, self._index))
        if amp is not None:
            agree_found_inf(self.scaler, self, self.last_committed and amp.skipped)
        return self.last_committed

    def _amp_step(self) -> AmpStep | None:
        """The GradScaler's part of this step, when one called it (it sets ``found_inf`` just before)."""
        found = self.__dict__.get("found_inf")
        if found is None:
            return None
        if self.scaler is None:
            raise RuntimeError("a torch.amp.GradScaler steps the job's optimizer but was not given to the job: "
                               "pass it with job.optimizer(..., scaler=scaler), so its scale travels to members "
                               "that join later (a member scaling its gradients differently would corrupt the "
                               "all-reduced gradient) and the recorded loss is unscaled")
        return AmpStep(found, self.__dict__.get("grad_scale"))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise RuntimeError("add parameter groups to the wrapped optimizer before job.optimizer(): the job's state "
                           "layout is fixed when the script takes its first batch")

    def zero_grad(self, set_to_none: bool = True) -> None:  # type: ignore[override]
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        if len(self.optimizers) == 1:
            return self.optimizers[0].state_dict()
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, sd: dict[str, Any]) -> None:  # type: ignore[override]
        if len(self.optimizers) == 1:
            self.optimizers[0].load_state_dict(sd)
            return
        for o, s in zip(self.optimizers, sd["optimizers"], strict=True):
            o.load_state_dict(s)


class ElasticData:
    """Batches of the run's data position, exactly once per epoch (module docstring); an iterator
    that ends when the job does.  ``before_first`` runs once, before the first batch is asked for."""

    def __init__(self, backend: Backend, before_first: Callable[[], None] | None = None) -> None:
        self._backend = backend
        self._before_first = before_first

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._before_first is not None:
            check, self._before_first = self._before_first, None
            check()
        return self._backend.next_batch()


class Job:
    """The job as the user's script sees it (module docstring).  Made by :func:`init`."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._data_made = False
        #: the script took its first batch: the job's models and optimizers are fixed
        self._started = False
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[ElasticOptimizer] = []
        self._schedulers: list[Any] = []
        self._state_names: set[str] = set()
        #: :meth:`randint`'s window starts and draws per call, and the batches they come from
        self._windows: tuple[int, int] | None = None
        self._window_data: ElasticData | None = None
        #: the script's job.steps() loop began
        self._looping = False

    # ------------------------------------------------------------------ who and where
    @property
    def launched(self) -> bool:
        """Whether spotwise started this process (else: a plain single process)."""
        return self._backend.launched

    @property
    def joining(self) -> bool:
        """Whether this process does not start the job (``SPOTWISE_JOINING=1`` in its environment too):
        a member that joins a running job, every member of a resumed run, the coordinator's probe.
        Its model and optimizer state are replaced by the job's, so a script's own resume path
        (loading its ``ckpt.pt``) is for the others: ``if job.joining: init_from = "scratch"``.
        A fresh job's first members start it: they take its first generation's rank 0's state, as
        ``DistributedDataParallel`` takes rank 0's."""
        return bool(getattr(self._backend, "joining", False))

    @property
    def rank(self) -> int:
        """This member's index in the current generation (0 on its own): the leader keeps rank 0 while
        it lives, survivors keep their order at a regroup, joiners come after them.  Right from
        :func:`init` on (torchrun's ``RANK`` says the same)."""
        return self._backend.rank

    @property
    def world(self) -> int:
        """Members in the current generation (1 on its own)."""
        return self._backend.world

    @property
    def is_leader(self) -> bool:
        """Whether this process should do the generation's one-per-job work (printing, say)."""
        return self._backend.rank == 0

    @property
    def device(self) -> torch.device:
        """Where this member trains (the spec's ``cluster.device``; the CPU on its own unless CUDA is there)."""
        return self._backend.device

    @property
    def seed(self) -> int:
        """The run's seed (the spec's ``seed`` under spotwise; ``init(seed=...)`` on its own): the data
        order's, and what a script seeds its model's initialisation with, so every member builds the
        same initial model."""
        return int(self._backend.seed)

    @property
    def step(self) -> int:
        """Committed steps (a resumed run counts on from its checkpoint)."""
        return self._backend.step

    @property
    def samples(self) -> int:
        """Committed samples, over all members (the schedule's clock)."""
        return self._backend.samples

    # ------------------------------------------------------------------ wrapping
    def model(self, module: torch.nn.Module, *, find_unused_parameters: bool = False) -> ElasticModel:
        """Wrap the model (already on :attr:`device`): DDP over the job's group, rebuilt at each regroup.
        Only parameters that require a gradient are reduced and stepped.  A job may train several
        models (a GAN's generator and discriminator): wrap each, each is DDP over the same group.
        A module that is not trained (an EMA copy, a teacher) is registered with :meth:`state`."""
        if self._started:
            raise RuntimeError("job.model() after the first batch: wrap every model before the loop, so it is part of "
                               "the job's state from its first step")
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"job.model() takes a torch.nn.Module, got {type(module).__name__}")
        mine = {id(q) for m in self._models for q in m.parameters()}
        if any(module is m for m in self._models) or any(id(q) in mine for q in module.parameters()):
            raise ValueError("job.model() was given a module (or parameters) it already wraps: wrap each model once, "
                             "and models that share no parameters (wrap a container of both otherwise)")
        self._models.append(module)
        index = self._backend.register_model(module, bool(find_unused_parameters))
        return ElasticModel(module, self._backend, index)

    def optimizer(self, *optimizers: torch.optim.Optimizer, scaler: Any = None) -> ElasticOptimizer:
        """Wrap the optimizer(s) of the model's parameters (several: e.g. Muon for the matrices and
        AdamW for the rest); their ``step()`` together is the step's commit.  ``scaler``: the script's
        ``torch.amp.GradScaler`` (fp16): its state travels with the job's, and its skip of a step
        with non-finite gradients is decided in the commit, on every member alike (:class:`AmpStep`).

        Called again, it makes another commit point of the same step: a GAN steps its discriminator,
        then its generator, on the same batch.  The job's step then ends at the ``step()`` that
        completes the set -- every wrapped optimizer stepped at least once since the last -- and is
        atomic as a whole: when a member is lost in a later commit point, the parameters and state
        of the optimizers that already stepped in it (and their registered schedulers) go back to
        where the step began, on every member, and the whole step is retried on the same samples
        (the copy this takes -- one of those optimizers' parameters and state per step -- is made
        only when there are several commit points).  ``step()`` returns False for every commit
        point of a dropped step after the one that failed, without training anything."""
        if self._started:
            raise RuntimeError("job.optimizer() after the first batch: wrap every optimizer before the loop")
        if not optimizers or not all(isinstance(o, torch.optim.Optimizer) and not isinstance(o, ElasticOptimizer)
                                     for o in optimizers):
            raise TypeError("job.optimizer() takes one or more torch.optim.Optimizer objects")
        if any(o is w for e in self._optimizers for w in e.optimizers for o in optimizers):
            raise ValueError("job.optimizer() was given an optimizer it already wraps: pass each optimizer once (the "
                             "optimizers of one commit point together, job.optimizer(opt_a, opt_b))")
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"job.optimizer(scaler=...) takes a torch.amp.GradScaler, got {type(scaler).__name__}")
        if self._optimizers:
            given = self._optimizers[0].scaler
            if (scaler is None) != (given is None) or (scaler is not None and scaler is not given):
                raise RuntimeError("give every job.optimizer() call the same torch.amp.GradScaler (scaler=...), or "
                                   "none: the job has one scale, which every commit point's gradients carry")
        index = self._backend.register_optimizers(list(optimizers))
        if scaler is not None and len(self._optimizers) == 0:
            self._register("grad_scaler", scaler)
        wrapped = ElasticOptimizer(list(optimizers), self._backend, scaler, index)
        self._optimizers.append(wrapped)
        return wrapped

    def scheduler(self, *schedulers: Any) -> None:
        """Register the script's ``torch.optim.lr_scheduler`` objects (built on the optimizer
        :meth:`optimizer` returned, or on the optimizers it wraps), before the first batch: their state
        travels with regroups, replicas and checkpoints (a member that joins later continues the
        schedule where the job is), and their ``step()`` does nothing after a step that was dropped,
        so the schedule counts committed steps (call it after ``optimizer.step()``, once per step).
        A scheduler built on the job's optimizers and not registered is an error at the first batch."""
        from torch.optim.lr_scheduler import LRScheduler

        if not self._optimizers:
            raise RuntimeError("job.scheduler() before job.optimizer(): wrap the optimizer(s) first")
        if self._data_made:
            raise RuntimeError("job.scheduler() after job.data(): register the schedulers before the data, so their "
                               "state is part of the job's from its first step")
        for s in schedulers:
            if not isinstance(s, LRScheduler):
                raise TypeError(f"job.scheduler() takes torch.optim.lr_scheduler objects, got {type(s).__name__}")
            owner = next((e for e in self._optimizers if any(s.optimizer is o for o in (e, *e.optimizers))), None)
            if owner is None:
                raise ValueError(f"the {type(s).__name__} passed to job.scheduler() steps an optimizer the job does "
                                 "not wrap: build it on the object job.optimizer() returned")
            if any(s is t for t in self._schedulers):
                continue
            self._register(f"lr_scheduler/{len(self._schedulers)}", s)
            self._schedulers.append(s)
            self._backend.register_scheduler(s)
            _gate_scheduler(s, owner)

    def _check_schedulers(self) -> None:
        """At the first batch: every LR scheduler PyTorch attached to the job's optimizers is registered."""
        self._started = True
        for o in (o for e in self._optimizers for o in (e, *e.optimizers)):
            if getattr(o.step, "_wrapped_by_lr_sched", False) and not any(s.optimizer is o for s in self._schedulers):
                raise RuntimeError("an LR scheduler (torch.optim.lr_scheduler) was built on the job's optimizer and not "
                                   "registered: call job.scheduler(scheduler) before the first batch, so its state "
                                   "travels to members that join later and it counts committed steps only")

    def data(self, dataset: Any, batch_size: int | None = None, *, collate_fn: Callable[[list[Any]], Any] | None = None,
             epochs: float | None = None, num_workers: int = 0, prefetch: int = 2,
             pin_memory: bool = False) -> ElasticData:
        """The training batches (module docstring): of a map-style dataset, one with ``batch(indices)``,
        or a stream with ``iter_from(position)``.  ``num_workers > 0``: built ahead by that many
        ``DataLoader`` worker processes (``prefetch`` batches each; ``pin_memory`` on CUDA), the same
        batches in the same order.  ``epochs`` bounds a plain process's iteration (under spotwise
        the spec's target does)."""
        if self._data_made:
            raise RuntimeError("job.data() was called twice: iterate the one it returned (it resumes where the "
                               "run is; a second one would hand the same samples out again)")
        self._data_made = True
        self._backend.register_data(dataset, batch_size, collate_fn, epochs,
                                    {"num_workers": num_workers, "prefetch": prefetch, "pin_memory": pin_memory})
        return ElasticData(self._backend, before_first=self._check_schedulers)

    def randint(self, high: int, size: Any, *, generator: torch.Generator | None = None,
                device: Any = None) -> torch.Tensor:
        """``torch.randint(high, size)`` as nanoGPT draws window offsets (:mod:`~spotwise.elastic.windows`):
        with gradients on, the step's ``size`` offsets from the job's data position over ``high``
        window starts -- each start once per epoch, the same on a retry, a joiner and a resume;
        under ``torch.no_grad()`` (an evaluation) and for the one batch drawn ahead of the
        ``job.steps()`` loop, ``torch.randint`` itself.  Under spotwise the
        number of draws is the spec's ``workload.batch_size``."""
        from spotwise.elastic.windows import Windows, draws

        shape, n = draws(size)
        if not torch.is_grad_enabled():
            return torch.randint(int(high), shape, generator=generator, device=device)
        if self._windows is None:
            if self._data_made:
                raise RuntimeError("job.randint() draws the job's training data and the script already iterates "
                                   "job.data(): use one of them")
            self._window_data = self.data(Windows(int(high)), batch_size=n)
            self._windows = (int(high), n)
            if not self._looping:  # the batch drawn ahead, before the job.steps() loop: torch's own draw
                return torch.randint(int(high), shape, generator=generator, device=device)
        elif self._windows != (int(high), n):
            raise ValueError(f"job.randint({high}, {size!r}): every training draw takes the same range and size as the "
                             f"first (job.randint({self._windows[0]}, ({self._windows[1]},))) -- the job's data is "
                             "one sequence of window starts")
        assert self._window_data is not None
        out = next(self._window_data).view(shape)
        return out if device is None else to_device(out, torch.device(device))

    def steps(self, n: int) -> Iterator[int]:
        """``for iter_num in job.steps(n):`` -- the job's committed steps, ``job.step`` at the top of each
        iteration, until ``n`` are committed or the job's target is reached (:mod:`~spotwise.elastic.windows`):
        a dropped step comes again, a joiner starts at the job's step.  Under spotwise the script's
        first batch is drawn before the loop (a member learns the job's step there)."""
        from spotwise.elastic.windows import StepLoop

        return StepLoop(self._backend, n, before_first=self._loop_begins)

    def _loop_begins(self) -> None:
        self._looping = True
        if not self._started:
            self._check_schedulers()

    def state(self, name: str, obj: Any) -> None:
        """Make ``obj`` (``state_dict()`` / ``load_state_dict()``: an EMA model, a teacher, a counter
        object) part of the job's state: it travels with regroups, replicas and checkpoints."""
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise TypeError(f"job.state({name!r}, ...) needs an object with state_dict() and load_state_dict()")
        self._register(str(name), obj)

    def _register(self, name: str, obj: Any) -> None:
        """One name per object of the job's state (the scaler and schedulers take theirs from here too)."""
        if name in self._state_names:
            raise ValueError(f"job.state({name!r}, ...): the name is taken (by an earlier job.state call, the "
                             "GradScaler given to job.optimizer or a job.scheduler): give each object its own name")
        self._state_names.add(name)
        self._backend.register_state(name, obj)

    # ------------------------------------------------------------------ the step
    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` that also counts the loss into the step's record (no host read)."""
        self._backend.backward(loss)

    def no_sync(self) -> Any:
        """Gradients of the micro-batches inside accumulate locally (DDP's ``no_sync``; every wrapped model's)."""
        return self._backend.no_sync(None)

    def log(self, metrics: dict[str, Any] | None = None, **values: Any) -> None:
        """Metrics of the current step (``loss=...``, ``val_loss=...``): into the run's events, status
        and report.  Tensors are read when the step commits; a non-finite or non-numeric value is
        dropped with a warning."""
        merged = dict(metrics or {})
        merged.update(values)
        self._backend.log(merged)


def _gate_scheduler(scheduler: Any, optimizer: ElasticOptimizer) -> None:
    """Make ``scheduler.step()`` do nothing when ``optimizer``'s last step was dropped.  The instance
    gets a subclass of its own class (same name) whose ``step`` checks: nothing is added to its
    ``__dict__``, so its ``state_dict()`` -- which is its ``__dict__`` -- stays what PyTorch writes."""
    base = type(scheduler)
    if getattr(base, "_spotwise_gated", False):
        return

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not optimizer.last_committed:
            return None
        return base.step(self, *args, **kwargs)

    scheduler.__class__ = type(base.__name__, (base,), {"step": step, "_spotwise_gated": True,
                                                        "__module__": base.__module__, "__qualname__": base.__qualname__})


_LOCK = threading.Lock()
_JOB: Job | None = None
#: set by a spotwise member before it runs the script (:mod:`spotwise.elastic.host`)
_HOST: Backend | None = None


def init(seed: int | None = None) -> Job:
    """The job this process belongs to: a spotwise member's (started by ``spotwise run``), else a
    plain single process (``seed``: its data order, default 0).  One per process: a second call
    returns the same job."""
    global _JOB
    with _LOCK:
        if _JOB is None:
            if _HOST is not None:
                _JOB = Job(_HOST)
            else:
                from spotwise.elastic.local import LocalBackend

                _JOB = Job(LocalBackend(0 if seed is None else int(seed)))
        return _JOB


def install_host(host: Backend | None) -> None:
    """The member's backend for the script it is about to run (None: forget it and the job)."""
    global _HOST, _JOB
    with _LOCK:
        _HOST = host
        _JOB = None
