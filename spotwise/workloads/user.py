"""User workloads named ``package.module:function`` in ``workload.name``.

The function is imported in every worker and called as ``function(**spec.params)``, plus
``seed=<seed>`` when it has a ``seed`` parameter (or ``**kwargs``) and ``params`` does not set
one.  The call runs under ``torch.manual_seed(seed)`` in a forked RNG, so a model built inside it
is initialised reproducibly.  It may return:

* a :class:`~spotwise.workloads.base.Workload` -- used as is; or
* a tuple ``(model_or_factory, loss_fn, dataset[, test_dataset])``:

  - ``model_or_factory``: an ``nn.Module`` (each ``build_model()`` returns a deep copy of it, so
    all workers start from its weights) or a zero-argument callable returning one (called under
    ``torch.manual_seed(seed)``);
  - ``loss_fn``: a torch criterion -- an ``nn.Module`` such as ``nn.CrossEntropyLoss()`` or a
    ``torch.nn.functional`` function -- is called as ``loss_fn(model(*batch[:-1]), batch[-1])``;
    any other callable as ``loss_fn(model, batch)``.  It must return the batch *mean* loss;
  - ``dataset`` / ``test_dataset``: an :class:`~spotwise.workloads.base.IndexedDataset`, a
    ``torch.utils.data.TensorDataset``, or any map-style dataset (``__len__`` and
    ``__getitem__`` returning a tensor or a tuple of tensors; batches are made with
    ``default_collate``), or a streaming ``torch.utils.data.IterableDataset`` that implements
    ``iter_from(position)`` and ``__len__`` (:class:`StreamDataset`; anything else is refused with
    exit 2).

**Streaming sources.**  Workers come and go, so spotwise must be able to start reading a stream
at any position: an ``IterableDataset`` is accepted when it implements ``iter_from(position: int)``
-- an iterator over its samples starting at stream position ``position`` of the current pass --
and ``__len__`` -- the samples per pass (the epoch).  The workload is then *ordered*
(``Workload.info["ordered"]``): every sampler uses the identity order, so with ``k`` members or
workers, member ``r`` reads positions ``[pos + r*b, pos + (r+1)*b)`` of each step (sharded by
member), the position is the sampler's ``(epoch, cursor)`` that checkpoints already hold, and the
sampler guarantee becomes: **within a pass, every stream position is in exactly one committed
step, in stream order** (spotwise does not shuffle a stream; shuffle inside the source if needed).

``evaluate`` reports the mean ``loss`` and, when the model maps a batch to ``N x C`` scores and
the last tensor holds integer class labels, ``accuracy`` (then ``metric_name == "accuracy"``,
else ``"loss"``).  ``sparse_grads`` is True when the model has sparse ``Embedding`` /
``EmbeddingBag`` modules.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from spotwise.errors import InputError
from spotwise.user_failures import exit_fix, failure_text, is_user_failure
from spotwise.usercode import refuse_unsafe_reference, user_traceback  # noqa: F401  (user_traceback re-exported)
from spotwise.workloads.base import (
    Batch,
    IndexedDataset,
    TensorIndexedDataset,
    Workload,
    as_index_array,
    evaluate_in_chunks,
    seeded_factory,
)

FIX_IMPORT = (
    "make the module importable on every worker: install its package in this environment, or add "
    "the folder that contains it to PYTHONPATH (export PYTHONPATH=/path/to/dir:$PYTHONPATH)"
)




class UserWorkloadError(InputError):
    """The user's workload code raised: the workload's fault, so exit 2, with its traceback.

    ``details`` holds the traceback of the user's frames (spotwise's own leading frames are cut);
    the CLI prints it on stderr above the one-line message.  Survives pickling (Ray ships it from
    a worker actor to the driver).
    """

    def __init__(self, what: str, fix: str = "", where: str | None = None, details: str = "") -> None:
        super().__init__(what, fix, where)
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (UserWorkloadError, (self.what, self.fix, self.where, self.details))


def blame_workload(name: str, during: str, exc: BaseException) -> UserWorkloadError:
    """The :class:`UserWorkloadError` for ``exc`` raised by workload ``name`` while ``during``."""
    if isinstance(exc, UserWorkloadError):
        return exc
    return UserWorkloadError(
        f"the workload {name} {failure_text(exc, during)}",
        exit_fix(exc, "a workload") + "this is an error in the workload's code, not in spotwise: fix it (its "
        "traceback is printed above)",
        "workload.name",
        details=user_traceback(exc),
    )


def _guard(name: str, during: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with any exception it raises turned into :func:`blame_workload`'s error."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError:
            raise
        except BaseException as e:  # whatever user code raises (sys.exit too) is the user's to fix
            if not is_user_failure(e):
                raise
            raise blame_workload(name, during, e) from e

    return call


class GuardedDataset:
    """:class:`IndexedDataset` whose ``batch`` blames the user's dataset for its exceptions."""

    def __init__(self, ds: IndexedDataset, name: str) -> None:
        self.ds = ds
        self.batch = _guard(name, "while building a batch from its dataset", ds.batch)

    def __len__(self) -> int:
        return len(self.ds)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.ds, attr)


class MapDatasetAdapter:
    """:class:`IndexedDataset` over a map-style torch dataset (``ds[i]`` per index, collated)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def batch(self, indices: np.ndarray) -> Batch:
        from torch.utils.data import default_collate

        idx = as_index_array(indices, len(self))
        out = default_collate([self.ds[int(i)] for i in idx])
        if isinstance(out, torch.Tensor):
            return (out,)
        return tuple(out)


class StreamDataset:
    """:class:`IndexedDataset` over a resumable stream: an ``IterableDataset`` with ``iter_from(position)``
    and ``__len__`` (module docstring).  Index ``i`` is stream position ``i`` of the current pass.

    ``batch(indices)`` reads each contiguous ascending run of ``indices`` from a live iterator: the
    one left where the previous request ended when the run continues it, else a new
    ``iter_from(start)``.  The runtime asks for contiguous ranges (the sampler's order is the identity
    for an ordered workload), so a worker reading consecutive blocks never seeks; a member of ``k``
    seeks once per step (over its peers' shares), so ``iter_from`` should be a cheap seek (a file
    offset, a shard and an offset in it).  Batches are ``default_collate`` of the samples.  Pickled
    (DataLoader workers under ``spawn``) without its live iterator.
    """

    #: the samplers must use the identity order for this dataset
    ordered = True

    def __init__(self, ds: Any) -> None:
        self.ds = ds
        self._n: int | None = None  # the user's __len__, read on first use (its errors are the workload's)
        self._it: Any = None
        self._next = -1

    def __len__(self) -> int:
        if self._n is None:
            self._n = len(self.ds)
        return self._n

    def __getstate__(self) -> dict[str, Any]:
        return {"ds": self.ds, "_n": self._n, "_it": None, "_next": -1}

    def batch(self, indices: np.ndarray) -> Batch:
        from torch.utils.data import default_collate

        idx = as_index_array(indices, len(self))
        if idx.size == 0:
            raise ValueError("a stream has no empty batch to read")
        samples: list[Any] = []
        for run in np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1):
            samples.extend(self._read(int(run[0]), len(run)))
        out = default_collate(samples)
        if isinstance(out, torch.Tensor):
            return (out,)
        return tuple(out)

    def _read(self, start: int, count: int) -> list[Any]:
        if self._it is None or self._next != start:
            self._it = None
            self._it = iter(self.ds.iter_from(start))
            self._next = start
        out = []
        for _ in range(count):
            try:
                out.append(next(self._it))
            except StopIteration:
                self._it = None
                raise InputError(f"the stream ended at position {self._next}, but its __len__ says a pass holds "
                                 f"{self._n} samples", "make iter_from(position) yield every sample from position "
                                 "to __len__() - 1 (and __len__ return the samples per pass)", "workload.name") from None
            self._next += 1
        return out


#: why spotwise needs ``iter_from`` (the fix of a refused IterableDataset)
STREAM_CONTRACT = ("implement iter_from(position) -> an iterator over the samples from stream position `position` "
                   "of the current pass, and __len__() -> the samples per pass (the epoch): spotwise needs a "
                   "resumable position because workers come and go (each reads its own share of every step, and a "
                   "joiner or a resumed run starts mid-stream); see docs/workloads.md, Streaming sources")


def as_indexed(ds: Any, where: str) -> IndexedDataset:
    """Adapt a user dataset to :class:`IndexedDataset` (see the module docstring)."""
    if callable(getattr(ds, "batch", None)) and hasattr(ds, "__len__"):
        return ds
    if isinstance(ds, torch.utils.data.IterableDataset):
        missing = [m for m, ok in (("iter_from(position)", callable(getattr(ds, "iter_from", None))),
                                   ("__len__", callable(getattr(type(ds), "__len__", None)))) if not ok]
        if missing:
            raise InputError(f"the workload function returned an IterableDataset ({type(ds).__name__}) as {where} "
                             f"without {' and '.join(missing)}, so it cannot be resumed at a position",
                             STREAM_CONTRACT, "workload.name")
        return StreamDataset(ds)
    if isinstance(ds, torch.utils.data.TensorDataset):
        return TensorIndexedDataset(*ds.tensors)
    if hasattr(ds, "__getitem__") and hasattr(ds, "__len__"):
        return MapDatasetAdapter(ds)
    raise InputError(
        f"the workload function returned a {type(ds).__name__} as {where}, which is not a dataset",
        "return a torch Dataset/TensorDataset or an object with __len__ and batch(indices)",
        "workload.name",
    )


def _is_criterion(fn: Any) -> bool:
    return isinstance(fn, nn.Module) or getattr(fn, "__module__", "") in ("torch.nn.functional", "torch._C._nn")


#: first-parameter names of a criterion-shaped function ``loss(output, target)``
_OUTPUT_NAMES = frozenset({"logits", "input", "inputs", "output", "outputs", "out", "pred", "preds", "prediction",
                           "predictions", "y_pred", "yhat", "y_hat", "scores"})
LOSS_CONTRACT = ("write the loss as loss(model, batch) returning the batch's mean loss as a scalar tensor, or "
                 "return a torch criterion (an nn.Module such as nn.CrossEntropyLoss(), called as "
                 "loss(model(*batch[:-1]), batch[-1])); see docs/workloads.md")


def _check_loss_signature(fn: Callable[..., Any], name: str) -> None:
    """A plain function whose first parameter is named like a model output (``loss(logits, target)``)
    would be called as ``loss(model, batch)``: refuse it with the contract instead (exit 2)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return
    if params and params[0].name.lower() in _OUTPUT_NAMES:
        args = ", ".join(p.name for p in params)
        raise InputError(f"{name} returned a loss {getattr(fn, '__name__', 'function')}({args}) that takes the model's "
                         f"output first, but a loss function is called as loss(model, batch)", LOSS_CONTRACT,
                         "workload.name")


def _probe_loss(loss: Callable[[nn.Module, Batch], torch.Tensor], model: nn.Module, ds: IndexedDataset,
                name: str) -> None:
    """Call the loss once on two training samples: a scalar tensor with a gradient, or exit 2 with the contract."""
    from spotwise.workloads.base import check_loss

    batch = ds.batch(np.arange(min(2, len(ds))))
    try:
        out = loss(model, batch)
    except InputError as e:
        if isinstance(e.__cause__, TypeError) or "TypeError" in str(e) or "AttributeError" in str(e):
            raise InputError(f"{name}'s loss failed when called as loss(model, batch): {e.what}", LOSS_CONTRACT,
                             "workload.name") from None
        raise
    check_loss(out)


def _adapt_loss(fn: Callable[..., torch.Tensor], name: str = "the workload") -> Callable[[nn.Module, Batch], torch.Tensor]:
    if not _is_criterion(fn):
        _check_loss_signature(fn, name)
    if _is_criterion(fn):

        def criterion_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
            return fn(model(*batch[:-1]), batch[-1])

        return criterion_loss
    return fn


def _wants_seed(fn: Callable[..., Any], params: dict[str, Any]) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    if "seed" in params:
        return False
    return "seed" in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def make_user_workload(spec: Any, seed: int) -> Workload:
    """Import and call ``spec.name`` = ``module:function`` and adapt its result to a :class:`Workload`.

    This executes the user's code (import and call): only trusted specs should name one.  A module
    that cannot be found raises :class:`InputError`; an exception raised by the user's code -- at
    import, in the function, and later in the model factory, loss, dataset or evaluation it
    returned -- raises :class:`UserWorkloadError` (an InputError carrying the user's traceback).
    """
    refuse_unsafe_reference(spec.name, "workload", "workload.name")  # also for a JobSpec built around validation
    mod_name, _, fn_name = spec.name.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            raise InputError(f"cannot import module {mod_name!r}: {type(e).__name__}: {e}", FIX_IMPORT, "workload.name") from None
        raise blame_workload(spec.name, f"while importing {mod_name}", e) from None
    except BaseException as e:  # any failure while importing user code (sys.exit too) is the user's to fix
        if not is_user_failure(e):
            raise
        raise blame_workload(spec.name, f"while importing {mod_name}", e) from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise InputError(
            f"module {mod_name!r} has no function {fn_name!r}",
            f"define {fn_name}(**params) in {getattr(module, '__file__', mod_name)} or fix workload.name",
            "workload.name",
        )
    params = dict(spec.params or {})
    if _wants_seed(fn, params):
        params["seed"] = seed
    try:
        inspect.signature(fn).bind(**params)
    except TypeError as e:
        raise InputError(f"{spec.name} does not accept these parameters: {e}", "fix workload.params to match the function's arguments", "workload.params") from None
    except ValueError:
        pass  # no signature available (builtin); just call it
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        try:
            result = fn(**params)
        except InputError:
            raise
        except BaseException as e:  # the user's function failed (sys.exit too): their traceback, exit 2
            if not is_user_failure(e):
                raise
            raise blame_workload(spec.name, "when called", e) from None
    if isinstance(result, Workload):
        return _guarded_workload(result, spec.name)
    if not isinstance(result, (tuple, list)) or len(result) not in (3, 4):
        raise InputError(
            f"{spec.name} returned {type(result).__name__}, expected a Workload or a tuple (model_or_factory, loss_fn, dataset[, test_dataset])",
            "return one of those",
            "workload.name",
        )
    model_or_factory, loss_fn, train = result[:3]
    test = result[3] if len(result) == 4 else None
    if isinstance(model_or_factory, nn.Module):
        snapshot = copy.deepcopy(model_or_factory)

        def build_model() -> nn.Module:
            return copy.deepcopy(snapshot)

    elif callable(model_or_factory):
        build_model = _guard(spec.name, "in its model factory", seeded_factory(model_or_factory, seed))
    else:
        raise InputError(f"{spec.name} returned {type(model_or_factory).__name__} as the model", "return an nn.Module or a function that builds one", "workload.name")
    if not callable(loss_fn):
        raise InputError(f"{spec.name} returned a non-callable loss ({type(loss_fn).__name__})", "return a loss function or torch criterion", "workload.name")
    train_ds: IndexedDataset = GuardedDataset(as_indexed(train, "the training dataset"), spec.name)
    test_ds: IndexedDataset | None = GuardedDataset(as_indexed(test, "the test dataset"), spec.name) if test is not None else None
    try:
        n_train = len(train_ds)
    except BaseException as e:  # the user's __len__
        if not is_user_failure(e):
            raise
        raise blame_workload(spec.name, "in len() of its training dataset", e) from None
    if n_train == 0:
        raise InputError(f"{spec.name} returned an empty training dataset", "return a dataset with samples", "workload.name")
    loss = _guard(spec.name, "in its loss (or the model's forward pass)", _adapt_loss(loss_fn, spec.name))
    probe_model = build_model()
    if not isinstance(probe_model, nn.Module):
        raise InputError(f"the model factory of {spec.name} returned {type(probe_model).__name__}", "make it return an nn.Module", "workload.name")
    _probe_loss(loss, probe_model, train_ds, spec.name)
    classification = _looks_like_classification(probe_model, train_ds, spec.name)
    sparse = any(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse for m in probe_model.modules())
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=build_model,
        loss=loss,
        train=train_ds,
        test=test_ds,
        metric_name="accuracy" if classification else "loss",
        evaluate=_guard(spec.name, "while evaluating", _make_evaluate(loss, classification)),
        sparse_grads=sparse,
        info={"n_train": len(train_ds), "n_test": len(test_ds) if test_ds is not None else 0, "source": spec.name,
              **({"ordered": True} if getattr(train_ds, "ordered", False) else {})},
    )


def _guarded_workload(wl: Workload, name: str) -> Workload:
    """A user-returned :class:`Workload` whose callables blame the workload for their exceptions."""
    import dataclasses

    if not dataclasses.is_dataclass(wl):
        return wl
    return dataclasses.replace(
        wl,
        build_model=_guard(name, "in its model factory", wl.build_model),
        loss=_guard(name, "in its loss (or the model's forward pass)", wl.loss),
        evaluate=_guard(name, "while evaluating", wl.evaluate),
        train=GuardedDataset(wl.train, name),
        test=GuardedDataset(wl.test, name) if wl.test is not None else None,
    )


def _looks_like_classification(model: nn.Module, ds: IndexedDataset, name: str = "(user workload)") -> bool:
    batch = ds.batch(np.arange(min(2, len(ds))))
    if len(batch) < 2:
        return False
    target = batch[-1]
    if target.dtype not in (torch.int64, torch.int32) or target.dim() != 1:
        return False
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(*batch[:-1])
    except Exception:  # noqa: BLE001 - a model that cannot take the inputs this way simply gets no accuracy
        return False
    except BaseException as e:  # sys.exit in the model's forward: the workload's fault (exit 2)
        if not is_user_failure(e):
            raise
        raise blame_workload(name, "in the model's forward pass", e) from None
    finally:
        model.train(was)
    return isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == target.shape[0]


def _make_evaluate(loss: Callable[[nn.Module, Batch], torch.Tensor], classification: bool):
    def evaluate(model: nn.Module, dataset: IndexedDataset) -> dict[str, float]:
        def per_batch(m: nn.Module, b: Batch) -> dict[str, float]:
            res = {"loss": float(loss(m, b))}
            if classification:
                res["accuracy"] = float((m(*b[:-1]).argmax(dim=1) == b[-1]).float().mean())
            return res

        return evaluate_in_chunks(model, dataset, per_batch, chunk=1024)

    return evaluate
