"""One generation of a restart-mode job: the script's ranks on the current members, as torchrun starts them.

:class:`ScriptRanks` starts rank ``r`` of ``k`` on the ``r``-th member (:class:`~spotwise.planes.restart.member.RestartMember`)
with torchrun's environment -- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``ROLE_RANK``, ``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``,
``TORCHELASTIC_RUN_ID`` -- so the script's own ``init_process_group()`` (env://) meets its peers.  As
torchrun's agent does, spotwise hosts each generation's rendezvous store itself
(``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is a client of it), a fresh one per generation,
bound to the host only (:func:`~spotwise.planes.collective.group_store.listen_on`; loopback on one
machine, and gloo pinned to loopback too: ``GLOO_SOCKET_IFNAME=lo``).  ``OMP_NUM_THREADS`` is 1 when
several ranks share a machine and the user set none (torchrun's default).

Stopping a generation is torchrun's too: SIGTERM to every rank (a script that saves on SIGTERM saves),
``grace_s`` wall seconds, then SIGKILL of each rank's process group.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from spotwise.planes.collective.calls import wait_calls
from spotwise.planes.collective.group_store import is_loopback, listen_on

#: seconds a rank's start call may take before the member is taken for lost
START_CALL_S = 60.0


class RendezvousStore:
    """The generation's TCPStore (torchrun's agent store), listening on ``host`` only."""

    def __init__(self, host: str) -> None:
        sock = listen_on(host, 0)
        try:
            self.server = dist.TCPStore(host, int(sock.getsockname()[1]), is_master=True,
                                        timeout=timedelta(seconds=300), wait_for_workers=False,
                                        master_listen_fd=sock.fileno(), use_libuv=True)
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store closes it
        self.host, self.port = host, int(self.server.port)

    def close(self) -> None:
        self.server = None  # type: ignore[assignment]


class ScriptRanks:
    """The ranks of one generation (module docstring): ``actors`` in rank order, ``slots`` their member slots."""

    def __init__(self, gen: int, slots: list[int], actors: list[Any], host: str, run_id: str) -> None:
        if len(slots) != len(actors) or not slots:
            raise ValueError("a generation needs one actor per member slot")
        self.gen, self.slots, self.actors = int(gen), list(slots), list(actors)
        self.host, self.run_id = host, run_id
        self.store: RendezvousStore | None = None
        self.pids: dict[int, int] = {}
        #: rank -> exit status, once known
        self.exits: dict[int, int] = {}
        self.stopping = False

    @property
    def world(self) -> int:
        return len(self.slots)

    def rank_env(self, rank: int) -> dict[str, str]:
        """torchrun's environment of ``rank`` (module docstring)."""
        assert self.store is not None
        k = self.world
        env = {"RANK": rank, "WORLD_SIZE": k, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": k, "GROUP_RANK": 0,
               "GROUP_WORLD_SIZE": 1, "ROLE_RANK": rank, "ROLE_WORLD_SIZE": k, "ROLE_NAME": "default",
               "MASTER_ADDR": self.store.host, "MASTER_PORT": self.store.port,
               "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": self.gen,
               "TORCHELASTIC_MAX_RESTARTS": 1_000_000, "TORCHELASTIC_RUN_ID": self.run_id}
        if is_loopback(self.store.host) and "GLOO_SOCKET_IFNAME" not in os.environ:
            env["GLOO_SOCKET_IFNAME"] = "lo"
        if k > 1 and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = 1
        return {key: str(v) for key, v in env.items()}

    def start(self, script: str, args: list[str], extra_env: dict[str, str], cwd: str, run_dir: str | None = None) -> None:
        """Start every rank (a fresh rendezvous store first); raises if a member's start call fails.  ``run_dir``:
        what each rank prints is appended to ``script-logs/member-<slot>.log`` there."""
        from spotwise.rundir_names import SCRIPT_LOGS

        self.store = RendezvousStore(self.host)
        calls = [a.start.remote(script, args, {**extra_env, **self.rank_env(r)}, cwd,
                                None if run_dir is None else (run_dir, f"{SCRIPT_LOGS}/member-{self.slots[r]}.log"))
                 for r, a in enumerate(self.actors)]
        pids = wait_calls(calls, timeout_s=START_CALL_S)
        for r, pid in enumerate(pids):
            if pid is None:
                raise RuntimeError(f"member {self.slots[r]} could not start rank {r}")
            self.pids[r] = int(pid)

    def poll(self) -> dict[int, int]:
        """Ranks that have ended since the start (rank -> exit status; a lost member's rank: -9)."""
        pending = [r for r in range(self.world) if r not in self.exits]
        if pending:
            got = wait_calls([self.actors[r].poll.remote() for r in pending], timeout_s=10.0)
            for r, rc in zip(pending, got):
                if rc is not None:
                    self.exits[r] = int(rc)
        return dict(self.exits)

    def lost(self, slot: int) -> None:
        """``slot``'s member is gone (its script died with it)."""
        if slot in self.slots:
            self.exits.setdefault(self.slots.index(slot), -int(signal.SIGKILL))

    def stop(self, grace_s: float, why: str = "") -> dict[int, int]:
        """SIGTERM every running rank, up to ``grace_s`` for them to end, then SIGKILL; their exit statuses."""
        self.stopping = True
        live = [r for r in range(self.world) if r not in self.exits]
        wait_calls([self.actors[r].signal.remote(int(signal.SIGTERM)) for r in live], timeout_s=10.0)
        deadline = time.monotonic() + float(grace_s)
        pause = 0.01
        while time.monotonic() < deadline and len(self.poll()) < self.world:
            time.sleep(pause)
            pause = min(0.2, pause * 1.5)
        self.kill()
        return dict(self.exits)

    def kill(self) -> None:
        """SIGKILL every rank still running (and its process group)."""
        live = [r for r in range(self.world) if r not in self.exits]
        got = wait_calls([self.actors[r].kill.remote() for r in live], timeout_s=30.0)
        for r, rc in zip(live, got):
            self.exits[r] = int(rc) if rc is not None else -int(signal.SIGKILL)
        if self.store is not None:
            self.store.close()
            self.store = None

    def tails(self) -> dict[int, list[str]]:
        """The last lines each rank printed (what a member still holds)."""
        got = wait_calls([a.output_tail.remote() for a in self.actors], timeout_s=10.0)
        return {r: list(t) for r, t in enumerate(got) if t}
