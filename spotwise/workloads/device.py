"""Where a worker's tensors live (issue 20 item 4): one device per worker, one place that moves tensors.

A worker (a parameter-server :class:`~spotwise.planes.ps.worker.GradientWorker` or a collective
:class:`~spotwise.planes.collective.member.CollectiveMember`) resolves its device once, when it
starts (:func:`resolve_device`), and from then on keeps its model, its mini-batches and its flat
parameter and gradient buffers there.  Every tensor that enters the worker's training path goes
through :func:`to_device` (batches through :class:`DeviceDataset`), and a gradient leaves it for
the wire through :func:`to_host` (one copy to CPU numpy per step).  There is no ``if cuda:``
anywhere else: the CPU is just the device these functions are handed when there is no GPU, and a
GPU runs exactly the same code.

Which device a worker is *asked* for is the driver's decision
(:func:`spotwise.capacity.placement.placement_for`: the spec's ``cluster.device``, the catalog's
GPUs for the instance type and the Ray cluster's GPU resources); this module only resolves it on
the worker's own node.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spotwise.errors import InputError

#: the message (what, fix) of a worker asked for CUDA on a node without it
NO_CUDA = ("cluster.device is cuda but this node has no CUDA device (torch.cuda.is_available() is False)",
           "use device: auto or cpu, or run on a GPU node")


def no_cuda_error(what: str = NO_CUDA[0]) -> InputError:
    """The InputError (exit 2) of ``device: cuda`` where there is no CUDA device (the message names the field)."""
    return InputError(what, NO_CUDA[1])


def resolve_device(requested: str | torch.device = "auto") -> torch.device:
    """The device a worker trains on: ``auto`` -> ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``;
    ``cpu``; ``cuda`` (or ``cuda:N``) -> that CUDA device, :class:`InputError` when this node has none."""
    name = str(requested)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise no_cuda_error()
        dev = torch.device(name)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise InputError(f"cluster.device asks for {name} but this node has {torch.cuda.device_count()} CUDA devices",
                             "use device: cuda (the worker's own GPU) or auto")
        torch.cuda.set_device(index)  # NCCL and the default stream of this process use it
        return torch.device("cuda", index)
    raise InputError(f"unknown device {name!r}", "valid values are auto, cpu and cuda", "cluster.device")


def cuda_available() -> bool:
    """Whether this process sees a CUDA device (the one place outside placement that asks)."""
    return bool(torch.cuda.is_available())


def to_device(x: Any, device: torch.device) -> Any:
    """``x`` on ``device``: a tensor or a module (``.to``), or a tuple/list of them (element-wise).

    The one place the training path moves tensors.  A tensor already there is returned as it is
    (no copy: on the CPU this costs nothing).  Anything else (an int, ``None``) is returned unchanged.
    """
    if isinstance(x, (torch.Tensor, torch.nn.Module)):
        return x.to(device)
    if isinstance(x, tuple):
        return tuple(to_device(v, device) for v in x)
    if isinstance(x, list):
        return [to_device(v, device) for v in x]
    return x


def to_host(t: torch.Tensor) -> np.ndarray:
    """A tensor as a CPU numpy array (one device-to-host copy; none for a CPU tensor)."""
    return t.detach().cpu().numpy()


def host_buffer(n: int, device: torch.device) -> torch.Tensor:
    """A float32 host vector of ``n`` entries that a copy from ``device`` fills fast: pinned memory for a
    CUDA device, plain memory otherwise."""
    return torch.empty(int(n), dtype=torch.float32, pin_memory=torch.device(device).type == "cuda")


def collective_backend(device: torch.device) -> str:
    """The torch.distributed backend for collectives on tensors of ``device``: ``nccl`` for CUDA, ``gloo`` for the CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def local_rank_device(device: torch.device, local_rank: int) -> torch.device:
    """A torchrun rank's device: ``cuda:LOCAL_RANK`` (made the current one) where ``device`` is a GPU, else ``device``."""
    if torch.device(device).type != "cuda":
        return torch.device(device)
    out = torch.device("cuda", int(local_rank))
    torch.cuda.set_device(out)
    return out


def device_index(device: torch.device) -> int:
    """LOCAL_RANK for a member on ``device``: its CUDA index (the current device if none), else 0."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    return int(device.index) if device.index is not None else int(torch.cuda.current_device())


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (``cpu`` for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


class DeviceDataset:
    """An :class:`~spotwise.workloads.base.IndexedDataset` whose batches come out on ``device``.

    Wraps the workload's dataset (which stays in host memory: the data is sampled by index on the
    CPU, then each batch is copied once), so the workload's own ``loss`` and ``evaluate`` --
    built-ins and ``module:function`` user workloads alike -- see tensors on the model's device.
    """

    def __init__(self, inner: Any, device: torch.device) -> None:
        self.inner = inner
        self.device = device

    def __len__(self) -> int:
        return len(self.inner)

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, ...]:
        return to_device(self.inner.batch(indices), self.device)

    def __getattr__(self, name: str) -> Any:  # anything else a workload reads off its dataset
        if name == "inner":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """``DistributedDataParallel``'s ``device_ids`` for a model on ``device``: its GPU's index, or None on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return [device.index if device.index is not None else torch.cuda.current_device()]


def rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU generator's state and, for a model on a GPU, that GPU's (what :func:`set_rng_state` puts back)."""
    device = torch.device(device)
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    cpu, gpu = state
    torch.set_rng_state(cpu)
    if gpu is not None:
        torch.cuda.set_rng_state(gpu, torch.device(device))


class HostCopier:
    """Copies of a device's tensors in host memory, taken off the training thread's critical path
    (issue 40 item 3: replica offers and checkpoints).

    :meth:`copy` returns the host tensors and a ``wait()`` that returns once they hold the values the
    tensors had when :meth:`copy` was called.  On a CUDA device the tensors are first copied on the
    device (on the training stream: microseconds, so the next step may change them at once), then
    to pinned host buffers on a side stream that runs while training goes on; ``wait()`` is that
    stream's event.  On the CPU the copy is made at once (a memcpy between two steps, into fresh
    memory the caller drops once it is serialised) and ``wait()`` has nothing to wait for.  On a GPU
    the device and pinned host buffers (slow to allocate) are kept and reused by the next copy of
    tensors of the same shapes: a caller waits for one copy's use to end before the next.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self._dev: list[torch.Tensor] = []
        self._host: list[torch.Tensor] = []
        self._stream: Any = None

    def _buffers(self, tensors: list[torch.Tensor]) -> None:
        same = len(self._host) == len(tensors) and all(
            h.shape == t.shape and h.dtype == t.dtype for h, t in zip(self._host, tensors))
        if same:
            return
        self._dev = [torch.empty_like(t) for t in tensors]
        self._host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda) for t in tensors]

    def copy(self, tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], Any]:
        """Host copies of ``tensors`` (class docstring); CPU tensors among CUDA ones are copied at once."""
        tensors = [t.detach() for t in tensors]
        if self.device.type != "cuda":
            return [t.clone() for t in tensors], lambda: None
        self._buffers(tensors)
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        for d, t in zip(self._dev, tensors):
            d.copy_(t, non_blocking=True)  # on the training stream, in device memory
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            for h, d in zip(self._host, self._dev):
                h.copy_(d, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        return list(self._host), done.synchronize


class GpuBusy:
    """How busy a GPU has been (issue 40 item 5): NVML's utilization rate -- the share of its last sample
    period (1/6 s to 1 s, by GPU) in which one or more kernels ran --, read with ``torch.cuda.utilization``
    (one NVML query, no synchronisation with the device).  A member samples it once per step, so the mean
    over a run's steps is the share of training time the GPU computed.  :meth:`sample` is ``None`` on the
    CPU, and where NVML cannot be read (``pynvml`` not installed, no driver): tried once, then never again."""

    def __init__(self, device: torch.device | str, read: Any = None) -> None:
        self.device = torch.device(device)
        self._read = read if read is not None else (lambda: torch.cuda.utilization(self.device))
        self._ok = read is not None or self.device.type == "cuda"

    def sample(self) -> float | None:
        if not self._ok:
            return None
        try:
            v = float(self._read())
        except Exception:  # NVML missing or failing: the share is not measured, training goes on
            self._ok = False
            return None
        return min(1.0, max(0.0, v / 100.0))


def unscale_grads(optimizers: list[torch.optim.Optimizer], grad_scale: torch.Tensor) -> None:
    """Divide the optimizers' gradients by ``grad_scale`` as ``GradScaler.unscale_`` does (the same
    float32 reciprocal, one ``_foreach_mul_`` per device and dtype), on the device."""
    inv = grad_scale.double().reciprocal().float()
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for o in optimizers:
        for g in o.param_groups:
            for q in g["params"]:
                if q.grad is not None and not q.grad.is_sparse:
                    groups.setdefault((q.grad.device, q.grad.dtype), []).append(q.grad)
    for (device, _), grads in groups.items():
        torch._foreach_mul_(grads, inv.to(device))
