"""The worker: one volatile instance's training process (a Ray actor in the runtimes).

A worker builds the workload itself from the spec (nothing large is shipped), receives the
current parameters and a block of sample indices, and returns the gradient of the mean loss over
that block.  It holds no training state that matters: when it is revoked, nothing is lost but the
gradient it was computing (the coordinator owns parameters and data order), so a joiner is simply
a *new* worker handed the current parameters.

A worker trains on its device (issue 20 item 4, :mod:`spotwise.workloads.device`): the model and
each mini-batch live there, the parameters arrive once per step and are copied there once, and the
gradient is computed there and copied to CPU numpy once per step for the wire.

**No prefetching here** (``workload.loader``, issue 28 item 4).  A parameter-server worker learns its
block of indices only when the coordinator starts the step (the block depends on which workers are
up, N-sync cancellations and released blocks), so there is nothing to build ahead: the collective
plane, whose members know their future blocks, is where ``loader.num_workers`` prefetches through
DataLoader workers (:mod:`spotwise.workloads.loading`).  Splitting the block into ``num_workers``
sub-batches fetched by a thread pool was measured and not adopted (256 samples, 2 threads, 2 cores):
an I/O-bound ``__getitem__`` (0.5 ms sleep) went from 162 to 92 ms, but a CPU-bound one got slower
-- a pure-Python one 81 -> 142 ms (the GIL), a torch one 105 -> 247 ms (contending with the
worker's own compute threads) -- and it would call a user's ``__getitem__`` from several threads at
once, which many datasets (open file handles, decoders) do not allow.  So here ``batch(indices)``
is always built in the training thread.
"""

from __future__ import annotations

import os
import resource
import time
import warnings
from typing import Any

import numpy as np
import torch

from spotwise.config import JobSpec, WorkloadSpec
from spotwise.planes.ps.wire import DENSE_ENTRY_BYTES, Gradient
from spotwise.spec.load import build, to_plain
from spotwise.workloads.device import DeviceDataset, GpuBusy, resolve_device, to_device, to_host
from spotwise.training.recipe import worker_recipe
from spotwise.training.state import FlatModel, check_precision_device, forward_backward_on_device
from spotwise.workloads.params import flat_grad, flat_grad_sparse, num_params, zero_grad
from spotwise.workloads.registry import make_workload


#: fp16 loss scaling on a parameter-server worker: retries of a mini-batch whose scaled gradient
#: overflowed (each halves the scale), and finite steps before the scale doubles (GradScaler's default)
MAX_SCALE_RETRIES = 24
SCALE_GROWTH_INTERVAL = 2000


def worker_args_for(spec: JobSpec, notices: dict[str, Any] | None = None, device: str | None = None) -> tuple[Any, ...]:
    """Constructor arguments of a worker actor for ``spec`` (workload, seed, threads, notice watcher, device).

    ``device``: what the worker resolves on its node (:func:`~spotwise.workloads.device.resolve_device`),
    the driver's :class:`~spotwise.capacity.placement.Placement` ``device``; default the spec's
    ``cluster.device``.
    """
    return (to_plain(spec.workload), spec.seed, 1, notices, device or spec.cluster.device)


class GradientWorker:
    """Plain-Python worker; :func:`remote_worker_class` wraps it as a Ray actor.

    ``notices``: on a real cluster, ``{"cloud": "aws"|"gcp"|"auto", "base_url": ..., "interval_s": ...}``
    starts a :class:`~spotwise.capacity.notice.NoticeWatcher` on the worker's node; a preemption
    notice it receives rides back to the coordinator on the next gradient (the existing data
    connection carries the control message, as in Spotnik, ``papers/001_30a454edd897cf47.txt``
    Sec. 3.2), and is also available from :meth:`poll_notice`.
    """

    def __init__(self, workload: dict[str, Any], seed: int, threads: int = 1, notices: dict[str, Any] | None = None,
                 device: str = "cpu") -> None:
        torch.set_num_threads(max(1, int(threads)))
        self.device = resolve_device(device)
        self._busy = GpuBusy(self.device)  # how busy its GPU was, with each result (issue 40 item 5)
        self.spec = build(WorkloadSpec, workload, "workload")
        self.workload = make_workload(self.spec, seed)
        #: parameters and float buffers as views into one flat vector (issue 28: buffers travel too)
        self.fm = FlatModel(self.workload.build_model(), self.device)
        self.model = self.fm.model
        self.model.train()
        self.recipe = worker_recipe(self.spec)
        check_precision_device(self.recipe.precision, self.device)
        self.train = DeviceDataset(self.workload.train, self.device)
        self.n_params = num_params(self.model)
        self.n_buffers = self.fm.B
        #: fp16: this worker's loss scale (dynamic, see :meth:`_unscale`); 1.0 otherwise
        self._scale = 2.0**16 if self.recipe.precision == "fp16" else 1.0
        self._good = 0
        #: ship sparse updates (issue 9): the workload has sparse embedding gradients
        self.sparse = bool(getattr(self.workload, "sparse_grads", False))
        self.pid = os.getpid()
        self.calls = 0
        self._notice: dict[str, Any] | None = None
        self._watcher = None
        if notices:
            self._start_watcher(dict(notices))

    def _start_watcher(self, cfg: dict[str, Any]) -> None:
        from spotwise.capacity.notice import NoticeWatcher, detect_cloud, make_notice_source

        cloud = cfg.pop("cloud", "auto")
        interval = float(cfg.pop("interval_s", 5.0))
        if cloud == "auto":
            url = cfg.get("base_url")
            cloud = detect_cloud(**({"aws_url": url, "gcp_url": url} if url else {}))
            if cloud is None:
                return  # not on a cloud VM: no metadata service to watch
        source = make_notice_source(cloud, **cfg)

        def keep(notice: Any) -> None:
            if notice.imminent:
                self._notice = {"cloud": notice.cloud, "action": notice.action, "at": notice.at, "received": notice.received}

        self._watcher = NoticeWatcher(source, keep, interval_s=interval)
        self._watcher.start()

    def poll_notice(self) -> dict[str, Any] | None:
        return self._notice

    def promote(self) -> int:
        """Leave standby: back to normal CPU priority (see :func:`low_priority`); returns the largest
        nice value left on any of the process's threads (0 when promoted)."""
        return normal_priority()

    def ready(self) -> dict[str, Any]:
        return {"pid": self.pid, "n_params": self.n_params, "n_train": len(self.workload.train), "device": str(self.device)}

    def placement(self) -> dict[str, Any]:
        """Where this worker trains: its device, the devices of its model and of a batch, and the
        GPUs Ray gave its process (``CUDA_VISIBLE_DEVICES``, set by Ray for an actor with ``num_gpus``)."""
        x = self.train.batch(np.arange(min(1, len(self.train)), dtype=np.int64))[0]
        return {"device": str(self.device), "model": str(next(self.model.parameters()).device),
                "batch": str(x.device), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def compute(self, params: np.ndarray, indices: np.ndarray
                ) -> tuple[Gradient, float, int, float, dict[str, Any] | None, float | None]:
        """``(flat gradient of the mean loss over indices, loss, len(indices), compute seconds,
        preemption notice or None, the GPU's busy share or None)``.

        The gradient is the dense flat float32 vector, or -- for a workload with sparse gradients
        -- a :class:`~spotwise.planes.serverless.significance.SparseUpdate` over the same layout holding
        only the touched embedding rows (see :mod:`spotwise.planes.ps.wire`).
        """
        t0 = time.perf_counter()
        for _ in range(MAX_SCALE_RETRIES):
            self.fm.set_flat(to_device(_as_tensor(params), self.device))
            zero_grad(self.model)
            # the loss stays on the device (no read between forward and backward: issue 40 item 2); it
            # comes to the host with the gradient, in the step's one copy
            loss = forward_backward_on_device(self.model, self.workload.loss, self.train.batch, np.asarray(indices),
                                              self.recipe, self.device, self._scale)
            if self._scale == 1.0:
                break
            if self._unscale():  # fp16: the gradient fit; else the scale was halved: compute it again
                break
        grad, lv = self._gradient(loss)
        self.calls += 1
        return grad, lv, int(len(indices)), time.perf_counter() - t0, self._notice, self._busy.sample()

    def _unscale(self) -> bool:
        """fp16 (dynamic loss scaling on the worker, GradScaler's rule): divide the gradient by the
        scale if it is finite (and double the scale after ``SCALE_GROWTH_INTERVAL`` such steps);
        otherwise halve the scale and say so.  The coordinator receives an ordinary gradient."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        if not finite:
            self._scale = max(1.0, self._scale / 2.0)
            self._good = 0
            return self._scale == 1.0
        for g in grads:
            g.div_(self._scale)
        self._good += 1
        if self._good >= SCALE_GROWTH_INTERVAL:
            self._scale, self._good = self._scale * 2.0, 0
        return True

    def _gradient(self, loss: torch.Tensor) -> tuple[Gradient, float]:
        """The gradient now on the model in its wire form (:mod:`spotwise.planes.ps.wire`), computed on
        the device and copied to the host once -- the loss (a 0-dim device tensor) in the same copy --
        and the loss as a float."""
        if self.sparse:
            try:
                update = flat_grad_sparse(self.model)
            except ValueError:
                update = None  # a non-finite gradient: ship it dense, as before, for the controller to see
            if update is not None and update.nbytes < DENSE_ENTRY_BYTES * self.n_params:
                return update, float(loss)
        parts = [flat_grad(self.model)]
        if self.n_buffers:  # the buffers after this worker's forward passes ride behind the gradient
            parts.append(self.fm.buffer_vec)
        host = to_host(torch.cat([*parts, loss.reshape(1).to(parts[0].dtype)]))
        return host[:-1], float(host[-1])

    def memory(self) -> dict[str, float]:
        """Resident set size now and at peak (MiB) of this worker process."""
        rss = 0.0
        try:
            with open(f"/proc/{self.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss = float(line.split()[1]) / 1024.0
        except OSError:
            pass
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        return {"rss_mib": rss, "peak_rss_mib": peak}


def _as_tensor(arr: Any) -> torch.Tensor:
    """A read-only numpy array (Ray's zero-copy object) as a tensor, without a copy: it is only read."""
    a = np.asarray(arr)
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


def low_priority() -> None:
    """Ray worker-process setup hook for standby actors: start at low CPU priority.

    A standby actor's start (Python, Ray, torch) takes about a second of CPU; on a small machine
    that competes with the active workers' gradients and slows every step while it runs.  Started
    nice, it uses only idle CPU; :meth:`GradientWorker.promote` restores normal priority when the
    actor becomes a worker.
    """
    try:
        os.nice(15)
    except OSError:
        pass


def _thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # pragma: no cover - no /proc: the calling thread only
        return [0]


def normal_priority() -> int:
    """Every thread of this process back to nice 0; returns the largest nice value left.

    Linux keeps a nice value per *thread* (``setpriority(PRIO_PROCESS, 0, ...)`` changes only the
    calling one), and a standby actor started nice (:func:`low_priority`) has many: the main thread
    that imported torch and runs a plain actor's methods, torch's intra-op pool, Ray's and a
    concurrent actor's method threads.  Promoting only the thread that ran ``promote`` left the
    training threads at nice 15, so a promoted spare trained at a twenty-eighth of a normal
    process's CPU share beside other work.  Lowering niceness needs privileges (root or
    CAP_SYS_NICE); without them the threads stay nicer and the value returned says so.
    """
    worst = 0
    for tid in _thread_ids():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError:
            pass  # a thread that just ended, or no privilege to lower niceness
        try:
            worst = max(worst, os.getpriority(os.PRIO_PROCESS, tid))
        except OSError:
            pass
    return worst


_REMOTE: dict[str, Any] = {}


def remote_worker_class() -> Any:
    """The Ray actor class (created lazily so importing this module does not import Ray)."""
    if "cls" not in _REMOTE:
        import ray

        _REMOTE["cls"] = ray.remote(max_restarts=0, max_task_retries=0)(GradientWorker)
    return _REMOTE["cls"]
