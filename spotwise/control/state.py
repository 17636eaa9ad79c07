"""The model side of a job: its parameters, how a committed step changes them, how they are evaluated.

The coordinator owns one :class:`TrainingState` and nothing else about the model, so the same
control logic drives real training and the simulator:

* :class:`TorchState` -- the workload's PyTorch model as one flat float32 vector (parameters, then
  floating-point buffers); a committed step applies ``g``, the sample-weighted mean of the
  contributions' gradients (the atomic update of ``papers/001_30a454edd897cf47.txt`` Sec. 3.2),
  through the recipe's optimizer (plain ``params -= lr * g`` by default) and adopts the mean of
  their buffers; evaluation runs the model on the workload's test split.
* :class:`spotwise.sim.modelled.ModelledState` -- no model at all: the expected error follows
  the recursion of ``papers/000_3c734f3ffedcac15.txt`` Thm 1 (the simulator's loss model).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch

from spotwise.training.recipe import Recipe
from spotwise.workloads.base import is_ordered
from spotwise.training.state import FlatModel, Updater, extra_state, load_extra_state, num_float_buffer_entries
from spotwise.training.tensor_tree import tree_to_host
from spotwise.workloads.device import DeviceDataset, host_buffer, to_device


class SizeOnly:
    """What the coordinator keeps of a training set: its size (``len``), nothing to read."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def __len__(self) -> int:
        return self.n


class NonFiniteStep(ArithmeticError):
    """A step's loss or gradient is NaN or infinite: the run stops before applying it."""


class TrainingState(ABC):
    """Parameters (``params``, a flat float32 vector a checkpoint stores), update and evaluation."""

    params: np.ndarray
    #: samples in the training split (the epoch sampler's size)
    n_train: int
    #: name of the evaluation metric (``None`` if there is none besides the loss)
    metric_name: str | None
    #: the training set is a stream read in order (:func:`spotwise.workloads.base.is_ordered`): the
    #: epoch sampler uses the identity order instead of a seeded shuffle
    ordered: bool = False

    @property
    @abstractmethod
    def can_evaluate(self) -> bool:
        """Whether :meth:`evaluate` has something to evaluate on."""

    @abstractmethod
    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        """Commit one step: ``grad`` is the sample-weighted mean gradient of ``contributions`` results."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """``{"loss": ..., metric_name: ...}`` at the current parameters."""

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint holds besides :attr:`params` (optimizer, integer buffers); ``{}``: nothing."""
        return {}

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        """Put back what :meth:`extra_state` gave."""

    def model_state_dict(self) -> "dict[str, torch.Tensor] | None":
        """The model's ``state_dict`` (parameters and buffers) for export; ``None``: no model."""
        return None


def _flat_on_cpu(model: torch.nn.Module) -> tuple[FlatModel, np.ndarray]:
    """``model`` as a :class:`FlatModel` on the CPU and its flat vector as a numpy array sharing its memory."""
    n = sum(p.numel() for p in model.parameters()) + num_float_buffer_entries(model)
    vec = torch.zeros(n, dtype=torch.float32)
    return FlatModel(model, "cpu", flat=vec), vec.numpy()


def _copy_params(dst: np.ndarray, value: np.ndarray) -> None:
    v = np.asarray(value, dtype=np.float32).reshape(-1)
    if v.shape != dst.shape:
        raise ValueError(f"parameter vector of {v.size} entries for a model of {dst.size}")
    np.copyto(dst, v)


class TorchState(TrainingState):
    """A PyTorch workload (:mod:`spotwise.workloads`) trained for real.

    The model's parameters and floating-point buffers are views into one flat float32 vector
    (:class:`~spotwise.training.state.FlatModel`), which :attr:`params` exposes as a numpy array
    sharing its memory: what the parameter-server plane ships to its workers and what checkpoints
    store.  A committed step's combined result holds the mean gradient (``P`` entries) and the
    sample-weighted mean of the workers' updated buffers (``B`` entries); :meth:`apply` runs the
    recipe's real optimizer on the gradient (issue 28: the coordinator applies the aggregated
    gradient through ``torch.optim``) and adopts the buffers.  Without an optimizer in the recipe a
    model without buffers keeps the papers' update ``params -= lr * g`` bit-for-bit.
    """

    def __init__(self, workload: Any, recipe: Recipe | None = None, base_lr: float = 0.05, device: str = "cpu",
                 mirrored: bool | None = None) -> None:
        # the coordinator needs the training set's size only (workers read the data): the dataset
        # object is dropped here, so an eager one the workload built is freed (issue 28 item 4)
        n_train = len(workload.train)
        self.ordered = is_ordered(workload)
        if dataclasses.is_dataclass(workload) and not isinstance(workload.train, SizeOnly):
            workload = dataclasses.replace(workload, train=SizeOnly(n_train))
        self.workload = workload
        self.recipe = recipe or Recipe()
        #: where the optimizer steps (issue 40 item 4): the CPU, or the coordinator's GPU when the parameter-server
        #: plane's coordinator has one (:func:`spotwise.capacity.placement.coordinator_device`).  On a GPU the
        #: parameters, buffers and optimizer state live there and :attr:`params` is a host mirror (pinned memory)
        #: refreshed after every change: what the workers are sent and checkpoints store.  (``mirrored`` -- default:
        #: on a GPU -- takes the mirrored path on any device: the tests run it on the CPU against the plain one.)
        self.device = torch.device(device)
        self._host: torch.Tensor | None = None
        if not (self.device.type != "cpu" if mirrored is None else mirrored):
            self.fm, self._np = _flat_on_cpu(workload.build_model())
        else:
            self.fm = FlatModel(workload.build_model(), self.device)
            self._host = host_buffer(self.fm.flat.numel(), self.device)
            self._host.copy_(self.fm.flat)
            self._np = self._host.numpy()
            self._eval_set = DeviceDataset(workload.test, self.device) if workload.test is not None else None
        self.model = self.fm.model
        self.updater = Updater(self.fm, self.recipe, base_lr)
        self.n_train = n_train
        self.metric_name = workload.metric_name

    def _mirror(self) -> None:
        """The host mirror after a change on the device (one device-to-host copy)."""
        if self._host is not None:
            self._host.copy_(self.fm.flat)

    @property
    def params(self) -> np.ndarray:  # type: ignore[override]
        return self._np

    @params.setter
    def params(self, value: np.ndarray) -> None:
        _copy_params(self._np, value)
        if self._host is not None:
            self.fm.flat.copy_(self._host)

    @property
    def can_evaluate(self) -> bool:
        return self.workload.test is not None

    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        fm = self.fm
        on_cpu = self._host is None
        if on_cpu and self.updater.plain and fm.B == 0:
            self.params -= np.float32(lr) * grad  # the papers' update, bit-for-bit
            return
        g = to_device(torch.from_numpy(np.ascontiguousarray(grad, dtype=np.float32)), self.device)
        if self.updater.plain:
            if on_cpu:
                self._np[: fm.P] -= np.float32(lr) * np.asarray(grad[: fm.P], dtype=np.float32)
            else:
                fm.param_vec.sub_(g[: fm.P] * np.float32(lr))
        elif not self.updater.apply(g[: fm.P], lr):
            raise NonFiniteStep("the aggregated gradient holds NaN or infinite values")
        if fm.B:
            fm.buffer_vec.copy_(g[fm.P:])
            fm.advance_int_buffers(self.recipe.accumulate)
        self._mirror()

    def evaluate(self) -> dict[str, float]:
        if self.workload.test is None:
            return {}
        self.model.eval()
        try:
            with torch.no_grad():
                res = self.workload.evaluate(self.model, self.workload.test if self._host is None else self._eval_set)
        finally:
            self.model.train()
        return {k: float(v) for k, v in res.items()}

    def extra_state(self) -> dict[str, Any]:
        return tree_to_host(extra_state(self.fm, self.updater))  # optimizer state on the host (checkpoints pack CPU tensors)

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        load_extra_state(self.fm, self.updater, extra)  # torch.optim moves its state to the parameters' device

    def model_state_dict(self) -> dict[str, torch.Tensor] | None:
        return tree_to_host(self.fm.state_dict())


class ScriptState(TrainingState):
    """What the coordinator keeps of a training script's state (issue 41; :mod:`spotwise.elastic.describe`):
    the parameters and float buffers of the last replica a member offered, as one flat vector, and its
    extra state (the script's optimizers, integer buffers, registered objects) as it came -- kept
    whole for checkpoints and the next generation, never interpreted here.  Nothing is trained or
    evaluated on the coordinator: the script evaluates in its own loop and logs what it finds."""

    metric_name = None

    def __init__(self, workload: Any) -> None:
        self.n_train = len(workload.train)
        self.ordered = is_ordered(workload)
        self.fm, self._np = _flat_on_cpu(workload.build_model())
        self._extra: dict[str, Any] = {"int_buffers": self.fm.int_buffers()}

    @property
    def params(self) -> np.ndarray:  # type: ignore[override]
        return self._np

    @params.setter
    def params(self, value: np.ndarray) -> None:
        _copy_params(self._np, value)

    @property
    def can_evaluate(self) -> bool:
        return False

    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        raise RuntimeError("a script job's steps are applied by its members, not the coordinator")

    def evaluate(self) -> dict[str, float]:
        return {}

    def extra_state(self) -> dict[str, Any]:
        return self._extra

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        if extra:
            self._extra = extra
            self.fm.load_int_buffers(extra.get("int_buffers") or {})

    def model_state_dict(self) -> "dict[str, torch.Tensor] | None":
        return self.fm.state_dict()


def training_state(spec: Any, recipe: Recipe, base_lr: float) -> TrainingState:
    """The coordinator's :class:`TrainingState` of a job's workload: a script's (:class:`ScriptState`)
    or a PyTorch workload trained for real (:class:`TorchState`), whose optimizer steps on the coordinator's
    GPU when the job is a parameter server's on GPUs and this process has one
    (:func:`~spotwise.capacity.placement.coordinator_device`, issue 40 item 4)."""
    from spotwise.capacity.placement import coordinator_device
    from spotwise.elastic.describe import workload_for

    wl = workload_for(spec.workload, spec.seed)
    if wl.info.get("script"):
        return ScriptState(wl)
    return TorchState(wl, recipe, base_lr, coordinator_device(spec))
