"""Transactional epoch sampler: how data is resharded when membership changes.

Guarantee (tested): **within an epoch, every sample is used in exactly one committed step** --
none is lost and none is repeated, however workers come and go.

How: each epoch is a seeded permutation of ``0..n-1``.  A step *reserves* index blocks (one per
mini-batch it will compute); when the step commits, the blocks that contributed are *committed*
and the others (a revoked worker's block, the stragglers cancelled by N-sync, an aborted step's
blocks) are *released* back to the front of a pending queue, from which the next reservations are
served first.  An epoch ends only when its permutation is exhausted and nothing of it is pending
or reserved; reservations never cross an epoch boundary (the last batches of an epoch may be
short), so the committed samples of epoch ``e`` are exactly a permutation of the dataset.

The "data lake" reading of ``papers/000_3c734f3ffedcac15.txt`` Sec. III (workers draw i.i.d.
mini-batches from the whole dataset) is what this gives each step: the union of a step's blocks is
a uniformly random subset of the epoch's remaining samples, independent of which workers are up.

**Streaming sources** (``ordered=True``; a workload whose training set is a stream,
:class:`~spotwise.workloads.user.StreamDataset`): the epoch's order is the identity, so an
"epoch" is one pass over the stream and the guarantee becomes: **within a pass, every stream
position is in exactly one committed step, in stream order** (spotwise does not shuffle a
stream; a released block is served again first, so a retried step reads the same positions).
The position in the stream is the sampler's ``(epoch, cursor)`` plus its pending blocks, which
checkpoints already hold; ``ordered`` is part of :meth:`EpochSampler.state`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from spotwise.control.permutation import EpochPermutation, epoch_permutation


@dataclass(frozen=True)
class Block:
    """A reserved mini-batch: ``indices`` from epoch ``epoch``; ``id`` is unique per sampler."""

    id: int
    epoch: int
    indices: np.ndarray


class EpochSampler:
    def __init__(self, n: int, seed: int, ordered: bool = False) -> None:
        if n < 1:
            raise ValueError("EpochSampler needs at least one sample")
        self.n = int(n)
        self.seed = int(seed)
        #: a stream: the identity order every epoch (module docstring)
        self.ordered = bool(ordered)
        self.epoch = 0
        self._cursor = 0
        self._perm = self._permutation(0)
        self._pending: deque[np.ndarray] = deque()
        self._reserved: dict[int, Block] = {}
        self._next_id = 0
        self.committed_in_epoch = 0

    def _permutation(self, epoch: int) -> EpochPermutation:
        """The epoch's order, sliced lazily (:mod:`spotwise.control.permutation`): numpy's
        ``default_rng([seed, epoch]).permutation(n)`` up to 2**22 samples, a seeded bijection above,
        so the sampler's memory does not grow with the dataset; the identity when ``ordered``."""
        return epoch_permutation(self.n, self.seed, epoch, self.ordered)

    # ------------------------------------------------------------------ transactions
    def _advance_epoch_if_done(self) -> None:
        if self._cursor >= self.n and not self._pending and not self._reserved:
            self.epoch += 1
            self._cursor = 0
            self._perm = self._permutation(self.epoch)
            self.committed_in_epoch = 0

    def reserve(self, size: int) -> Block | None:
        """One block of up to ``size`` indices of the current epoch; ``None`` if the epoch's
        remaining samples are all reserved by in-flight blocks (wait for them to settle)."""
        if size < 1:
            raise ValueError("block size must be >= 1")
        self._advance_epoch_if_done()
        parts: list[np.ndarray] = []
        need = size
        while need > 0 and self._pending:
            head = self._pending.popleft()
            if head.size > need:
                parts.append(head[:need])
                self._pending.appendleft(head[need:])
                need = 0
            else:
                parts.append(head)
                need -= head.size
        if need > 0 and self._cursor < self.n:
            take = self._perm[self._cursor:self._cursor + need]
            self._cursor += take.size
            parts.append(take)
        if not parts:
            return None
        block = Block(self._next_id, self.epoch, np.concatenate(parts).astype(np.int64))
        self._next_id += 1
        self._reserved[block.id] = block
        return block

    def commit(self, block: Block) -> None:
        """The block's samples are now part of a committed step."""
        self._pop(block)
        self.committed_in_epoch += block.indices.size
        self._advance_epoch_if_done()

    def release(self, block: Block) -> None:
        """The block was not used (revoked, cancelled or aborted): its samples go back first in line."""
        self._pop(block)
        if block.indices.size:
            self._pending.appendleft(block.indices)

    def release_all(self) -> None:
        for block in sorted(self._reserved.values(), key=lambda b: -b.id):
            self.release(block)

    def _pop(self, block: Block) -> None:
        if self._reserved.pop(block.id, None) is None:
            raise KeyError(f"block {block.id} is not reserved (committed or released twice?)")

    @property
    def in_flight(self) -> int:
        return len(self._reserved)

    # ------------------------------------------------------------------ checkpointing
    def state(self) -> dict[str, Any]:
        """Plain-data state (checkpoints load it with ``weights_only=True``): in-flight blocks
        count as released, since a checkpoint holds only committed progress."""
        pending = [b.indices for b in sorted(self._reserved.values(), key=lambda b: b.id)] + list(self._pending)
        state = {
            "n": self.n, "seed": self.seed, "epoch": self.epoch, "cursor": self._cursor,
            "pending": [p.tolist() for p in pending], "next_id": self._next_id,
            "committed_in_epoch": self.committed_in_epoch,
        }
        if self.ordered:  # only then: a shuffled sampler's state is what it always was
            state["ordered"] = True
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "EpochSampler":
        s = cls(int(state["n"]), int(state["seed"]), bool(state.get("ordered", False)))
        s.epoch = int(state["epoch"])
        s._perm = s._permutation(s.epoch)
        s._cursor = int(state["cursor"])
        s._pending = deque(np.asarray(p, dtype=np.int64) for p in state["pending"] if len(p))
        s._next_id = int(state["next_id"])
        s.committed_in_epoch = int(state["committed_in_epoch"])
        return s
