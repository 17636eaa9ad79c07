"""The default process group of a script run by spotwise: the job's group of the current generation.

A script written for ``torchrun`` uses ``torch.distributed``'s *default* group: ``dist.get_rank()``,
``dist.get_world_size()``, ``dist.all_reduce(t)``, ``DistributedDataParallel(model)``.  In a
spotwise member that group is the generation's own (:meth:`~spotwise.planes.collective.group.ElasticGroup.process_group`),
registered here the way ``init_process_group`` registers the one it creates -- ``_world``'s maps,
the group's name, ``_update_default_pg`` -- and replaced at every regroup (:func:`install`), so the
default group always answers for the generation the member is in.  The member's own group objects
are the only owners of the backend: replacing the registration never shuts a group down (the
member aborts a failed generation's group itself).

Before the member's first generation has formed (the script's top, before its first batch) the
default group is a :class:`NotFormed` stand-in: rank and size answer, a collective says why it
cannot run there.  (A joiner's script starts while the other members train: a collective before
the first batch would have nobody to meet.)  For the rest of a dropped step it is :class:`Alone`:
the generation failed, and a collective there leaves this member's values as they are.

A collective of the script's own between steps in a generation that is still whole (a metric's
``all_reduce`` after ``optimizer.step()``) runs on the generation's group as it is; a member lost
*there* -- not inside a step, where spotwise catches it -- fails it in the script, which raises.
"""

from __future__ import annotations

import threading
from typing import Any

import torch.distributed as dist

from spotwise.elastic.usage import ScriptError

_LOCK = threading.Lock()
#: the groups this module registered (the default one; at most one) and their names
_OURS: list[Any] = []
_NAMES: list[str] = []


class NotFormed(dist.ProcessGroup):
    """The default group until the member's first generation forms: rank and size, no collectives."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(int(rank), int(size))

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise ScriptError("a collective on the default process group before the script's first batch (a "
                          "dist.barrier(), all_reduce or broadcast at its top): under spotwise a member that joins "
                          "later starts its script while the others train, so there is no one to meet there; move it "
                          "after the first batch, or leave it out (what a joiner needs -- the model, the optimizer "
                          "state -- comes from the job)")

    allreduce = allreduce_coalesced = allgather = allgather_coalesced = _allgather_base = barrier = _refuse
    broadcast = reduce = reduce_scatter = _reduce_scatter_base = alltoall = alltoall_base = gather = scatter = _refuse
    send = recv = recv_anysource = _refuse

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "gloo"


class _Done:
    """A collective that is over: its tensors as they were."""

    def __init__(self, tensors: Any) -> None:
        self._tensors = tensors

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> Any:
        import torch

        fut: Any = torch.futures.Future()
        fut.set_result(self._tensors)
        return fut


class Alone(dist.ProcessGroup):
    """The default group for the rest of a dropped step (``optimizer.step()`` returned False): its
    generation failed, so a collective of the script's own there leaves every tensor with this
    member's own values, and nobody waits for anybody.  The next step runs in the next generation."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(int(rank), int(size))

    def _alone(self, *args: Any, **kwargs: Any) -> Any:
        return _Done(args[0] if args else None)

    allreduce = allreduce_coalesced = allgather = allgather_coalesced = _allgather_base = barrier = _alone
    broadcast = reduce = reduce_scatter = _reduce_scatter_base = alltoall = alltoall_base = gather = scatter = _alone

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "gloo"


def install(pg: Any, store: Any, backend: str, name: str) -> None:
    """Make ``pg`` the default process group (the one this module installed before is unregistered,
    never shut down).  ``backend``: ``gloo`` or ``nccl``; ``name``: unique per generation."""
    from torch._C._distributed_c10d import _register_process_group
    from torch.distributed import distributed_c10d as c10d

    with _LOCK:
        current = c10d._world.default_pg
        if current is not None and not any(current is o for o in _OURS):
            raise ScriptError("this process already has a default process group that spotwise did not make: under "
                              "spotwise the default group is the job's (call init_process_group once, as under "
                              "torchrun, or not at all)")
        _forget_locked()
        pg._set_group_name(name)
        pg._set_group_desc("spotwise")
        c10d._world.pg_map[pg] = (backend, store if store is not None else dist.HashStore())
        c10d._world.pg_names[pg] = name
        c10d._world.pg_backend_config[pg] = "cuda:nccl" if backend == "nccl" else "cpu:gloo"
        c10d._world.pg_group_ranks[pg] = {i: i for i in range(pg.size())}
        c10d._world.tags_to_pg.setdefault("", []).append(pg)
        c10d._world.tags_to_pg.setdefault(f"ptd:{name}", []).append(pg)
        c10d._world.pg_to_tag[pg] = f"ptd:{name}"
        _register_process_group(name, pg)
        c10d._update_default_pg(pg)
        _OURS.append(pg)
        _NAMES.append(name)


def install_stand_in(rank: int, size: int, name: str) -> None:
    """The :class:`NotFormed` stand-in as the default group (before the first generation forms)."""
    install(NotFormed(rank, size), dist.HashStore(), "gloo", name)


def installed() -> bool:
    """Whether the default group is one this module installed."""
    from torch.distributed import distributed_c10d as c10d

    with _LOCK:
        return c10d._world.default_pg is not None and any(c10d._world.default_pg is o for o in _OURS)


def uninstall() -> None:
    """Unregister the group this module installed (the process has no default group afterwards)."""
    with _LOCK:
        _forget_locked()


def _forget_locked() -> None:
    from torch._C._distributed_c10d import _unregister_process_group
    from torch.distributed import distributed_c10d as c10d

    w = c10d._world
    for pg in _OURS:
        for table in (w.pg_map, w.pg_names, w.pg_backend_config, w.pg_group_ranks, w.pg_to_tag):
            table.pop(pg, None)
        for tagged in w.tags_to_pg.values():
            while any(pg is t for t in tagged):
                tagged.remove(pg)
        if w.default_pg is pg:
            c10d._update_default_pg(None)
    for name in _NAMES:
        _unregister_process_group(name)
    _OURS.clear()
    _NAMES.clear()
