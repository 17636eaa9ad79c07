"""A batch of the user's dataset for an array of sample indices (the user-loop API's data side).

Three kinds of dataset are taken as they are:

* an index-addressed one (spotwise's :class:`~spotwise.workloads.base.IndexedDataset`: ``len`` and
  ``batch(indices)``), asked for the whole batch at once;
* a map-style ``torch.utils.data.Dataset`` (``len`` and ``dataset[i]``), whose samples are collated
  with the script's ``collate_fn`` or PyTorch's own ``default_collate`` -- what a ``DataLoader``
  would hand out for the same indices;
* a resumable stream: an ``IterableDataset`` with ``__len__`` and ``iter_from(position)``
  (:class:`~spotwise.workloads.user.StreamDataset`), read in order -- its epochs are the identity
  order, each member reading its share of a step's positions.

:class:`BatchFeed` serves the batches, built ahead by ``torch.utils.data.DataLoader`` worker
processes when ``num_workers > 0`` (:class:`~spotwise.workloads.loading.BlockLoader`): it predicts
the blocks this process will take -- the same membership and batches per step as the last step --
and a wrong prediction (a regroup) only costs speed, never a different batch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from spotwise.elastic.positions import StreamPosition
from spotwise.errors import InputError


def dataset_size(dataset: Any) -> int:
    """``len(dataset)``; InputError (exit 2) for a dataset without one (an iterable-style dataset)."""
    try:
        n = int(len(dataset))
    except TypeError:
        raise InputError(f"the dataset given to job.data() ({type(dataset).__name__}) has no len(): spotwise hands out "
                         "batches by sample index, so every sample is trained once per epoch and a resume continues "
                         "where the run was", "pass a map-style dataset (len() and dataset[i], as a torch Dataset has) "
                         "or an object with len() and batch(indices)", "job.data") from None
    if n < 1:
        raise InputError("the dataset given to job.data() is empty", "pass a dataset with at least one sample", "job.data")
    return n


def batch_maker(dataset: Any, collate_fn: Callable[[list[Any]], Any] | None) -> Callable[[np.ndarray], Any]:
    """A function from an index array to the batch for it (module docstring)."""
    batch = getattr(dataset, "batch", None)
    if collate_fn is None and callable(batch):
        return lambda idx: batch(np.asarray(idx, dtype=np.int64))
    if not hasattr(dataset, "__getitem__"):
        raise InputError(f"the dataset given to job.data() ({type(dataset).__name__}) cannot be indexed",
                         "pass a map-style dataset (dataset[i]) or an object with batch(indices)", "job.data")
    if collate_fn is None:
        from torch.utils.data import default_collate

        collate_fn = default_collate
    fn = collate_fn
    return lambda idx: fn([dataset[int(i)] for i in idx])


def as_dataset(dataset: Any) -> Any:
    """The user's dataset; a stream (``iter_from``: an ``IterableDataset``, or no ``dataset[i]``) wrapped
    to be read by position."""
    from torch.utils.data import IterableDataset

    if callable(getattr(dataset, "iter_from", None)) and (isinstance(dataset, IterableDataset)
                                                          or not hasattr(dataset, "__getitem__")):
        from spotwise.workloads.user import StreamDataset

        return StreamDataset(dataset)
    return dataset


class _Batcher:
    """An index-addressed view of the user's dataset (what :class:`BlockLoader`'s workers call)."""

    def __init__(self, make: Callable[[np.ndarray], Any], n: int) -> None:
        self.make, self.n = make, int(n)

    def __len__(self) -> int:
        return self.n

    def batch(self, indices: np.ndarray) -> Any:
        return self.make(indices)


class BatchFeed:
    """The batches of one dataset by index block, built ahead when asked to (module docstring)."""

    def __init__(self, dataset: Any, collate_fn: Any = None, num_workers: int = 0, prefetch: int = 2,
                 pin_memory: bool = False) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"job.data(num_workers={num_workers!r}): a number of DataLoader worker processes >= 0")
        ds = as_dataset(dataset)
        self.n = dataset_size(ds)
        self.ordered = bool(getattr(ds, "ordered", False))
        self.make = batch_maker(ds, collate_fn)
        self.loader: Any = None
        if num_workers > 0:
            from spotwise.workloads.loading import BlockLoader

            self.loader = BlockLoader(_Batcher(self.make, self.n), num_workers, int(prefetch), bool(pin_memory))
        self._pred: tuple[int, int, int, int] | None = None
        self._pred_at = -1

    def plan(self, position: StreamPosition, k: int, r: int, per_step: int, b: int) -> None:
        """A step begins at ``position`` with ``k`` members (this one ``r``) taking ``per_step``
        batches of ``b`` each: the loader keeps its prediction if it said so, else predicts anew."""
        if self.loader is None:
            return
        key = (int(k), int(r), max(1, int(per_step)), int(b))
        if key == self._pred and position.absolute == self._pred_at:
            self._pred_at += key[0] * key[2] * key[3]
            return
        self._pred = key
        self._pred_at = position.absolute + key[0] * key[2] * key[3]
        start = StreamPosition(position.n, position.seed, position.epoch, position.pos, position.ordered)
        self.loader.expect(_blocks(start, *key))

    def batch(self, indices: np.ndarray) -> Any:
        return self.loader.batch(indices) if self.loader is not None else self.make(indices)

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()


def _blocks(at: StreamPosition, k: int, r: int, per_step: int, b: int) -> Iterator[np.ndarray]:
    while True:
        for j in range(per_step):
            yield at.block(j * k + r, b)
        at.advance(k * per_step * b)
