"""The model side of a training step: one flat vector, a real optimizer, precision, the whole state.

:class:`FlatModel` holds a workload's model with every parameter *and every floating-point buffer*
that training changes (BatchNorm's running statistics; :func:`_tracks_statistics`) a view into one
flat float32 vector ``flat`` of ``P + B`` entries:
parameters first (``model.parameters()`` order), then buffers (``model.named_buffers()`` order).
That vector is what the planes ship, all-reduce, average and checkpoint; the model itself is
always the real ``nn.Module`` whose ``state_dict()`` holds the same numbers.  Integer buffers
(``num_batches_tracked``) are kept as they are and travel in :meth:`FlatModel.extra_state`.

**Buffers** (issue 28 item 2).  A step's result carries, after the ``P`` gradient entries, the
``B`` buffer values the worker's forward passes left (its BatchNorm running statistics after its
micro-batches); the step's contributions are combined *sample-weighted* like the gradients, so the
committed buffers are the sample-weighted **average** of the workers' updated statistics (the
parameter-server plane and the collective plane alike: the all-reduce sums ``n_i * buffers_i``).
That is what DDP gives with ``broadcast_buffers=False`` plus an average, and unlike DDP's default
(rank 0's statistics) it uses every worker's batch.  Evaluation and checkpoints use these buffers.

:class:`Updater` applies a step's aggregated mean gradient: the papers' plain SGD
``theta -= lr * g`` when the recipe names no optimizer (the old arithmetic, bit-for-bit), else the
real ``torch.optim`` optimizer (gradient clipping with ``clip_grad_norm_`` first, the step's
learning rate written into every parameter group).  Its state (the optimizer's ``state_dict`` and a
``GradScaler``'s) is part of every checkpoint and of every state transfer to a joiner.

:func:`forward_backward` is a worker's local work for one mini-batch: ``accumulate`` micro-batches
under ``torch.autocast`` (bf16/fp16), gradients summed into ``.grad`` as the mini-batch's mean.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import numpy as np
import torch

from spotwise.errors import InputError
from spotwise.training import tensor_tree
from spotwise.training.recipe import Recipe, optimizer_failure
from spotwise.user_failures import is_user_failure
import spotwise.workloads.device as _device  # its to_device: the one place tensors move
from spotwise.workloads.base import check_loss


def _tracks_statistics(mod: torch.nn.Module) -> bool:
    """Whether a training forward pass of ``mod`` changes its buffers: normalisation layers with
    running statistics (BatchNorm*, SyncBatchNorm, InstanceNorm with ``track_running_stats``), or a
    module of the user's that says so with ``spotwise_sync_buffers = True``."""
    if getattr(mod, "spotwise_sync_buffers", False):
        return True
    return isinstance(mod, torch.nn.modules.batchnorm._NormBase) and bool(mod.track_running_stats)


def _float_buffers(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
    """The floating-point buffers training changes (:func:`_tracks_statistics`); other buffers (a
    constant such as a mean rating, a causal mask) stay what ``build_model`` made them everywhere."""
    out = []
    for mod in model.modules():
        if not _tracks_statistics(mod):
            continue
        for name, buf in mod._buffers.items():
            if buf is not None and buf.is_floating_point():
                out.append((mod, name, buf))
    return out


def _int_buffers(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, b) for n, b in model.named_buffers() if not b.is_floating_point()]


def num_float_buffer_entries(model: torch.nn.Module) -> int:
    """``B``: entries of ``model``'s floating-point buffers (0 for a model without BatchNorm & co.)."""
    return sum(b.numel() for _, _, b in _float_buffers(model))


def moving_ranges(params: list[torch.Tensor], n_buffers: int) -> tuple[tuple[int, int], ...]:
    """The ranges of a flat vector (``params`` in order, then ``n_buffers`` buffer entries) that training
    changes: the parameters that require a gradient and the buffers, adjacent ranges merged."""
    out: list[list[int]] = []
    off = 0
    for p in params:
        k = p.numel()
        if p.requires_grad and k:
            if out and out[-1][1] == off:
                out[-1][1] = off + k
            else:
                out.append([off, off + k])
        off += k
    if n_buffers:
        if out and out[-1][1] == off:
            out[-1][1] = off + n_buffers
        else:
            out.append([off, off + n_buffers])
    return tuple((a, b) for a, b in out)


class FlatModel:
    """A model whose parameters and float buffers are views into one flat float32 vector (module docstring)."""

    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu", flat: torch.Tensor | None = None) -> None:
        self.device = torch.device(device)
        self.model = _device.to_device(model, self.device)
        self.params = list(self.model.parameters())
        bufs = _float_buffers(self.model)
        self.P = sum(p.numel() for p in self.params)
        self.B = sum(b.numel() for _, _, b in bufs)
        if flat is None:
            flat = _device.to_device(torch.empty(self.P + self.B, dtype=torch.float32), self.device)
        elif flat.numel() != self.P + self.B:  # a caller-owned vector (e.g. sharing memory with a numpy array)
            raise ValueError(f"flat vector of {flat.numel()} entries for a model of {self.P + self.B}")
        self.flat = flat
        # each tensor is copied into its slice and then replaced by it, one at a time: the model's
        # memory is never held twice over (a 100M-parameter model: 400 MB, not 800 MB, at start)
        off = 0
        with torch.no_grad():
            for p in self.params:
                k = p.numel()
                self.flat[off:off + k].copy_(p.detach().reshape(-1))
                p.data = self.flat[off:off + k].view_as(p)
                off += k
            for mod, name, b in bufs:
                k = b.numel()
                self.flat[off:off + k].copy_(b.detach().reshape(-1))
                mod._buffers[name] = self.flat[off:off + k].view_as(b)
                off += k
        #: issue 41 item 3: the ``[start, end)`` ranges of :attr:`flat` that training changes -- the
        #: parameters that require a gradient (as the model is wrapped) and the float buffers.  Frozen
        #: parameters (a backbone, LoRA's base weights) stay out of what replicas and regroups move:
        #: every process builds them itself, the same way (:meth:`frozen_fingerprint` checks it)
        self.moving = moving_ranges(self.params, self.B)
        #: entries in :attr:`moving` (``P + B`` when nothing is frozen)
        self.M = sum(b - a for a, b in self.moving)

    @property
    def param_vec(self) -> torch.Tensor:
        return self.flat[: self.P]

    @property
    def buffer_vec(self) -> torch.Tensor:
        return self.flat[self.P:]

    def moving_views(self) -> list[torch.Tensor]:
        """Views of the :attr:`moving` ranges of :attr:`flat` (one view when nothing is frozen)."""
        return [self.flat[a:b] for a, b in self.moving]

    def pack_moving(self) -> torch.Tensor:
        """The :attr:`moving` entries as one vector: :attr:`flat` itself when nothing is frozen, else a copy."""
        views = self.moving_views()
        return views[0] if len(views) == 1 and self.M == self.flat.numel() else torch.cat(views)

    def unpack_moving(self, vec: torch.Tensor) -> None:
        """Take ``vec`` -- the :attr:`moving` entries (``M``) or the whole vector (``P + B``) -- into :attr:`flat`."""
        v = vec.reshape(-1)
        if v.numel() == self.flat.numel():
            self.flat.copy_(v)
            return
        if v.numel() != self.M:
            raise ValueError(f"a model whose trainable parameters and buffers are {self.M} entries cannot take "
                             f"{v.numel()} values")
        off = 0
        for a, b in self.moving:
            self.flat[a:b].copy_(v[off:off + b - a])
            off += b - a

    def frozen_fingerprint(self) -> torch.Tensor:
        """Two float64 sums (of the frozen entries and of their squares) on the model's device: equal
        wherever the frozen parameters were built the same way, computed without a host copy."""
        out = torch.zeros(2, dtype=torch.float64, device=self.flat.device)
        at = 0
        for a, b in [*self.moving, (self.flat.numel(), self.flat.numel())]:
            if a > at:
                x = self.flat[at:a].double()
                out[0] += x.sum()
                out[1] += (x * x).sum()
            at = b
        return out

    def set_flat(self, vec: torch.Tensor | np.ndarray) -> None:
        v = torch.as_tensor(vec).reshape(-1)
        if v.numel() != self.P + self.B:
            raise ValueError(f"a model of {self.P} parameters and {self.B} buffer entries cannot take {v.numel()} values")
        self.flat.copy_(v)  # copy_ converts dtype and device (callers move tensors with to_device)

    def int_buffers(self) -> dict[str, torch.Tensor]:
        return {n: b.detach().cpu().clone() for n, b in _int_buffers(self.model)}

    def buffer_snapshot(self, into: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """A copy, on the device (no host read), of every buffer -- the float ones and the integer
        ones (``num_batches_tracked``) -- reusing ``into``'s memory when given: what a step that may
        be dropped puts back (:meth:`restore_buffers`)."""
        ints = dict(_int_buffers(self.model))
        if into is None:
            return self.buffer_vec.detach().clone(), {n: b.detach().clone() for n, b in ints.items()}
        vec, kept = into
        vec.copy_(self.buffer_vec)
        for n, b in ints.items():
            kept[n].copy_(b)
        return into

    def restore_buffers(self, snapshot: tuple[torch.Tensor, dict[str, torch.Tensor]]) -> None:
        vec, kept = snapshot
        own = dict(_int_buffers(self.model))
        with torch.no_grad():
            self.buffer_vec.copy_(vec)
            for n, v in kept.items():
                own[n].copy_(v)

    def load_int_buffers(self, values: dict[str, torch.Tensor]) -> None:
        own = dict(_int_buffers(self.model))
        with torch.no_grad():
            for n, v in values.items():
                if n in own:
                    own[n].copy_(v.to(own[n].device))

    def advance_int_buffers(self, forwards: int) -> None:
        """What ``forwards`` training forward passes do to the integer buffers (BatchNorm's
        ``num_batches_tracked`` counts them): for the copy that never runs one (the coordinator)."""
        with torch.no_grad():
            for mod in self.model.modules():
                n = getattr(mod, "num_batches_tracked", None)
                if isinstance(n, torch.Tensor) and isinstance(mod, torch.nn.modules.batchnorm._NormBase) \
                        and mod.track_running_stats:
                    n.add_(int(forwards))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's own ``state_dict`` (parameters and buffers), detached CPU copies."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Load a ``state_dict`` into the model (the flat views see it)."""
        own = self.model.state_dict()
        with torch.no_grad():
            for k, v in sd.items():
                if k in own:
                    own[k].copy_(v.to(own[k].device, own[k].dtype))


def check_precision_device(precision: str, device: torch.device) -> None:
    """fp16 needs CUDA (float16 autocast with loss scaling); exit 2 where a worker has none."""
    if precision == "fp16" and torch.device(device).type != "cuda":
        raise InputError(f"precision fp16 needs CUDA, but this worker trains on {device} (no CUDA device)",
                         "use precision: bf16 on CPUs, or run on GPU nodes (cluster.device: cuda with a GPU instance type)",
                         "workload.precision")


def set_group_rates(groups: list[dict[str, Any]], bases: list[float], base_lr: float, lr: float) -> None:
    """The step's rate ``lr`` into every parameter group, each keeping its ratio to the job's base rate
    ``base_lr`` (``bases``: the groups' own base rates; a group at the job's base gets exactly ``lr``).
    The runtime's :class:`Updater` and :mod:`spotwise.elastic.workload_loop` set rates by this one rule."""
    for group, base in zip(groups, bases):
        group["lr"] = float(lr) if base == base_lr else float(lr) * base / base_lr


def _has_nonfinite(t: torch.Tensor) -> bool:
    return not bool(torch.isfinite(t).all())


class Updater:
    """Applies a step's mean gradient to a :class:`FlatModel` (module docstring)."""

    def __init__(self, fm: FlatModel, recipe: Recipe, base_lr: float) -> None:
        self.fm = fm
        self.recipe = recipe
        self.optimizer: torch.optim.Optimizer | None = None
        if recipe.optimizer is not None:
            self.optimizer = recipe.optimizer.build(fm.params, base_lr, model=fm.model)
        self.scaler: Any = None
        if recipe.precision == "fp16":  # dynamic loss scaling: torch's GradScaler drives the optimizer step
            self.scaler = torch.amp.GradScaler(fm.device.type)
            if self.optimizer is None:  # the papers' SGD, as torch.optim.SGD so the scaler can step it
                self.optimizer = torch.optim.SGD(fm.params, lr=base_lr)
        #: each parameter group's own base rate (several optimizers: each entry's ``lr``, issue 41 item 3)
        #: and the job's: a step's rate ``lr`` sets a group to ``lr * its base / the job's base``
        self._base_lr = float(base_lr)
        self._group_bases = [float(g["lr"]) for g in self.optimizer.param_groups] if self.optimizer is not None else []
        #: whether the recipe's optimizer has stepped once in this process (its first step's failure is the user's)
        self._stepped = False
        #: steps the grad scaler skipped (an fp16 overflow: the scale is lowered, nothing is applied)
        self.skipped = 0
        #: the gradient norm before clipping of the last step, a 0-dim tensor on the model's device (None
        #: without clipping); not read here: on a GPU a read waits for the step (issue 40 item 2)
        self.last_norm: torch.Tensor | None = None

    @property
    def plain(self) -> bool:
        return self.optimizer is None and self.recipe.grad_clip_norm is None

    @property
    def loss_scale(self) -> float:
        """What the loss is multiplied by before the backward pass (the grad scaler's scale; 1 without)."""
        return float(self.scaler.get_scale()) if self.scaler is not None else 1.0

    def apply(self, grad: torch.Tensor, lr: float, scaled: bool = False, check: bool = True) -> bool:
        """Apply the mean gradient ``grad`` (``P`` entries) at rate ``lr``; False (nothing changed) if
        it is not finite.  ``check=False`` skips that test (a host read): the caller finds a
        non-finite gradient later, in a read it makes anyway, and undoes the step (S-MA's rounds).

        ``scaled``: ``grad`` is the gradient of the loss times :attr:`loss_scale` (fp16); the grad
        scaler unscales it, skips the step on an overflow (lowering the scale; True: not an error)
        and steps the optimizer otherwise -- torch's ``unscale_`` / ``step`` / ``update`` sequence,
        the same on every member since they all hold the same all-reduced gradient.
        """
        fm = self.fm
        if fm.P == 0:
            return True
        if self.plain:
            fm.param_vec.sub_(grad.to(fm.device), alpha=float(lr))
            return True
        if scaled and self.scaler is not None:
            return self._apply_scaled(grad, lr)
        if check and _has_nonfinite(grad):
            return False
        self._set_grads(grad)
        if self.recipe.grad_clip_norm is not None:
            self.last_norm = torch.nn.utils.clip_grad_norm_(fm.params, float(self.recipe.grad_clip_norm))
        if self.optimizer is None:
            with torch.no_grad():
                for p in fm.params:
                    if p.grad is not None:
                        p.sub_(p.grad, alpha=float(lr))
        else:
            self._set_lr(lr)
            self._step(self.optimizer.step)
        for p in fm.params:
            p.grad = None
        return True

    def apply_grads(self, lr: float, scaled: bool = False) -> None:
        """Apply the mean gradient already in ``p.grad`` (DDP's reduced buckets, :mod:`spotwise.planes.collective.bucketed`)
        at rate ``lr``: clipping, the recipe's optimizer (or plain SGD, one fused update over every
        trainable parameter), the grad scaler's unscale / step / update under fp16.  The caller has
        checked that the gradient is finite (its norm came with the step's one read); a frozen
        parameter has no gradient and is not touched."""
        fm = self.fm
        params = [p for p in fm.params if p.requires_grad and p.grad is not None]
        if not params:
            return
        if scaled and self.scaler is not None:
            self._step_scaled(lr)
            return
        if self.recipe.grad_clip_norm is not None:
            self.last_norm = torch.nn.utils.clip_grad_norm_(params, float(self.recipe.grad_clip_norm))
        if self.optimizer is None:
            with torch.no_grad():
                torch._foreach_add_(params, [p.grad for p in params], alpha=-float(lr))
            return
        self._set_lr(lr)
        self._step(self.optimizer.step)

    def _apply_scaled(self, grad: torch.Tensor, lr: float) -> bool:
        self._set_grads(grad)
        self._step_scaled(lr)
        for p in self.fm.params:
            p.grad = None
        return True

    def _step_scaled(self, lr: float) -> None:
        """torch's ``unscale_`` / clip / ``step`` / ``update`` on the gradients in ``p.grad``."""
        fm, opt, scaler = self.fm, self.optimizer, self.scaler
        assert opt is not None
        self._set_lr(lr)
        scaler.scale(torch.ones((), device=fm.device))  # the scaler's lazy init (the loss was scaled by loss_scale)
        scaler.unscale_(opt)
        if self.recipe.grad_clip_norm is not None:
            self.last_norm = torch.nn.utils.clip_grad_norm_(fm.params, float(self.recipe.grad_clip_norm))
        before = scaler.get_scale()
        self._step(lambda: scaler.step(opt))
        scaler.update()
        if scaler.get_scale() < before:
            self.skipped += 1

    def _set_lr(self, lr: float) -> None:
        """This step's rate into every parameter group, keeping each group's ratio to the job's base
        rate (a single optimizer's groups: exactly ``lr``, as before)."""
        assert self.optimizer is not None
        set_group_rates(self.optimizer.param_groups, self._group_bases, self._base_lr, lr)

    def _set_grads(self, grad: torch.Tensor) -> None:
        """``p.grad`` of every parameter that requires a gradient, as a view into the step's mean
        gradient; a frozen parameter (``requires_grad=False``) keeps ``grad = None``, so no optimizer
        touches it -- no weight decay, no momentum, no Adam moments (issue 40: its entries of the flat
        gradient are zeros, and a zero gradient is still stepped)."""
        fm = self.fm
        g = _device.to_device(grad.to(torch.float32), fm.device)
        off = 0
        for p in fm.params:
            k = p.numel()
            p.grad = g[off:off + k].view_as(p) if p.requires_grad else None
            off += k

    def _step(self, step: Callable[[], Any]) -> None:
        """``step()`` -- the optimizer's step -- with a failure of the recipe's optimizer made the user's
        (:class:`~spotwise.training.recipe.UserOptimizerError`, exit 2 naming ``workload.optimizer``) at
        its first step in this process (an argument or class that cannot step this model on this
        device), and at any step for a ``module:Class`` optimizer (the user's code)."""
        spec = self.recipe.optimizer
        try:
            step()
        except InputError:
            raise
        except BaseException as e:
            if spec is None or not is_user_failure(e) or (self._stepped and ":" not in spec.name):
                raise
            during = "in its first step" if not self._stepped else "in a step"
            raise optimizer_failure(spec.name, e, f"{during} (on {self.fm.device})") from e
        self._stepped = True

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        if self.optimizer is not None and sd.get("optimizer") is not None:
            self.optimizer.load_state_dict(sd["optimizer"])
        if self.scaler is not None and sd.get("scaler") is not None:
            self.scaler.load_state_dict(sd["scaler"])


def extra_state(fm: FlatModel, updater: Updater | None) -> dict[str, Any]:
    """Everything of the training state the flat vector does not hold: integer buffers, optimizer, scaler."""
    out: dict[str, Any] = {"int_buffers": fm.int_buffers()}
    if updater is not None:
        out.update(updater.state_dict())
    return out


def load_extra_state(fm: FlatModel, updater: Updater | None, extra: dict[str, Any] | None) -> None:
    if not extra:
        return
    fm.load_int_buffers(extra.get("int_buffers") or {})
    if updater is not None:
        updater.load_state_dict(extra)


def encode_extra(extra: dict[str, Any]) -> bytes:
    """``extra`` as bytes (:func:`spotwise.training.tensor_tree.encode`: packed tensor by tensor, or
    ``torch.save`` for what a packed tree cannot hold; :func:`decode_extra` reads both, never unpickling)."""
    return tensor_tree.encode(extra)


def decode_extra(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    out = tensor_tree.decode(data)
    if not isinstance(out, dict):
        raise ValueError(f"the extra state is a {type(out).__name__}, not a mapping")
    return out


@contextlib.contextmanager
def autocast_for(precision: str, device: torch.device) -> Iterator[None]:
    """``torch.autocast`` for the recipe's precision on ``device`` (nothing for fp32)."""
    if precision == "fp32":
        yield
        return
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
        yield


def forward_backward(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
                     batch_of: Callable[[np.ndarray], Any], indices: np.ndarray, recipe: Recipe,
                     device: torch.device, scale: float = 1.0) -> float:
    """Back-propagate the mean loss over ``indices`` into ``.grad`` (accumulating; call with zeroed
    grads), as ``recipe.accumulate`` micro-batches under the recipe's precision; the mean loss.

    ``scale`` multiplies what is back-propagated (a GradScaler's scale; the loss returned is not
    scaled).  Micro-batch ``j`` of ``n_j`` samples adds ``n_j / n`` of its mean loss's gradient, so
    the result is the mean over all ``n`` samples whatever the split.
    """
    idx = np.asarray(indices)
    n = len(idx)
    parts = [p for p in np.array_split(idx, min(max(1, recipe.accumulate), n)) if len(p)] if recipe.accumulate > 1 else [idx]
    total = 0.0
    for part in parts:
        with autocast_for(recipe.precision, device):
            loss = check_loss(loss_fn(model, batch_of(part)))
        w = len(part) / n
        lv = float(loss.detach().float())
        if math.isfinite(lv):
            ((loss.float() * (w * scale)) if (w != 1.0 or scale != 1.0) else loss).backward()
        else:  # no backward through a non-finite loss: the caller sees it and stops
            total = lv
            continue
        total += lv * w
    return total


def forward_backward_on_device(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
                               batch_of: Callable[[np.ndarray], Any], indices: np.ndarray, recipe: Recipe,
                               device: torch.device, scale: float = 1.0,
                               no_sync: Callable[[], Any] | None = None) -> torch.Tensor:
    """:func:`forward_backward` without a host read: the mean loss comes back as a 0-dim float32
    tensor on ``device`` (issue 40 item 2: the step's one read happens later, with its sample count).

    ``model`` may be a ``DistributedDataParallel`` wrapper: every micro-batch but the last runs
    under ``no_sync()`` (its gradients accumulate locally), so the buckets are all-reduced once,
    while the last backward pass runs.  A non-finite loss is back-propagated like any other (its
    gradient is not finite either, which the step's read sees: the step is refused, nothing applied).
    """
    idx = np.asarray(indices)
    n = len(idx)
    parts = [p for p in np.array_split(idx, min(max(1, recipe.accumulate), n)) if len(p)] if recipe.accumulate > 1 else [idx]
    total = torch.zeros((), dtype=torch.float32, device=device)
    for j, part in enumerate(parts):
        quiet = no_sync() if (no_sync is not None and j < len(parts) - 1) else contextlib.nullcontext()
        with quiet:
            with autocast_for(recipe.precision, device):
                loss = check_loss(loss_fn(model, batch_of(part)))
            w = len(part) / n
            ((loss.float() * (w * scale)) if (w != 1.0 or scale != 1.0) else loss).backward()
        total.add_(loss.detach().float(), alpha=w)
    return total
