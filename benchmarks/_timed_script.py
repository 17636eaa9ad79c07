"""Run a spotwise.elastic script without spotwise (plain, or a torchrun rank) and write what it logged
with ``job.log`` to a JSON file per rank: ``python _timed_script.py OUT.json script.py ARGS...``.

The baseline side of ``benchmarks/own_loop.py --members K``: the converted script's own per-step
``ms`` (it logs them every iteration with ``--log-interval 1``) under torchrun's DDP."""

from __future__ import annotations

import json
import runpy
import sys

out, script, *args = sys.argv[1:]
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")

import spotwise.elastic.job as job_module  # noqa: E402  (after the script made its job)

job = job_module._JOB
assert job is not None, "the script never called sw.init()"
with open(f"{out}.{job.rank}", "w") as f:
    json.dump([{"step": s, **v} for s, v in job._backend.logged], f)  # type: ignore[attr-defined]
