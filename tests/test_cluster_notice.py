"""Preemption notices on a real cluster: a worker's metadata watcher -> coordinator checkpoint.

The workers run on the test session's Ray (which carries a ``spot`` resource, like a spot node)
and watch a fake GCP metadata server on loopback; when it flips ``preempted`` to TRUE, the
notice rides back on the next gradient and the coordinator writes a checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_notice import fake as metadata  # noqa: F401  (the fake metadata service of the watcher tests, as a fixture)
from test_runtime import make_spec

from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.capacity.cluster import ClusterProvider, cluster_controller
from spotwise.planes.ps.worker import worker_args_for

pytestmark = pytest.mark.timeout(180)


def test_gcp_preemption_notice_reaches_coordinator(ray_session, metadata, tmp_path: Path) -> None:
    spec = make_spec(**{"target__iterations": 500, "cluster__workers": 2, "outputs__checkpoint_every": 0})
    notices = {"cloud": "gcp", "base_url": metadata.url, "interval_s": 0.05}
    provider = ClusterProvider(worker_args_for(spec, notices))

    def flip_at_step_50(snap: dict) -> None:
        if snap["step"] == 50:
            metadata.set_preempted(True)  # the provider announces preemption of both nodes

    coord = cluster_controller(spec, tmp_path / "run", market=build_market(spec), provider=provider,
                               progress=flip_at_step_50)
    summary = coord.run()  # a hang is caught by the module's timeout; the test asserts behaviour, not speed
    assert summary.steps == 500
    events = read_events(tmp_path / "run" / "events.jsonl")
    notices_seen = [e for e in events if e["kind"] == "notice"]
    assert {e["worker"] for e in notices_seen} == {0, 1}, "each worker reports its node's notice once"
    assert all(e["source"] == "gcp" and e["action"] == "preempted" for e in notices_seen)
    # as soon as a notice arrives the coordinator checkpoints: at the end of the step in flight, whatever other
    # events (the other node's notice) land in between -- counted in steps, not in events
    first = events.index(notices_seen[0])
    seen = [(e["kind"], e.get("why"), e.get("step")) for e in events[first:first + 8]]
    after = [e for e in events[first + 1:] if e["kind"] == "step" or (e["kind"] == "checkpoint" and e["why"] == "notice")]
    steps_first = next((i for i, e in enumerate(after) if e["kind"] == "checkpoint"), None)
    assert steps_first is not None and steps_first <= 1, f"the coordinator checkpoints as soon as a notice arrives: {seen}"
    assert any(p.endswith("/instance/preempted") for p in metadata.paths())
