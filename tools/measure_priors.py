"""Measure the loss curves shipped as planning priors for the built-in GPU workloads.

``spotwise plan`` of a job that trains ``resnet18-cifar`` or ``gpt-bytes`` on GPUs does not train the
model on the planning machine's CPU (issue 42 item 1).  Its error model then comes from a *measured
prior*: the per-step training losses of the workload's in-process pilot at its default recipe, run
once here with exactly the code a pilot runs (:func:`spotwise.planner.estimate.pilot_training.recipe_steps`:
the job's optimizer through the runtime's Updater, its schedule, clipping, micro-batches and precision,
global batches from the seeded epoch sampler).  A loss curve per step depends on the model, data, recipe,
global batch and seed, not on the hardware (a GPU computes the same numbers up to float rounding), so a
curve measured on this CPU is the curve a pilot on the target GPU would record -- only slower to get.

Usage (writes ``spotwise/data/priors/<workload>.json`` every 10 steps, so a cut run keeps what it measured)::

    python tools/measure_priors.py examples/resnet18-v100.yaml --steps 200 --threads 2
    python tools/measure_priors.py tools/gpt-bytes-prior.yaml --steps 200 --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotwise.config import load_spec  # noqa: E402
from spotwise.control.sampler import EpochSampler  # noqa: E402
from spotwise.planner.estimate.pilot_training import recipe_steps  # noqa: E402
from spotwise.planner.estimate.priors import model_params  # noqa: E402
from spotwise.training.recipe import recipe_of  # noqa: E402
from spotwise.workloads.registry import make_workload  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="default: spotwise/data/priors/<workload>.json")
    a = ap.parse_args()
    spec = load_spec(a.spec)
    wl = spec.workload
    torch.set_num_threads(a.threads)
    workload = make_workload(wl, spec.seed)
    model = workload.build_model()
    model.train()
    workers = int(spec.cluster.workers)
    batch = workers * int(wl.batch_size)
    lr = float(wl.lr)
    recipe = recipe_of(wl, spec.planned_samples())
    sampler = EpochSampler(len(workload.train), spec.seed)
    losses = np.full(a.steps, np.nan)
    out = Path(a.out) if a.out else ROOT / "spotwise" / "data" / "priors" / f"{wl.name}.json"
    t0 = time.perf_counter()

    def write(done: int) -> None:
        lrs = [float(recipe.lr_at(lr, j * batch)) for j in (0, max(0, done - 1))]
        rec = {
            "what": (f"per-step training losses of {wl.name}'s in-process pilot at its default recipe, measured with "
                     "tools/measure_priors.py (the pilot's own code: recipe_steps)"),
            "workload": wl.name,
            "params": model_params(wl),
            "data": str(workload.info.get("source", "")),
            "n_params": int(sum(p.numel() for p in model.parameters())),
            "workers": workers, "batch_size": int(wl.batch_size), "global_batch": batch,
            "lr": lr, "lr_first": lrs[0], "lr_last": lrs[1],
            "optimizer": wl.optimizer, "precision": str(wl.precision), "accumulate": int(recipe.accumulate),
            "grad_clip_norm": recipe.grad_clip_norm, "seed": int(spec.seed),
            "steps": done, "losses": [round(float(v), 6) for v in losses[:done]],
            "measured": {"date": datetime.date.today().isoformat(), "torch": torch.__version__,
                         "machine": f"{platform.machine()} CPU, {a.threads} threads",
                         "seconds": round(time.perf_counter() - t0, 1),
                         "command": f"python tools/measure_priors.py {a.spec} --steps {a.steps} --threads {a.threads}"},
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1) + "\n")
        tmp.replace(out)

    class Progress:
        """The pilot's clock protocol (``after(done) -> go on``): progress and the file every 10 steps."""

        def after(self, done: int) -> bool:
            if done % 10 == 0 or done == a.steps:
                write(done)
                el = time.perf_counter() - t0
                print(f"{wl.name}: step {done}/{a.steps} loss {losses[done - 1]:.4f} ({el:.0f} s, "
                      f"{el / done:.1f} s/step)", flush=True)
            return done < a.steps

    recipe_steps(torch, spec, workload, model, sampler, batch, lr, losses, spec.seed, Progress())  # type: ignore[arg-type]
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
