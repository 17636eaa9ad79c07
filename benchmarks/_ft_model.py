"""The model and data both sides of ``benchmarks/torchft_side_by_side.py`` train: an MLP classifier
(3 x 1024 hidden, ~2.2M parameters) on a generated dataset whose every sample carries its id."""

from __future__ import annotations

import torch
from torch import nn

IN, HIDDEN, CLASSES = 64, 1024, 10


def dataset(n: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, IN, generator=g)
    w = torch.randn(IN, CLASSES, generator=g)
    return torch.utils.data.TensorDataset(x, (x @ w).argmax(1), torch.arange(n))


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def optimizer(params) -> torch.optim.Optimizer:  # type: ignore[no-untyped-def]
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
