"""The torchrun side of a script run by spotwise: its place, environment, default group and rank names.

:class:`ScriptEnv` is what a :class:`~spotwise.elastic.host.ScriptHost` holds of issue 55's items
1 and 2, on the script's own thread:

* when the script starts, torchrun's environment for its :class:`~spotwise.elastic.torchrun.Place`
  (:meth:`enter`; put back when the coordinator's probe is done, :meth:`leave`);
* the script's ``init_process_group(...)`` (:meth:`init_process_group`): the backend checked, the
  default group a stand-in until the first generation forms;
* at each step's start (:meth:`moved`): the generation's group as the default group, ``RANK`` /
  ``WORLD_SIZE`` updated, and -- when the rank or size changed -- the script's top-level names
  computed from them run again (:mod:`~spotwise.elastic.rank_names`: ``master_process``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from spotwise.elastic import default_group
from spotwise.elastic.rank_names import RankNames
from spotwise.elastic.torchrun import EnvScope, Place, check_backend
from spotwise.elastic.usage import ScriptError


class ScriptEnv:
    """One script's torchrun environment (module docstring)."""

    def __init__(self, path: str, device: torch.device, place: Place | None) -> None:
        self.path = os.path.abspath(path)
        self.device = torch.device(device)
        #: a script started on its own by a host without a place (tests): rank 0 of 1
        self.place = place if place is not None else Place(0, 1)
        self._scope = EnvScope()
        try:
            with open(self.path, encoding="utf-8") as f:
                source = f.read()
        except (OSError, UnicodeDecodeError):
            source = ""  # the script's own run says what is wrong with it
        self.names = RankNames.of_source(source, self.path)
        #: the generation whose group is the default one (None: the stand-in, or none yet)
        self._gen: int | None = None
        #: the script's first step began (WORLD_SIZE is the generation's from then on)
        self.started = False
        #: what the last refresh of the rank names changed (for tests and logs)
        self.refreshed: list[str] = []

    @property
    def rank(self) -> int:
        return self.place.rank

    @property
    def world(self) -> int:
        return self.place.world if self.started else self.place.start_world

    def enter(self) -> None:
        """The script starts: torchrun's environment as it is before the first batch."""
        self._scope.set(self.place.env(started=False))

    def leave(self) -> None:
        """The coordinator's probe is done: the process's own environment and default group back."""
        self._scope.restore()
        if default_group.installed():
            default_group.uninstall()

    def init_process_group(self, backend: Any, world_size: int, rank: int) -> None:
        """The script's ``init_process_group``: its backend must fit the device, a rank or size it
        gives must be the environment's; the default group is the job's (a stand-in before the
        first generation forms)."""
        check_backend(backend, self.device)
        for name, given, mine in (("rank", rank, self.rank), ("world_size", world_size, self.world)):
            if given not in (-1, mine):
                raise ScriptError(f"init_process_group({name}={given}) differs from this member's {mine}: take it "
                                  f"from the environment (os.environ['{'RANK' if name == 'rank' else 'WORLD_SIZE'}']) "
                                  "or leave it out -- spotwise sets torchrun's variables in every member")
        if not default_group.installed():
            default_group.install_stand_in(self.rank, self.world, "spotwise-start")

    def moved(self, group: Any, rank: int, world: int) -> None:
        """A step begins in ``group``'s generation, where this member has ``rank`` of ``world``."""
        if group is None:
            return
        seen = (self.rank, self.world)  # what the script's top level last saw
        new = self.place.moved(rank, world)
        self.place, self.started = new, True
        gen = getattr(group, "gen", None)  # (None: a stand-in of a test, without a process group)
        if gen is not None and int(gen) != self._gen:
            default_group.install(group.process_group(), group.gen_store, str(group.backend), f"spotwise-g{gen}")
            self._gen = int(gen)
        if (new.rank, new.world) != seen:
            self._scope.set(new.env(started=True))
            ns = self._namespace()
            self.refreshed = self.names.refresh(ns) if ns is not None else []

    def alone(self) -> None:
        """The step was dropped: until the next step the default group is :class:`~spotwise.elastic.default_group.Alone`
        (the generation it was is failed; its regroup comes when the script takes its next batch)."""
        if self._gen is not None:
            default_group.install(default_group.Alone(self.rank, self.place.world), None, "gloo",
                                  f"spotwise-alone-g{self._gen}")
            self._gen = None

    def _namespace(self) -> dict[str, Any] | None:
        """The script's module globals: the frame of its top level on this thread's stack."""
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_name == "<module>" and os.path.abspath(f.f_code.co_filename) == self.path:
                return f.f_globals
            f = f.f_back  # type: ignore[assignment]
        return None
