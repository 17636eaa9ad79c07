"""Shared helpers for the benchmarks: Ray start-up, job specs, statistics, result files."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

BASE: dict[str, Any] = {
    "name": "bench",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 32, "lr": 0.05, "eval_every": 100000},
    "target": {"iterations": 100},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", "sync": "full"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def make_spec(**over: Any):
    """A JobSpec from BASE with ``a__b=value`` overrides (the tests' helper, ``tests/_specs.py``)."""
    from tests._specs import spec_with

    return spec_with(BASE, **over)


def start_ray(num_cpus: int = 2) -> None:
    """Local Ray as in tests/conftest.py: no dashboard, auth disabled, a short temp dir of its own."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return
    from spotwise.capacity.raystart import RAY_SYSTEM_CONFIG

    tmp = tempfile.mkdtemp(prefix="sw-bench-", dir="/tmp")
    # lenient node health checks: on a loaded 2-core machine a busy raylet can miss the default
    # (3 s x 5) health checks, and the GCS then marks the node dead and the raylet exits
    ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False, _temp_dir=tmp,
             _system_config={"health_check_failure_threshold": 60, "health_check_timeout_ms": 30000,
                             **RAY_SYSTEM_CONFIG})


def restart_ray(num_cpus: int = 2) -> None:
    """Shut Ray down and start a fresh one (after a lost raylet; the machine is shared)."""
    import ray

    try:
        ray.shutdown()
    except Exception:  # pragma: no cover - best effort
        pass
    time.sleep(2)
    start_ray(num_cpus)


def with_retries(fn, *a, num_cpus: int = 2, tries: int = 3, **k):
    """Run ``fn``; if Ray itself failed (raylet lost), restart Ray and try again (counted in the result)."""
    import sys

    for i in range(tries):
        try:
            r = fn(*a, **k)
            if isinstance(r, dict):
                r["ray_restarts"] = i
            return r
        except Exception as e:  # RayActorError, ActorDiedError, RaySystemError ...
            if i == tries - 1 or "ray" not in type(e).__module__:
                raise
            print(f"  Ray failure ({type(e).__name__}); restarting Ray and repeating this configuration",
                  file=sys.stderr, flush=True)
            restart_ray(num_cpus)


def build_run(spec, out: Path, revocation=None, **kw):
    """A JobController (the spec's data plane) on the emulated provider, with an injected revocation model."""
    from spotwise.market.world import build_market
    from spotwise.assemble import build_controller

    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    return build_controller(spec, out, market=market, **kw)


def pct(xs, q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else None


def med(xs) -> float | None:
    return float(statistics.median(xs)) if len(xs) else None


def machine() -> dict[str, Any]:
    import torch

    mem_gib = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        import ray

        ray_v = ray.__version__
    except Exception:  # pragma: no cover
        ray_v = None
    return {"cpus": os.cpu_count(), "mem_gib": mem_gib, "python": platform.python_version(),
            "torch": torch.__version__, "ray": ray_v, "platform": platform.platform()}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def fmt(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[fmt(c) for c in r] for r in rows]
    w = [max(len(str(r[i])) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(str(c).rjust(w[i]) for i, c in enumerate(r)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [line(r) for r in cells[1:]])
