"""Workloads that misbehave (issue 30 items 9 and 10), in the tuple form (model factory, loss,
train, test): each must end its command with exit 2 naming the workload, never exit 0 or 1."""

from __future__ import annotations

import sys

import torch
from torch import nn

_N, _DIM = 64, 6


def _data(seed: int = 0) -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(_N, _DIM, generator=g)
    y = (x @ torch.randn(_DIM, 3, generator=g)).argmax(1)
    ds = torch.utils.data.TensorDataset(x, y)
    return ds, ds


def _model() -> nn.Module:
    return nn.Linear(_DIM, 3)


def exits_when_called(code: int = 3):
    """``sys.exit(code)`` in the workload function itself."""
    sys.exit(code)


def exits_in_loss(code: int = 0, after: int = 0):
    """A loss that calls ``sys.exit(code)`` once it has been called more than ``after`` times in
    this process (the build-time probe counts as one call)."""
    train, test = _data()
    calls = [0]

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        calls[0] += 1
        if calls[0] > after:
            sys.exit(code)
        return nn.functional.cross_entropy(model(batch[0]), batch[1])

    return _model, loss, train, test


def nan_loss(after: int = 0):
    """A loss that is NaN once it has been called more than ``after`` times (a diverged run)."""
    train, test = _data()
    calls = [0]

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        calls[0] += 1
        out = nn.functional.cross_entropy(model(batch[0]), batch[1])
        return out * float("nan") if calls[0] > after else out

    return _model, loss, train, test


def vector_loss(after: int = 0):
    """A loss that returns the per-sample vector (no ``.mean()``) once called more than ``after`` times."""
    train, test = _data()
    calls = [0]

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        calls[0] += 1
        per = nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="none")
        return per if calls[0] > after else per.mean()

    return _model, loss, train, test
