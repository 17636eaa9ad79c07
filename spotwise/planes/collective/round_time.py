"""The virtual time of one committed step on the collective plane, per strategy.

On the emulated provider (a virtual clock) the collective plane draws each step's time from the
run's mini-batch time law (:class:`~spotwise.theory.runtime.MiniBatchTimeLaw`, paper 000
``papers/000_3c734f3ffedcac15.txt`` eq. 14) as the strategy's round (Spotnik,
``papers/001_30a454edd897cf47.txt`` Sec. 3.3): S-SGD the slowest of ``k`` mini-batches, S-MA the
slowest member's ``H`` local mini-batches, AD-PSGD per barrier window the slowest member's sum of
its pairs' slower mini-batches; each plus the commit overhead ``Delta``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from spotwise.planes.collective.member import BARRIER_EVERY
from spotwise.theory.runtime import MiniBatchTimeLaw


def draw_round(law: MiniBatchTimeLaw, rng: np.random.Generator, k: int, strategy: str, local_steps: int,
               delta: float) -> float:
    """Virtual seconds of one committed step with ``k`` members under ``strategy``.

    AD-PSGD: each member waits only for its partner of the step; over the ``BARRIER_EVERY``
    steps between two barriers a member's time is the sum of its pairs' slower mini-batches
    (plus ``Delta`` per exchange), and the barrier waits for the slowest member: a step is that
    window's time over its steps.  S-MA: ``local_steps`` mini-batches per member and step.
    """
    if strategy == "adpsgd":
        if k < 2:
            return float(law.draw(rng)) + delta
        draws = np.asarray(law.draw(rng, (BARRIER_EVERY, k)))
        per_member = np.zeros(k)
        for h in range(BARRIER_EVERY):
            perm = rng.permutation(k)
            pair = np.empty(k)
            for i in range(0, k - 1, 2):
                a, b = perm[i], perm[i + 1]
                pair[a] = pair[b] = max(draws[h, a], draws[h, b])
            if k % 2:
                pair[perm[-1]] = draws[h, perm[-1]]
            per_member += pair
        return float(per_member.max()) / BARRIER_EVERY + delta
    per = local_steps if strategy == "sma" else 1
    draws = np.asarray(law.draw(rng, (k, per)))
    return float(np.max(np.sum(draws, axis=1))) + delta


def restored_draws(raw: object) -> list[tuple[int, float]]:
    """The round times a checkpoint holds (``[[k, seconds], ...]``: drawn ahead of its step), checked
    (a checkpoint is untrusted input: a malformed list is refused, not half-used)."""
    if not isinstance(raw, (list, tuple)) or len(raw) > 1_000_000:
        raise ValueError("the checkpoint's round_draws is not a list of [members, seconds] pairs")
    out: list[tuple[int, float]] = []
    for item in raw:
        if (not isinstance(item, (list, tuple)) or len(item) != 2 or isinstance(item[0], bool)
                or not isinstance(item[0], int) or not isinstance(item[1], (int, float))
                or item[0] < 1 or not np.isfinite(item[1]) or item[1] < 0):
            raise ValueError(f"the checkpoint's round_draws holds {item!r}, not a [members, seconds] pair")
        out.append((int(item[0]), float(item[1])))
    return out


def steps_before(t0: float, limit: float, room: int, draw: Callable[[int], float]) -> int:
    """How many of the next ``room`` steps (at most 100 000), the ``i``-th lasting ``draw(i)`` virtual
    seconds from ``t0``, end by ``limit`` (a step ending exactly at ``limit`` counts)."""
    t, n = t0, 0
    while n < min(room, 100_000):
        d = draw(n)
        if t + d > limit:
            break
        t += d
        n += 1
    return n
