"""A built-in job on spotwise's own S-SGD step vs the same job ejected onto ``spotwise.elastic`` (issue 41 item 2).

``spotwise eject SPEC --out DIR`` writes the workload's training as a script on the elastic API
(:mod:`spotwise.elastic.workload_loop`); ``tests/test_workload_loop.py`` shows it commits the same
steps with the same losses.  This measures what the move costs in step time: the same spec (the
built-in ``gpt-bytes`` with its default recipe -- AdamW, warm-up + cosine, clipping -- and a
``resnet18-cifar``-like alternative with ``--workload``) run in the same process, both as
``spotwise.run`` jobs with K members on the collective plane (same controller, market, replica
offers), one torch thread per member:

* **built-in**: ``spotwise run SPEC`` -- the member's own step (:func:`~spotwise.planes.collective.steps.bucketed_step`);
* **ejected**: ``spotwise run DIR/job.yaml`` -- the ejected ``train.py`` in the member's script thread.

Per-step wall time is the difference of consecutive commit times (``commit_wall``) after
``--warmup`` steps; medians per repetition, repetitions interleaved; the ratio is built-in /
ejected step time (1.0: the elastic API costs nothing over spotwise's own step).

    .venv/bin/python benchmarks/workload_loop.py --steps 40 --reps 3 --members 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import med, start_ray, table, write_result  # noqa: E402


def spec_text(a: argparse.Namespace) -> str:
    return f"""name: workload-loop-bench
seed: 0
workload:
  name: gpt-bytes
  batch_size: {a.batch}
  params: {{n_layer: {a.n_layer}, n_head: 4, n_embd: {a.n_embd}, block_size: {a.block}}}
  eval_every: 1000000
target: {{samples: {(a.warmup + a.steps + 1) * a.batch * a.members}}}
cluster: {{instance_type: c5.xlarge, workers: {a.members}, coordinator_instance: c5.large, standby: 0,
          data_plane: collective}}
market: {{synthetic: {{kind: constant, price: 0.07}}}}
outputs: {{checkpoint_every: 0, plots: false}}
"""


def once(spec_file: Path, out: Path, warmup: int) -> float:
    import spotwise
    from spotwise.events import read_events

    spotwise.run(str(spec_file), out, overwrite=True)
    walls = [float(e["commit_wall"]) for e in read_events(out / "events.jsonl", kinds=["step"])]
    return float(med([b - x for x, b in zip(walls[warmup:], walls[warmup + 1:])]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    from spotwise.spec.eject import eject

    start_ray(2)
    native, ejected = [], []
    with tempfile.TemporaryDirectory(prefix="sw-workload-loop-") as d:
        tmp = Path(d)
        spec_file = tmp / "job.yaml"
        spec_file.write_text(spec_text(a))
        eject(spec_file, tmp / "ej")
        for rep in range(a.reps):
            native.append(once(spec_file, tmp / f"native-{rep}", a.warmup))
            ejected.append(once(tmp / "ej" / "job.yaml", tmp / f"ejected-{rep}", a.warmup))
            print(f"rep {rep}: built-in {native[-1] * 1000:.1f} ms/step, ejected {ejected[-1] * 1000:.1f} ms/step",
                  flush=True)
    n, e = float(med(native)), float(med(ejected))
    print(table(["side", "median ms/step", "reps"], [[f"built-in step ({a.members} members)", f"{n * 1000:.1f}", len(native)],
                                                      [f"ejected loop ({a.members} members)", f"{e * 1000:.1f}", len(ejected)]]))
    print(f"ratio built-in/ejected step time: {n / e:.3f}x (1.0: the elastic API costs nothing)")
    write_result(f"workload_loop_{a.members}", {"args": vars(a), "builtin_s": native, "ejected_s": ejected, "ratio": n / e})


if __name__ == "__main__":
    main()
