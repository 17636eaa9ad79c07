"""Who computes which step on which samples: the membership schedule of a serverless job.

Every worker ``w`` computes the steps in ``[join_w, leave_w)``; ``leave_w`` is set by the scale-in
auto-tuner (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 4.2) to a step no worker has started yet, so
every function reads the same membership for every step.  ``P(t)`` is the number of workers of
step ``t``; each scales its update by ``1 / P(t)`` so the sum of a step's updates is one SGD step
on the global batch (Sec. 3.2: "local gradients are averaged to obtain a global gradient update").

Data: one stream of seeded per-epoch permutations of the training set; step ``t`` takes the next
``P(t) * B`` indices and the worker of rank ``k`` (among the step's workers, by id) takes the
``k``-th block of ``B`` (MLLess keeps ``B`` fixed when workers leave: "Weak scaling", Sec. 3.2).
So a function redoing a step after a failure computes on exactly the same samples, and within an
epoch every sample is in exactly one step.  Epoch ``e``'s order is
:func:`~spotwise.control.permutation.epoch_permutation` with ``salt=7919``: for ``n <= 2**22`` it
is ``default_rng([seed, 7919, e]).permutation(n)`` (the order this stream always used), above a
lazily evaluated seeded bijection (memory independent of ``n``); for a stream (``ordered``) the
identity, so positions are read in stream order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spotwise.control.permutation import EpochPermutation, epoch_permutation

#: seeds this stream's orders apart from the epoch sampler's (``default_rng([seed, SALT, epoch])``)
SALT = 7919


@dataclass
class Schedule:
    """``join`` / ``leave`` step of every worker id (``leave`` None: still in)."""

    join: dict[int, int] = field(default_factory=dict)
    leave: dict[int, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.join) != set(self.leave):
            raise ValueError("join and leave must name the same workers")
        for w, j in self.join.items():
            lv = self.leave[w]
            if j < 0 or (lv is not None and lv < j):
                raise ValueError(f"worker {w}: bad range [{j}, {lv})")

    @classmethod
    def initial(cls, workers: int) -> "Schedule":
        return cls({w: 0 for w in range(workers)}, {w: None for w in range(workers)})

    def members(self, t: int) -> list[int]:
        """Ids of the workers that compute step ``t``, sorted."""
        return sorted(w for w, j in self.join.items() if j <= t and (self.leave[w] is None or t < self.leave[w]))

    def size(self, t: int) -> int:
        return len(self.members(t))

    def active_now(self) -> list[int]:
        """Workers that have not been told to leave."""
        return sorted(w for w, lv in self.leave.items() if lv is None)

    def required_clock(self, w: int, t: int, staleness: int) -> int:
        """Steps worker ``w`` must have committed before a peer may compute step ``t``.

        The SSP rule (paper 004 Sec. 3, citing SSP): every worker has reached step ``t - s``
        (``s = 0``: BSP); a worker that leaves at ``L`` is only waited for up to ``L``.
        """
        need = t - staleness
        lv = self.leave[w]
        return need if lv is None else min(need, lv)

    def samples_before(self, t: int, batch: int) -> int:
        """Position in the sample stream where step ``t`` starts: ``sum_{u<t} P(u) * B``."""
        # P is piecewise constant between the join / leave points
        cuts = sorted({0, t, *(j for j in self.join.values() if j < t), *(lv for lv in self.leave.values() if lv is not None and lv < t)})
        pos = 0
        for a, b in zip(cuts, cuts[1:]):
            pos += (b - a) * self.size(a) * batch
        return pos

    def to_json(self) -> str:
        return json.dumps({"join": {str(k): v for k, v in self.join.items()}, "leave": {str(k): v for k, v in self.leave.items()}})

    @classmethod
    def restored(cls, text: Any, workers: int) -> "Schedule":
        """The schedule a checkpoint holds (:meth:`to_json`), checked -- it is read from a run directory:
        ``{"join": {...}, "leave": {...}}`` and nothing else, both naming exactly the job's function slots
        ``0..workers-1``, a join a step >= 0, a leave null or a step not before its join.  InputError
        (exit 2) naming what is wrong otherwise."""
        from spotwise.control.carried import refuse
        from spotwise.safeparse import loads_json

        if not isinstance(text, str) or len(text) > 64 * (workers + 1) + 1_000:
            raise refuse("schedule", text, "the membership schedule spotwise writes (JSON text)")
        try:
            d: Any = loads_json(text, "checkpoint", "checkpoint's schedule")
        except ValueError:
            raise refuse("schedule", text, "JSON text") from None
        if not isinstance(d, dict) or set(d) != {"join", "leave"} or not all(isinstance(d[k], dict) for k in d):
            raise refuse("schedule", d, '{"join": {slot: step}, "leave": {slot: step or null}}')
        slots = {str(w) for w in range(workers)}
        for key in ("join", "leave"):
            if set(d[key]) != slots:
                raise refuse(f"schedule.{key}", d[key], f"a step for each of the job's function slots 0..{workers - 1}")
        step = lambda v: not isinstance(v, bool) and isinstance(v, int) and 0 <= v < 2**62  # noqa: E731
        bad = [w for w in slots if not step(d["join"][w]) or not (d["leave"][w] is None or (
            step(d["leave"][w]) and d["leave"][w] >= d["join"][w]))]
        if bad:
            w = sorted(bad, key=int)[0]
            raise refuse(f"schedule of slot {w}", [d["join"][w], d["leave"][w]],
                         "a join step >= 0 and a leave step (or null) not before it")
        return cls({int(k): int(v) for k, v in d["join"].items()}, {int(k): d["leave"][k] for k in d["leave"]})

    @classmethod
    def from_json(cls, text: str | bytes) -> "Schedule":
        d: Any = json.loads(text)
        return cls({int(k): int(v) for k, v in d["join"].items()}, {int(k): (None if v is None else int(v)) for k, v in d["leave"].items()})


class SampleStream:
    """Concatenated seeded permutations of ``0..n-1`` (epoch ``e``: ``epoch_permutation(n, seed, e,
    salt=SALT)``, module docstring); the identity every epoch when ``ordered``."""

    def __init__(self, n: int, seed: int, ordered: bool = False) -> None:
        if n < 1:
            raise ValueError("the training set is empty")
        self.n, self.seed, self.ordered = int(n), int(seed), bool(ordered)
        self._cache: dict[int, EpochPermutation] = {}

    def _perm(self, epoch: int) -> EpochPermutation:
        p = self._cache.get(epoch)
        if p is None:
            if len(self._cache) > 4:
                self._cache.clear()
            p = self._cache[epoch] = epoch_permutation(self.n, self.seed, epoch, self.ordered, salt=SALT)
        return p

    def take(self, start: int, count: int) -> np.ndarray:
        """Indices at stream positions ``[start, start + count)``."""
        out = []
        pos, left = int(start), int(count)
        while left > 0:
            e, off = divmod(pos, self.n)
            k = min(left, self.n - off)
            out.append(self._perm(e)[off : off + k])
            pos += k
            left -= k
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def epoch_of(self, pos: int) -> int:
        return int(pos // self.n)


def worker_batch(schedule: Schedule, stream: SampleStream, w: int, t: int, batch: int) -> np.ndarray:
    """The sample indices worker ``w`` computes at step ``t``."""
    members = schedule.members(t)
    if w not in members:
        raise ValueError(f"worker {w} does not compute step {t}")
    start = schedule.samples_before(t, batch) + members.index(w) * batch
    return stream.take(start, batch)


def epochs_done(schedule: Schedule, stream: SampleStream, steps: int, batch: int) -> float:
    """Epochs of data the first ``steps`` steps consumed."""
    return schedule.samples_before(steps, batch) / stream.n if steps else 0.0


__all__ = ["Schedule", "SampleStream", "worker_batch", "epochs_done"]
