"""The user's own loop under spotwise vs. the same loop as a plain PyTorch script (issue 41).

Both sides run the nanoGPT-style script of ``examples/own-loop`` with the same model, batch,
gradient accumulation and precision, one torch thread, on this machine, in the same run:

* **plain**: ``train_gpt.py`` (the user's script as written) in its own process; its per-iteration
  wall time is the ``ms`` it logs every iteration (``--log-interval 1``).
* **spotwise**: ``train_gpt_spotwise.py`` (the 10-line conversion) as a ``spotwise run`` job with
  one member (the collective plane: the script thread, the member thread, DDP over a one-member
  gloo group, the commit all-reduce, replica offers every 20 steps as by default); its per-step
  wall time is the difference of consecutive commit times (``commit_wall`` of the step events).

With ``--members K`` (K > 1) the baseline is DDP: the converted script under ``torchrun
--standalone --nproc-per-node K`` (a plain DDP job over PyTorch's own gloo group, :mod:`spotwise.elastic.local`;
its ranks' logged ``ms``), against a ``spotwise run`` with K members; one torch thread per process.

Medians over the timed steps (after ``--warmup``), repetitions interleaved; the ratio is baseline /
spotwise step time (1.0: no overhead).  On this 2-core machine K = 2 puts one process on each core
beside Ray's own processes (and the spotwise side's coordinator); the goal of issue 41 (>= 0.95x
DDP) is for GPUs, where this was not measured.

    .venv/bin/python benchmarks/own_loop.py --steps 60 --reps 3
    .venv/bin/python benchmarks/own_loop.py --steps 40 --reps 3 --members 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import med, start_ray, table, write_result  # noqa: E402

EX = Path(__file__).resolve().parents[1] / "examples" / "own-loop"
TR = Path(__file__).resolve().parents[1] / "examples" / "torchrun"


def torchrun_args(a: argparse.Namespace, out: Path, iters: int) -> list[str]:
    """The torchrun-style nanoGPT's own --key=value arguments (``--script torchrun``)."""
    return [f"--n_layer={a.n_layer}", f"--n_embd={a.n_embd}", "--n_head=4", f"--block_size={a.block}",
            f"--batch_size={a.batch}", f"--gradient_accumulation_steps={a.accum * a.members}", f"--dtype={a.dtype}",
            "--eval_interval=100000000", "--log_interval=1", f"--max_iters={iters}", f"--out_dir={out}",
            "--compile=False"]


def torchrun_script_ms(out: Path, warmup: int) -> float:
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return float(med([r["ms"] for r in rows if "ms" in r and r["iter"] > warmup])) / 1000.0


def model_args(a: argparse.Namespace) -> list[str]:
    return ["--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd), "--n-head", "4", "--block-size", str(a.block),
            "--batch-size", str(a.batch), "--grad-accum", str(a.accum), "--dtype", a.dtype, "--eval-interval", "1000000"]


def plain_once(a: argparse.Namespace, tmp: Path) -> float:
    if a.script == "torchrun":  # the original script as written, on its own or under torchrun (DDP)
        out = tmp / f"tr-base-{os.getpid()}-{len(list(tmp.iterdir()))}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        launcher = [sys.executable] if a.members == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                            "--nproc-per-node", str(a.members)]
        subprocess.run([*launcher, str(TR / "train_nanogpt.py"), *torchrun_args(a, out, a.warmup + a.steps)],
                       check=True, env=env, timeout=1800, capture_output=True)
        return torchrun_script_ms(out, a.warmup)
    log = tmp / "plain.jsonl"
    log.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(EX / "train_gpt.py"), *model_args(a), "--max-iters", str(a.warmup + a.steps),
                    "--log-interval", "1", "--out-dir", str(tmp / "plain-out"), "--log-file", str(log)],
                   check=True, env=env, timeout=1800)
    ms = [r["ms"] for r in map(json.loads, log.read_text().splitlines()) if "ms" in r and r["iter"] > a.warmup]
    return float(med(ms)) / 1000.0


def ddp_once(a: argparse.Namespace, tmp: Path) -> float:
    log = tmp / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.members),
                    str(Path(__file__).resolve().parent / "_timed_script.py"), str(log),
                    str(EX / "train_gpt_spotwise.py"), *model_args(a), "--max-iters", str(a.warmup + a.steps),
                    "--log-interval", "1", "--out-dir", str(tmp / "ddp-out")], check=True, env=env, timeout=1800)
    rows = json.loads(Path(f"{log}.0").read_text())  # rank 0's own per-iteration times
    ms = [r["ms"] for r in rows if "ms" in r and r["iter"] > a.warmup]
    return float(med(ms)) / 1000.0


def spotwise_once(a: argparse.Namespace, tmp: Path, rep: int) -> float:
    import spotwise
    from spotwise.events import read_events

    per_step = a.batch * a.accum
    if a.script == "torchrun":  # its 5-line conversion, under spotwise
        script, args = TR / "train_nanogpt_spotwise.py", torchrun_args(a, tmp / f"tr-sw-{rep}", 100000000)
    else:
        script, args = EX / "train_gpt_spotwise.py", [*model_args(a), "--max-iters", "100000000", "--out-dir",
                                                     str(tmp / "sw-out")]
    spec = {
        "name": "own-loop-bench", "seed": 0,
        "workload": {"script": str(script), "batch_size": a.batch, "args": args},
        "target": {"samples": (a.warmup + a.steps + 1) * per_step * a.members},
        "cluster": {"instance_type": "c5.xlarge", "workers": a.members, "coordinator_instance": "c5.large", "standby": 0},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 0, "plots": False},
    }
    out = tmp / f"sw-{rep}"
    spotwise.run(spec, out, overwrite=True)
    walls = [float(e["commit_wall"]) for e in read_events(out / "events.jsonl", kinds=["step"])]
    return float(med([b - x for x, b in zip(walls[a.warmup:], walls[a.warmup + 1:])]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--members", type=int, default=1, help="K > 1: spotwise with K members vs torchrun DDP with K ranks")
    ap.add_argument("--script", choices=("own-loop", "torchrun"), default="own-loop",
                    help="own-loop: examples/own-loop (written for the API); torchrun: examples/torchrun/train_nanogpt.py "
                         "as written (plain / torchrun) vs its 5-line conversion under spotwise")
    a = ap.parse_args()
    start_ray(2)
    plain, sw = [], []
    with tempfile.TemporaryDirectory(prefix="sw-own-loop-") as d:
        tmp = Path(d)
        for rep in range(a.reps):
            plain.append(plain_once(a, tmp) if a.members == 1 else ddp_once(a, tmp))
            sw.append(spotwise_once(a, tmp, rep))
            print(f"rep {rep}: baseline {plain[-1] * 1000:.1f} ms/step, spotwise {sw[-1] * 1000:.1f} ms/step", flush=True)
    p, s = float(med(plain)), float(med(sw))
    base = "plain script" if a.members == 1 else f"torchrun DDP, {a.members} ranks"
    print(table(["side", "median ms/step", "reps"], [[base, f"{p * 1000:.1f}", len(plain)],
                                                      [f"spotwise ({a.members} member(s))", f"{s * 1000:.1f}", len(sw)]]))
    print(f"ratio {base}/spotwise step time: {p / s:.3f}x (1.0: no overhead)")
    write_result(("own_loop" if a.members == 1 else f"own_loop_{a.members}") + ("_torchrun" if a.script == "torchrun" else ""), {"args": vars(a), "baseline_s": plain,
                                                                              "spotwise_s": sw, "ratio": p / s})


if __name__ == "__main__":
    main()
