"""Nothing outlives a driver killed with ``kill -9`` (issue 54 item 7).

The review's finding: after ``kill -9`` of ``spotwise run`` Ray's ``DashboardAgent`` and
``RuntimeEnvAgent`` (re-parented to init once the raylet died) and worker processes stayed alive --
4 of 10 processes on the PS plane, 2 on the collective plane.  Each test starts a real run of a tiny
spec through the CLI in a session of its own (with its own Ray), waits until it committed a few steps,
records every process that descended from the driver, kills the driver alone with SIGKILL and asserts
that none of them is alive within 10 s (times the machine's slowdown).  Both are ``extended``: the default
tier makes the same assertion on a collective run killed mid-run (``test_own_loop_kill.py``), and the
processes are Ray's and the members' whichever the plane (the watchdog is the same).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _load import bound
from _same_run import end_what_is_left, kill_driver_and_assert_none_outlives, record_descendants

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DIGITS = {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000}
VM_CLUSTER = {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0}
SPECS: dict[str, dict[str, Any]] = {
    "ps": {"name": "kill-ps", "seed": 5, "workload": DIGITS, "target": {"iterations": 100000}, "cluster": VM_CLUSTER,
           "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": {"checkpoint_every": 1000, "plots": False}},
    "collective": {"name": "kill-coll", "seed": 5, "workload": DIGITS, "target": {"iterations": 100000},
                   "cluster": {**VM_CLUSTER, "data_plane": "collective", "group_timeout_s": 5, "replica_every": 5},
                   "market": {"synthetic": {"kind": "constant", "price": 0.07}},
                   "outputs": {"checkpoint_every": 1000, "plots": False}},
}


def _steps(out: Path) -> int:
    path = out / "events.jsonl"
    if not path.exists():
        return 0
    n = 0
    for line in path.read_text().splitlines():
        try:
            n += json.loads(line).get("kind") == "step"
        except (json.JSONDecodeError, AttributeError):  # a line being written
            continue
    return n


# collective: the default tier's test_own_loop_kill.py::test_a_killed_script_job_resumes_to_the_uninterrupted_result
# kills a collective run's driver alone with SIGKILL and makes the same assertion (before resuming it)
@pytest.mark.parametrize("plane", [pytest.param("ps", marks=pytest.mark.extended),
                                   pytest.param("collective", marks=pytest.mark.extended)])
def test_no_process_outlives_a_driver_killed_by_sigkill(tmp_path: Path, plane: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(SPECS[plane]))
    out = tmp_path / "run"
    ray_tmp = tempfile.mkdtemp(prefix="swdk-", dir="/tmp")  # short: Ray's socket paths stay under 107 characters
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "spotwise.cli", "run", str(spec), "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    seen: dict[int, tuple[int, str]] = {}
    try:
        deadline = time.monotonic() + bound(180)
        while _steps(out) < 5:  # an event wait; the bound only ends a hang
            if proc.poll() is not None:
                raise AssertionError(proc.communicate()[1].decode(errors="replace")[-2000:])
            assert time.monotonic() < deadline, "fewer than 5 committed steps within 180 s"
            time.sleep(0.1)
        end = time.monotonic() + 1.0  # a little longer: every Ray daemon and member is up and recorded
        while time.monotonic() < end:
            record_descendants(proc.pid, seen)
            time.sleep(0.1)
        kill_driver_and_assert_none_outlives(proc, seen)
    finally:
        end_what_is_left(proc, seen)
        shutil.rmtree(ray_tmp, ignore_errors=True)
