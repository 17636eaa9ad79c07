"""Where a collective member waits for its coordinator: at the lease, and once it commits no more.

Both waits end when the coordinator fails the generation (:class:`~spotwise.planes.collective.group.GroupFailed`
raised, the group abandoned); meanwhile the leader serves the coordinator's replica requests
(``serve``), so a checkpoint or a notice's replica is taken while the members wait.
"""

from __future__ import annotations

import time
from typing import Callable, NoReturn

from spotwise.planes.collective.group import ElasticGroup, GroupFailed
from spotwise.planes.collective.plan import Plan, decode_lease


def _raise_if_failed(g: ElasticGroup) -> None:
    if g.failed():
        why = g.store.get(f"fail/{g.gen}").decode(errors="replace")
        g.abandon()
        raise GroupFailed(why)


def wait_lease(g: ElasticGroup, plan: Plan, member: int, step: int, serve: Callable[[], None] | None,
               gated: bool = False) -> int:
    """Wait at the lease (this member committed ``step``) until the coordinator raises it; the new
    lease.  A member revoked inside the next step contributes nothing to it and waits for the end of
    the generation -- having come to the step's gate first when its peers wait there (``gated``), so
    they start the step, which its kill then fails."""
    pause = 0.0002
    while True:
        _raise_if_failed(g)
        lease, revoked = decode_lease(g.store.get("lease"))
        if lease > step and step < plan.max_step:
            if member in revoked:
                if gated:
                    g.reach()
                until_failed(g, serve)
            return lease
        if serve is not None:
            serve()
        time.sleep(pause)
        pause = min(0.005, pause * 1.5)


def until_failed(g: ElasticGroup, serve: Callable[[], None] | None) -> NoReturn:
    """Wait (the leader serving replica requests) until the coordinator ends the generation."""
    while True:
        _raise_if_failed(g)
        if serve is not None:
            serve()
        time.sleep(0.005)
