"""Issue 20 item 2: spot pools through Ray's autoscaler, end to end on its fake multi-node provider.

The cluster starts with the head only (on-demand, no ``spot`` units).  ``spotwise run --autoscale``
asks Ray's autoscaler for the job's worker slots (``ray.autoscaler.sdk.request_resources``); the
autoscaler launches spot nodes (real raylets, from the fake provider), spotwise admits their
workers as joiners.  Mid-run a spot node is killed (its raylet and workers, SIGKILL): spotwise
sees the lost workers as revocations and asks for the slots again; the autoscaler launches a
replacement; spotwise admits it and its workers commit steps; the test then stops the run
(SIGTERM) and checks every sample in exactly one committed step per epoch.  Both data planes.  See ``tests/_autoscaling.py`` for how the fake provider is
started (Ray's ``AutoscalingCluster``, without its ``ray stop --force``).

The collective run is also ``test_cluster_collective.py``'s S-SGD-with-strategy-switch scenario (issue
54: one multi-node run where two started clusters of their own): three members on nodes of two
``spot`` units, so the lost node leaves a survivor who regroups in place (no rollback), the
strategy-switch policy acts on the loss, and the replacement's members join a later generation.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _autoscaling import BIN, ENV, autoscaling_cluster, kill_spot_node, spot_raylets

from spotwise.events import read_events
from _load import bound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # each wait is an event wait; this ends a hang


def _steps(events: Path) -> int:
    if not events.exists():
        return 0
    return sum('"kind":"step"' in line for line in events.read_text().splitlines())


#: the strategy-switch policy of test_cluster_collective.py's ssgd+switch run: a node loss drops the
#: availability below the threshold and the policy switches S-SGD to AD-PSGD
SWITCH = [{"name": "strategy-switch", "params": {"strategies": ["ssgd", "adpsgd"], "threshold": 0.99, "window_s": 0.5,
                                                 "min_interval_s": 1.0}}]


def _spec(plane: str, steps: int) -> dict[str, Any]:
    # no standby spares: the workers that join after the loss are the replacement node's
    cluster: dict[str, Any] = {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0}
    policies: list[dict[str, Any]] = []
    if plane == "collective":
        # three members on nodes of two units: two nodes, and the lost one always leaves a survivor
        cluster.update(workers=3, data_plane="collective", sync="ssgd", replica_every=5, group_timeout_s=bound(5))
        policies = SWITCH
    return {"name": f"autoscale-{plane}", "seed": 2,
            "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 100000},
            "target": {"iterations": steps}, "cluster": cluster,
            "market": {"synthetic": {"kind": "constant", "price": 0.07}},
            "outputs": {"checkpoint_every": 100, "plots": False}, "policies": policies}


def _regrouped_and_switched(ev: list[dict[str, Any]], t_lost: float) -> bool:
    """The survivors regrouped in place after the loss and committed steps after it, and the
    strategy-switch policy acted (the collective run)."""
    i = next((i for i, e in enumerate(ev) if e["kind"] == "regroup" and e["t"] >= t_lost and e["gen"] > 0
              and e["survivors"]), None)
    switched = any(e["kind"] == "decision" and e["decision"].startswith("SwitchSync") and e["acted"] for e in ev)
    return i is not None and switched and sum(1 for f in ev[i + 1:] if f["kind"] == "step") >= AFTER


#: committed steps wanted from the replacement node's workers before the test stops the run
AFTER = 20


@pytest.mark.parametrize("plane", [pytest.param("ps", marks=pytest.mark.extended), "collective"])
def test_autoscaled_spot_pool_replaces_a_lost_node_and_the_job_goes_on(tmp_path: Path, plane: str) -> None:
    """Event waits only: the run is stopped (SIGTERM, a clean stop: exit 143) once the replacement's
    workers joined and ``AFTER`` steps were committed after that; no step count guessed from this
    machine's speed.  That a cluster run completes is asserted by tests/test_cluster.py."""
    spec = _spec(plane, 10**7)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "run"
    events = out / "events.jsonl"

    def replaced() -> bool:
        ev = read_events(events)
        lost = [e for e in ev if e["kind"] == "revoke"]
        if not lost:
            return False
        joins = [i for i, e in enumerate(ev) if e["kind"] == "join" and e["t"] > lost[0]["t"]]
        if plane == "collective":
            # the survivor's node has two slots: a generation of three members after the loss holds a
            # member on the replacement node (a join on the survivor's free slot alone is not one; CI
            # saw that join come first, before the replacement node was up)
            full = next((i for i, e in enumerate(ev) if e["kind"] == "regroup" and e["t"] > lost[0]["t"]
                         and len(e["members"]) == 3), None)
            if (not _regrouped_and_switched(ev, lost[0]["t"]) or full is None
                    or sum(1 for e in ev[full + 1:] if e["kind"] == "step") < AFTER):
                return False
        return bool(joins) and sum(1 for e in ev[joins[0] + 1:] if e["kind"] == "step") >= AFTER

    with autoscaling_cluster(tmp_path) as address:
        assert spot_raylets(address) == [], "the cluster starts without spot nodes"
        if plane == "collective":
            # a run without --autoscale on this cluster of no spot node exits 2 saying so, before training
            # (test_cluster.py's own test of it, a cluster start of its own, is extended)
            from test_cluster import _no_spot_node_exits_2

            _no_spot_node_exits_2(address, tmp_path)
        err = tmp_path / "run.err"  # a file, not a pipe nobody reads during the waits (a full pipe blocks the run)
        run = subprocess.Popen([str(BIN / "spotwise"), "run", str(tmp_path / "job.yaml"), "--out", str(out),
                                "--ray-address", address, "--autoscale", "--json"],
                               stdout=subprocess.DEVNULL, stderr=open(err, "w"), text=True, env=ENV)
        try:
            deadline = time.monotonic() + bound(300)  # event waits: the bounds only end a hang
            # past the first epoch, so the sampler checks below span an epoch boundary; the collective
            # run's three members on both nodes (whichever is lost, a member survives it)
            while (_steps(events) < 100 or not any(e["kind"] == "step" and e.get("epoch", 0) >= 1
                                                   for e in read_events(events))
                   or (plane == "collective" and not any(e["kind"] == "regroup" and len(e["members"]) == 3
                                                         for e in read_events(events)))) and run.poll() is None:
                assert time.monotonic() < deadline, "no 100 steps: the autoscaler did not provide spot nodes"
                time.sleep(0.5)
            assert run.poll() is None, err.read_text()[-4000:]
            first = spot_raylets(address)
            assert first, "the autoscaler launched spot nodes for the job"
            kill_spot_node(first[0])  # a spot node is reclaimed
            deadline = time.monotonic() + bound(300)
            first_pids = {p.pid for p in first}
            # a replacement node (a raylet that was not there at the loss) whose workers joined and stepped
            while (not (replaced() and any(r.pid not in first_pids for r in spot_raylets(address)))
                   and run.poll() is None):
                assert time.monotonic() < deadline, "no replacement node's workers joined and stepped"
                time.sleep(0.5)
            assert run.poll() is None, err.read_text()[-4000:]
            assert any(r.pid not in first_pids for r in spot_raylets(address)), "a replacement node"
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=bound(120))
        finally:
            if run.poll() is None:
                run.kill()
    stderr = err.read_text()
    assert run.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    ev = read_events(events)
    lost = [e for e in ev if e["kind"] == "revoke"]
    assert lost and all(e["reason"] == "node-lost" for e in lost), lost
    joined_after = [e for e in ev if e["kind"] == "join" and e["t"] > lost[0]["t"]]
    assert joined_after, "the replacement node's workers joined"
    first_join = joined_after[0]["t"]
    assert any(e["kind"] == "step" and e["t"] > first_join for e in ev), "and contributed to committed steps"
    if plane == "ps":
        # no committed step lost, none twice; the stop's checkpoint holds the sampler's state: every
        # sample of each finished epoch exactly once (whole epochs plus the current one's)
        steps = [e for e in ev if e["kind"] == "step"]
        assert [e["step"] for e in steps] == list(range(1, len(steps) + 1))
        from spotwise.control.checkpoint import load_latest_checkpoint

        state, _ = load_latest_checkpoint(out)
        sampler = state["sampler"]
        assert state["step"] == len(steps), (state["step"], len(steps))
        assert sampler["epoch"] >= 1, "the run crossed epochs"
        assert state["counters"]["samples"] == sampler["epoch"] * sampler["n"] + sampler["committed_in_epoch"]
    else:
        from test_collective_plane import assert_sampler_guarantee, committed_history

        history = committed_history(out)
        assert [e["step"] for e in history] == list(range(1, len(history) + 1))
        assert_sampler_guarantee(history, len(_train(spec)))
        # a node loss leaves a survivor, who rolls forward: no committed step is lost
        assert not [e for e in ev if e["kind"] == "rollback"]
        assert _regrouped_and_switched(ev, lost[0]["t"]), "the survivors regrouped in place and the policy switched"
        # the replacement's members took part in a generation after the loss
        joiners = {e["worker"] for e in joined_after}
        assert any(set(e["joiners"]) & joiners for e in ev if e["kind"] == "regroup" and e["t"] > lost[0]["t"])


def _train(spec: dict[str, Any]) -> torch.utils.data.Dataset:
    from spotwise.config import spec_from_dict
    from spotwise.workloads.registry import make_workload

    job = spec_from_dict(spec)
    return make_workload(job.workload, job.seed).train
