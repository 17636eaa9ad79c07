"""The scale-in auto-tuner (paper 004 Sec. 4.2) driven by the job controller: the controller keeps
the learning curve and hands it to its policies (``Observation.extra``), so the same policy that
the serverless runtime will use shrinks a VM pool too (issue 9: "usable by VM runs too")."""

from __future__ import annotations

from pathlib import Path

from _specs import spec_with

from spotwise.events import read_events
from spotwise.sim.simulate import simulate_job

BASE = {
    "name": "scale-in", "seed": 0,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.05, "step_time_s": 1.0, "eval_every": 1000},
    "target": {"iterations": 400},
    "cluster": {"instance_type": "c5.xlarge", "workers": 6, "coordinator_instance": "c5.large", "straggler": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def test_controller_feeds_the_learning_curve_and_the_tuner_shrinks_the_pool(tmp_path: Path) -> None:
    spec = spec_with(BASE, policies=[{"name": "scale-in", "params": {"interval_s": 20, "min_workers": 2}}])
    summary, _, _ = simulate_job(spec, tmp_path / "run", pilot_steps=20)
    assert summary.status == "completed" and summary.steps == 400
    resizes = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["kind"] == "decision" and "Resize" in e["decision"]]
    assert resizes, "past the knee the tuner removes workers"
    sizes = [int(e["decision"].split("workers=")[1].rstrip(")")) for e in resizes]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= 2, "one at a time, never below min_workers"
    times = [e["t"] for e in resizes]
    assert all(b - a >= 20 - 1e-9 for a, b in zip(times, times[1:])), "at most one removal per scheduling interval"
    steps = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["kind"] == "step"]
    assert steps[-1]["active"] == sizes[-1]
    # the same job without the tuner keeps all six workers and pays more for the same steps
    plain, _, _ = simulate_job(spec_with(BASE), tmp_path / "plain", pilot_steps=20)
    assert plain.cost_usd > summary.cost_usd
