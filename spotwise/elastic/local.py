"""The user-loop API without spotwise: ``python train.py``, or ``torchrun --nproc-per-node K train.py``.

One process, no group: the model is called as it is, ``optimizer.step()`` steps, and the data
come in the same seeded epoch orders a spotwise run uses (:mod:`spotwise.elastic.positions`), so
a script is debugged here and trains the same samples in the same order under spotwise with one
member.  The data end after ``epochs`` when ``job.data`` is given them, else never (the script's
own loop bounds it).

Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) the script is a plain DDP job: the
process group is PyTorch's own (``init_process_group``: NCCL on GPUs, gloo on CPUs; each rank on
``cuda:LOCAL_RANK`` where there are GPUs), the model is wrapped in
``DistributedDataParallel``, and rank ``r`` of ``k`` takes block ``r`` of each step's ``k`` batches
-- the split a spotwise run with ``k`` members makes -- so the same script runs the same samples
under both (a fixed membership here: nothing survives a lost rank).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import torch

from spotwise.elastic.batches import BatchFeed
from spotwise.elastic.amp import AmpStep
from spotwise.elastic.metrics import clean_metrics
from spotwise.elastic.positions import StreamPosition
from spotwise.workloads.device import (collective_backend, ddp_device_ids, local_rank_device, resolve_device,
                                       unscale_grads)


class LocalBackend:
    """:class:`~spotwise.elastic.job.Backend` of a plain process (module docstring)."""

    launched = False
    joining = False
    rank = 0
    world = 1

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.device = resolve_device("auto")  # a GPU where there is one
        #: torchrun's DDP over PyTorch's own process group, one per wrapped model (module docstring);
        #: empty: one process
        self.ddps: list[Any] = []
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if self.world > 1:
            import torch.distributed as dist

            self.rank = int(os.environ.get("RANK", "0"))
            self.device = local_rank_device(self.device, int(os.environ.get("LOCAL_RANK", "0")))
            # PyTorch's own group: the script's init_process_group, or ours when a model is wrapped
            # (job.model) before it made one (a torchrun script that calls it after init() keeps its own)
            self._dist = dist
        self.modules: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        #: the optimizers of each ``job.optimizer()`` call: the step's commit points
        self.groups: list[list[torch.optim.Optimizer]] = []
        #: commit points stepped in the current step (it ends when every one has)
        self._stepped: set[int] = set()
        self.states: dict[str, Any] = {}
        #: job.randint's windows, and whether the job.steps() loop began
        self._windows = self._looping = False
        self._feed: Any = None
        self._per_step = 1
        self._pos: StreamPosition | None = None
        self._b = 0
        self._end: int | None = None
        self._pulled = 0
        self._step = 0
        self._samples = 0
        #: what ``job.log`` was given, per committed step: ``(step, {name: value})``
        self.logged: list[tuple[int, dict[str, float]]] = []
        self._pending: dict[str, Any] = {}

    @property
    def step(self) -> int:
        return self._step

    @property
    def samples(self) -> int:
        return self._samples

    def _group(self) -> None:
        """PyTorch's process group under torchrun, made here if the script has not made its own."""
        if not self._dist.is_initialized():
            self._dist.init_process_group(collective_backend(self.device))

    def boundary(self) -> bool:
        self._looping = True
        return True  # the data's end (epochs) stops the loop; a plain process has no job's target

    def register_model(self, module: torch.nn.Module, find_unused: bool) -> int:
        self.modules.append(module)
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self._group()
            self.ddps.append(DistributedDataParallel(module, device_ids=ddp_device_ids(self.device),
                                                     find_unused_parameters=find_unused))
        return len(self.modules) - 1

    def forward_module(self, index: int = 0) -> Any:
        return self.ddps[index] if self.ddps else self.modules[index]

    def forward_failed(self, index: int, error: RuntimeError) -> bool:
        return False  # under torchrun a lost rank ends the job (no membership change)

    def no_sync(self, index: int | None = None) -> Any:
        if not self.ddps:
            return contextlib.nullcontext()
        if index is not None:
            return self.ddps[index].no_sync()
        stack = contextlib.ExitStack()
        for d in self.ddps:
            stack.enter_context(d.no_sync())
        return stack

    def register_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> int:
        self.groups.append(list(optimizers))
        self.optimizers = [o for g in self.groups for o in g]
        return len(self.groups) - 1

    def register_scheduler(self, scheduler: Any) -> None:
        return None

    def register_state(self, name: str, obj: Any) -> None:
        self.states[name] = obj

    def register_data(self, dataset: Any, batch_size: int | None, collate_fn: Any, epochs: float | None,
                      loader: dict[str, Any]) -> None:
        if batch_size is None or int(batch_size) < 1:
            raise ValueError("job.data(dataset, batch_size=B) needs a positive batch size when the script runs on its "
                             "own (under spotwise it is the spec's workload.batch_size)")
        from spotwise.elastic.windows import Windows

        self._windows = isinstance(dataset, Windows)
        self._feed = BatchFeed(dataset, collate_fn, **loader)
        n = self._feed.n
        self._pos = StreamPosition(n, self.seed, ordered=self._feed.ordered)
        self._b = int(batch_size)
        self._end = None if epochs is None else int(round(float(epochs) * n))

    def next_batch(self) -> Any:
        if self._pos is None:
            raise RuntimeError("iterate the object job.data() returned")

        if self.world > 1:  # torchrun: block r of each of the step's k batches, as a spotwise member takes
            k = self.world
            if self._end is not None and self._samples + self._pulled * k * self._b >= self._end:
                self._feed.close()
                raise StopIteration
            if self._pulled == 0:
                self._feed.plan(self._pos, k, self.rank, self._per_step, self._b)
            idx = self._pos.block(self._pulled * k + self.rank, self._b)
            self._pulled += 1
            return self._feed.batch(idx)
        start = self._pulled * self._b
        if self._end is not None and self._samples + start >= self._end:
            self._feed.close()
            raise StopIteration
        count = self._b if self._end is None else min(self._b, self._end - self._samples - start)
        if self._pulled == 0 and count == self._b:
            self._feed.plan(self._pos, 1, 0, self._per_step, self._b)
        self._pulled += 1
        idx = self._pos.indices(start, count)
        return self._feed.batch(idx) if count == self._b else self._feed.make(idx)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def commit(self, amp: AmpStep | None = None, index: int = 0) -> bool:
        if self._windows and not self._looping:
            from spotwise.elastic.windows import NEEDS_STEPS

            raise RuntimeError(NEEDS_STEPS)
        if self._pulled == 0:
            raise RuntimeError("optimizer.step() before any batch of this step: take a batch from job.data() first")
        group = self.groups[index]
        # a GradScaler's step: skipped when a gradient is not finite (read here, as the scaler reads it;
        # under torchrun every rank holds the same all-reduced gradients, so the same answer)
        if amp is not None:
            amp.skipped = float(amp.found_inf.sum()) > 0
        if amp is None or not amp.skipped:
            if amp is not None and amp.grad_scale is not None:
                unscale_grads(group, amp.grad_scale)
            for o in group:
                o.step()
        self._stepped.add(int(index))
        if len(self._stepped) < len(self.groups):  # a commit point inside the step (a GAN's first)
            return True
        self._stepped = set()
        taken = self._pulled * self._b * self.world
        if self._end is not None:
            taken = min(taken, self._end - self._samples)
        assert self._pos is not None
        self._pos.advance(taken)
        self._samples += taken
        self._step += 1
        self._per_step = self._pulled
        self._pulled = 0
        if self._pending:
            self.logged.append((self._step, clean_metrics(self._pending, _warn)))
            self._pending = {}
        return True

    def log(self, metrics: dict[str, Any]) -> None:
        self._pending.update(metrics)


def _warn(msg: str) -> None:
    print(f"spotwise: {msg}", file=sys.stderr)


