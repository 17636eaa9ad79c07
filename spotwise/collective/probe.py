"""A member process that all-reduces in a loop and regroups on failures (tests and benchmarks).

:func:`member_main` is the smallest complete user of :class:`~spotwise.collective.group.ElasticGroup`:
it forms the announced generation, all-reduces a vector every round, and on :class:`GroupFailed`
reports itself alive and forms the next generation the coordinator announces, timing each
recovery (failure seen -> next all-reduce done).  A joiner (``join_gen``) forms that generation and
receives the vector by broadcast from the lowest other member.  Results go to ``out`` (a queue).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from spotwise.collective.group import ElasticGroup, GroupFailed


def member_main(host: str, port: int, member: int, out: Any, rounds: int, size: int = 100_000, timeout_s: float = 2.0,
                join_gen: int = 0, die_at: int = -1, freeze_at: int = -1) -> None:
    torch.set_num_threads(1)
    g = ElasticGroup(host, port, member, timeout_s=timeout_s)
    x = torch.full((size,), float(member + 1)) if join_gen == 0 else torch.zeros(size)
    gen = join_gen
    g.form(gen)
    step, recoveries = 0, []
    if join_gen:  # member ids only grow, so the lowest member of the generation already has the state
        t0 = time.perf_counter()
        step = _receive_state(g, x)
        out.put(("joined", member, gen, time.perf_counter() - t0, float(x[0]), step))
    while step < rounds:
        if g.store.check(["stop"]):
            break
        if step == die_at:
            os._exit(3)
        if step == freeze_at:
            os.kill(os.getpid(), 19)  # SIGSTOP: a frozen process
        y = torch.ones(size)
        try:
            g.allreduce(y)
        except GroupFailed:
            t_fail = time.perf_counter()
            g.report_alive(step)
            old = set(g.members)
            gen += 1
            g.form(gen)
            if set(g.members) - old:  # a joiner: hand it the vector and the step it resumes at
                _receive_state(g, x, step)
            y = torch.ones(size)  # the failed step is retried whole
            g.allreduce(y)
            recoveries.append(time.perf_counter() - t_fail)
        out.put(("step", member, gen, step, float(y[0]), len(g.members), time.time()))
        step += 1
    out.put(("done", member, gen, recoveries))
    g.close()


def _receive_state(g: ElasticGroup, x: torch.Tensor, step: int = 0) -> int:
    """Broadcast the vector and the step counter from the generation's lowest member; the step."""
    g.broadcast(x, min(g.members))
    s = torch.tensor([float(step)], dtype=torch.float64)
    g.broadcast(s, min(g.members))
    return int(s[0])
