"""A member process that all-reduces in a loop and regroups on failures (tests and benchmarks).

:func:`member_main` is the smallest complete user of :class:`~spotwise.planes.collective.group.ElasticGroup`:
it forms the announced generation, all-reduces a vector every round, and on :class:`GroupFailed`
reports itself alive and forms the next generation the coordinator announces, timing each
recovery (failure seen -> next all-reduce done).  After every regroup the members roll forward as the
data plane's coordinator does (:func:`_reconcile`: the highest step wins; a member one step behind
-- its all-reduce failed where a peer's completed -- or a joiner (``join_gen``) takes the vector
and the step by broadcast).  Results go to ``out`` (a queue).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from spotwise.planes.collective.group import ElasticGroup, GroupFailed, StoreAddress
from spotwise.planes.collective.step_gate import flag_failed


def member_main(address: StoreAddress, member: int, out: Any, rounds: int, size: int = 100_000, timeout_s: float = 2.0,
                join_gen: int = 0, die_at: int = -1, freeze_at: int = -1) -> None:
    torch.set_num_threads(1)
    g = ElasticGroup(address, member, timeout_s=timeout_s)
    x = torch.full((size,), float(member + 1)) if join_gen == 0 else torch.zeros(size)
    gen = join_gen
    g.form(gen)
    step, recoveries = 0, []
    if join_gen:
        t0 = time.perf_counter()
        step, src = _reconcile(g, x, None)
        out.put(("joined", member, gen, time.perf_counter() - t0, float(x[0]), step, src))
    while step < rounds:
        if g.store.check(["stop"]):
            break
        if step in (die_at, freeze_at):
            # ``out``'s feeder thread writes under a lock shared by every process using the queue: a
            # process killed or frozen while it holds it would silence the survivors' results too
            # (the frozen-member test once saw none for 120 s); flush this member's results first
            out.close()
            out.join_thread()
            if step == die_at:
                os._exit(3)
            os.kill(os.getpid(), 19)  # SIGSTOP: a frozen process (it reports nothing more)
        y = torch.ones(size)
        try:
            g.allreduce(y)
        except GroupFailed:
            t_fail = time.perf_counter()
            while True:  # a generation can fail again while it forms (a slow peer on a busy machine)
                g.report_alive(step)
                gen += 1
                try:
                    g.form(gen)
                    step, _ = _reconcile(g, x, step)
                    y = torch.ones(size)  # the failed step is retried whole
                    g.allreduce(y)
                    break
                except GroupFailed:
                    continue
                except RuntimeError as e:  # gloo could not connect the generation in time
                    flag_failed(g.store, gen, f"member {member}: {e}")
            recoveries.append(time.perf_counter() - t_fail)
        out.put(("step", member, gen, step, float(y[0]), len(g.members), time.time()))
        step += 1
    out.put(("done", member, gen, recoveries))
    g.close()


def _reconcile(g: ElasticGroup, x: torch.Tensor, step: int | None) -> tuple[int, int]:
    """Roll forward, as the data plane's coordinator does: every member's step in one all-reduce
    (``None``: a joiner, holding none); the lowest member at the highest step is the source, whose
    vector everyone takes when the steps differ (an all-reduce that completed on some members only,
    or a joiner).  Returns ``(step, source member)``."""
    mine = torch.zeros(len(g.members), dtype=torch.float64)
    mine[g.rank] = 0.0 if step is None else float(step + 1)
    g.allreduce(mine)
    have = [int(v) - 1 for v in mine.tolist()]
    top = max(have)
    src = g.members[have.index(top)]
    if any(h != top for h in have):
        g.broadcast(x, src)
    return top, src
