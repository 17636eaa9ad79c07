"""Issue 55 item 6: restart mode -- an unmodified torchrun script on spot capacity, stopped and started again
(from its own checkpoint) at every membership change, with the steps it redoes counted as lost work.

``examples/torchrun/train_nanogpt.py`` runs here exactly as written for torchrun (0 changed lines): its
``--out_dir`` is the folder spotwise names (``{checkpoint_dir}``) and ``--init_from=resume`` is added when
it restarts after a checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from test_own_loop import run, script_spec

from spotwise.errors import InputError
from spotwise.events import read_events

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parent.parent
NANOGPT = ROOT / "examples" / "torchrun" / "train_nanogpt.py"
SCRIPTS = Path(__file__).parent / "user_scripts"
#: a small nanoGPT (tens of ms a step here); it checkpoints every 3 steps
SMALL = ["--n_layer=1", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=1", "--log_interval=1",
         "--eval_interval=3", "--dtype=float32", "--out_dir={checkpoint_dir}"]


def restart_spec(iterations: int, workers: int = 2, script: Path = NANOGPT, args: list[str] | None = None,
                 resume_args: list[str] | None = None, **over: Any) -> Any:
    settings = {"resume_args": ["--init_from=resume"] if resume_args is None else resume_args, "grace_s": 10}
    over.setdefault("workload__restart", settings)
    return script_spec(workload__script=str(script), workload__batch_size=4,
                       workload__args=SMALL + ["--max_iters=1000"] if args is None else args,
                       target__iterations=iterations, target__samples=None, seed=0, cluster__workers=workers, **over)


def events(out: Path, *kinds: str) -> list[dict[str, Any]]:
    return list(read_events(out / "events.jsonl", kinds=list(kinds)))


def test_restart_spec_is_checked_at_load(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="target.iterations"):
        script_spec(workload__script=str(NANOGPT), workload__restart={}, target__samples=100)
    with pytest.raises(InputError, match="grace_s"):
        restart_spec(10, workload__restart={"grace_s": -1})
    with pytest.raises(InputError, match="resume_args"):
        restart_spec(10, workload__restart={"resume_args": "--init_from=resume"})
    with pytest.raises(InputError, match="sync"):
        restart_spec(10, cluster__sync="sma")


def test_a_script_that_never_saves_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import spotwise

    plain = tmp_path / "train.py"
    plain.write_text("import torch\nfor i in range(10):\n    print(i)  # torch.save( is only a comment here\n")
    spec = {"name": "x", "cluster": {"instance_type": "c5.xlarge", "workers": 1}, "target": {"iterations": 5},
            "workload": {"batch_size": 4}, "market": {"synthetic": {"kind": "constant", "price": 0.07}}}
    with pytest.raises(InputError, match="never saves a checkpoint") as e:
        spotwise.launch(spec, plain, [], out=tmp_path / "run", restart=True)
    assert "step 0" in str(e.value)
    assert not (tmp_path / "run").exists()  # refused before the run directory (and Ray) exist


def test_restart_mode_refuses_a_ray_cluster(tmp_path: Path) -> None:
    import spotwise

    spec = {"name": "x", "cluster": {"instance_type": "c5.xlarge", "workers": 1}, "target": {"iterations": 5},
            "workload": {"batch_size": 4}, "market": {"synthetic": {"kind": "constant", "price": 0.07}}}
    with pytest.raises(InputError, match="--ray-address"):
        spotwise.launch(spec, NANOGPT, ["--out_dir={checkpoint_dir}"], out=tmp_path / "run", restart=True,
                        ray_address="127.0.0.1:1")


def test_the_cli_takes_restart_and_resume_args(tmp_path: Path) -> None:
    from spotwise.spec.launch import launch_spec

    spec = {"name": "x", "cluster": {"instance_type": "c5.xlarge", "workers": 1}, "target": {"iterations": 5},
            "workload": {"batch_size": 4}}
    job = launch_spec(spec, NANOGPT, ["--out_dir={checkpoint_dir}"], restart={"resume_args": ["--init_from=resume"]})
    assert job.workload.restart.resume_args == ["--init_from=resume"] and job.workload.restart.grace_s == 30.0
    assert launch_spec(spec, NANOGPT, []).workload.restart is None


def test_the_unmodified_torchrun_script_survives_five_revocations(ray_session: Any, tmp_path: Path) -> None:
    from spotwise.capacity.faults import ScriptedRevocation, outage

    spec = restart_spec(30, workers=2)
    # five revocations of one member or the other (the script restarts at world 1 and 2), one of both at once
    rev = ScriptedRevocation((outage(5, 8, [0]), outage(12, 14, [1]), outage(19, 22, [0]), outage(26, 28, [1]),
                              outage(33, 35, [0, 1]), outage(40, 42, [0])))
    out = tmp_path / "run"
    coord, summary = run(spec, out, revocation=rev)
    assert summary.status == "completed", (summary, coord.stop_message)
    assert coord.step == 30
    extra = summary.extra
    assert extra["data_plane"] == "restart"
    revokes = [e for e in events(out, "revoke") if e.get("reason") == "market"]
    assert len(revokes) >= 5
    restarts = events(out, "restart")
    assert extra["restarts"] == len(restarts) - 1 >= 5
    worlds = {len(r["members"]) for r in restarts}
    assert worlds == {1, 2}  # the script ran again with each new WORLD_SIZE
    assert any(r["resume"] for r in restarts)  # ... from its own checkpoint, with --init_from=resume
    # every committed step accounted: the steps after each checkpoint that a restart redid are the rollbacks'
    rollbacks = events(out, "rollback")
    assert sum(r["lost_steps"] for r in rollbacks) == extra["redone_steps"] > 0
    steps = [e["step"] for e in events(out, "step")]
    assert steps[-1] == 30 and len(steps) == 30 + extra["redone_steps"]
    # the log replays: each step follows the one before it or a rollback's step
    expect = 1
    marks = {(r["from_step"], r["to_step"]) for r in rollbacks}
    for s in steps:
        if s != expect:
            assert (expect - 1, s - 1) in marks, (s, expect, marks)
        expect = s + 1
    ckpts = events(out, "script_checkpoint")
    assert ckpts and all(c["step"] % 3 == 0 for c in ckpts) and extra["script_checkpoints"] == len(ckpts)
    assert (out / "script-checkpoints" / "ckpt.pt").is_file()
    assert extra["redone_s"] > 0 and extra["restart_wall_s_total"] > 0
    assert all(math_finite(e["loss"]) for e in events(out, "step"))


def math_finite(v: Any) -> bool:
    import math

    return isinstance(v, float) and math.isfinite(v)
