"""Issue 20 item 1: the collective data plane on a real multi-node Ray cluster.

A head (on-demand, no ``spot`` resource, where the controller and its rendezvous store run) and
two spot nodes, started with ``ray start`` as in ``test_cluster.py`` (each node its own process
group, stopped by signalling it -- never ``ray stop``, which would also stop the test session's
own Ray).  Under S-MA, AD-PSGD and S-SGD with the strategy-switch policy (plain S-SGD: the
collective run of ``test_cluster_autoscale.py``) a spot node is killed mid-run (``SIGKILL`` to every process of the node at once: its members die at a
random point of a step, computing or inside the all-reduce), the survivors regroup in place and
the lost slots are requested again (a new spot node is started; its members join if it is up
before the run is stopped).  Asserted, once the survivors regrouped and committed steps (the
test then stops the run with SIGTERM): a clean stop, every step is committed exactly once in the history that stands (a rollback, if every member was
lost at once, is logged and redone), every complete epoch's samples are committed exactly once
(the sampler guarantee), nothing hangs (bounded waits everywhere), and the store listened on the
head's address only.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cluster import BIN, ENV, NODE_WAIT_S, _free_port, _spot_units, _start, _steps, _stop, _vanish, _wait
from test_collective_plane import assert_sampler_guarantee, committed_history

from spotwise.events import read_events
from _load import bound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # each wait is an event wait; this ends a hang


def _n_train(spec: dict[str, Any]) -> int:
    """The training split's size (what the sampler guarantee is checked against)."""
    from spotwise.config import spec_from_dict
    from spotwise.workloads.registry import make_workload

    job = spec_from_dict(spec)
    return len(make_workload(job.workload, job.seed).train)




@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A head and two spot nodes (two ``spot`` units each); tests replace the nodes they kill."""
    logs = tmp_path_factory.mktemp("cluster-logs")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="swcc-", dir="/tmp")
    head = _start(["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard=false", "--temp-dir", tmp],
                  logs / "head.log")
    address = f"127.0.0.1:{port}"
    state: dict[str, Any] = {"address": address, "nodes": [], "logs": logs, "n": 0}
    try:
        _wait(lambda: subprocess.run([str(BIN / "ray"), "status", "--address", address], capture_output=True,
                                     env=ENV, timeout=bound(60)).returncode == 0, NODE_WAIT_S, "the head node", every=2.0)
        _ensure_nodes(state)
        yield state
    finally:
        for n in state["nodes"]:
            _stop(n)
        _stop(head)


def _ensure_nodes(state: dict[str, Any], want: int = 2) -> None:
    """Bring the cluster to ``want`` live spot nodes of two units each, one start at a time (two
    raylets starting at once on one machine time out).  A node whose ``ray start`` exited is started
    again: Ray gives a raylet a fixed 30 s to register, which a loaded 2-core machine can exceed (a
    replacement started during a test is the usual victim).  The wait is for exactly ``want`` nodes'
    units: a node a test killed still counts in ``ray status`` until the GCS has declared it dead,
    and a run started then would find fewer units than were counted."""
    address = state["address"]
    deadline = time.monotonic() + 2 * NODE_WAIT_S  # an event wait: the bound only ends a hang
    while True:
        state["nodes"] = [n for n in state["nodes"] if n.poll() is None]
        live, units = len(state["nodes"]), _spot_units(address)
        if live == want and units == 2 * want:
            return
        assert time.monotonic() < deadline, f"{live} live spot nodes, {units:g} spot units; want {want} nodes"
        if live < want and units >= 2 * live:  # every live node registered: start the next one
            _add_node(state)
        time.sleep(2.0)


def _add_node(state: dict[str, Any]) -> subprocess.Popen:
    state["n"] += 1
    node = _start(["--address", state["address"], "--resources", '{"spot": 2}', "--num-cpus", "1"],
                  state["logs"] / f"node{state['n']}.log")
    state["nodes"].append(node)
    return node


#: plain S-SGD and S-SGD with the strategy switch through a real node loss are test_cluster_autoscale.py's
#: collective run: one end-to-end run of that path, not two
SPECS: dict[str, dict[str, Any]] = {
    "sma": {"sync": "sma", "local_steps": 2},
    "adpsgd": {"sync": "adpsgd"},
    "ssgd+switch": {"sync": "ssgd", "policies": [{"name": "strategy-switch", "params": {
        "strategies": ["ssgd", "adpsgd"], "threshold": 0.99, "window_s": 0.5, "min_interval_s": 1.0}}]},
}
#: committed steps wanted after the survivors' regroup (and after a switch, for the switching policy)
AFTER = 15


def _steps_after_regroup(events: list[dict[str, Any]], t_lost: float) -> int | None:
    """Steps committed after the survivors regrouped in place following the node loss (None: no
    such regroup yet), counted in the log's order."""
    for i, e in enumerate(events):
        if e["kind"] == "regroup" and e["t"] >= t_lost and e["gen"] > 0 and e["survivors"]:
            return sum(1 for f in events[i + 1:] if f["kind"] == "step")
    return None


# extended, every strategy: S-MA and AD-PSGD run single-node through revocations in test_collective_plane;
# S-SGD with the strategy switch through a real node loss (survivors regroup in place, no rollback, the
# policy switches, new members join) is test_cluster_autoscale.py::
# test_autoscaled_spot_pool_replaces_a_lost_node_and_the_job_goes_on[collective] (issue 54: one
# multi-node cluster run for both)
@pytest.mark.extended
@pytest.mark.parametrize("strategy", list(SPECS))
def test_collective_run_survives_a_spot_node_killed_mid_step(cluster: dict[str, Any], tmp_path: Path,
                                                             strategy: str) -> None:
    """The run is stopped (SIGTERM, a clean stop: exit 143) once the survivors regrouped and
    committed ``AFTER`` more steps: event waits, not a step count guessed from this machine's speed.
    That a cluster run completes is asserted by tests/test_cluster.py."""
    address = cluster["address"]
    _ensure_nodes(cluster)
    extra = dict(SPECS[strategy])
    policies = extra.pop("policies", [])
    spec = {
        "name": f"cluster-{strategy}", "seed": 3,
        "workload": {"name": "mlp-digits", "batch_size": 32, "lr": 0.05, "eval_every": 100000},
        "target": {"iterations": 10**7},  # stopped by the test
        # no standby spares: the members that join after the loss are the new node's
        "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large", "standby": 0,
                    "data_plane": "collective", "replica_every": 5, "group_timeout_s": bound(5), **extra},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 0, "plots": False},
        "policies": policies,
    }
    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "run"
    n_train = _n_train(spec)
    err = tmp_path / "run.err"  # a file, not a pipe nobody reads during the waits (a full pipe blocks the run)
    run = subprocess.Popen([str(BIN / "spotwise"), "run", str(spec_path), "--out", str(out), "--ray-address", address,
                            "--json"], stdout=subprocess.DEVNULL, stderr=open(err, "w"), text=True, env=ENV)

    def events() -> list[dict[str, Any]]:
        return read_events(out / "events.jsonl") if (out / "events.jsonl").exists() else []

    try:
        def three_members_stepping() -> bool:
            ev = events()
            full = [e for e in ev if e["kind"] == "regroup" and len(e["members"]) == 3]
            # past the first epoch, so the sampler guarantee below spans an epoch boundary
            return (bool(full) and _steps(out / "events.jsonl") >= 20 and
                    any(e["kind"] == "step" and e.get("epoch", 0) >= 1 for e in ev)) or run.poll() is not None

        _wait(three_members_stepping, NODE_WAIT_S, "three members committing steps")
        assert run.poll() is None, err.read_text()[-4000:]
        victim = cluster["nodes"].pop(0)
        _vanish(victim)  # the spot node is reclaimed: its members die mid-step
        _add_node(cluster)  # capacity returns: a new spot node (it takes seconds to start)

        def survived() -> bool:
            ev = events()
            lost = [e for e in ev if e["kind"] == "revoke"]
            after = _steps_after_regroup(ev, lost[0]["t"]) if lost else None
            if after is None or run.poll() is not None:
                return run.poll() is not None
            if strategy == "ssgd+switch":
                sw = [e for e in ev if e["kind"] == "decision" and e["decision"].startswith("SwitchSync") and e["acted"]]
                if not sw:
                    return False
            return after >= AFTER

        _wait(survived, NODE_WAIT_S, f"the survivors' regroup and {AFTER} steps after it")
        assert run.poll() is None, err.read_text()[-4000:]
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=bound(120))
    finally:
        if run.poll() is None:
            run.kill()
    stderr = err.read_text()
    assert run.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    ev = read_events(out / "events.jsonl")
    lost = [e for e in ev if e["kind"] == "revoke"]
    assert lost and all(e["reason"] == "node-lost" for e in lost), lost
    # two spot units per node, three members: a node loss always leaves a survivor, who rolls
    # forward -- no committed step is lost
    assert not [e for e in ev if e["kind"] == "rollback"]
    history = committed_history(out)
    assert [e["step"] for e in history] == list(range(1, len(history) + 1))
    assert_sampler_guarantee(history, n_train)
    regroups = [e for e in ev if e["kind"] == "regroup"]
    assert any(e["gen"] > 0 and e["survivors"] for e in regroups), "the survivors regrouped in place"
    # members that joined after the loss (the new node's, when it came up before the stop) took part
    # in a generation; that a replacement node's members are admitted is asserted, for both planes,
    # by tests/test_cluster_autoscale.py
    joined_after = {e["worker"] for e in ev if e["kind"] == "join" and e["t"] > lost[0]["t"]}
    if joined_after:
        assert any(set(e["joiners"]) & joined_after for e in regroups if e["t"] > lost[0]["t"])
