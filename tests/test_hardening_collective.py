"""Issue 18 item 6: the collective plane listens on loopback only, on one machine.

The plane's :class:`torch.distributed.TCPStore` (no authentication: anyone who reaches it can
read the replicas and abort or steer generations) used to listen on every interface (``::``, which
also accepts IPv4) whatever host it was given: torch 2.13's store ignores the host for its bind,
with either backend (libuv or not).  It is now handed a socket already bound to the host
(``master_listen_fd``).  The members' gloo groups listen where gloo's default device resolves
(``GLOO_SOCKET_IFNAME`` or the hostname's address); with a loopback store they are pinned to that
address too.  Checked from the kernel's socket table (psutil), not from the code's intentions.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import psutil
import pytest
import torch

pytestmark = pytest.mark.timeout(120)


def _listening(pid: int | None = None) -> set[tuple[str, int]]:
    proc = psutil.Process(pid or os.getpid())
    return {(c.laddr.ip, c.laddr.port) for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN}


def test_the_plane_store_listens_on_loopback_only() -> None:
    from spotwise.planes.collective.group import ElasticGroup
    from spotwise.planes.collective.plane import PlaneControl

    plane = PlaneControl(timeout_s=5.0)  # as the collective controller builds it
    try:
        mine = {addr for addr in _listening() if addr[1] == plane.port}
        assert mine == {("127.0.0.1", plane.port)}, mine
        # and it still serves: a member's client reads what the coordinator wrote
        g = ElasticGroup(plane.address, member=0, timeout_s=2.0)
        assert g.store.get("lease") == b"0"
        plane.set_lease(3)
        assert g.store.get("lease") == b"3"
        # nothing answers on the machine's other addresses
        for ip in _other_ipv4s():
            with socket.socket() as s:
                s.settimeout(1.0)
                assert s.connect_ex((ip, plane.port)) != 0, f"the store answers on {ip}"
    finally:
        plane.close()
    assert not {addr for addr in _listening() if addr[1] == plane.port}  # released on close


def _other_ipv4s() -> list[str]:
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


def _non_loopback_interface() -> str | None:
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and not a.address.startswith("127.") for a in addrs):
            return name
    return None


def _in_threads(member: Any, members: tuple[int, ...] = (0, 1), timeout_s: float = 60.0) -> None:
    """Run ``member(m)`` for every member in a thread of its own and wait for them all."""
    threads = [threading.Thread(target=member, args=(m,)) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)


def test_a_members_gloo_group_listens_on_loopback_even_if_gloo_would_pick_another_interface(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``GLOO_SOCKET_IFNAME`` (or a hostname resolving to an external address) makes gloo's default
    device listen on that interface; a group over a loopback store must stay on loopback."""
    from spotwise.planes.collective.group import ElasticGroup, GroupCoordinator

    iface = _non_loopback_interface()
    if iface is None:
        pytest.skip("this machine has no non-loopback IPv4 interface to tempt gloo with")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", iface)
    before = _listening()  # listeners earlier tests of this process left (not this group's)
    coord = GroupCoordinator()
    coord.announce(0, [0, 1])
    groups: dict[int, Any] = {}
    errors: list[BaseException] = []

    def member(m: int) -> None:
        try:
            g = ElasticGroup(coord.address, member=m, timeout_s=10.0)
            g.form(0)
            t = torch.ones(4)
            g.allreduce(t)
            assert t.tolist() == [2.0] * 4
            groups[m] = g
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    _in_threads(member)
    assert not errors, errors
    try:
        listening = _listening() - before
        assert len(listening) >= 2, listening  # the store and at least one gloo listener
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
        for ip in _other_ipv4s():
            for _, port in listening:
                with socket.socket() as s:
                    s.settimeout(1.0)
                    assert s.connect_ex((ip, port)) != 0, f"port {port} answers on {ip}"
    finally:
        for g in groups.values():
            g.close()


def test_a_client_without_the_runs_secret_can_neither_read_nor_write_the_runs_keys() -> None:
    """Issue 20 item 5: every key of a run lives under its per-run secret.  A client that reaches
    the store (here: on loopback, as anything on the head node could on a cluster) but lacks the
    secret reads nothing of the run and its writes -- a fail flag, a lease, a plan -- change
    nothing the coordinator or a member sees."""
    from datetime import timedelta

    import torch.distributed as dist

    from spotwise.planes.collective.group import ElasticGroup, StoreAddress
    from spotwise.planes.collective.member import Plan
    from spotwise.planes.collective.plane import PlaneControl

    plane = PlaneControl(timeout_s=5.0)
    try:
        plane.set_lease(7)
        plane.announce(Plan(gen=0, members=(0, 1), source=-1, lease=7))
        member = ElasticGroup(plane.address, member=0, timeout_s=2.0)
        assert member.store.get("lease") == b"7"  # the secret's holder sees the run
        outsider = dist.TCPStore(plane.host, plane.port, is_master=False, timeout=timedelta(seconds=1))
        for key in ("lease", "plan/0", "want", "fail/0"):
            assert not outsider.check([key]), f"{key} is readable without the secret"
        with pytest.raises(Exception):  # a read of a run's key waits for a key that never exists
            outsider.get("plan/0")
        outsider.set("fail/0", "outsider")
        outsider.set("lease", "0")
        outsider.set("plan/1", Plan(gen=1, members=(9,), source=-1).to_json())
        assert plane.failed(0) is None and not member.store.check(["fail/0"]) and member.store.get("lease") == b"7"
        assert not member.store.check(["plan/1"])
        # a wrong secret is no better than none
        wrong = StoreAddress(plane.host, plane.port, "0" * 32)
        assert not wrong.connect(1.0).check(["lease"])
        assert "0" * 32 not in repr(wrong) and plane.address.secret not in repr(plane.address)
    finally:
        plane.close()


def test_store_address_refuses_a_weak_secret() -> None:
    from spotwise.planes.collective.group import StoreAddress

    with pytest.raises(ValueError, match="32 hex"):
        StoreAddress("127.0.0.1", 1234, "abc")
    with pytest.raises(ValueError, match="port"):
        StoreAddress("127.0.0.1", 0, "a" * 32)


def test_flag_cadence_reads_at_once_then_at_doubling_gaps_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.planes.collective import group
    from spotwise.planes.collective.group import FLAG_GAP_MAX_S, FlagCadence

    now = [100.0]
    monkeypatch.setattr(group.time, "monotonic", lambda: now[0])
    c = FlagCadence(0.005)
    reads = []
    for i in range(2000):  # 2 s in 1 ms ticks
        now[0] = 100.0 + i * 0.001
        if c.due():
            reads.append(round(now[0] - 100.0, 3))
    assert reads[:4] == [0.005, 0.015, 0.035, 0.075], reads[:6]  # 5, 10, 20, 40 ms, then the cap
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    assert max(gaps) == pytest.approx(FLAG_GAP_MAX_S, abs=0.0015)
    assert len(reads) <= 2.0 / FLAG_GAP_MAX_S + 5  # ~44 reads in 2 s, not one per 5 ms slice (400)
    with pytest.raises(ValueError):
        FlagCadence(0.0)


def test_a_member_waiting_for_a_straggler_reads_the_fail_flag_at_the_cadence_not_every_slice() -> None:
    """Two members on a real gloo group; member 1 starts its all-reduce 1.5 s late.  Member 0 waits
    in 5 ms slices; it must read the store's fail flag (one remote call each) at :class:`FlagCadence`'s gaps (the old code
    read it after every slice: ~300 reads), and the all-reduce still completes."""
    import time

    from spotwise.planes.collective.group import FLAG_GAP_MAX_S, ElasticGroup, GroupCoordinator

    coord = GroupCoordinator()
    coord.announce(0, [0, 1])
    groups: dict[int, Any] = {}
    reads: list[float] = []
    errors: list[BaseException] = []
    formed = threading.Barrier(2)

    def member(m: int) -> None:
        try:
            g = ElasticGroup(coord.address, member=m, timeout_s=30.0, poll_s=0.005)
            g.form(0)
            groups[m] = g
            formed.wait(60)
            if m == 0:
                flag = g._failed_flag
                g._failed_flag = lambda: (reads.append(time.monotonic()), flag())[1]  # type: ignore[method-assign]
            else:
                time.sleep(1.5)  # the straggler
            t = torch.ones(4)
            start = time.monotonic()
            g.allreduce(t)
            if m == 0:
                reads.append(-(time.monotonic() - start))  # the wait's length, marked negative
            assert t.tolist() == [2.0] * 4
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    _in_threads(member, timeout_s=120.0)
    try:
        assert not errors, errors
        waited = -reads.pop()
        assert waited > 0.5, "member 0 waited for the straggler"
        assert len(reads) <= waited / FLAG_GAP_MAX_S + 8, (len(reads), waited)
    finally:
        for g in groups.values():
            g.close()
