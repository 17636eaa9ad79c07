"""Image classification workloads: ``mlp-digits``, ``cnn-digits`` and ``cnn-cifar10``.

* digits: scikit-learn's bundled ``load_digits`` (1,797 real 8x8 grey-scale handwritten digits,
  no download).  Features are standardised with the *training* split's mean and standard
  deviation; the train/test split is a seeded permutation (``data_seed``, default 0;
  ``test_fraction``, default 0.2).  Needs scikit-learn (``pip install scikit-learn``).
* CIFAR-10: the "python version" batches a user brings (``workload.dataset`` = the
  ``cifar-10-batches-py`` folder holding ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``,
  pickles with ``b"data"`` uint8 N x 3072, channel-major, and ``b"labels"``).  Images are kept as
  uint8 and normalised per channel only for the requested batch.  The files are Python pickles,
  read by :func:`spotwise.workloads.safe_pickle.read_cifar_pickle`, which runs no code: only the
  numpy arrays, numbers and strings of a genuine batch are accepted, anything else exits 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spotwise.errors import InputError
from spotwise.workloads.base import (
    TensorIndexedDataset,
    Workload,
    classification_evaluate,
    classification_loss,
    read_params,
    seeded_factory,
    seeded_split,
)
from spotwise.workloads.safe_pickle import read_cifar_pickle

DIGITS_DEFAULTS: dict[str, Any] = {"hidden": [128], "channels": [16, 32], "test_fraction": 0.2, "data_seed": 0}


class MLP(nn.Module):
    """Fully connected ReLU classifier ``in -> hidden... -> classes``."""

    def __init__(self, n_in: int, hidden: list[int], n_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = n_in
        for h in hidden:
            layers += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        layers.append(nn.Linear(prev, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(x.shape[0], -1))


class SmallCNN(nn.Module):
    """Two 3x3 conv blocks (ReLU, 2x2 max-pool after each) and a linear head.

    For ``side``-pixel square inputs with ``in_ch`` channels; ``side`` must be divisible by 4.
    """

    def __init__(self, in_ch: int, side: int, channels: list[int], n_classes: int, hidden: int = 64) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_ch, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(c2 * (side // 4) ** 2, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _digits_cache() -> Path:
    root = os.environ.get("SPOTWISE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "spotwise")
    return Path(root) / "sklearn-digits-v1.npz"


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits, cached as ``.npz`` after the first load.

    Importing scikit-learn and parsing its CSV takes about a second, which every new worker actor
    (every joiner after a revocation) would otherwise pay; the cache makes it milliseconds.  The
    cache is written atomically and ignored if unreadable.
    """
    cache = _digits_cache()
    try:
        if not cache.is_file():  # absent, or a FIFO / device under the name: never opened (a FIFO would block)
            raise FileNotFoundError(str(cache))
        with np.load(cache) as z:
            return z["x"].astype(np.float32), z["y"].astype(np.int64)
    except (OSError, KeyError, ValueError):
        pass
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InputError(
            f"the digits workloads need scikit-learn ({e})", "pip install scikit-learn", "workload.name"
        ) from None
    d = load_digits()
    x, y = d.data.astype(np.float32), d.target.astype(np.int64)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp.npz")
        np.savez(tmp, x=x, y=y)
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only home: no cache, just slower starts
    return x, y


def _digits_data(p: dict[str, Any], image: bool) -> tuple[TensorIndexedDataset, TensorIndexedDataset, dict[str, Any]]:
    x, y = _load_digits()
    tr, te = seeded_split(len(y), p["test_fraction"], p["data_seed"])
    mean = x[tr].mean(axis=0)
    std = x[tr].std(axis=0)
    std[std == 0] = 1.0
    x = (x - mean) / std
    xt = torch.from_numpy(x.reshape(-1, 1, 8, 8) if image else x)
    yt = torch.from_numpy(y)
    full = TensorIndexedDataset(xt, yt)
    return full.subset(tr), full.subset(te), {"n_train": len(tr), "n_test": len(te), "source": "sklearn.datasets.load_digits"}


def _check_layers(p: dict[str, Any], key: str, example: list[int], n: int | None = None) -> list[int]:
    layers = list(p[key])
    if (n is not None and len(layers) != n) or any(h <= 0 for h in layers):
        want = f"{n} positive integers" if n is not None else "positive integers"
        raise InputError(f"expected a list of {want}, got {layers!r}", f"use e.g. {example!r}", f"workload.params.{key}")
    return layers


def make_mlp_digits(spec: Any, seed: int) -> Workload:
    """MLP ``64 -> hidden (default [128]) -> 10`` on standardised digits; metric accuracy."""
    p = read_params(spec.params, DIGITS_DEFAULTS, spec.name)
    hidden = _check_layers(p, "hidden", [128])
    train, test, info = _digits_data(p, image=False)
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(lambda: MLP(64, hidden, 10), seed),
        loss=classification_loss,
        train=train,
        test=test,
        metric_name="accuracy",
        evaluate=classification_evaluate,
        info=info,
    )


def make_cnn_digits(spec: Any, seed: int) -> Workload:
    """Small CNN on 1x8x8 digit images (channels default [16, 32]); metric accuracy."""
    p = read_params(spec.params, DIGITS_DEFAULTS, spec.name)
    channels = _check_layers(p, "channels", [16, 32], 2)
    train, test, info = _digits_data(p, image=True)
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(lambda: SmallCNN(1, 8, channels, 10), seed),
        loss=classification_loss,
        train=train,
        test=test,
        metric_name="accuracy",
        evaluate=classification_evaluate,
        info=info,
    )


# --------------------------------------------------------------------------------------- CIFAR-10

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
CIFAR_DEFAULTS: dict[str, Any] = {"channels": [32, 64], "max_train": 0, "max_test": 0}


def require_path(dataset: str | None, workload: str, what: str) -> Path:
    """``spec.dataset`` as an existing path, or InputError saying how to fix it."""
    if not dataset:
        raise InputError(f"workload {workload!r} needs a dataset path", f"set workload.dataset to {what}", "workload.dataset")
    from spotwise.inputfiles import check_input_file

    path = Path(dataset).expanduser()
    if not path.exists():
        raise InputError(f"dataset path {str(path)!r} does not exist", f"check workload.dataset (expected {what})", "workload.dataset")
    # a FIFO would block the reader forever, /dev/zero never end: refused without opening them
    check_input_file(path, what, "workload.dataset", folder_ok=True, capped=False)
    return path


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(data uint8 N x 3072, labels int64 N)`` of one batch file, read without running code
    (:func:`~spotwise.workloads.safe_pickle.read_cifar_pickle`); InputError naming the file otherwise."""
    d = read_cifar_pickle(path)
    if b"data" not in d or b"labels" not in d:
        keys = sorted(repr(k) for k in d)[:10]
        raise InputError(f"not a CIFAR-10 batch (need keys b'data' and b'labels', found {', '.join(keys) or 'none'})",
                         "use the 'python version' of CIFAR-10", str(path))
    data = np.asarray(d[b"data"])
    try:
        labels = np.asarray(d[b"labels"], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise InputError("not a CIFAR-10 batch (b'labels' must be integers)", "use the 'python version' of CIFAR-10",
                         str(path)) from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise InputError(f"b'data' must be uint8 N x 3072, got {data.dtype} {data.shape}", "use the 'python version' of CIFAR-10", str(path))
    if data.shape[0] != labels.shape[0]:
        raise InputError(f"{data.shape[0]} images but {labels.shape[0]} labels", "re-download the batch", str(path))
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise InputError(f"labels must be in 0..9, found {labels.min()}..{labels.max()}", "use CIFAR-10 (not CIFAR-100)", str(path))
    return data, labels


def load_cifar10(path: str | Path) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """Read ``data_batch_1..5`` (those present, at least one) and ``test_batch`` (optional).

    Returns ``((x_train, y_train), (x_test, y_test) or None)`` with ``x`` uint8 N x 3 x 32 x 32.
    """
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{str(path)!r} is not a directory", "point workload.dataset at the cifar-10-batches-py folder", "workload.dataset")
    train_files = [path / f"data_batch_{i}" for i in range(1, 6) if (path / f"data_batch_{i}").is_file()]
    if not train_files:
        raise InputError(f"no data_batch_1..data_batch_5 in {str(path)!r}", "point workload.dataset at the extracted cifar-10-batches-py folder", "workload.dataset")
    parts = [_read_cifar_batch(f) for f in train_files]
    x = np.concatenate([a for a, _ in parts]).reshape(-1, 3, 32, 32)
    y = np.concatenate([b for _, b in parts])
    test = None
    if (path / "test_batch").is_file():
        xt, yt = _read_cifar_batch(path / "test_batch")
        test = (xt.reshape(-1, 3, 32, 32), yt)
    return (x, y), test


def _cifar_transform(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    x, y = batch
    mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return ((x.float() / 255.0 - mean) / std, y)


def make_cnn_cifar10(spec: Any, seed: int) -> Workload:
    """Small CNN on CIFAR-10 3x32x32 images from ``spec.dataset``; metric accuracy.

    ``max_train`` / ``max_test`` (0 = all) keep the first N samples, for quick experiments.
    """
    p = read_params(spec.params, CIFAR_DEFAULTS, spec.name)
    channels = _check_layers(p, "channels", [32, 64], 2)
    path = require_path(spec.dataset, spec.name, "the cifar-10-batches-py folder")
    (x, y), te = load_cifar10(path)
    if p["max_train"] > 0:
        x, y = x[: p["max_train"]], y[: p["max_train"]]
    train = TensorIndexedDataset(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y), transform=_cifar_transform)
    test = None
    if te is not None:
        xt, yt = te
        if p["max_test"] > 0:
            xt, yt = xt[: p["max_test"]], yt[: p["max_test"]]
        test = TensorIndexedDataset(torch.from_numpy(np.ascontiguousarray(xt)), torch.from_numpy(yt), transform=_cifar_transform)
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(lambda: SmallCNN(3, 32, channels, 10, hidden=128), seed),
        loss=classification_loss,
        train=train,
        test=test,
        metric_name="accuracy",
        evaluate=classification_evaluate,
        info={"n_train": len(train), "n_test": len(test) if test is not None else 0, "source": str(path)},
    )
