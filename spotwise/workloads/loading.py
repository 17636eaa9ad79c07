"""Batches built ahead by ``torch.utils.data.DataLoader`` worker processes (issue 28 item 4).

The runtime addresses data by sample index: a worker calls ``dataset.batch(indices)``
(:class:`~spotwise.workloads.base.IndexedDataset`).  For a dataset whose ``batch`` is expensive
(a map-style dataset reading and decoding one file per ``__getitem__``) that work can run in
other processes *ahead* of the training thread, if the worker knows which indices it will ask for
next.  A collective member does (:mod:`spotwise.planes.collective.member`): in a generation its
blocks are a function of the data cursor, the membership and the strategy, so it hands them to a
:class:`BlockLoader` when the generation starts (:meth:`BlockLoader.expect`) and takes the batches
in that order (:meth:`BlockLoader.batch`).

How: a real ``torch.utils.data.DataLoader`` over :class:`_BatchSource`, a thin map-style wrapper
of the IndexedDataset whose ``__getitems__(list_of_indices)`` is ``dataset.batch(indices)`` (the
DataLoader's fetcher calls ``__getitems__`` when a dataset has it, so a whole block is one call,
the dataset's own batching); the expected blocks are its ``batch_sampler``, ``collate_fn`` is the
identity, ``num_workers`` / ``prefetch_factor`` / ``pin_memory`` come from the spec's
``workload.loader`` (:class:`~spotwise.training.recipe.LoaderSpec`).  So the samples and their
order are exactly the runtime's sampler's; the DataLoader only decides *when* and *where* a batch
is built.  A request that is not the next expected block (a step retried after a failure, a
prediction that does not hold) drops the DataLoader -- its worker processes stop -- and the loader
serves ``dataset.batch(indices)`` directly until the next :meth:`BlockLoader.expect`: a wrong
prediction costs speed, never a different batch.

Robustness:

* **worker processes** never outlive the loader: :meth:`BlockLoader.reset` / :meth:`BlockLoader.close`
  shut them down (joined, terminated if they hang); they are daemonic, and each exits by itself
  when its parent dies (the DataLoader's watchdog), e.g. a revoked member's ``os._exit``.
* **an exception in a worker** (the dataset's ``batch`` raised) comes back as a marker, not as
  the DataLoader's re-wrapped copy; the loader then builds that batch with the direct call, which
  raises the dataset's own exception (type, message, traceback -- e.g. the
  :class:`~spotwise.workloads.user.UserWorkloadError` of a user's dataset), exactly what
  ``num_workers: 0`` would raise.  A worker that dies or a DataLoader that fails in any other way
  drops the DataLoader and falls back to the direct call.
* **each worker process holds its own copy of the dataset**.  Workers are started with the
  ``fork`` start method where the platform has it (Linux): the copy is the parent's memory, shared
  copy-on-write, and nothing is pickled (a dataset of tensors or numpy arrays stays shared; a
  dataset holding millions of small Python objects is slowly copied page by page as reference
  counts touch it -- keep samples in arrays).  Elsewhere (``spawn``) the dataset must be picklable
  and its module importable; if the workers cannot start, the loader warns once and builds batches
  directly.  Open file handles or database connections in a dataset should be opened lazily (on
  first use in each process), not in ``__init__``.  A streaming source
  (:class:`~spotwise.workloads.user.StreamDataset`) keeps one live iterator per worker process;
  with more than one worker each reads every ``num_workers``-th block, so ``iter_from`` must be a
  cheap seek (use ``num_workers: 1`` for a stream read strictly in order).
* **no inherited destructor runs in a worker**: the parent collects its garbage and freezes the
  rest (:func:`gc.freeze`) while the workers are forked, so a worker never frees a copy of, e.g., a
  previous generation's gloo process group (its destructor blocked forever there).
* **inside a Ray actor** it works as in any process (fork from the actor's process; the DataLoader
  uses no global state of the actor).  The DataLoader's base seed comes from a private generator,
  so starting one never consumes the process's global torch RNG (dropout draws are those of
  ``num_workers: 0``).

``num_workers == 0`` (the default spec) builds no DataLoader: :meth:`BlockLoader.batch` is
``dataset.batch``.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from spotwise.workloads.device import cuda_available

Batch = tuple[torch.Tensor, ...]


def micro_batches(indices: Any, accumulate: int) -> list[np.ndarray]:
    """The parts :func:`spotwise.training.state.forward_backward` asks ``batch_of`` for, in order, for a
    block of ``indices`` under ``recipe.accumulate`` (the same ``np.array_split``); none for an empty block."""
    idx = np.asarray(indices)
    n = len(idx)
    if n == 0:
        return []
    if accumulate > 1:
        return [p for p in np.array_split(idx, min(max(1, int(accumulate)), n)) if len(p)]
    return [idx]


class _Failed:
    """What a loader worker returns for a block whose ``dataset.batch`` raised (the exception's
    text only: the exception object itself may not pickle)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


class _BatchSource(torch.utils.data.Dataset):
    """A map-style view of an IndexedDataset for the DataLoader: ``__getitems__`` builds a whole block
    with ``dataset.batch`` and returns ``(indices, batch)`` (or :class:`_Failed`)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:  # not used: the fetcher calls __getitems__
        return self.__getitems__([i])

    def __getitems__(self, indices: list[int]) -> Any:
        idx = np.asarray(indices, dtype=np.int64)
        try:
            return idx, self.dataset.batch(idx)
        except Exception as e:  # noqa: BLE001 - rebuilt (and raised) by the direct call in the parent
            return _Failed(f"{type(e).__name__}: {e}")


def _identity(data: Any) -> Any:
    return data


def _context() -> Any:
    """``fork`` where the platform has it (module docstring), else the default start method."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


@contextlib.contextmanager
def _fork_safely() -> Iterator[None]:
    """Fork workers that never run the destructors of objects they inherited.

    A forked worker holds a copy of every object of the parent, garbage in reference cycles
    included; when the worker's garbage collector frees such garbage, its C++ destructors run in a
    process where the threads they talk to do not exist.  Found in the tests: a collective member's
    previous generation's gloo ``ProcessGroup``, collected inside a DataLoader worker, blocked in its
    destructor forever (the member waited for a batch that never came).  So the parent collects its
    garbage first (destructors run where they belong), then freezes what is left
    (:func:`gc.freeze`: the children's collector never looks at it -- which also keeps the pages
    shared copy-on-write) and unfreezes once the workers are started."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class BlockLoader:
    """``batch(indices)`` of ``dataset``, built ahead by DataLoader workers for the blocks given to
    :meth:`expect` (module docstring).  ``pin_memory`` is honoured only where CUDA is available."""

    def __init__(self, dataset: Any, num_workers: int, prefetch: int = 2, pin_memory: bool = False) -> None:
        if int(num_workers) < 0 or int(prefetch) < 1:
            raise ValueError(f"num_workers {num_workers} must be >= 0 and prefetch {prefetch} >= 1")
        self.dataset = dataset
        self.num_workers = int(num_workers)
        self.prefetch = int(prefetch)
        self.pin_memory = bool(pin_memory) and cuda_available()
        self._it: Any = None
        self._expected: deque[np.ndarray] = deque()
        self._warned = False
        #: batches served from the DataLoader, built directly, and DataLoaders dropped on a mismatch or failure
        self.stats = {"prefetched": 0, "direct": 0, "dropped": 0}

    @property
    def active(self) -> bool:
        """Whether a DataLoader is running (its workers building the expected blocks)."""
        return self._it is not None

    def expect(self, blocks: Iterable[Any]) -> None:
        """The blocks :meth:`batch` will be asked for next, in order (an iterator, possibly endless;
        empty blocks are skipped).  Replaces any earlier expectation; nothing with ``num_workers == 0``."""
        self.reset()
        if self.num_workers == 0:
            return
        expected: deque[np.ndarray] = deque()
        self._expected = expected

        def feed() -> Iterator[list[int]]:  # pulled by the DataLoader, in this process, ahead of batch()
            for blk in blocks:
                idx = np.asarray(blk, dtype=np.int64).reshape(-1)
                if idx.size:
                    expected.append(idx)
                    yield idx.tolist()

        loader = torch.utils.data.DataLoader(
            _BatchSource(self.dataset), batch_sampler=feed(), collate_fn=_identity, num_workers=self.num_workers,
            prefetch_factor=self.prefetch, pin_memory=self.pin_memory, multiprocessing_context=_context(),
            generator=torch.Generator().manual_seed(0))
        try:
            with _fork_safely():
                self._it = iter(loader)  # (the workers are forked here)
        except Exception as e:  # noqa: BLE001 - workers that cannot start (an unpicklable dataset under spawn)
            self.reset()
            if not self._warned:
                self._warned = True
                warnings.warn(f"workload.loader: DataLoader workers did not start ({type(e).__name__}: {e}); "
                              "building batches in the training process", RuntimeWarning, stacklevel=2)

    def batch(self, indices: np.ndarray) -> Batch:
        """The batch of ``indices``: the next prefetched one if they are the next expected block, else
        (dropping the DataLoader) ``dataset.batch(indices)``."""
        it = self._it
        if it is None:
            self.stats["direct"] += 1
            return self.dataset.batch(indices)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        expected = self._expected
        if not expected or not np.array_equal(expected[0], idx):
            self._drop()
            return self.dataset.batch(indices)
        try:
            got = next(it)
        except Exception:  # noqa: BLE001 - a dead worker, the blocks' iterator raised, ...: build it here
            self._drop()
            return self.dataset.batch(indices)
        expected.popleft()
        if isinstance(got, _Failed):  # the dataset raised in the worker: raise the same thing here
            self.stats["direct"] += 1
            return self.dataset.batch(indices)
        if not np.array_equal(got[0], idx):  # never expected: the DataLoader keeps sampler order
            self._drop()
            return self.dataset.batch(indices)
        self.stats["prefetched"] += 1
        return got[1]

    def _drop(self) -> None:
        self.stats["dropped"] += 1
        self.stats["direct"] += 1
        self.reset()

    def reset(self) -> None:
        """Forget the expected blocks and stop the DataLoader's worker processes."""
        it, self._it = self._it, None
        self._expected = deque()
        if it is not None:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()

    def close(self) -> None:
        self.reset()

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass

    def __len__(self) -> int:
        return len(self.dataset)


__all__ = ["BlockLoader", "micro_batches"]
