"""Issue 54 item 6: memory limits are read, not hit -- real runs under ``ulimit -v``.

* At the documented minimum (docs/security.md: ``ulimit -v`` of ~2.3 GiB, :data:`RUN_VMEM_MIB` plus Ray's
  smallest store) a run completes on the parameter-server and the collective plane.
* Under the review's ``ulimit -v 8000000`` a collective run stopped with SIGTERM after its first checkpoint
  resumes and completes: with the store at the whole headroom (5,508 MiB) the raylet, which may map it twice,
  died in ``mmap`` (exit 1, no summary).
Each run is a fresh ``spotwise`` process (the limit is per process and inherited by Ray's), so nothing here
shares the suite's Ray.

The default tier runs the first on the collective plane only: the parameter-server run at the minimum and
the collective run stopped and resumed under the review's limit are the SIGTERM-and-resume runs of
``test_hardening_signals.py::test_sigterm_checkpoints_the_last_committed_step_and_resume_continues_from_it``
(``[ps]`` at the minimum, ``[collective]`` under 8,000,000 KiB: the run and its resume), which start the same
processes under the same limits and assert more of them; the runs of their own here are ``extended``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _load import bound

from spotwise.capacity.raystart import RAY_MIN_OBJECT_STORE_MIB, RUN_VMEM_MIB

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: the documented minimum, KiB (what `ulimit -v` takes)
MINIMUM_KIB = (RUN_VMEM_MIB + RAY_MIN_OBJECT_STORE_MIB) * 1024
#: the review's limit
REVIEW_KIB = 8_000_000


def _spec(tmp: Path, plane: str, iterations: int) -> Path:
    d: dict[str, Any] = {
        "name": "memory-limits", "seed": 1,
        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
        "target": {"iterations": iterations},
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0,
                    **({"data_plane": "collective"} if plane == "collective" else {})},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 10, "plots": False},
    }
    p = tmp / f"{plane}.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPOTWISE_", "RAY_ADDRESS"))}


def _limited(kib: int, *args: str) -> list[str]:
    quoted = " ".join(f"'{a}'" for a in args)
    return ["bash", "-c", f'ulimit -v {kib} && exec "{sys.executable}" -m spotwise.cli {quoted}']


def _no_dump(err: str) -> None:
    for dump in ("StackTrace", "Traceback", "mmap failed", "internal error"):
        assert dump not in err, err[-3000:]


# ps: the default tier's test_hardening_signals.py::test_sigterm_checkpoints_the_last_committed_step_and_resume_continues_from_it[ps]
# runs a PS run and its resume to completion at this minimum
@pytest.mark.parametrize("plane", [pytest.param("ps", marks=pytest.mark.extended), "collective"])
def test_a_run_completes_at_the_documented_minimum(tmp_path: Path, plane: str) -> None:
    out = tmp_path / "run"
    res = subprocess.run(_limited(MINIMUM_KIB, "run", str(_spec(tmp_path, plane, 20)), "--out", str(out), "--json"),
                         capture_output=True, text=True, env=_env(), timeout=bound(600))
    assert res.returncode == 0, res.stderr[-3000:]
    _no_dump(res.stderr)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 20


# the default tier's test_hardening_signals.py::test_sigterm_checkpoints_the_last_committed_step_and_resume_continues_from_it[collective]
# stops a collective run with SIGTERM and resumes it to completion under this limit (and asserts exit 143)
@pytest.mark.extended
def test_a_collective_run_stopped_under_the_reviews_limit_resumes_and_completes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = _spec(tmp_path, "collective", 200)
    run = subprocess.Popen(_limited(REVIEW_KIB, "run", str(spec), "--out", str(out), "--json"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + bound(300)
        while not (out / "checkpoints" / "manifest.json").exists():
            assert run.poll() is None, (run.communicate()[1] or "")[-3000:]
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.2)
        os.kill(run.pid, signal.SIGTERM)
        _, err = run.communicate(timeout=bound(120))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    assert run.returncode in (0, 143), err[-3000:]  # 0: it finished before the signal (a fast machine)
    res = subprocess.run(_limited(REVIEW_KIB, "run", "--resume", str(out), "--json"), capture_output=True, text=True,
                         env=_env(), timeout=bound(600))
    assert res.returncode == 0, res.stderr[-3000:]
    _no_dump(res.stderr)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 200
