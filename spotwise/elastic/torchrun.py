"""What a script run by spotwise sees of torchrun's environment (issue 55 item 1).

A script written for ``torchrun`` reads its place in the job from the environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ...) and then calls ``init_process_group``.  A
spotwise member starts its script when it knows the first generation it joins
(:mod:`spotwise.planes.collective.script_member`), with :class:`Place`'s environment set -- so
``ddp = int(os.environ.get("RANK", -1)) != -1`` is true there and the script's own ``if ddp:``
blocks run -- and updates ``RANK`` and ``WORLD_SIZE`` at every regroup that changes them
(:meth:`Place.moved`).

* ``RANK``: this member's index in its generation (:mod:`spotwise.planes.collective.ranks`: the
  leader keeps rank 0 while it lives, survivors keep their order, joiners come after them).
* ``WORLD_SIZE``: until the script's first batch, the job's *planned* size (``cluster.workers``)
  on every member, joiners included -- a script that divides its gradient accumulation by it at
  start (nanoGPT's ``gradient_accumulation_steps //= ddp_world_size``) does so alike everywhere,
  as the members must take the same number of batches per step; from the first batch on, the
  generation's size.
* ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``: the member's device index (0 on a CPU) and 1 -- every
  member is one process on one device, so ``device = f"cuda:{LOCAL_RANK}"`` is its own GPU.
* ``GROUP_RANK``, ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``GROUP_WORLD_SIZE``: as torchrun sets them
  for one process per node; ``TORCHELASTIC_RUN_ID`` (``dist.is_torchelastic_launched()`` is true),
  ``TORCHELASTIC_RESTART_COUNT`` 0 (nothing is restarted: members regroup in place).
* ``MASTER_ADDR`` / ``MASTER_PORT``: the job's rendezvous store.  Its keys live under a per-run
  secret, so a client of the address alone reads and changes nothing of the job's.
* ``SPOTWISE_JOINING=1`` where the process does not start the job -- a member joining a running
  job, every member of a resumed run, and the coordinator's probe: its state is replaced by the
  job's, so the script's own resume path (``init_from == "resume"``, loading its ``ckpt.pt``) is
  for the members that start the job only (``job.joining``).  ``SPOTWISE_PROBE=1`` in the probe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import torch

from spotwise.elastic.usage import ScriptError

#: the variables a :class:`Place` sets; those it leaves out are removed (a stale one from the parent)
ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "SPOTWISE_JOINING", "SPOTWISE_PROBE")
#: collective backends a script may name, by the device type they run on
BACKENDS = {"gloo": ("cpu", "cuda"), "nccl": ("cuda",)}


@dataclass(frozen=True)
class Place:
    """This process's place in the job, as torchrun's environment says it (module docstring)."""

    rank: int
    world: int
    #: what WORLD_SIZE says until the first batch: the job's planned size (>= world)
    start_world: int = 0
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    joining: bool = False
    probe: bool = False

    def __post_init__(self) -> None:
        for name in ("rank", "world", "start_world", "local_rank", "master_port"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"Place.{name} must be an int, got {v!r}")
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ValueError(f"Place: rank {self.rank} of a world of {self.world}")
        if self.start_world == 0:
            object.__setattr__(self, "start_world", self.world)
        if self.start_world < self.world or self.local_rank < 0 or not 0 < self.master_port < 65536:
            raise ValueError(f"Place: start_world {self.start_world} < world {self.world}, local rank "
                             f"{self.local_rank} or port {self.master_port} out of range")
        if not isinstance(self.master_addr, str) or not self.master_addr:
            raise ValueError("Place.master_addr must be a host name or address")

    def env(self, started: bool) -> dict[str, str | None]:
        """The environment: before the first batch (``started`` False) WORLD_SIZE is the planned size."""
        world = str(self.world if started else self.start_world)
        rank = str(self.rank)
        return {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": "1",
                "GROUP_RANK": rank, "GROUP_WORLD_SIZE": world, "ROLE_RANK": rank, "ROLE_WORLD_SIZE": world,
                "ROLE_NAME": "default", "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
                "TORCHELASTIC_RUN_ID": "spotwise", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "SPOTWISE_JOINING": "1" if self.joining else None,
                "SPOTWISE_PROBE": "1" if self.probe else None}

    def moved(self, rank: int, world: int) -> Place:
        """The same process in a generation where it has ``rank`` of ``world``."""
        return replace(self, rank=int(rank), world=int(world), start_world=max(self.start_world, int(world)))


class EnvScope:
    """Sets a :class:`Place`'s environment in this process and, on :meth:`restore`, puts back what
    was there (the coordinator's probe runs in the controller's own process)."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def set(self, values: dict[str, str | None]) -> None:
        if self._saved is None:
            self._saved = {k: os.environ.get(k) for k in ENV_NAMES}
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is not None:
            self.set(saved)


def check_backend(backend: Any, device: torch.device) -> str:
    """The backend name a script's ``init_process_group(backend=...)`` asked for, checked against the
    member's device: ``gloo`` on a CPU, ``nccl`` (or ``gloo``) on a GPU, a ``"cpu:gloo,cuda:nccl"``
    map naming this device's type, or none.  Anything else is a :class:`ScriptError` saying which
    name fits.  Returns the name of the job's own backend (what ``dist.get_backend()`` answers)."""
    kind = torch.device(device).type
    mine = "nccl" if kind == "cuda" else "gloo"
    if backend is None or backend == "" or str(backend).lower() == "undefined":
        return mine
    text = str(backend).lower().strip()
    names = [text]
    if ":" in text:  # "cpu:gloo,cuda:nccl": the entry for this device type
        pairs = dict(p.split(":", 1) for p in text.split(",") if ":" in p)
        names = [pairs[kind].strip()] if kind in pairs else []
    fits = "gloo" if kind == "cpu" else "nccl (or gloo)"
    for name in names:
        if kind in BACKENDS.get(name, ()):
            return mine
    raise ScriptError(f"init_process_group(backend={backend!r}) cannot run on this member's device ({kind}): under "
                      f"spotwise the script joins the job's own group on the device the spec gives it "
                      f"(cluster.device); name {fits} there, or call init_process_group() without a backend")
