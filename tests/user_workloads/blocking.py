"""User workloads whose code blocks (issue 54 item 9): a stream whose ``iter_from`` never returns --
waiting on an event, or sleeping in a loop -- and a workload function that never returns.  Each waits
until a test sets :data:`RELEASE`, so nothing is left running after the test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import torch
from torch import nn

#: set by the tests when they are done: every blocked call returns
RELEASE = threading.Event()


class BlockingStream(torch.utils.data.IterableDataset):
    def __init__(self, how: str, n: int = 64) -> None:
        self.how, self.n = how, n

    def __len__(self) -> int:
        return self.n

    def iter_from(self, position: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.how == "event":
            RELEASE.wait()  # a wait on a lock: as a queue or socket read would block
        else:
            while not RELEASE.is_set():
                time.sleep(0.05)
        for i in range(int(position), self.n):
            yield torch.zeros(6), torch.tensor(i % 3)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iter_from(0)


def _parts(how: str):
    return (lambda: nn.Linear(6, 3)), nn.CrossEntropyLoss(), BlockingStream(how)


def waits(seed: int = 0):
    """iter_from waits on an event."""
    return _parts("event")


def sleeps(seed: int = 0):
    """iter_from sleeps (time.sleep in a loop)."""
    return _parts("sleep")


def never_returns(seed: int = 0):
    """The workload function itself blocks."""
    RELEASE.wait()
    return _parts("event")
