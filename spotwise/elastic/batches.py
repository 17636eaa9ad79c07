"""A batch of the user's dataset for an array of sample indices (the user-loop API's data side).

Two kinds of dataset are taken as they are:

* an index-addressed one (spotwise's :class:`~spotwise.workloads.base.IndexedDataset`: ``len`` and
  ``batch(indices)``), asked for the whole batch at once;
* a map-style ``torch.utils.data.Dataset`` (``len`` and ``dataset[i]``), whose samples are collated
  with the script's ``collate_fn`` or PyTorch's own ``default_collate`` -- what a ``DataLoader``
  would hand out for the same indices.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

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
