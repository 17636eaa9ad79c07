"""Ray's fake multi-node autoscaler, for tests and benchmarks (issue 20 item 2).

This is what ``ray.cluster_utils.AutoscalingCluster`` does, with two changes forced by this
machine: the Ray wheel installed here lacks the ``fake_multi_node/example.yaml`` that
``AutoscalingCluster`` reads its base config from (so the same base config is written here), and
``AutoscalingCluster.start`` begins with ``ray stop --force``, which would kill every Ray on the
machine -- the test session's own included -- so the head runs in its own process group, on its
own port and temp dir, and is stopped by signalling that group.  Everything else is Ray's: the
head runs Ray's autoscaler (monitor) with ``provider.type: fake_multinode``, whose worker "VMs"
are real raylets started on this machine when the autoscaler launches a node type; a spot node
that vanishes is a raylet killed with SIGKILL (with the workers on it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil
from _load import bound

BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def fake_config(port: int, spot_units: int = 2, max_spot_nodes: int = 3) -> dict[str, Any]:
    """The fake_multinode cluster config: an on-demand head (1 CPU, no spot) and a spot node type."""
    return {
        "cluster_name": "spotwise-fake",
        "max_workers": max_spot_nodes,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": f"127.0.0.1:{port}"},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "spot.worker": {"resources": {"CPU": 1, "spot": spot_units}, "node_config": {}, "min_workers": 0,
                            "max_workers": max_spot_nodes},
        },
        "head_node_type": "ray.head.default",
        "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 0.2, "docker": {},
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
        "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def autoscaling_cluster(log_dir: Path, spot_units: int = 2, max_spot_nodes: int = 3) -> Iterator[str]:
    """Start the head with Ray's autoscaler on the fake provider; yields its address."""
    port = _free_port()
    cfg = Path(tempfile.mkstemp(prefix="sw-fake-", suffix=".json")[1])
    cfg.write_text(json.dumps(fake_config(port, spot_units, max_spot_nodes)))
    tmp = tempfile.mkdtemp(prefix="swas-", dir="/tmp")
    env = {**ENV, "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_FAKE_CLUSTER": "1"}
    head = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", "--port", str(port),
                             "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--include-dashboard=false",
                             "--disable-usage-stats", "--temp-dir", tmp, f"--autoscaling-config={cfg}"],
                            stdout=open(log_dir / "head.log", "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + bound(240)  # an event wait; the bound only ends a hang
        # registered once ``ray start`` says so (test_cluster.STARTED): a read of its log, not a ``ray status``
        # process a poll (~1 CPU-s each on the 2-core machine)
        while "Ray runtime started." not in (log_dir / "head.log").read_text(errors="replace"):
            if time.monotonic() > deadline or head.poll() is not None:
                raise RuntimeError(f"the autoscaling head did not start (see {log_dir / 'head.log'})")
            time.sleep(1.0)
        yield address
    finally:
        _kill_group(head)
        for p in spot_raylets(address):  # the fake provider's nodes are not in the head's process group
            _kill_tree(p)
        cfg.unlink(missing_ok=True)


def spot_raylets(address: str) -> list[psutil.Process]:
    """The raylets of the spot nodes of the cluster at ``address`` (their resources name ``spot``)."""
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "raylet" in (p.info["name"] or "") and "spot" in cmd and address in cmd:
            out.append(p)
    return out


def kill_spot_node(raylet: psutil.Process) -> None:
    """A spot node vanishes: its raylet and every process under it, SIGKILL."""
    _kill_tree(raylet)


def _kill_tree(p: psutil.Process) -> None:
    try:
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for q in procs:
        try:
            q.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
