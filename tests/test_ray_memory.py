"""A replica fetched in chunks reuses the same object-store memory (``RAY_SYSTEM_CONFIG``).

The coordinator fetches an offered replica from its member in 32 MiB chunks, one after the other
(:meth:`~spotwise.planes.collective.plane.PlaneControl._fetch`).  Each chunk is an object in Ray's
object store, written by the member; with Ray's default the memory of chunks nobody references any
more is freed once a second, so every chunk of every offer landed in fresh shared pages, counted in
the member's resident memory (which grew by the whole state at each offer).  With the settings every
Ray spotwise starts runs with, two chunks' pages are reused.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(180)

MIB = 2**20


def test_fetching_a_replica_again_and_again_reuses_the_same_object_store_pages(ray_session: Any) -> None:
    import ray

    from spotwise.capacity.raystart import RAY_SYSTEM_CONFIG
    from spotwise.planes.collective.member import REPLICA_CHUNK_BYTES
    from spotwise.planes.collective.plane import PlaneControl

    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc to read a process's shared resident memory")

    class Offering:
        """A stand-in for a collective member serving one offered replica (``take_replica``)."""

        def __init__(self, nbytes: int) -> None:
            self.buf = np.arange(nbytes, dtype=np.uint8)

        def take_replica(self, token: int, offset: int = 0, size: int = 32 * MIB) -> np.ndarray:
            return self.buf[int(offset):int(offset) + int(size)]

        def shared_mib(self) -> float:
            with open(f"/proc/{os.getpid()}/status") as f:
                for line in f:
                    if line.startswith("RssShmem:"):
                        return int(line.split()[1]) / 1024
            return 0.0

    assert RAY_SYSTEM_CONFIG["free_objects_period_milliseconds"] <= 10
    chunks = 4
    size = chunks * REPLICA_CHUNK_BYTES
    member = ray.remote(num_cpus=0)(Offering).remote(size)
    before = ray.get(member.shared_mib.remote())
    control = PlaneControl("127.0.0.1", 5.0)
    want = np.arange(size, dtype=np.uint8)
    try:
        for token in range(3):  # three offers of the same state, as a run's periodic offers
            got = control._fetch(member, {"token": token, "vec_bytes": size, "extra_bytes": 0})
            assert got is not None
            assert np.array_equal(np.frombuffer(got[1], dtype=np.uint8), want)
    finally:
        control.close()
    grown = ray.get(member.shared_mib.remote()) - before
    # 12 chunks moved; without timely frees each lands in fresh pages (the first offer alone: 4 chunks)
    assert grown < 3.5 * REPLICA_CHUNK_BYTES / MIB, f"{grown:.0f} MiB of object-store pages for {chunks}-chunk offers"
    ray.kill(member)
