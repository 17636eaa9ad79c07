"""A worker's result lost with its node is a lost worker, not a crash of the job.

A real two-node Ray (``ray.cluster_utils.Cluster``, in a subprocess: the test session's own Ray
stays as it is): a worker on the spot node computes a result over Ray's inline limit (any real
model's gradient), which stays in that node's object store until the coordinator fetches it; the
node is removed in between.  ``ray.get`` then raises ``ObjectReconstructionFailedError`` (an
``ObjectLostError``, not an actor error): :class:`~spotwise.planes.ps.compute.RayCompute` must
report :class:`~spotwise.planes.ps.compute.WorkerLost` for that slot (the data plane drops the
worker and retries its block) and ``gather`` must return nothing (the plane then asks one by one).
Before the fix the exception escaped the data plane and ended the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from _load import bound

pytestmark = [pytest.mark.slow]

SCRIPT = textwrap.dedent('''
    import logging, os
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster
    from spotwise.planes.ps.compute import RayCompute, WorkerLost

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    node = c.add_node(num_cpus=1, resources={"spot": 1})
    ray.init(address=c.address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        @ray.remote(num_cpus=0, resources={"spot": 1})
        class Worker:
            def compute(self):
                return np.ones(1 << 18, np.float32), 0.5, 16, 0.01, None, None  # a 1 MiB gradient

        compute = RayCompute((), standby=0)  # the calls below are on an actor placed by hand
        w = Worker.remote()
        refs = {3: w.compute.remote(), 5: w.compute.remote()}
        # computed, still in the spot node's object store (not fetched: fetch_local=False)
        ready, _ = ray.wait(list(refs.values()), num_returns=2, timeout=120, fetch_local=False)
        assert len(ready) == 2, "the worker computed both results"
        c.remove_node(node)  # the spot VM vanishes with the results
        assert compute.gather(refs) == {}, "a lost result: nothing gathered, the plane asks one by one"
        for slot, ref in refs.items():
            try:
                compute.result(slot, ref)
            except WorkerLost as e:
                assert e.worker == slot
            else:
                raise AssertionError(f"slot {slot}: a result lost with its node was returned")
        print("LOST-AS-WORKER-LOST")
    finally:
        ray.shutdown()
        c.shutdown()
''')


def test_a_result_lost_with_its_node_is_a_lost_worker(tmp_path) -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": "/tmp"}
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=bound(300))
    assert res.returncode == 0 and "LOST-AS-WORKER-LOST" in res.stdout, (res.stdout + res.stderr)[-4000:]
