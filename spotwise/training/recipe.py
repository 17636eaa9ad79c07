"""The training recipe of a job: optimizer, learning-rate schedule, clipping, accumulation, precision.

Spec fields (all under ``workload:``; issue 28 item 1):

* ``optimizer: {name: AdamW, lr: 1e-3, weight_decay: 0.1, betas: [0.9, 0.95], ...}`` -- any
  ``torch.optim`` class by name, or ``module:Class`` for your own (imported only where the model is
  trained, never when a spec loads).  The other keys are the class's constructor arguments; they
  are checked at load against its signature ("did you mean") and by building the optimizer once
  on a dummy parameter and **stepping it once** there (:meth:`OptimizerSpec.first_step`: a
  throwaway parameter, the real model is untouched), so arguments the class rejects
  (``betas: [2, 0]``) and optimizers that cannot step what spotwise gives them (``SparseAdam``:
  spotwise's gradients are dense; ``differentiable: true``; ``capturable: true`` on a CPU) exit 2
  then, not after the cluster started.  The step runs on the device the optimizer will step on:
  the CPU for the parameter-server plane (its coordinator applies every update) and for
  ``device: cpu``, else the device a ``run`` places its workers on (:func:`spotwise.api.check_spec`).
  A ``module:Class`` must be a ``torch.optim.Optimizer`` subclass (a function is refused); it is
  imported, built and stepped when ``spotwise run`` loads.  Whatever fails at the first real step
  anyway (on any plane, or in the planner's pilot), and anything a ``module:Class`` raises at any
  step, is the user's: :class:`UserOptimizerError`, exit 2 naming ``workload.optimizer`` with the
  user's traceback.  ``lr`` is the *base* learning rate (``workload.lr`` when absent); the
  runtime sets each step's rate itself.  Without ``optimizer`` the update is the papers' plain SGD
  ``theta -= lr * g`` (bit-for-bit as before).
* ``schedule: {warmup: 2000, decay: cosine, min_lr: 1e-5, total: 500000}`` -- measured in committed
  **samples**, not steps, so it does not warp when workers come and go (a step of 3 workers moves
  it 3 batches, a step of 1 worker one batch).  ``decay``: ``constant`` | ``linear`` | ``cosine`` |
  ``step`` (``step_every`` samples, times ``gamma``).  ``total`` defaults to the job's planned
  samples (``target.iterations`` x workers x batch).  The schedule multiplies the base rate, so it
  composes with the lr-scaling policy and with a policy's ``SetLearningRate`` (which change the
  base).
* ``grad_clip_norm: 1.0`` -- ``torch.nn.utils.clip_grad_norm_`` of the step's aggregated gradient.
* ``accumulate: 4`` -- each worker's mini-batch is computed as 4 micro-batches (same samples, same
  mean gradient, a quarter of the activation memory).
* ``precision: fp32 | bf16 | fp16`` -- ``torch.autocast`` around the forward pass on the workers
  (bf16 on CPU and CUDA; fp16 needs CUDA and uses ``torch.amp.GradScaler``); parameters and
  optimizer state stay float32.
"""

from __future__ import annotations

import difflib
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from spotwise.errors import InputError
from spotwise.training.optim_args import check_optimizer_kwargs

Precision = Literal["fp32", "bf16", "fp16"]
Decay = Literal["constant", "linear", "cosine", "step"]
DECAYS: tuple[str, ...] = ("constant", "linear", "cosine", "step")

#: the default recipes of the built-in realistic workloads (used when the spec names no optimizer):
#: the usual ones for these models (ResNet on CIFAR: SGD momentum + weight decay + cosine; a GPT:
#: AdamW + warmup + cosine + clipping)
BUILTIN_RECIPES: dict[str, dict[str, Any]] = {
    "resnet18-cifar": {"optimizer": {"name": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4, "nesterov": True},
                       "schedule": {"decay": "cosine", "warmup_fraction": 0.02}},
    "gpt-bytes": {"optimizer": {"name": "AdamW", "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1},
                  "schedule": {"decay": "cosine", "warmup_fraction": 0.05, "min_lr_fraction": 0.1},
                  "grad_clip_norm": 1.0},
}


def _torch_optim_names() -> list[str]:
    import torch

    return sorted(n for n, c in vars(torch.optim).items()
                  if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer)


def optimizer_class(name: str, import_user: bool = True) -> Any:
    """The optimizer class ``name`` names: a ``torch.optim`` class, or ``module:Class`` (imported
    only with ``import_user``; else ``None`` for it).  InputError with the valid names otherwise."""
    if ":" in name:
        mod, _, cls = name.partition(":")
        if not mod or not cls or not all(p.isidentifier() for p in mod.split(".")) or not cls.isidentifier():
            raise InputError(f"malformed optimizer reference {name!r}", "write it as 'package.module:Class'",
                             "optimizer.name")
        from spotwise.usercode import refuse_unsafe_reference

        refuse_unsafe_reference(name, "optimizer", "optimizer.name")
        if not import_user:
            return None
        import importlib

        try:
            obj = getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError) as e:
            raise InputError(f"cannot import optimizer {name!r}: {e}",
                             "make the module importable on every worker (install it or add its folder to PYTHONPATH)",
                             "optimizer.name") from None
        except BaseException as e:  # the user's module failed (sys.exit too): exit 2 (issue 30 item 9)
            from spotwise.user_failures import exit_fix, failure_text, is_user_failure

            if not is_user_failure(e):
                raise
            raise InputError(f"optimizer {name} {failure_text(e, f'while importing {mod}')}",
                             exit_fix(e, "an optimizer module") + "fix the module", "optimizer.name") from None
        import torch

        if not (isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)):
            kind = "a class that is not a torch.optim.Optimizer subclass" if isinstance(obj, type) else \
                f"not a class but an object of type {type(obj).__name__!r}"
            raise InputError(f"optimizer {name!r} is {kind}",
                             f"name a class that subclasses torch.optim.Optimizer (class {cls}(torch.optim.Optimizer): "
                             "...), or a torch.optim name such as AdamW", "optimizer.name")
        return obj
    import torch

    names = _torch_optim_names()
    if name not in names:
        close = [n for n in names if n.lower() == name.lower()] or difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown optimizer {name!r}", f"{hint}valid torch.optim names are {', '.join(names)}, "
                         "or 'package.module:Class' for your own", "optimizer.name")
    if name == "LBFGS":
        raise InputError("LBFGS needs a closure that re-evaluates the loss, which a distributed step cannot give",
                         "use a first-order optimizer (SGD, Adam, AdamW, ...)", "optimizer.name")
    return getattr(torch.optim, name)


class UserOptimizerError(InputError):
    """The optimizer failed where it is built or stepped: the user's to fix (exit 2 naming
    ``workload.optimizer``).  ``details`` holds the traceback of a ``module:Class`` optimizer's own
    frames (the CLI prints it above the message, as for a user workload); survives pickling (Ray
    ships it from a collective member to the driver)."""

    def __init__(self, what: str, fix: str = "", where: str | None = "workload.optimizer", details: str = "") -> None:
        super().__init__(what, fix, where)
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (UserOptimizerError, (self.what, self.fix, self.where, self.details))


#: what to do about an optimizer that fails (its first step, or a user class at any step)
OPTIMIZER_FIX = ("fix workload.optimizer: its arguments (e.g. capturable/fused need a GPU, differentiable is not "
                 "supported, SparseAdam cannot step spotwise's dense gradients) or its class")


def optimizer_failure(name: str, exc: BaseException, during: str) -> UserOptimizerError:
    """The :class:`UserOptimizerError` for ``exc`` raised by optimizer ``name`` ``during`` (e.g.
    "in its first step"): a ``module:Class``'s traceback is shown (its frames only), a torch class's is not."""
    from spotwise.user_failures import exit_fix, failure_text

    user = ":" in name
    details = ""
    if user:
        from spotwise.usercode import user_traceback

        details = user_traceback(exc)
    fix = exit_fix(exc, "an optimizer") + (
        "this is an error in the optimizer's code, not in spotwise: fix it (its traceback is printed above)" if user
        else OPTIMIZER_FIX)
    return UserOptimizerError(f"optimizer {name} {failure_text(exc, during)}", fix, "workload.optimizer", details)


@dataclass(frozen=True)
class OptimizerSpec:
    """``workload.optimizer`` parsed: the class name and its constructor arguments (``lr`` apart)."""

    name: str
    lr: float | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any, check: bool = True) -> "OptimizerSpec":
        where = "optimizer"
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict):
            raise InputError(f"expected a mapping, got {data!r}", "write e.g. {name: AdamW, lr: 0.001, weight_decay: 0.1}",
                             where)
        d = dict(data)
        name = d.pop("name", None)
        if not isinstance(name, str) or not name:
            raise InputError("needs a name", "write e.g. {name: AdamW, lr: 0.001} (any torch.optim class)", where)
        lr = d.pop("lr", None)
        if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < float(lr) < math.inf):
            raise InputError(f"lr must be a positive number, got {lr!r}", "use e.g. 0.001", f"{where}.lr")
        kwargs = {str(k): (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        spec = cls(name, None if lr is None else float(lr), kwargs)
        if check:
            spec.check()
        return spec

    def check(self) -> None:
        """Name and arguments against the class (torch.optim only: a user class is not imported here)."""
        where = "optimizer"
        klass = optimizer_class(self.name, import_user=False)
        if klass is None:
            return
        import torch

        sig = inspect.signature(klass.__init__)
        accepted = [p for p in sig.parameters if p not in ("self", "params")]
        takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        for key in self.kwargs:
            if key not in accepted and not takes_any:
                close = difflib.get_close_matches(key, accepted, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise InputError(f"{self.name} takes no argument {key!r}",
                                 f"{hint}{self.name} takes {', '.join(a for a in accepted if a != 'lr')}", f"{where}.{key}")
        check_optimizer_kwargs(klass, self.name, self.kwargs, where)  # foreach: "yes", betas: [0.9] (issue 54 item 9)
        try:
            klass([torch.nn.Parameter(torch.zeros(2, 2))], lr=self.lr or 1e-3, **self.kwargs)  # a matrix: Muon takes only those
        except Exception as e:  # noqa: BLE001 -- whatever torch.optim raises for its arguments (an IndexError too)
            raise InputError(f"{self.name} rejects these arguments: {e.__class__.__name__}: {str(e)[:300]}",
                             "fix the value(s) under workload.optimizer", where) from None

    def build(self, params: Any, lr: float, model: Any = None) -> Any:
        """The optimizer over ``params`` at base rate ``lr`` (imports a ``module:Class`` here).

        :class:`UserOptimizerError` (exit 2) when the class refuses its arguments, or when a
        ``module:Class`` raises anything while it is built (its traceback kept)."""
        from spotwise.user_failures import is_user_failure

        try:
            klass = optimizer_class(self.name)
        except InputError as e:  # named from the spec's top (this runs outside the spec's own validation)
            if e.where and e.where.startswith("optimizer"):
                e.where = f"workload.{e.where}"
                e.args = (e.message,)
            raise
        try:
            return klass(params, lr=float(lr), **self.kwargs)
        except InputError:
            raise
        except (TypeError, ValueError, RuntimeError) as e:
            if ":" in self.name:
                raise optimizer_failure(self.name, e, "when built") from None
            fix = "fix workload.optimizer"
            if "2D" in str(e) or "2d" in str(e):  # Muon and its like: matrices only
                fix = ("give it the matrices only and another optimizer the rest: optimizer: [{name: "
                       f"{self.name}, params: matrices}}, {{name: AdamW, params: rest}}]")
            raise UserOptimizerError(f"optimizer {self.name} rejects its arguments: {e}", fix) from None
        except BaseException as e:  # a user class's constructor (sys.exit too) is the user's to fix
            if ":" not in self.name or not is_user_failure(e):
                raise
            raise optimizer_failure(self.name, e, "when built") from None

    def first_step(self, device: Any = "cpu") -> None:
        """Build the optimizer over a throwaway 2 x 2 parameter on ``device`` and step it once with a
        dense gradient of ones, as :class:`~spotwise.training.state.Updater` steps the real one
        (``p.grad`` set, ``step()`` outside ``no_grad``); the real model is never touched.

        :class:`UserOptimizerError` (exit 2 naming ``workload.optimizer``) for whatever it raises:
        ``SparseAdam`` (spotwise's gradients are dense), ``differentiable: true``, ``capturable:
        true`` on a CPU, a user ``step`` that raises (a ``module:Class`` is imported here).
        """
        import torch

        from spotwise.user_failures import is_user_failure

        p = torch.nn.Parameter(torch.zeros(2, 2, device=device))
        opt = self.build([p], self.lr or 1e-3)
        p.grad = torch.ones_like(p)
        try:
            opt.step()
        except BaseException as e:
            if not is_user_failure(e):
                raise
            raise optimizer_failure(self.name, e, f"in its first step (checked on a dummy parameter on {device})") from None

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.lr is not None:
            out["lr"] = self.lr
        out.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in self.kwargs.items()})
        return out


@dataclass
class ScheduleSpec:
    """``workload.schedule``: the learning-rate factor as a function of committed samples.

    ``warmup`` samples of linear warm-up from 0 (or ``warmup_fraction`` of ``total``), then the
    ``decay`` shape from the base rate down to ``min_lr`` (or ``min_lr_fraction`` of the base) at
    ``total`` samples (default: the job's planned samples); ``step`` decay multiplies by ``gamma``
    every ``step_every`` samples.  Past ``total`` the rate stays at its final value.
    """

    decay: Decay = "constant"
    warmup: int = 0
    warmup_fraction: float | None = None
    total: int | None = None
    min_lr: float | None = None
    min_lr_fraction: float | None = None
    step_every: int | None = None
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise InputError(f"must be >= 0 samples, got {self.warmup}", "use e.g. 2000 (samples)", "warmup")
        if self.warmup_fraction is not None and not 0 <= self.warmup_fraction < 1:
            raise InputError(f"must be in [0, 1), got {self.warmup_fraction}", "use e.g. 0.05", "warmup_fraction")
        if self.warmup and self.warmup_fraction is not None:
            raise InputError("warmup and warmup_fraction are both set", "give one of them", "warmup")
        if self.total is not None and self.total < 1:
            raise InputError(f"must be >= 1 sample, got {self.total}", "the samples the schedule spans, e.g. 500000", "total")
        if self.min_lr is not None and self.min_lr < 0:
            raise InputError(f"must be >= 0, got {self.min_lr}", "use e.g. 1e-5", "min_lr")
        if self.min_lr_fraction is not None and not 0 <= self.min_lr_fraction <= 1:
            raise InputError(f"must be in [0, 1], got {self.min_lr_fraction}", "use e.g. 0.1", "min_lr_fraction")
        if self.min_lr is not None and self.min_lr_fraction is not None:
            raise InputError("min_lr and min_lr_fraction are both set", "give one of them", "min_lr")
        if self.decay == "step":
            if self.step_every is None or self.step_every < 1:
                raise InputError("step decay needs step_every (samples between two decays)", "add e.g. step_every: 100000",
                                 "step_every")
            if not 0 < self.gamma <= 1:
                raise InputError(f"gamma must be in (0, 1], got {self.gamma}", "use e.g. 0.1", "gamma")
        elif self.step_every is not None:
            raise InputError(f"step_every applies only to decay: step (decay is {self.decay})", "remove it or use decay: step",
                             "step_every")

    def resolved(self, planned_samples: int | None) -> "LrSchedule":
        """The schedule with its ``total`` fixed (``planned_samples`` when the spec gives none)."""
        total = self.total if self.total is not None else planned_samples
        if total is None and (self.decay in ("linear", "cosine") or self.warmup_fraction is not None):
            raise InputError(f"a {self.decay} schedule needs its length in samples, and the job has neither target.samples "
                             "nor target.iterations", "add target.samples (the job's length in samples), "
                             "workload.schedule.total (samples), or target.iterations", "workload.schedule.total")
        warmup = self.warmup if self.warmup_fraction is None else int(round(self.warmup_fraction * float(total or 0)))
        return LrSchedule(self.decay, warmup, total, self.min_lr, self.min_lr_fraction, self.step_every, self.gamma)


@dataclass(frozen=True)
class LrSchedule:
    """A resolved schedule: :meth:`lr` is a pure function of (base rate, committed samples)."""

    decay: str = "constant"
    warmup: int = 0
    total: int | None = None
    min_lr: float | None = None
    min_lr_fraction: float | None = None
    step_every: int | None = None
    gamma: float = 0.1

    def lr(self, base: float, samples: int) -> float:
        """The rate after ``samples`` committed samples, for base rate ``base``."""
        s = max(0, int(samples))
        if self.warmup and s < self.warmup:
            return base * (s + 1) / (self.warmup + 1)
        floor = self.min_lr if self.min_lr is not None else base * (self.min_lr_fraction or 0.0)
        floor = min(floor, base)
        if self.decay == "constant":
            return base
        if self.decay == "step":
            return max(floor, base * self.gamma ** ((s - self.warmup) // int(self.step_every or 1)))
        span = max(1, int(self.total or 1) - self.warmup)
        frac = min(1.0, (s - self.warmup) / span)
        shape = 1.0 - frac if self.decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))
        return floor + (base - floor) * shape


@dataclass
class LoaderSpec:
    """``workload.loader``: how a worker turns sample indices into batches.

    ``num_workers`` > 0 batches through ``torch.utils.data.DataLoader`` worker processes with
    ``prefetch`` batches in flight each (the runtime's own sampler is the batch sampler, so the
    samples and their order are unchanged); 0 builds each batch in the training thread.  Used by the
    collective plane's members, which know their blocks ahead (:mod:`spotwise.workloads.loading`);
    a parameter-server worker learns its block only when a step starts and always builds it in its
    training thread (:mod:`spotwise.planes.ps.worker` says why).
    """

    num_workers: int = 0
    prefetch: int = 2
    pin_memory: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.num_workers <= 256:
            raise InputError(f"must be in 0..256, got {self.num_workers}", "use e.g. 2 (0: no loader processes)",
                             "num_workers")
        if not 1 <= self.prefetch <= 64:
            raise InputError(f"must be in 1..64, got {self.prefetch}", "use e.g. 2", "prefetch")


@dataclass(frozen=True)
class Recipe:
    """Everything a step does besides computing the gradient (module docstring)."""

    optimizer: Any = None  # an OptimizerSpec, or an OptimizerSet (spotwise.training.optimizers): several
    schedule: LrSchedule | None = None
    grad_clip_norm: float | None = None
    accumulate: int = 1
    precision: str = "fp32"

    @property
    def plain_sgd(self) -> bool:
        """The papers' update ``theta -= lr * g`` with nothing else (the default: bit-for-bit the old path)."""
        return self.optimizer is None and self.grad_clip_norm is None and self.precision == "fp32"

    def lr_at(self, base: float, samples: int) -> float:
        return base if self.schedule is None else self.schedule.lr(base, samples)


def recipe_of(workload: Any, planned_samples: int | None = None) -> Recipe:
    """The :class:`Recipe` of a :class:`~spotwise.config.WorkloadSpec` (its schedule resolved for
    ``planned_samples`` when it gives no ``total``)."""
    opt = workload.optimizer_spec
    sched = workload.schedule.resolved(planned_samples) if workload.schedule is not None else None
    return Recipe(opt, sched, workload.grad_clip_norm, int(workload.accumulate), str(workload.precision))


def worker_recipe(workload: Any) -> Recipe:
    """What a worker needs of the recipe to compute a gradient: micro-batches and precision."""
    return Recipe(None, None, None, int(workload.accumulate), str(workload.precision))


__all__ = ["BUILTIN_RECIPES", "DECAYS", "LoaderSpec", "LrSchedule", "OPTIMIZER_FIX", "OptimizerSpec", "Recipe",
           "ScheduleSpec", "UserOptimizerError", "optimizer_class", "optimizer_failure", "recipe_of", "worker_recipe"]
