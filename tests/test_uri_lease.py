"""One machine at a time on a run's URI (spotwise.remote.lease): a live holder refuses a second one, a dead
holder's lease goes stale and a relaunch proceeds, the lease is gone after a clean end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from spotwise.errors import InputError
from spotwise.remote.lease import LEASE, RemoteLease
from spotwise.remote.location import open_run_location
from spotwise.remote.uri import connect


def _remote(tmp_path: Path):
    root = tmp_path / "bucket"
    root.mkdir()
    return connect(f"file://{root}"), root


def test_a_live_holder_refuses_a_second_machine_and_a_dead_ones_lease_goes_stale(tmp_path: Path) -> None:
    remote, root = _remote(tmp_path)
    first = RemoteLease(remote, ttl_s=0.6, wait_s=1.0)
    first.acquire()
    try:
        doc = json.loads((root / LEASE).read_text())
        assert doc["owner"] == first.owner
        second = RemoteLease(remote, ttl_s=0.6, wait_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(InputError, match="in use by"):
            second.acquire()  # the first beats every ttl/3: never stale within wait_s
        assert time.monotonic() - t0 >= 0.9  # it waited for the lease to go stale before refusing
    finally:
        first.release()
    assert not (root / LEASE).exists()  # released: removed
    # a holder that died (no release, no heartbeat): its lease goes stale and the next one takes over
    dead = RemoteLease(remote, ttl_s=0.5, wait_s=0.1)
    dead._write()
    relaunch = RemoteLease(remote, ttl_s=0.5, wait_s=2.0)
    relaunch.acquire()
    try:
        assert json.loads((root / LEASE).read_text())["owner"] == relaunch.owner
    finally:
        relaunch.release()


def test_a_torn_lease_object_counts_as_none(tmp_path: Path) -> None:
    remote, root = _remote(tmp_path)
    (root / LEASE).write_text("{not json")
    lease = RemoteLease(remote, ttl_s=1.0, wait_s=0.1)
    assert lease.current() is None
    lease.acquire()
    lease.release()


def test_two_runs_on_one_uri_the_second_is_refused_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "0.6")
    remote, root = _remote(tmp_path)
    with open_run_location(tmp_path / "a", "new", remote.uri):
        assert json.loads((root / LEASE).read_text())["ttl_s"] == pytest.approx(0.6)
        with pytest.raises(InputError, match="in use by"):
            with open_run_location(tmp_path / "b", "new", remote.uri, fetch=False):
                pass
    assert not (root / LEASE).exists()
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "-3")
    with pytest.raises(InputError, match="SPOTWISE_LEASE_TTL_S"):
        RemoteLease(remote)
