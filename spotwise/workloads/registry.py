"""Named workloads: ``make_workload(spec, seed)`` builds one inside a worker.

Built-ins (see each module's docstring):

==================  ======================================================  ===========
name                what                                                    metric
==================  ======================================================  ===========
``mlp-digits``      MLP on scikit-learn's bundled 8x8 digits                accuracy
``cnn-digits``      small CNN on the same digits as 1x8x8 images            accuracy
``sparse-logreg``   sparse logistic regression, Criteo-like or Criteo TSV   accuracy
``pmf``             matrix factorisation, MovieLens-like or ML ratings      rmse
``cnn-cifar10``     small CNN on CIFAR-10 python batches (needs dataset)    accuracy
``resnet18-cifar``  ResNet-18 on CIFAR-10 batches or lazy synthetic images  accuracy
``gpt-bytes``       nanoGPT-style byte-level LM on a text file or built-in  loss
==================  ======================================================  ===========

Any other name of the form ``package.module:function`` is a user workload
(:mod:`spotwise.workloads.user`).  ``Workload.family`` is ``spec.family`` (the key of the
instance catalog's throughput profiles).  More built-ins can be added with
:func:`register_workload`.
"""

from __future__ import annotations

from typing import Any, Callable

from spotwise.errors import InputError
from spotwise.workloads.base import Workload
from spotwise.workloads.criteo import make_sparse_logreg
from spotwise.workloads.gpt import make_gpt_bytes
from spotwise.workloads.movielens import make_pmf
from spotwise.workloads.resnet import make_resnet18_cifar
from spotwise.workloads.user import make_user_workload
from spotwise.workloads.vision import make_cnn_cifar10, make_cnn_digits, make_mlp_digits

Builder = Callable[[Any, int], Workload]

_REGISTRY: dict[str, Builder] = {
    "mlp-digits": make_mlp_digits,
    "cnn-digits": make_cnn_digits,
    "sparse-logreg": make_sparse_logreg,
    "pmf": make_pmf,
    "cnn-cifar10": make_cnn_cifar10,
    "resnet18-cifar": make_resnet18_cifar,
    "gpt-bytes": make_gpt_bytes,
}


def workload_names() -> list[str]:
    """Names of the registered built-in workloads."""
    return list(_REGISTRY)


def register_workload(name: str, builder: Builder, *, replace: bool = False) -> None:
    """Register ``builder(spec, seed) -> Workload`` under ``name`` (no ``:`` allowed)."""
    if not name or ":" in name:
        raise ValueError(f"workload names must be non-empty and contain no ':', got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"workload {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = builder


def make_workload(spec: Any, seed: int) -> Workload:
    """Build the workload named by ``spec`` (a :class:`spotwise.config.WorkloadSpec`) for ``seed``.

    Deterministic: the same (spec, seed) gives the same data, the same batches for the same
    indices, and the same initial weights from ``build_model()``, in any process.  Raises
    :class:`InputError` for an unknown name, bad ``params``, a missing or malformed dataset, or a
    user module that cannot be imported.
    """
    name = spec.name
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer, got {seed!r}", "pass an integer seed, e.g. 0", "seed")
    if getattr(spec, "script", None) is not None:  # a training script: spotwise.elastic.describe.workload_for
        raise InputError("a training script (workload.script) is not a workload spotwise builds",
                         "build it with spotwise.elastic.describe.workload_for", "workload.script")
    if isinstance(name, str) and ":" in name:
        return make_user_workload(spec, seed)
    builder = _REGISTRY.get(name)
    if builder is None:
        raise InputError(
            f"unknown workload {name!r}; valid names are {', '.join(_REGISTRY)}",
            "use one of them or 'package.module:function' for your own",
            "workload.name",
        )
    if spec.params is not None and not isinstance(spec.params, dict):
        raise InputError(f"params must be a mapping, got {type(spec.params).__name__}", "write workload.params as key: value pairs", "workload.params")
    return builder(spec, seed)
