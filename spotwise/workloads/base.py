"""The workload interface the elastic runtime drives: index-addressed datasets and a model recipe.

The runtime builds a :class:`Workload` *inside each worker actor* from the job's
:class:`~spotwise.config.WorkloadSpec` and a seed (:func:`spotwise.workloads.make_workload`), so
nothing large crosses the wire.  The coordinator then drives workers by sample indices: every step
it hands each worker an ``np.ndarray`` of indices into ``workload.train`` (and reshards when
membership changes); the worker calls ``workload.loss(model, workload.train.batch(idx))``,
back-propagates and ships the gradient (see :mod:`spotwise.workloads.params`).

Determinism contract
--------------------
* ``make_workload(spec, seed)`` with the same spec and seed gives, in every process:

  - the same datasets (synthetic generators and splits are seeded by ``params["data_seed"]``,
    default 0, so runs with different model seeds still share data and test split);
  - ``build_model()`` returns a model with bit-identical initial parameters on every call (the
    initialisation runs under ``torch.random.fork_rng`` seeded with ``seed``, so it neither
    depends on nor disturbs the caller's global RNG state);
  - ``dataset.batch(idx)`` is a pure function of ``idx`` (no shuffling, no augmentation), so the
    same indices give the same tensors on every worker, before and after a reshard.

* ``loss`` is the *mean* loss over the batch, so the gradient of a global batch split across
  workers is the size-weighted average of the workers' gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from spotwise.errors import InputError

Batch = tuple[torch.Tensor, ...]


@runtime_checkable
class IndexedDataset(Protocol):
    """A dataset addressed by arrays of sample indices.

    ``batch(indices)`` returns a tuple of tensors whose first dimension is ``len(indices)``;
    it is deterministic (same indices -> same tensors) and accepts any order and repeats.
    """

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> Batch: ...


def as_index_array(indices: Any, n: int) -> np.ndarray:
    """Validate ``indices`` against a dataset of ``n`` samples and return them as int64.

    Raises :class:`IndexError` for out-of-range indices (a runtime bug, not user input).
    """
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"sample index out of range [0, {n}): min {idx.min()}, max {idx.max()}")
    return idx


class TensorIndexedDataset:
    """An :class:`IndexedDataset` over in-memory tensors sharing their first dimension.

    ``transform`` (optional) maps the selected tuple to the tensors handed out, e.g. to convert
    compact uint8 images to normalised floats only for the requested batch.
    """

    def __init__(self, *tensors: torch.Tensor, transform: Callable[[Batch], Batch] | None = None) -> None:
        if not tensors:
            raise ValueError("TensorIndexedDataset needs at least one tensor")
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError(f"tensors disagree on the sample count: {[tuple(t.shape) for t in tensors]}")
        self.tensors = tuple(tensors)
        self.transform = transform

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def batch(self, indices: np.ndarray) -> Batch:
        idx = torch.from_numpy(as_index_array(indices, len(self)))
        out = tuple(t[idx] for t in self.tensors)
        return self.transform(out) if self.transform is not None else out

    def subset(self, indices: np.ndarray) -> "TensorIndexedDataset":
        """A new dataset holding only ``indices`` (copies the selected rows)."""
        idx = torch.from_numpy(as_index_array(indices, len(self)))
        return TensorIndexedDataset(*(t[idx] for t in self.tensors), transform=self.transform)


@dataclass
class Workload:
    """Everything a worker needs to train, built deterministically from (spec, seed).

    ``build_model()`` returns a fresh model with the same initial weights for the same seed;
    ``loss(model, batch)`` is the mean loss over ``batch`` (a tuple from ``train.batch``);
    ``evaluate(model, dataset)`` returns ``{"loss": ..., metric_name: ..., ...}`` over the whole
    dataset without touching gradients.  ``sparse_grads`` is True when some parameters get
    sparse (``torch.sparse_coo``) gradients -- embedding tables -- which
    :func:`spotwise.workloads.params.flat_grad` densifies and
    :func:`~spotwise.workloads.params.sparse_grad_parts` exposes without densifying.
    """

    name: str
    family: str
    build_model: Callable[[], torch.nn.Module]
    loss: Callable[[torch.nn.Module, Batch], torch.Tensor]
    train: IndexedDataset
    test: IndexedDataset | None
    metric_name: str
    evaluate: Callable[[torch.nn.Module, IndexedDataset], dict[str, float]]
    sparse_grads: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form facts about the workload (sizes, generator parameters, source path)."""


def is_ordered(workload: Any) -> bool:
    """Whether ``workload``'s training set is a stream read in order (``info["ordered"]``, set for a
    :class:`~spotwise.workloads.user.StreamDataset`): its samplers then use the identity order
    (:func:`spotwise.control.permutation.epoch_permutation` ``ordered=True``), never a shuffle."""
    info = getattr(workload, "info", None) or {}
    return bool(info.get("ordered", False)) or bool(getattr(getattr(workload, "train", None), "ordered", False))


def seeded_factory(make: Callable[[], torch.nn.Module], seed: int) -> Callable[[], torch.nn.Module]:
    """Wrap ``make`` so each call initialises under ``torch.manual_seed(seed)`` in a forked RNG.

    The caller's global RNG state is left untouched, and every call returns identical weights.
    """

    def build() -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = make()
        return model

    return build


def iter_chunks(n: int, chunk: int) -> Sequence[np.ndarray]:
    """Consecutive index chunks covering ``range(n)``."""
    return [np.arange(s, min(n, s + chunk), dtype=np.int64) for s in range(0, n, chunk)]


def evaluate_in_chunks(
    model: torch.nn.Module,
    dataset: IndexedDataset,
    per_batch: Callable[[torch.nn.Module, Batch], dict[str, float]],
    chunk: int = 4096,
) -> dict[str, float]:
    """Sample-weighted mean of ``per_batch`` results over ``dataset``, in eval mode, no grad.

    ``per_batch`` returns per-batch *means*; keys ending in ``"_sse"`` are summed instead and
    turned into root-mean values (``"rmse"`` from ``"rmse_sse"``).  The model's train/eval mode
    is restored afterwards.
    """
    n = len(dataset)
    if n == 0:
        raise InputError("cannot evaluate on an empty dataset", "provide a dataset with at least one sample")
    was_training = model.training
    model.eval()
    totals: dict[str, float] = {}
    try:
        with torch.no_grad():
            for idx in iter_chunks(n, chunk):
                res = per_batch(model, dataset.batch(idx))
                for k, v in res.items():
                    w = 1.0 if k.endswith("_sse") else float(len(idx))
                    totals[k] = totals.get(k, 0.0) + float(v) * w
    finally:
        model.train(was_training)
    out: dict[str, float] = {}
    for k, v in totals.items():
        if k.endswith("_sse"):
            out[k[: -len("_sse")]] = float(np.sqrt(v / n))
        else:
            out[k] = v / n
    return out


def classification_evaluate(model: torch.nn.Module, dataset: IndexedDataset) -> dict[str, float]:
    """Cross-entropy loss and accuracy of a classifier whose batches are ``(x, y)``."""

    def per_batch(m: torch.nn.Module, b: Batch) -> dict[str, float]:
        x, y = b
        logits = m(x)
        return {
            "loss": float(torch.nn.functional.cross_entropy(logits, y)),
            "accuracy": float((logits.argmax(dim=1) == y).float().mean()),
        }

    return evaluate_in_chunks(model, dataset, per_batch)


def classification_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy of ``model(x)`` against integer labels ``y``; batch is ``(x, y)``."""
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def seeded_split(n: int, test_fraction: float, seed: int, where: str = "workload.params.test_fraction") -> tuple[np.ndarray, np.ndarray]:
    """A reproducible (train, test) permutation split of ``range(n)``; both parts sorted."""
    if not 0.0 <= float(test_fraction) < 1.0:
        raise InputError(f"test_fraction must be in [0, 1), got {test_fraction!r}", "use e.g. 0.2", where)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * float(test_fraction)))
    if n_test == 0 and test_fraction > 0 and n > 1:
        n_test = 1
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def read_params(params: dict[str, Any] | None, defaults: dict[str, Any], workload: str) -> dict[str, Any]:
    """Merge ``params`` (from ``spec.params``) over ``defaults``, checking names and types.

    Unknown names and values that do not convert to the default's type raise
    :class:`InputError` naming ``workload.params.<key>``.  A default of ``None`` accepts anything.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InputError(
            f"unknown parameter(s) {unknown} for workload {workload!r}",
            f"valid parameters are {sorted(defaults)}",
            "workload.params",
        )
    out = dict(defaults)
    for key, val in params.items():
        default = defaults[key]
        where = f"workload.params.{key}"
        if default is None or val is None:
            out[key] = val
            continue
        try:
            if isinstance(default, bool):
                if not isinstance(val, bool):
                    raise TypeError
                out[key] = val
            elif isinstance(default, int):
                if isinstance(val, bool) or float(val) != int(float(val)):
                    raise TypeError
                out[key] = int(float(val))
            elif isinstance(default, float):
                if isinstance(val, bool):
                    raise TypeError
                out[key] = float(val)
            elif isinstance(default, (list, tuple)):
                out[key] = type(default)(int(v) for v in val)
            else:
                out[key] = type(default)(val)
        except (TypeError, ValueError):
            raise InputError(
                f"expected {type(default).__name__} like {default!r}, got {val!r}", "fix the value in the spec", where
            ) from None
    return out


def positive(value: float, key: str, example: Any) -> None:
    """InputError unless ``value > 0``."""
    if not value > 0:
        raise InputError(f"must be positive, got {value!r}", f"use e.g. {example!r}", f"workload.params.{key}")


LOSS_FIX = ("a workload's loss is called as loss(model, batch) and must return the batch's mean loss as a "
            "scalar tensor; for a criterion such as nn.CrossEntropyLoss() return it from module:function as the "
            "loss (it is then called as loss(model(*batch[:-1]), batch[-1])), see docs/workloads.md")


def check_loss(loss: Any) -> torch.Tensor:
    """The workload's loss, checked: a scalar floating tensor with a graph (InputError otherwise)."""
    if not isinstance(loss, torch.Tensor):
        raise InputError(f"the workload's loss returned a {type(loss).__name__}, not a tensor", LOSS_FIX, "workload")
    if loss.numel() != 1:
        raise InputError(f"the workload's loss returned a tensor of shape {tuple(loss.shape)}, not a scalar "
                         "(reduce it with .mean())", LOSS_FIX, "workload")
    if not loss.requires_grad:
        raise InputError("the workload's loss does not depend on the model's parameters (no gradient: are all of "
                         "them frozen with requires_grad=False?)", "leave at least one parameter trainable; " + LOSS_FIX,
                         "workload")
    return loss.reshape(())
