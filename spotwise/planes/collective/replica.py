"""One member's model replica and its data cursor: the state a collective member keeps in memory.

:class:`Replica` holds the workload's model with every parameter a *view* into one flat float32
vector, and every gradient a view into one flat buffer of ``P + 2`` entries: the gradient sum
``sum_i n_i g_i``, then ``loss * n`` and ``n``.  A step's local work is then one backward pass into
that buffer, and the all-reduce that combines the members (``papers/001_30a454edd897cf47.txt``
Sec. 3.3, S-SGD: "updates model replicas using averaged gradients") is one collective on it: the
sample-weighted mean gradient, the step's mean loss and its sample count come out of the same sum.
Workloads with sparse gradients (embeddings) are densified into the buffer.  The model, both flat
buffers and every mini-batch live on the replica's device (issue 20 item 4,
:mod:`spotwise.workloads.device`): on a GPU the all-reduce runs on the device buffer (NCCL) and
nothing is copied to the host during a step.

:class:`DataCursor` is the member side of the sampler guarantee (:mod:`spotwise.control.sampler`):
an epoch is the permutation ``default_rng([seed, epoch]).permutation(n)`` (the same as
:class:`~spotwise.control.sampler.EpochSampler`), and a committed step with ``k`` members and
per-member batch ``b`` takes the next ``k * b`` (S-MA: ``H * k * b``) samples of it, clipped at the
epoch's end, exactly as ``k`` consecutive ``EpochSampler.reserve(b)`` calls would.  Every replica at
the same committed step holds the same cursor, so a step that is retried after a failure takes the
same samples with the new membership's split, and within an epoch every sample is in exactly one
committed step.  For a stream (``ordered``, :class:`~spotwise.workloads.user.StreamDataset`) the
epoch's order is the identity: with ``k`` members member ``r`` reads stream positions
``[pos + r*b, pos + (r+1)*b)`` of each step (sharded by member), the position is the cursor's
``(epoch, pos)``, and within a pass every position is in exactly one committed step, in order.

With ``workload.loader.num_workers > 0`` a replica's training batches come from a
:class:`~spotwise.workloads.loading.BlockLoader` (``torch.utils.data.DataLoader`` worker
processes): the member tells it the blocks it will take this generation (:meth:`Replica.expect`),
computed on a copy of the cursor, and they are built ahead while the replica computes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from spotwise.control.permutation import EpochPermutation, epoch_permutation
from spotwise.control.phases import PhaseClock
from spotwise.workloads.device import DeviceDataset, GpuBusy, rng_state, set_rng_state, to_device, to_host
from spotwise.workloads.loading import BlockLoader, micro_batches
from spotwise.training.recipe import Recipe
from spotwise.training.state import (FlatModel, Updater, extra_state, forward_backward, forward_backward_on_device,
                                     load_extra_state)
from spotwise.workloads.params import flat_grad


class Replica:
    """The model as one flat vector (parameters, then float buffers) with a flat gradient buffer (module docstring)."""

    def __init__(self, workload: Any, device: torch.device | str = "cpu", recipe: Recipe | None = None,
                 base_lr: float = 0.05, loader: Any = None) -> None:
        self.workload = workload
        self.device = torch.device(device)
        self.recipe = recipe or Recipe()
        self.fm = FlatModel(workload.build_model(), self.device)
        self.model = self.fm.model
        self.model.train()
        self.train = DeviceDataset(workload.train, self.device)
        self.test = DeviceDataset(workload.test, self.device) if workload.test is not None else None
        #: ``loader`` (a :class:`~spotwise.training.recipe.LoaderSpec`) with ``num_workers > 0``: batches
        #: from DataLoader worker processes, built ahead (:meth:`expect`); else straight from the dataset
        self.loader: BlockLoader | None = None
        self._build_batch = self.train.batch
        if loader is not None and int(loader.num_workers) > 0:
            self.loader = BlockLoader(self.train.inner, int(loader.num_workers), int(loader.prefetch),
                                      bool(loader.pin_memory))
            self._build_batch = self._loaded_batch
        #: per-phase step timing (issue 40 item 5): the member's clock, which batch building reports to
        self.clock = PhaseClock(busy=GpuBusy(self.device))
        #: parameters, and float buffers (BatchNorm statistics) behind them
        self.P, self.B = self.fm.P, self.fm.B
        self.N = self.P + self.B
        self.flat = self.fm.flat
        self.sparse = bool(getattr(workload, "sparse_grads", False))
        self.updater = Updater(self.fm, self.recipe, base_lr)
        self._params = self.fm.params
        #: the flat buffer behind :attr:`buf` (None while DDP's buckets hold the gradients: a member
        #: keeps one gradient's worth of memory, as a DDP rank does)
        self._buf: torch.Tensor | None = None
        self._restore_grad_views()
        #: S-SGD's gradients through DDP's Reducer over the current generation (:meth:`bind`); None: the flat buffer
        self.reducer: Any = None
        #: whether the model leaves trainable parameters without a gradient (DDP must then look for
        #: them every step: ``find_unused_parameters``): :meth:`probe_unused`, agreed by the members
        self.unused_params: bool | None = None
        #: ``n * buffers`` (B), ``n * loss``, ``n``: what a bucketed step all-reduces after its gradients
        self.tail = self.zeros(self.B + 2)

    @property
    def buf(self) -> torch.Tensor:
        """``n * grad`` (P), ``n * buffers`` (B), ``n * loss``, ``n``: what a flat step's one all-reduce
        combines (S-MA, AD-PSGD, sparse gradients, an epoch's short last step); allocated when first
        needed after :meth:`release_buf`, every gradient a view into it again."""
        if self._buf is None:
            self._buf = self.zeros(self.N + 2)
            self._point_grads(self._buf)
        return self._buf

    def release_buf(self) -> None:
        """Free the flat buffer while DDP's buckets hold the gradients (:meth:`bind`)."""
        self._buf = None
        for p in self._params:
            p.grad = None

    @property
    def can_bucket(self) -> bool:
        """Whether S-SGD steps go through DDP's Reducer: dense gradients (a sparse embedding's are
        densified into the flat buffer) and a trainable parameter -- the same answer on every member
        (same workload), so every member of a step takes the same path."""
        return not self.sparse and any(p.requires_grad for p in self._params)

    def bound_to(self, gen: int | None) -> bool:
        """Whether the DDP wrapper is built over generation ``gen``."""
        return self.reducer is not None and self.reducer.gen == gen

    def bind(self, group: Any) -> Any:
        """The DDP wrapper over ``group``'s current generation (built at its first bucketed step, with
        :attr:`unused_params` agreed by the members beforehand)."""
        from spotwise.planes.collective.bucketed import BucketedReducer

        if not self.bound_to(group.gen):
            self.unbind()
            self.release_buf()  # DDP's buckets hold the gradients now
            self.reducer = BucketedReducer(self.model, group.process_group(), int(group.gen), self.device,
                                           find_unused=bool(self.unused_params))
        return self.reducer

    def probe_unused(self, indices: np.ndarray) -> bool:
        """Whether a forward and backward pass over ``indices`` leaves a trainable parameter without a
        gradient (DDP must then look for such parameters every step: ``find_unused_parameters``).
        Local, no collective; the float and integer buffers and the random number generators are put
        back as they were, so the probe changes nothing the step computes."""
        rng = rng_state(self.device)
        bufs = self.fm.buffer_vec.clone() if self.B else None
        ints = self.fm.int_buffers()  # copies
        for p in self._params:
            p.grad = None
        try:
            # the batch straight from the dataset: a loader's prefetched batches are the steps'
            forward_backward(self.model, self.workload.loss, self.train.batch, np.asarray(indices), self.recipe, self.device)
            return any(p.requires_grad and p.grad is None for p in self._params)
        finally:
            for p in self._params:
                p.grad = None
            if bufs is not None:
                self.fm.buffer_vec.copy_(bufs)
            if ints:
                self.fm.load_int_buffers(ints)
            set_rng_state(rng, self.device)

    def unbind(self) -> Any:
        """Drop the DDP wrapper (a failed generation, another strategy).  The gradients are let go;
        the flat buffer is allocated again only when a flat step needs it (:attr:`buf`), not at every
        regroup, where the next generation's wrapper would free it at once.  Returns the dropped
        wrapper (None if there was none) for a caller that must release it elsewhere (its Reducer may
        hold a failed collective's work objects)."""
        red, self.reducer = self.reducer, None
        if red is not None:
            self.release_buf()
        return red

    def reduced_gradient(self, indices: np.ndarray, weight: float, scale: float = 1.0) -> torch.Tensor:
        """One bucketed S-SGD step's local work and its gradient all-reduce (:meth:`bind` first).

        Back-propagates the mean loss over ``indices`` through the DDP wrapper, whose comm hook sums
        ``weight * grad`` over the members bucket by bucket while the backward pass runs (``weight`` is
        this member's share ``n_i / n`` of the step's samples): when this returns, ``p.grad`` of every
        trainable parameter holds the step's sample-weighted mean gradient.  :attr:`tail` is filled
        with ``n * buffers, n * loss, n`` for the step's second, small all-reduce.  Returns the
        squared norm of the reduced gradient as a 0-dim device tensor (no host read).
        """
        red = self.reducer
        assert red is not None, "bind() before a bucketed step"
        red.state.weight = float(weight)
        params = [p for p in self._params if p.requires_grad]
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)
        n = len(indices)
        lv = forward_backward_on_device(red.ddp, self.workload.loss, self._batch_of, np.asarray(indices), self.recipe,
                                        self.device, scale, no_sync=red.no_sync)
        tail = self.tail
        if self.B:
            tail[: self.B].copy_(self.fm.buffer_vec).mul_(float(n))
        tail[self.B] = lv * n
        tail[self.B + 1] = float(n)
        grads = [p.grad for p in params if p.grad is not None]
        norms = torch._foreach_norm(grads)
        return torch.stack([x.float() for x in norms]).square().sum() if norms else self.zeros(1)[0]

    def apply_reduced(self, lr: float, total: float) -> None:
        """Apply a bucketed step: the reduced gradient in ``p.grad`` through the recipe's optimizer,
        the mean buffers (``tail`` after its all-reduce, over ``total`` samples) adopted."""
        self.updater.apply_grads(lr, scaled=self.updater.scaler is not None)
        if self.B and total > 0:
            self.fm.buffer_vec.copy_(self.tail[: self.B]).div_(float(total))

    def zeros(self, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A new zero tensor on the replica's device (what a collective on this replica's buffers takes)."""
        return torch.zeros(int(n), dtype=dtype, device=self.device)

    def tensor(self, values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``values`` as a tensor on the replica's device."""
        return to_device(torch.as_tensor(values, dtype=dtype), self.device)

    def host_params(self) -> np.ndarray:
        """The parameters and float buffers as a CPU float32 array (for the wire)."""
        return to_host(self.flat)

    def set_params(self, vec: torch.Tensor | np.ndarray) -> None:
        v = torch.as_tensor(np.asarray(vec, dtype=np.float32)).reshape(-1)
        if v.numel() != self.N:
            raise ValueError(f"a replica of {self.N} values cannot take {v.numel()}")
        self.flat.copy_(to_device(v, self.device))

    def extra_state(self) -> dict[str, Any]:
        """Optimizer, grad-scaler and integer-buffer state (what the flat vector does not hold)."""
        return extra_state(self.fm, self.updater)

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        load_extra_state(self.fm, self.updater, extra)

    @property
    def has_extra(self) -> bool:
        """Whether the state holds more than the flat vector (an optimizer with state, a scaler, integer buffers)."""
        return self.updater.optimizer is not None or self.updater.scaler is not None or bool(self.fm.int_buffers())

    def gradient(self, indices: np.ndarray, scale: float = 1.0) -> tuple[float, int]:
        """Fill :attr:`buf` with ``(n * grad of the mean loss over indices, n * buffers, n * loss, n)``; ``(loss, n)``.

        An empty block (the end of an epoch split over more members than it has mini-batches)
        contributes zeros.
        """
        if not self._zero_for(indices):
            return 0.0, 0
        lv = forward_backward(self.model, self.workload.loss, self._batch_of, np.asarray(indices), self.recipe,
                              self.device, scale)
        self._fill_buf(len(indices))
        self.buf[self.N] = lv * len(indices)
        self.buf[self.N + 1] = float(len(indices))
        return lv, len(indices)

    def gradient_on_device(self, indices: np.ndarray, scale: float = 1.0) -> tuple[torch.Tensor, int]:
        """:meth:`gradient` without a host read (S-MA's local steps, issue 40 item 2): the mean loss
        stays a 0-dim tensor on the device (a non-finite one is back-propagated: its gradient is not
        finite either)."""
        n = len(indices)
        if not self._zero_for(indices):
            return self.zeros(1)[0], 0
        lt = forward_backward_on_device(self.model, self.workload.loss, self._batch_of, np.asarray(indices),
                                        self.recipe, self.device, scale)
        self._fill_buf(n)
        self.buf[self.N].copy_(lt * n)
        self.buf[self.N + 1] = float(n)
        return lt, n

    def _zero_for(self, indices: np.ndarray) -> bool:
        """Zero :attr:`buf` and the gradients' views for a block; False for an empty block."""
        if self.reducer is not None:  # a flat step between bucketed ones (an epoch's short last step)
            self._restore_grad_views()
        self.buf.zero_()
        if len(indices) == 0:
            return False
        if self.sparse:
            for p in self._params:
                p.grad = None
        return True

    def _fill_buf(self, n: int) -> None:
        """``n * grad`` and ``n * buffers`` into :attr:`buf` after a backward pass."""
        if self.sparse:
            self.buf[: self.P].copy_(flat_grad(self.model))
        else:
            self._check_views()
        self.buf[: self.P].mul_(float(n))
        if self.B:
            self.buf[self.P:self.N].copy_(self.fm.buffer_vec).mul_(float(n))

    def _batch_of(self, indices: np.ndarray) -> Any:
        """A batch of the training set (from the loader when there is one), its time on the clock's ``data``."""
        t0 = time.perf_counter()
        try:
            return self._build_batch(indices)
        finally:
            self.clock.add("data", time.perf_counter() - t0)

    def _loaded_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, ...]:
        return to_device(self.loader.batch(indices), self.device)  # type: ignore[union-attr]

    def expect(self, blocks: Any) -> None:
        """The blocks :meth:`gradient` will be called with, in order (an iterator of index arrays;
        empty ones are skipped, as :meth:`gradient` reads nothing for them): the loader builds their
        batches -- split into the recipe's micro-batches -- ahead.  Nothing without a loader."""
        if self.loader is not None:
            acc = self.recipe.accumulate
            self.loader.expect(part for blk in blocks for part in micro_batches(blk, acc))

    def reset_loader(self) -> None:
        """Forget the expected blocks (a regroup); the loader's worker processes stop."""
        if self.loader is not None:
            self.loader.reset()

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()

    def _check_views(self) -> None:
        # autograd accumulates into an existing dense .grad in place; if it ever replaced one
        # (a layer that sets .grad itself), copy it back into the buffer and restore the view
        off = 0
        for p in self._params:
            k = p.numel()
            view = self.buf[off:off + k]
            if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                if p.grad is not None:
                    view.copy_(p.grad.reshape(-1))
                p.grad = view.view_as(p)
            off += k

    def sgd(self, grad_sum: torch.Tensor, total: float, lr: float, check: bool = True) -> bool:
        """Apply the step whose summed result is ``grad_sum`` (``buf[:N]``: ``sum n_i g_i`` then
        ``sum n_i buffers_i``) over ``total`` samples: the sample-weighted mean gradient through the
        recipe's optimizer (plain SGD ``params -= lr * mean`` by default, the old arithmetic), the
        mean buffers adopted.  False (nothing changed) if the gradient is not finite."""
        if total <= 0:
            return True
        if self.updater.plain:
            self.fm.param_vec.sub_(grad_sum[: self.P], alpha=float(lr) / float(total))
        else:
            mean = grad_sum[: self.P].div_(float(total))  # in place: the buffer is refilled next step
            ok = self.updater.apply(mean, lr, scaled=self.updater.scaler is not None, check=check)
            self._restore_grad_views()
            if not ok:
                return False
        if self.B and grad_sum.numel() >= self.N:
            self.fm.buffer_vec.copy_(grad_sum[self.P:self.N]).div_(float(total))
        if self.reducer is not None:  # a flat step between bucketed ones: the buckets hold the gradients again
            self.release_buf()
        return True

    def _restore_grad_views(self) -> None:
        self._point_grads(self.buf)

    def _point_grads(self, buf: torch.Tensor) -> None:
        """Every parameter's ``.grad`` a view into ``buf`` (sparse gradients: left to autograd)."""
        if self.sparse:
            return
        off = 0
        with torch.no_grad():
            for p in self._params:
                k = p.numel()
                p.grad = buf[off:off + k].view_as(p)
                off += k

    def evaluate(self) -> dict[str, float]:
        if self.test is None:
            return {}
        self.model.eval()
        try:
            with torch.no_grad():
                res = self.workload.evaluate(self.model, self.test)
        finally:
            self.model.train()
        return {k: float(v) for k, v in res.items()}


@dataclass
class DataCursor:
    """Where the committed steps are in the data: epoch and position (module docstring)."""

    n: int
    seed: int
    epoch: int = 0
    pos: int = 0
    #: a stream: the identity order (module docstring)
    ordered: bool = False
    _perm: np.ndarray | None = field(default=None, repr=False)
    _perm_epoch: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("a data cursor needs at least one sample")
        if not 0 <= self.pos <= self.n:
            raise ValueError(f"position {self.pos} is outside 0..{self.n}")

    def perm(self) -> EpochPermutation:
        if self._perm is None or self._perm_epoch != self.epoch:
            self._perm = epoch_permutation(self.n, self.seed, self.epoch, self.ordered)
            self._perm_epoch = self.epoch
        return self._perm

    def block(self, i: int, b: int) -> np.ndarray:
        """The ``i``-th block of ``b`` samples from the cursor (empty past the epoch's end)."""
        lo = min(self.n, self.pos + i * b)
        hi = min(self.n, lo + b)
        return self.perm()[lo:hi]

    def advance(self, blocks: int, b: int) -> int:
        """Commit ``blocks`` blocks of ``b``; the samples they held (clipped at the epoch's end)."""
        taken = min(self.n - self.pos, blocks * b)
        self.pos += taken
        if self.pos >= self.n:
            self.epoch += 1
            self.pos = 0
        return taken

    def as_list(self) -> list[int]:
        return [self.epoch, self.pos]

    def sampler_state(self) -> dict[str, Any]:
        """The state :meth:`EpochSampler.from_state` takes for the same place (nothing pending)."""
        state = {"n": self.n, "seed": self.seed, "epoch": self.epoch, "cursor": self.pos, "pending": [],
                 "next_id": 0, "committed_in_epoch": self.pos}
        if self.ordered:
            state["ordered"] = True
        return state

    def block_sizes(self, blocks: int, b: int) -> list[int]:
        """The sizes of blocks ``0 .. blocks - 1`` (:meth:`block`), clipped at the epoch's end."""
        return [max(0, min(self.n, self.pos + (i + 1) * b) - min(self.n, self.pos + i * b)) for i in range(int(blocks))]

    def copy(self) -> "DataCursor":
        """A cursor at the same place (sharing the epoch's order, which is never changed in place)."""
        return DataCursor(self.n, self.seed, self.epoch, self.pos, self.ordered, self._perm, self._perm_epoch)
