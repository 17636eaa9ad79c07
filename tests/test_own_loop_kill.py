"""Issue 41 item 7: a user's script killed with the whole job (``kill -9`` of ``spotwise run``: the
controller, Ray and the members die with it) resumes to the uninterrupted run's result.

The script (``tests/user_scripts/train_mlp.py --sched``) trains with AdamW over decay / no-decay groups,
BatchNorm and torch's own LambdaLR registered with ``job.scheduler``: the checkpoint must hold the
parameters, the optimizer's moments, the BatchNorm statistics, the schedule's position and the data
position, or the resumed run ends elsewhere.  The killed run goes through the CLI, as a user runs it, in a
session of its own with its own Ray, and only its driver is killed with SIGKILL: every process it started
(Ray's daemons, the members) must be gone within 10 s (issue 54 item 7, the assertion of
``test_driver_kill.py``, whose runs are ``extended``).  The resume (``spotwise.run(..., resume=True)``, what
``run --resume`` calls; the CLI's resume is ``test_hardening_signals.py``'s and ``test_output_uri.py``'s) and
the uninterrupted run it is compared with run in this process on the test session's Ray; the uninterrupted
run without the ``--pace`` sleeps that only give the kill its time to land (a sleep after each step changes
no number).
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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = Path(__file__).parent / "user_scripts" / "train_mlp.py"


def _spec_dict() -> dict[str, Any]:
    return {
        "name": "own-loop-kill", "seed": 2,
        "workload": {"script": str(SCRIPT), "batch_size": 8, "args": ["--sched", "--pace", "0.1"]},  # >= 6 s: the kill lands mid-run
        "target": {"samples": 960},  # 60 steps of 2 x 8
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                    "data_plane": "collective", "standby": 0, "replica_every": 5, "group_timeout_s": 5},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 4, "plots": False},
    }


def _spec(folder: Path) -> Path:
    p = folder / "job.yaml"
    p.write_text(yaml.safe_dump(_spec_dict()))
    return p


def _straight(out: Path) -> Any:
    """The uninterrupted run of the same spec, without ``--pace`` (it sleeps after each step, nothing
    else), in this process: the summary (``out/model.pt`` holds its final model)."""
    from spotwise.assemble import build_controller
    from spotwise.config import spec_from_dict
    from spotwise.market.world import build_market

    d = _spec_dict()
    args = d["workload"]["args"]
    d["workload"]["args"] = [a for i, a in enumerate(args) if a != "--pace" and (i == 0 or args[i - 1] != "--pace")]
    assert d["workload"]["args"] == ["--sched"], d["workload"]["args"]
    spec = spec_from_dict(d)
    return build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0)).run()


def _env() -> dict[str, str]:
    ray_tmp = tempfile.mkdtemp(prefix="swk-", dir="/tmp")  # short: Ray's socket paths stay under 107 characters
    return {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1"}


def _last_checkpoint(run: Path) -> int:
    try:
        manifest = json.loads((run / "checkpoints" / "manifest.json").read_text())
    except (OSError, ValueError):
        return 0
    return max((int(c["step"]) for c in manifest.get("checkpoints", [])), default=0)


def _kill_the_driver_mid_run(spec: Path, run: Path, log: Path) -> None:
    """``spotwise run`` in a session of its own, SIGKILL to its driver alone once a checkpoint at step 12 or
    later is written; every process it started is gone within 10 s (times the machine's slowdown)."""
    env = _env()
    with log.open("w") as sink:  # a file, not a pipe nobody reads during the wait
        proc = subprocess.Popen([sys.executable, "-m", "spotwise.cli", "run", str(spec), "--out", str(run)], env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, tuple[int, str]] = {}
    try:
        deadline = time.monotonic() + bound(400)
        while _last_checkpoint(run) < 12:  # well inside the run: several checkpoints, steps after the last
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint at step 12"
            record_descendants(proc.pid, seen)
            time.sleep(0.1)
        record_descendants(proc.pid, seen)
        kill_driver_and_assert_none_outlives(proc, seen)
    finally:
        end_what_is_left(proc, seen)
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def test_a_killed_script_job_resumes_to_the_uninterrupted_result(ray_session: Any, tmp_path: Path) -> None:
    import torch

    import spotwise

    spec = _spec(tmp_path)
    run, straight = tmp_path / "run", tmp_path / "straight"
    _kill_the_driver_mid_run(spec, run, tmp_path / "killed.log")
    summary = run / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["status"] != "completed", "killed before the end"
    killed_at = _last_checkpoint(run)

    resumed_summary = spotwise.run(spec, run, resume=True)
    done = json.loads(summary.read_text())
    assert resumed_summary.status == done["status"] == "completed", done
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    restores = [e for e in events if e["kind"] == "restore"]
    assert restores and restores[-1]["step"] >= killed_at >= 12, (restores, killed_at)

    straight_summary = _straight(straight)
    assert straight_summary.status == "completed", straight_summary
    resumed = torch.load(run / "model.pt", weights_only=True)
    want = torch.load(straight / "model.pt", weights_only=True)
    assert set(resumed) == set(want) and any("running_mean" in k for k in want), "BatchNorm statistics included"
    diff = max(float((resumed[k].double() - want[k].double()).abs().max()) for k in want)
    assert diff < 1e-5, diff
    assert straight_summary.steps == json.loads((straight / "summary.json").read_text())["steps"] == done["steps"]
