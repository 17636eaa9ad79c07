"""A real two-node Ray cluster on this machine: `spotwise run --ray-address`, a spot node dies mid-run.

The head (on-demand, no ``spot`` resource) and the spot nodes are started with ``ray start``
(``--block``, each in its own process group, bound to 127.0.0.1) and stopped by signalling their
process group -- never with ``ray stop``, which would also stop the test session's own Ray.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from spotwise.events import read_events
from _load import bound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # each wait is an event wait; this ends a hang

BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1",
                             "--disable-usage-stats", *args], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env=ENV, start_new_session=True)


def _session(sid: int) -> list[int]:
    """Every live process of session ``sid``: a node's ``ray start`` (started in a session of its
    own), its raylet and the worker processes the raylet started -- each of those in a process
    group of its own, so signalling the node's group does not reach them."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getsid(int(d.name)) == sid:
                    pids.append(int(d.name))
            except OSError:  # gone meanwhile
                pass
    return pids


def _kill_session(sid: int) -> None:
    for pid in _session(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _vanish(proc: subprocess.Popen) -> None:
    """A spot VM disappears: SIGKILL to every process of the node at once (the raylet and every
    actor on it), nothing shuts down gracefully -- the cluster learns of it as it would of a
    revoked VM."""
    _kill_session(proc.pid)
    proc.wait(timeout=bound(30))


def _stop(proc: subprocess.Popen) -> None:
    """Stop a node at the end of a test: SIGTERM to its group, then SIGKILL to whatever of its
    session is left (worker processes would otherwise outlive it)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    _kill_session(proc.pid)
    if proc.poll() is None:
        proc.wait(timeout=bound(30))


def _spot_units(address: str) -> float:
    out = subprocess.run([str(BIN / "ray"), "status", "--address", address], capture_output=True, text=True, env=ENV,
                         timeout=bound(60)).stdout
    for line in out.splitlines():
        if line.strip().endswith(" spot") and "/" in line:
            return float(line.split("/")[1].split()[0])
    return 0.0


#: bound on waits for a node to start and register (an event wait: the bound only ends a hang; a
#: raylet took ~10 s quiet and ~40 s beside two busy processes on the 2-core machine)
NODE_WAIT_S = bound(240.0)


#: what ``ray start`` prints once its node is registered with the GCS (``ray._private.node.Node`` waits for
#: the node's entry in the GCS before it returns; it gives up after a fixed 30 s and ``ray start`` exits)
STARTED = "Ray runtime started."


def _registered(log: Path) -> bool:
    """Whether the node a ``ray start --block`` writing to ``log`` started has registered: a
    read of its log, not a ``ray status`` process (~1 CPU-s a poll on the 2-core machine)."""
    try:
        return STARTED in log.read_text(errors="replace")
    except FileNotFoundError:
        return False


def _wait(cond, timeout: float, what: str, every: float = 0.5) -> None:
    """Poll ``cond`` until it holds; ``every``: the pause between polls (a ``ray status`` poll
    starts a Python process: ~1 CPU-s, so those poll every 2 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _diagnosis(run: subprocess.Popen, out: Path, tmp: Path) -> str:
    """What a failed wait shows: whether the run ended (and its stderr), the last events, and the
    Ray processes still alive (a node's worker that outlived its raylet keeps computing)."""
    lines = [f"run exit code: {run.poll()}"]
    if (tmp / "run.err").exists():
        lines.append("run stderr (tail):\n" + (tmp / "run.err").read_text(errors="replace")[-4000:])
    events = out / "events.jsonl"
    if events.exists():
        lines.append("events (tail):\n" + "\n".join(events.read_text().splitlines()[-15:]))
    ps = subprocess.run(["ps", "-eo", "pid,pgid,stat,etimes,args"], capture_output=True, text=True).stdout
    lines.append("ray processes:\n" + "\n".join(ln[:200] for ln in ps.splitlines() if "ray" in ln or "spotwise" in ln))
    for log in sorted(tmp.glob("n*.log")):
        lines.append(f"{log.name} (tail):\n" + "\n".join(log.read_text(errors="replace").splitlines()[-10:]))
    return "\n".join(lines)


def _spot_node(address: str, units: int, log: Path, nodes: list[subprocess.Popen]) -> subprocess.Popen:
    """Start a spot node with ``units`` ``spot`` units and wait until the cluster counts them.  Ray
    gives a starting raylet a fixed 30 s to register, which a loaded 2-core machine can exceed: its
    ``ray start`` then exits, and the node is started again (three tries)."""
    for attempt in range(3):
        node_log = log.with_name(f"{log.stem}.{attempt}.log")
        node = _start(["--address", address, "--resources", json.dumps({"spot": units}), "--num-cpus", "1"], node_log)
        nodes.append(node)
        _wait(lambda: node.poll() is not None or _registered(node_log), NODE_WAIT_S, "a spot node")
        if node.poll() is None:
            return node
    raise AssertionError(f"a spot node failed to start three times; its log: {log.with_name(f'{log.stem}.2.log').read_text()[-2000:]}")


def _steps(events: Path) -> int:
    if not events.exists():
        return 0
    return sum('"kind":"step"' in line for line in events.read_text().splitlines())


@pytest.fixture()
def head(tmp_path: Path):
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="swc-", dir="/tmp")
    head_log = tmp_path / "head.log"
    proc = _start(["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard=false", "--temp-dir", tmp],
                  head_log)
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    try:
        _wait(lambda: proc.poll() is not None or _registered(head_log), NODE_WAIT_S, "the head node")
        assert proc.poll() is None, head_log.read_text(errors="replace")[-3000:]
        yield address, nodes
    finally:
        for n in nodes:
            _stop(n)
        _stop(proc)


def _no_spot_node_exits_2(address: str, tmp_path: Path) -> None:
    chaos = Path(__file__).resolve().parents[1] / "examples" / "chaos.yaml"
    res = subprocess.run([str(BIN / "spotwise"), "run", str(chaos), "--out", str(tmp_path / "o"), "--ray-address", address],
                         capture_output=True, text=True, env=ENV, timeout=bound(120))
    assert res.returncode == 2 and "no node with a 'spot' resource" in res.stderr, res.stderr[-3000:]


@pytest.mark.extended  # by default on test_cluster_autoscale.py's cluster before its spot nodes (no start of its own)
def test_a_run_on_a_cluster_without_spot_nodes_exits_2(head, tmp_path: Path) -> None:
    """A cluster with no node offering the ``spot`` resource: the run exits 2 saying so, before training."""
    _no_spot_node_exits_2(head[0], tmp_path)


# issue 54 (the suite's time): a multi-node node loss and its replacement run by default in
# test_cluster_autoscale.py::test_autoscaled_spot_pool_replaces_a_lost_node_and_the_job_goes_on[collective];
# this PS-plane run of its own cluster, through a wait with no worker left, is the extended tier's
@pytest.mark.extended
def test_spot_node_lost_mid_run_and_capacity_returns(head, tmp_path: Path) -> None:
    """A spot node is lost with every worker of the job; the job waits; capacity returns and it
    finishes.  First, while the cluster has no spot node yet, a run against it exits 2 (the same
    head: one cluster start for both)."""
    address, nodes = head
    _no_spot_node_exits_2(address, tmp_path)
    _spot_node(address, 2, tmp_path / "n1.log", nodes)
    spec = {
        "name": "cluster", "seed": 1,
        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
        # long enough that the node is lost mid-run on a fast machine too (250 steps took 0.6 s on a quiet
        # one, finished between two polls of the 60-step wait: the loss came after the end)
        "target": {"iterations": 2500},
        # two workers on a node of two units, no standby spares: the node's loss leaves none
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 500, "plots": False},
    }
    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "run"
    # output to files, not pipes: nobody reads a pipe during the waits, and a run blocked on a full
    # stderr pipe (Ray forwards its workers' logs there) would stop before the node-lost revocations
    run_out, run_err = tmp_path / "run.out", tmp_path / "run.err"
    run = subprocess.Popen([str(BIN / "spotwise"), "run", str(spec_path), "--out", str(out), "--ray-address", address,
                            "--json"], stdout=open(run_out, "w"), stderr=open(run_err, "w"), text=True, env=ENV)
    try:
        _wait(lambda: _steps(out / "events.jsonl") >= 60 or run.poll() is not None, NODE_WAIT_S, "60 committed steps")
        assert run.poll() is None, run_err.read_text()[-4000:]
        _vanish(nodes[0])  # the spot node disappears with both workers
        revokes = lambda: sum(e["kind"] == "revoke" for e in read_events(out / "events.jsonl"))  # noqa: E731
        try:
            _wait(lambda: revokes() >= 2 or run.poll() is not None, NODE_WAIT_S, "node-lost revocations")
            assert revokes() >= 2
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_diagnosis(run, out, tmp_path)}") from None
        frozen = _steps(out / "events.jsonl")
        time.sleep(2)
        assert _steps(out / "events.jsonl") == frozen, "no worker left: no step can commit"
        nodes.append(_start(["--address", address, "--resources", '{"spot": 2}', "--num-cpus", "1"], tmp_path / "n2.log"))
        deadline = time.monotonic() + 2 * NODE_WAIT_S  # an event wait: the bound only ends a hang
        while run.poll() is None:
            assert time.monotonic() < deadline, f"the run did not finish after capacity returned\n{_diagnosis(run, out, tmp_path)}"
            if nodes[-1].poll() is not None:  # the raylet timed out registering (a loaded machine): again
                nodes.append(_start(["--address", address, "--resources", '{"spot": 2}', "--num-cpus", "1"],
                                    tmp_path / f"n{len(nodes) + 1}.log"))
            time.sleep(1.0)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, run_err.read_text()[-4000:]
    summary = json.loads(run_out.read_text())
    assert summary["status"] == "completed" and summary["steps"] == 2500 and summary["mode"] == "cluster"
    events = read_events(out / "events.jsonl")
    lost = [e for e in events if e["kind"] == "revoke"]
    assert len(lost) == 2 and all(e["reason"] == "node-lost" for e in lost)
    assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, 2501))
    assert any(e["kind"] == "idle" for e in events), "the job waited for capacity"
    joins = [e for e in events if e["kind"] == "join"]
    rejoined = [e for e in joins if e["t"] > lost[-1]["t"]]
    assert rejoined, "new workers joined on the new node (the job may finish before both have started)"


def test_unreachable_address_exits_2(tmp_path: Path) -> None:
    spec = Path(__file__).resolve().parents[1] / "examples" / "chaos.yaml"
    res = subprocess.run([str(BIN / "spotwise"), "run", str(spec), "--out", str(tmp_path / "o"), "--ray-address",
                          f"127.0.0.1:{_free_port()}"], capture_output=True, text=True, env=ENV, timeout=bound(120))
    assert res.returncode == 2 and "cannot reach the Ray cluster" in res.stderr and "Traceback" not in res.stderr
