"""Random windows into a token array, and a loop over the job's steps (issue 55 items 4-5, the forms
a torchrun script needs to convert in a few lines).

**Windows.**  nanoGPT draws each micro-batch as random offsets into one long token array::

    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])

``job.randint(high, size)`` is that line's spotwise form (:meth:`~spotwise.elastic.job.Job.randint`):
while gradients are on (a training draw) it returns the step's block of ``size`` offsets from the
run's data position over the ``high`` window starts (:class:`Windows`, handed out as ``job.data``
hands out samples) -- so every window start is drawn **exactly once per epoch** of ``high`` draws,
each member draws its own block of each step, a dropped step is retried on the same offsets, a
joiner and a resumed run continue the same sequence.  (An epoch of ``high`` windows of
``block_size`` tokens covers every token ``block_size`` times.)  Under ``torch.no_grad()`` /
``inference_mode`` (an evaluation, nanoGPT's ``estimate_loss``) it is ``torch.randint`` itself,
with the script's own generator: an evaluation draws from torch's RNG as it would without
spotwise, and takes nothing from the training data.

**A batch drawn ahead.**  nanoGPT draws its first batch before its loop (``X, Y =
get_batch('train')``) and each micro-step's next batch right after the forward pass, so it always
holds one batch ahead.  The draw before the loop -- once per process: a joiner makes its own when
the other members are mid-run -- is ``torch.randint`` itself, from the script's own generator
(seeded by the script, ``1337 + seed_offset`` in nanoGPT), as the script draws it without spotwise,
and counts to no step.  Every later draw counts to the step it is made in -- the same number on
every member, joiners included -- and the batch it holds is trained at the next step's first
micro-step.  (At a dropped step each member trains the batch it held again in the retry; the last
batch held is never trained.)  So ``job.randint``'s draws need the ``job.steps()`` loop: a step
committed before the loop's first iteration exits 2 saying so.

**Steps.**  ``for iter_num in job.steps(n):`` (:class:`StepLoop`) yields the job's committed steps
``job.step`` at the top of each iteration, until ``n`` steps are committed or the job's target is
reached: a dropped step yields the same number again (its retry), a joiner starts at the job's
step, a resumed run at its checkpoint's.  The loop ends there -- the code after it (a final save,
``destroy_process_group()``) runs -- where a loop of the script's own (``while True: ...
iter_num += 1``) would count a dropped step and start joiners at 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class Windows:
    """The ``n`` start offsets of windows into a token array, as a dataset: a batch of indices is
    the tensor of those offsets."""

    ordered = False

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"job.randint(high, size) needs a positive whole number of window starts, got {n!r}")
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))


#: why a step of ``job.randint``'s draws committed outside ``job.steps()``
NEEDS_STEPS = ("job.randint() draws the training windows and the step committed outside a `for iter_num in "
               "job.steps(n):` loop: draw the first batch before that loop (as nanoGPT does) and loop over "
               "job.steps(n) -- a joiner learns the job's step there, and every member then draws the same number "
               "of batches per step")


def draws(size: Any) -> tuple[tuple[int, ...], int]:
    """``torch.randint``'s ``size`` (an int or a shape) as a shape, and the number of draws in it."""
    shape = (int(size),) if isinstance(size, int) and not isinstance(size, bool) else tuple(int(s) for s in size)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"job.randint(high, size): size must be a shape of positive sizes, got {size!r}")
    return shape, int(np.prod(shape))


class StepLoop:
    """``for it in job.steps(n)`` (module docstring)."""

    def __init__(self, backend: Any, n: int, before_first: Any = None) -> None:
        """``before_first``: called once, at the loop's first iteration."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"job.steps(n) takes a number of steps >= 0, got {n!r}")
        self._backend = backend
        self._n = int(n)
        self._before_first = before_first

    def __iter__(self) -> StepLoop:
        return self

    def __next__(self) -> int:
        if self._before_first is not None:
            check, self._before_first = self._before_first, None
            check()
        if not self._backend.boundary():  # the job is over (its target is reached)
            raise StopIteration
        step = int(self._backend.step)
        if step >= self._n:
            raise StopIteration
        return step
