"""``resnet18-cifar``: a ResNet-18 for 3x32x32 images (He et al., 2016), on CIFAR-10 or synthetic data.

The model is the CIFAR variant of ResNet-18 from "Deep Residual Learning for Image Recognition"
(He, Zhang, Ren, Sun, CVPR 2016): a 3x3 convolution stem (stride 1, no max-pool), four stages of
:class:`BasicBlock` (two 3x3 conv + BatchNorm2d, identity or 1x1-conv projection shortcut) with
``width``, ``2*width``, ``4*width``, ``8*width`` channels and stride 1, 2, 2, 2, global average
pooling and a linear head.  With the default ``width=64`` and ``blocks=[2, 2, 2, 2]`` it is the
usual ~11.2M-parameter CIFAR ResNet-18; smaller widths give the same architecture, cheaper.

Parameters (``workload.params``):

* ``width`` (64), ``blocks`` ([2, 2, 2, 2]): the model;
* ``n_train`` (50000), ``n_test`` (10000): the number of samples; with a dataset, the first
  ``n_train`` / ``n_test`` CIFAR-10 samples (at most all of them);
* ``noise`` (1.0), ``data_seed`` (0): the synthetic generator (see below).

Data:

* ``workload.dataset`` set: the CIFAR-10 "python version" batches, read by
  :func:`spotwise.workloads.vision.load_cifar10` (the ``cifar-10-batches-py`` folder; pickles, read
  by :mod:`spotwise.workloads.safe_pickle`, which runs no code and refuses anything but a batch).
* otherwise: synthetic CIFAR-shaped, learnable data, generated *lazily per index*.  Each of the
  10 classes has a fixed smooth random template (seeded by ``data_seed``); sample ``i`` draws,
  from ``np.random.default_rng([data_seed, split, i])``, its label, a circular shift of up to 4
  pixels each way and per-pixel Gaussian noise (``noise`` times the template's scale), and is
  quantised to uint8 like a real image.  Nothing is held per sample, so ``n_train=1_000_000``
  costs no memory, and ``batch(idx)`` is a pure function of ``idx``.

Batches are ``(x float32 N x 3 x 32 x 32, normalised with the CIFAR-10 channel statistics;
y int64 N)``; the loss is cross-entropy, the metric accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from spotwise.errors import InputError
from spotwise.workloads.base import (
    Batch,
    IndexedDataset,
    TensorIndexedDataset,
    Workload,
    as_index_array,
    classification_loss,
    evaluate_in_chunks,
    positive,
    read_params,
    seeded_factory,
)
from spotwise.workloads.memory import check_memory, resnet_bytes
from spotwise.workloads.vision import _cifar_transform, load_cifar10, require_path

RESNET_DEFAULTS: dict[str, Any] = {
    "width": 64,
    "blocks": [2, 2, 2, 2],
    "n_train": 50000,
    "n_test": 10000,
    "noise": 1.0,
    "data_seed": 0,
}

N_CLASSES = 10
#: evaluation chunk: bounds activation memory of a width-64 ResNet-18 (512 x 64 x 32 x 32 floats = 128 MiB)
EVAL_CHUNK = 512
#: largest circular shift (pixels, each axis) of a synthetic sample's template
MAX_SHIFT = 4


# ------------------------------------------------------------------------------------------ model


class BasicBlock(nn.Module):
    """The two-layer residual block of ResNet-18/34 (He et al., 2016, Fig. 2 left).

    ``relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))``; the shortcut is the identity, or a
    1x1 strided convolution with BatchNorm when the shape changes (option B of the paper).
    """

    expansion = 1

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """ResNet for 32x32 inputs (He et al., 2016, CIFAR stem): 3x3 conv stem, no max-pool,
    ``len(blocks)`` stages of :class:`BasicBlock` (channels ``width * 2**s``, stride 2 from the
    second stage on), global average pooling, linear classifier.

    ``ResNetCifar(64, [2, 2, 2, 2])`` is ResNet-18 (11,173,962 parameters for 10 classes).
    """

    def __init__(self, width: int = 64, blocks: list[int] | tuple[int, ...] = (2, 2, 2, 2), n_classes: int = N_CLASSES, in_ch: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, width, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages: list[nn.Module] = []
        prev = width
        for s, n in enumerate(blocks):
            ch = width * 2**s
            layers: list[nn.Module] = []
            for b in range(n):
                layers.append(BasicBlock(prev, ch, stride=2 if (s > 0 and b == 0) else 1))
                prev = ch
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(prev, n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# ------------------------------------------------------------------------------------------- data


def _bilinear_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source rows and weights of bilinear upsampling ``n_in -> n_out`` (half-pixel centres, clamped edges)."""
    src = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (src - lo).astype(np.float32)


def _class_templates(data_seed: int) -> np.ndarray:
    """Ten smooth random 3x32x32 float32 templates (about unit scale), one per class.

    Low-frequency structure (a 3x8x8 Gaussian field, bilinearly upsampled) so a CNN -- and its
    pooling -- can pick them out under noise and shifts.  Only element-wise arithmetic (no BLAS,
    no reductions), so every worker computes bit-identical templates whatever its CPU.
    """
    rng = np.random.default_rng([int(data_seed), 2])
    coarse = rng.standard_normal((N_CLASSES, 3, 8, 8)).astype(np.float32)
    lo, hi, w = _bilinear_axis(8, 32)
    rows = coarse[:, :, lo, :] * (1 - w)[:, None] + coarse[:, :, hi, :] * w[:, None]  # 10 x 3 x 32 x 8
    fine = rows[:, :, :, lo] * (1 - w) + rows[:, :, :, hi] * w  # 10 x 3 x 32 x 32
    return (fine * np.float32(1.4)).astype(np.float32)  # bilinear smoothing shrinks the scale to ~0.7


class SyntheticCifar:
    """A CIFAR-shaped :class:`~spotwise.workloads.base.IndexedDataset` generated per index.

    Sample ``i`` is a pure function of ``(data_seed, stream, i)``: label, shift and noise come
    from ``np.random.default_rng([data_seed, stream, i])`` (``stream`` 0 = train, 1 = test), so
    nothing per sample is stored and any size costs the same memory.
    """

    def __init__(self, n: int, templates: np.ndarray, noise: float, data_seed: int, stream: int) -> None:
        self.n = int(n)
        self.templates = templates
        self.noise = float(noise)
        self.data_seed = int(data_seed)
        self.stream = int(stream)

    def __len__(self) -> int:
        return self.n

    def raw(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(uint8 images N x 3 x 32 x 32, int64 labels N)`` for ``indices``."""
        idx = as_index_array(indices, self.n)
        k = idx.size
        labels = np.empty(k, dtype=np.int64)
        shifts = np.empty((k, 2), dtype=np.int64)
        noise = np.empty((k, 3, 32, 32), dtype=np.float32)
        for j, i in enumerate(idx.tolist()):
            rng = np.random.default_rng([self.data_seed, self.stream, i])
            labels[j] = rng.integers(N_CLASSES)
            shifts[j] = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=2)
            noise[j] = rng.standard_normal((3, 32, 32), dtype=np.float32)
        # shifted templates, vectorised: gather rows/cols with per-sample circular offsets
        ar = np.arange(32)
        rows = (ar[None, :] - shifts[:, :1]) % 32  # k x 32
        cols = (ar[None, :] - shifts[:, 1:]) % 32
        base = self.templates[labels]  # k x 3 x 32 x 32
        base = base[np.arange(k)[:, None, None, None], np.arange(3)[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]]
        img = 128.0 + 48.0 * (base + self.noise * noise)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8), labels

    def batch(self, indices: np.ndarray) -> Batch:
        x, y = self.raw(indices)
        return _cifar_transform((torch.from_numpy(x), torch.from_numpy(y)))


def _classification_per_batch(model: nn.Module, batch: Batch) -> dict[str, float]:
    x, y = batch
    logits = model(x)
    return {
        "loss": float(torch.nn.functional.cross_entropy(logits, y)),
        "accuracy": float((logits.argmax(dim=1) == y).float().mean()),
    }


def resnet_evaluate(model: nn.Module, dataset: IndexedDataset) -> dict[str, float]:
    """Cross-entropy and accuracy over ``dataset`` (as
    :func:`~spotwise.workloads.base.classification_evaluate`, in chunks of :data:`EVAL_CHUNK` so
    a width-64 ResNet's activations stay small)."""
    return evaluate_in_chunks(model, dataset, _classification_per_batch, chunk=EVAL_CHUNK)


def _real_cifar(path: Any, n_train: int, n_test: int) -> tuple[TensorIndexedDataset, TensorIndexedDataset | None]:
    (x, y), te = load_cifar10(path)
    x, y = x[:n_train], y[:n_train]
    train = TensorIndexedDataset(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y), transform=_cifar_transform)
    test = None
    if te is not None:
        xt, yt = te[0][:n_test], te[1][:n_test]
        test = TensorIndexedDataset(torch.from_numpy(np.ascontiguousarray(xt)), torch.from_numpy(yt), transform=_cifar_transform)
    return train, test


def make_resnet18_cifar(spec: Any, seed: int) -> Workload:
    """ResNet-18 (He et al., 2016; CIFAR stem) on CIFAR-10 or lazily generated synthetic images.

    See the module docstring for the parameters.  ``info`` holds ``n_train``, ``n_test``,
    ``n_params`` and ``source`` (the dataset path, or ``"synthetic"``).
    """
    p = read_params(spec.params, RESNET_DEFAULTS, spec.name)
    width = int(p["width"])
    positive(width, "width", 64)
    blocks = [int(b) for b in p["blocks"]]
    if not blocks or any(b <= 0 for b in blocks):
        raise InputError(f"expected a non-empty list of positive integers, got {blocks!r}", "use e.g. [2, 2, 2, 2]", "workload.params.blocks")
    positive(p["n_train"], "n_train", 50000)
    if p["n_test"] < 0:
        raise InputError(f"must be >= 0, got {p['n_test']!r}", "use e.g. 10000 (0 = no test set)", "workload.params.n_test")
    if not p["noise"] >= 0:
        raise InputError(f"must be >= 0, got {p['noise']!r}", "use e.g. 1.0", "workload.params.noise")

    train: IndexedDataset
    test: IndexedDataset | None
    if spec.dataset:
        path = require_path(spec.dataset, spec.name, "the cifar-10-batches-py folder")
        train, test = _real_cifar(path, p["n_train"], p["n_test"])
        source = str(path)
    else:
        templates = _class_templates(p["data_seed"])
        train = SyntheticCifar(p["n_train"], templates, p["noise"], p["data_seed"], stream=0)
        test = SyntheticCifar(p["n_test"], templates, p["noise"], p["data_seed"], stream=1) if p["n_test"] > 0 else None
        source = "synthetic"
    if test is not None and len(test) == 0:
        test = None

    def make() -> nn.Module:
        return ResNetCifar(width, blocks, N_CLASSES)

    with torch.device("meta"):  # count without allocating or touching any RNG
        n_params = sum(t.numel() for t in make().parameters())
    check_memory(resnet_bytes(n_params, width, int(getattr(spec, "batch_size", 1) or 1)), p, ("width", "blocks"), spec.params, spec.name)
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(make, seed),
        loss=classification_loss,
        train=train,
        test=test,
        metric_name="accuracy",
        evaluate=resnet_evaluate,
        info={
            "n_train": len(train),
            "n_test": len(test) if test is not None else 0,
            "n_params": int(n_params),
            "source": source,
            "width": width,
            "blocks": blocks,
        },
    )
