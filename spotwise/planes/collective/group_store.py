"""The collective plane's rendezvous store and addresses: where a run's regroupable groups meet.

Split from :mod:`spotwise.planes.collective.group` (which re-exports these names).  The store listens
on its host only (:func:`listen_on`, issue 18 item 6) and every key of a run lives under a per-run
secret (:class:`StoreAddress`, issue 20 item 5); a loopback store pins the members' gloo groups to
loopback too (:func:`gloo_device`).  :class:`GroupCoordinator` owns the store: it announces each
generation's members, raises a generation's fail flag and waits for its survivors.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist

from spotwise.planes.collective.step_gate import flag_failed


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) resolves to loopback addresses only."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def listen_on(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host`` only (not every interface) and listening; ``port`` 0 picks one."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def node_address() -> str | None:
    """The address of the Ray node this process runs on (a member's gloo groups listen there on a
    cluster); ``None`` outside Ray."""
    try:
        import ray

        return str(ray.util.get_node_ip_address()) if ray.is_initialized() else None
    except Exception:  # pragma: no cover - Ray missing or not connected
        return None


def gloo_device(store_host: str, local_host: str | None = None) -> Any:
    """The gloo device a member's group listens on: the store's loopback address when the store is
    on loopback (one machine: nothing outside it may reach the group); on a cluster the member's
    own node address ``local_host`` (the address the Ray node uses); else gloo's default
    (``GLOO_SOCKET_IFNAME`` or the hostname's address) -- ``None``."""
    if is_loopback(store_host):
        ip = socket.getaddrinfo(store_host, None, type=socket.SOCK_STREAM)[0][4][0]
        return dist.ProcessGroupGloo.create_device(hostname=ip)
    if local_host:
        return dist.ProcessGroupGloo.create_device(hostname=local_host)
    return None


@dataclass(frozen=True)
class StoreAddress:
    """Where members find the coordinator's store, and the run's secret that names its keys."""

    host: str
    port: int
    secret: str

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"StoreAddress.host must be a host name or address, got {self.host!r}")
        if not (isinstance(self.port, int) and 0 < self.port < 65536):
            raise ValueError(f"StoreAddress.port must be a TCP port (1-65535), got {self.port!r}")
        if not (isinstance(self.secret, str) and len(self.secret) >= 32
                and all(c in "0123456789abcdef" for c in self.secret)):
            raise ValueError("StoreAddress.secret must be at least 32 hex digits (128 random bits)")

    @property
    def prefix(self) -> str:
        return f"{self.secret}/"

    def connect(self, timeout_s: float) -> Any:
        """A client of the store, seeing only this run's keys (a PrefixStore of the secret)."""
        raw = dist.TCPStore(self.host, int(self.port), is_master=False, timeout=timedelta(seconds=timeout_s))
        return dist.PrefixStore(self.prefix, raw)

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"StoreAddress(host={self.host!r}, port={self.port}, secret=<{len(self.secret)} hex digits>)"


class GroupCoordinator:
    """The store's owner (the job controller's side): announces generations and flags failures.

    The store listens on ``host`` only (issue 18 item 6): torch's TCPStore binds every interface
    (``::``) whatever host it is given, with either backend, and has no authentication; so it is
    handed a socket already bound to ``host`` (``master_listen_fd``; the store owns it from then
    on and closes it when destroyed).  ``127.0.0.1``, the default, keeps it on this machine.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0) -> None:
        sock = listen_on(host, port)
        try:
            self.server = dist.TCPStore(host, int(sock.getsockname()[1]), is_master=True,
                                        timeout=timedelta(seconds=timeout_s), wait_for_workers=False,
                                        master_listen_fd=sock.fileno(), use_libuv=True)
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store closes the descriptor itself
        self.host, self.port = host, int(self.server.port)
        #: what members need to reach this run's keys (the secret never leaves spotwise's processes)
        self.address = StoreAddress(host, self.port, secrets.token_hex(16))
        #: the run's view of the store: every key under the secret
        self.store = dist.PrefixStore(self.address.prefix, self.server)

    def announce(self, gen: int, members: list[int]) -> None:
        """Generation ``gen`` is formed by ``members`` (member ids; rank = position in sorted order)."""
        if len(set(members)) != len(members) or not members:
            raise ValueError(f"a generation needs distinct members, got {members!r}")
        self.store.set(f"members/{gen}", json.dumps(sorted(int(m) for m in members)))

    def fail(self, gen: int, why: str = "coordinator") -> None:
        """Abort generation ``gen`` everywhere (e.g. a revocation notice arrived): its fail flag and
        its step gate (:func:`~spotwise.planes.collective.step_gate.flag_failed`)."""
        flag_failed(self.store, gen, why)

    def alive(self, gen: int, members: list[int], timeout_s: float, poll_s: float = 0.002,
              gone: Callable[[], set[int]] | None = None,
              lost: Callable[[list[int]], list[int]] | None = None) -> dict[int, int]:
        """Members of ``gen`` that reported alive (``member -> last committed step``).

        ``gone`` (optional) names members known dead (their process or node is gone); ``lost``
        (optional) names, of the members it is given, those whose heartbeat has been silent too long
        (:mod:`~spotwise.planes.collective.heartbeat`).  The wait ends as soon as every member has
        answered, is gone or is lost -- a member whose heartbeat goes on is waited for however slow
        its answer (inside a long step, an evaluation, starved of CPU: it sees the failure only at its
        next collective), up to ``timeout_s`` in all (a member that beats but never answers is hung).
        Without ``lost``, a member is waited for ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        keys = {m: f"alive/{gen}/{m}" for m in members}
        next_gone = next_look = 0.0
        dead: set[int] = set()
        silent: set[int] = set()  # once lost, lost: a beat that comes back later is a new process's to show
        pause = poll_s
        while True:
            have = {m: int(self.store.get(k)) for m, k in keys.items() if self.store.check([k])}
            now = time.monotonic()
            if gone is not None and now >= next_gone:
                dead, next_gone = set(gone()), now + 0.05
            pending = [m for m in keys if m not in have and m not in dead and m not in silent]
            if pending and lost is not None and now >= next_look:
                next_look = now + 0.1
                silent |= set(lost(pending))
                pending = [m for m in pending if m not in silent]
            if not pending or now >= deadline:
                return have
            time.sleep(pause)
            pause = min(0.02, pause * 1.2)  # a long wait for a slow member asks the store less often
