"""Where a user loop's batches come from: positions in the concatenation of the epochs' orders.

The data side of the user-loop API (issue 41 item 1; the sampler guarantee of
:mod:`spotwise.control.sampler`).  Epoch ``e`` visits the training set in the order
``epoch_permutation(n, seed, e)`` (a stream: the identity), and the epochs follow each other: a
run's data is the sequence ``order_0 + order_1 + ...``, and its *position* is an offset into it
(``epoch * n + pos``).  A step with ``k`` members, each pulling ``A`` batches of ``b``, takes the
next ``k * A * b`` positions: micro-batch ``j`` of member ``r`` is block ``j * k + r``.  Every block is
full (a step that reaches an epoch's end takes the next epoch's first samples), so every member of a
step computes on the same number of samples and each member's share is exactly ``1 / k``; within
every epoch, every sample is in exactly one committed step.  A step that fails is retried from the
same position with the new membership's split: the same samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spotwise.control.permutation import EpochPermutation, epoch_permutation


@dataclass
class StreamPosition:
    """A position in the epochs' concatenated orders (module docstring)."""

    n: int
    seed: int
    epoch: int = 0
    pos: int = 0
    ordered: bool = False
    _orders: dict[int, EpochPermutation] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("a data position needs at least one sample")
        if not 0 <= self.pos < self.n or self.epoch < 0:
            raise ValueError(f"position (epoch {self.epoch}, {self.pos}) is outside a training set of {self.n}")

    @property
    def absolute(self) -> int:
        return self.epoch * self.n + self.pos

    def order(self, epoch: int) -> EpochPermutation:
        """Epoch ``epoch``'s order (sliced lazily: memory does not grow with the dataset)."""
        got = self._orders.get(epoch)
        if got is None:
            got = epoch_permutation(self.n, self.seed, epoch, self.ordered)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = got
        return got

    def indices(self, start: int, count: int) -> np.ndarray:
        """The sample indices at positions ``[absolute + start, absolute + start + count)``."""
        out: list[np.ndarray] = []
        at = self.absolute + int(start)
        left = int(count)
        while left > 0:
            e, p = divmod(at, self.n)
            take = min(left, self.n - p)
            out.append(np.asarray(self.order(e)[p:p + take], dtype=np.int64))
            at += take
            left -= take
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def block(self, i: int, b: int) -> np.ndarray:
        """Block ``i`` of ``b`` samples from here."""
        return self.indices(int(i) * int(b), int(b))

    def advance(self, samples: int) -> None:
        self.epoch, self.pos = divmod(self.absolute + int(samples), self.n)

    def moved_to(self, epoch: int, pos: int) -> None:
        self.epoch, self.pos = int(epoch), int(pos)
