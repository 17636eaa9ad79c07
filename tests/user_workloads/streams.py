"""User workloads for the streaming tests (issue 28 item 4): IterableDatasets, with and without a
resumable position, in the tuple form (model factory, criterion, train, test)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

#: every iter_from(position) call of any CountingStream in this process (the tests read it)
SEEKS: list[int] = []


class CountingStream(torch.utils.data.IterableDataset):
    """A stream of ``n`` samples per pass; the sample at position ``i`` is ``(x_i, y_i)`` of a fixed
    seeded table (so the tests can tell which positions a batch holds)."""

    def __init__(self, n: int = 96, dim: int = 6, table_seed: int = 5) -> None:
        g = torch.Generator().manual_seed(table_seed)
        self.n = n
        self.x = torch.randn(n, dim, generator=g)
        w = torch.randn(dim, 3, generator=g)
        self.y = (self.x @ w).argmax(1)

    def __len__(self) -> int:
        return self.n

    def iter_from(self, position: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        SEEKS.append(int(position))
        for i in range(int(position), self.n):
            yield self.x[i], self.y[i]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iter_from(0)


class PlainStream(torch.utils.data.IterableDataset):
    """An ordinary IterableDataset: no resumable position."""

    def __len__(self) -> int:
        return 10

    def __iter__(self):
        for i in range(10):
            yield torch.zeros(6), torch.tensor(i % 3)


def stream(seed: int = 0, n: int = 96):
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    return model, nn.CrossEntropyLoss(), CountingStream(n), CountingStream(32, table_seed=6)


def no_position(seed: int = 0):
    return (lambda: nn.Linear(6, 3)), nn.CrossEntropyLoss(), PlainStream()
