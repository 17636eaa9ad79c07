"""Issue 41 item 5: a resume with a changed spec applies the change from the resumed step and says so.

``run SPEC --resume DIR`` with a lowered learning rate used to exit 0 and keep the old one.  Now
the fields a resume can apply (learning rate, schedule, clipping, the job's length and targets,
limits) take effect at the resumed step, the ``restore`` event lists them, ``spec.json`` becomes
the new spec, and a finished run can be extended.  Fields the checkpoint was made with exit 2
(tests/test_hardening_rundirs.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for
from spotwise.training.recipe import recipe_of

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "resume-changes",
    "seed": 4,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.02, "eval_every": 1000,
                 "optimizer": {"name": "AdamW", "weight_decay": 0.01},
                 "schedule": {"decay": "cosine", "warmup": 16}},
    "target": {"iterations": 20},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 5, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """In-process workers: the resume's arithmetic needs no Ray."""


def _controller(spec, out: Path, **kw: Any):  # type: ignore[no-untyped-def]
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    return build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)), **kw)


def test_a_resume_applies_a_new_learning_rate_and_length_from_the_resumed_step(tmp_path: Path, capfd) -> None:
    out = tmp_path / "run"
    first = spec_with(BASE)
    s1 = _controller(first, out, stop_after_steps=10).run()
    assert s1.status == "stopped" and s1.steps == 10
    changed = spec_with(BASE, workload__lr=0.01, target__iterations=30, workload__grad_clip_norm=0.5)
    coord = _controller(changed, out, resume=True)
    s2 = coord.run()
    assert s2.status == "completed" and s2.steps == 30
    restore = list(read_events(out / "events.jsonl", kinds=["restore"]))[-1]
    assert restore["step"] == 10
    assert restore["changed"]["workload.lr"] == [0.02, 0.01]
    assert restore["changed"]["target.iterations"] == [20, 30]
    assert restore["changed"]["workload.grad_clip_norm"][1] == 0.5
    assert "applies the spec's changes" in capfd.readouterr().err
    assert json.loads((out / "spec.json").read_text())["workload"]["lr"] == 0.01, "spec.json is the spec now run"
    # from the resumed step: the new base rate under the schedule of the new length (30 steps x 16 samples)
    sched = recipe_of(changed.workload, changed.planned_samples()).schedule
    assert sched is not None and sched.total == 30 * 16
    steps = {e["step"]: e for e in read_events(out / "events.jsonl", kinds=["step"])}
    assert sorted(steps) == list(range(1, 31))
    for s in (11, 20, 30):
        assert steps[s]["lr"] == pytest.approx(sched.lr(0.01, (s - 1) * 16), rel=1e-9), s
    old = recipe_of(first.workload, first.planned_samples()).schedule
    assert old is not None
    assert steps[10]["lr"] == pytest.approx(old.lr(0.02, 9 * 16), rel=1e-9), "steps before the resume keep theirs"


def test_a_finished_run_can_be_extended(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = spec_with(BASE, workload__schedule=None, workload__optimizer=None, workload__lr=0.1)
    done = _controller(spec, out)
    s1 = done.run()
    assert s1.status == "completed" and s1.steps == 20
    longer = spec_with(BASE, workload__schedule=None, workload__optimizer=None, workload__lr=0.1, target__iterations=26)
    again = _controller(longer, out, resume=True)
    s2 = again.run()
    assert s2.status == "completed" and s2.steps == 26
    assert [e["step"] for e in read_events(out / "events.jsonl", kinds=["step"])] == list(range(1, 27))
    # the extension continues from the finished run's parameters, not a fresh model
    straight = _controller(longer, tmp_path / "straight")
    s3 = straight.run()
    assert s3.steps == 26 and np.max(np.abs(again.params - straight.params)) < 1e-5
