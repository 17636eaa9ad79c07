"""Issue 41: the user's own training loop (``spotwise.elastic``) as a spotwise job.

The script ``tests/user_scripts/train_mlp.py`` (AdamW with decay / no-decay parameter groups,
BatchNorm, its own loss and logging) runs in every member of the collective plane; spotwise keeps
the controller, the market, checkpoints and the event log around it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.events import read_events
from spotwise.market.world import build_market

pytestmark = pytest.mark.timeout(300)

SCRIPTS = Path(__file__).parent / "user_scripts"


def script_spec(**over: Any):  # type: ignore[no-untyped-def]
    base: dict[str, Any] = {
        "name": "own-loop",
        "seed": 2,
        "workload": {"script": str(SCRIPTS / "train_mlp.py"), "batch_size": 8, "args": []},
        "target": {"samples": 480},
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                    "data_plane": "collective", "standby": 0, "replica_every": 5, "group_timeout_s": 5,
                    "replica_budget": None},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 0, "plots": False},
    }
    return spec_with(base, **over)


def run(spec, out: Path, revocation=None, **kw: Any):  # type: ignore[no-untyped-def]
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    coord = build_controller(spec, out, market=market, **kw)
    return coord, coord.run()


def test_a_script_trains_as_a_job(ray_session: Any, tmp_path: Path) -> None:
    spec = script_spec()
    coord, summary = run(spec, tmp_path / "run")
    assert summary.status == "completed", summary
    assert 480 <= coord.counters.samples < 480 + 16
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    assert [e["step"] for e in steps] == list(range(1, len(steps) + 1))
    metrics = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["metrics"]))
    assert metrics and all("loss" in m["values"] for m in metrics)
    print(json.dumps(summary.extra.get("metrics")))
