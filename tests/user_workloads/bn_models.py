"""User workloads for the recipe tests (module:function, issue 28): a small CNN with BatchNorm on
learnable synthetic images, returned in the tuple form (model factory, criterion, train, test)."""

from __future__ import annotations

import torch
from torch import nn


def bn_cnn(seed: int = 0, n_train: int = 512, n_test: int = 256, width: int = 8):
    g = torch.Generator().manual_seed(1234)
    templates = torch.randn(4, 3, 8, 8, generator=g)

    def data(n: int, off: int):
        gg = torch.Generator().manual_seed(99 + off)
        y = torch.randint(0, 4, (n,), generator=gg)
        x = templates[y] + 0.8 * torch.randn(n, 3, 8, 8, generator=gg)
        return torch.utils.data.TensorDataset(x, y)

    def model() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                             nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 4))

    return model, nn.CrossEntropyLoss(), data(n_train, 0), data(n_test, 1)


def vector_loss(seed: int = 0):
    """A loss that forgets to reduce: the runtime must refuse it (exit 2), not crash."""
    model, _, train, test = bn_cnn(seed)

    def loss(m: nn.Module, batch):
        x, y = batch
        return nn.functional.cross_entropy(m(x), y, reduction="none")

    return model, loss, train, test


def exploding(seed: int = 0):
    """A workload whose loss becomes NaN after a few steps (a huge learning rate does it)."""
    model, crit, train, test = bn_cnn(seed)

    def loss(m: nn.Module, batch):
        x, y = batch
        out = crit(m(x), y)
        return out * 1e30 * 1e30  # inf at once
    return model, loss, train, test


def frozen_backbone(seed: int = 0):
    """Fine-tuning with a frozen backbone (issue 40): the first conv and the first BatchNorm's affine
    weights have ``requires_grad=False``; only the rest is trained."""
    factory, crit, train, test = bn_cnn(seed)

    def model() -> nn.Module:
        m = factory()
        for p in (*m[0].parameters(), *m[1].parameters()):
            p.requires_grad_(False)
        return m

    return model, crit, train, test


def unseeded_init(seed: int = 0):
    """A model initialised from fresh entropy in every process (a user who forgot the seed): a
    member's initial parameters differ from the coordinator's, which must win."""
    import os

    factory, crit, train, test = bn_cnn(seed)

    def model() -> nn.Module:
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
        return factory()

    return model, crit, train, test


def unseeded_frozen(seed: int = 0):
    """A frozen first layer initialised from fresh entropy in every process (issue 41 item 3: frozen
    parameters do not travel with replicas and regroups, so a joiner whose own differ must be handed
    the whole vector).  Every sample is the same, so with a learning rate of ~0 every step's mean loss
    is the same number exactly when every member holds the same frozen layer."""
    import os

    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(5)).repeat(512, 1)
    data = torch.utils.data.TensorDataset(x, torch.ones(512, dtype=torch.long))

    def model() -> nn.Module:
        m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        with torch.no_grad():
            m[0].weight.copy_(torch.randn(16, 8, generator=g))
            m[0].bias.copy_(torch.randn(16, generator=g))
        m[0].requires_grad_(False)
        return m

    return model, nn.CrossEntropyLoss(), data, data
