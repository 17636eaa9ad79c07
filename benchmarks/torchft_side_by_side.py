"""spotwise beside torchft on the same model, data and failures (issue 55 item 9).

Both sides train the MLP of ``_ft_model.py`` (3 x 1024 hidden, AdamW, batch ``--batch`` per member, one torch
thread per process) with two replicas / members over gloo on this machine, through the same failures: one of
the two is lost ``--failures`` times during the run and comes back.

* **torchft** (``pip install torchft``; its own API, as its ``train_ddp.py`` example uses it): a
  ``LighthouseServer`` (127.0.0.1), two replica-group processes, each a ``Manager`` with ``ProcessGroupGloo``,
  ``torchft.ddp.DistributedDataParallel``, ``OptimizerWrapper`` and ``torchft.data.DistributedSampler`` (its shard
  of the data, as the example reads it), ``min_replica_size=1``.  A failure is ``SIGKILL`` of replica 1's process
  when it has committed the failure's step; a supervisor (this script, as torchelastic would) starts it again at
  once; it heals from replica 0 (torchft's HTTP checkpoint transport) and trains on.
* **spotwise** (``_ft_spotwise_train.py``, the same model on ``spotwise.elastic``: 6 lines of API): the
  collective plane on the emulated market, two members, one epoch of ``job.data`` (exactly-once, resumable).  A
  failure is a revocation of member 1 (``ScriptedRevocation``) at the failure's step; the slot comes back after
  ``--down`` steps and joins in place.

Measured, on one wall clock per side:

* **changed lines**: the lines of each side's training script that belong to the framework (API calls,
  wrappers, the state-dict callbacks torchft needs);
* **recovery**: a lost member -> the survivors' next committed step (torchft: the kill -> replica 0's next
  commit; spotwise: the revocation -> the next commit, the controller's ``recovery_ms``);
* **goodput**: samples in committed steps per wall second over the run (process starts included on both sides);
* **distinct goodput**: the same, counting each sample once (a sample trained twice is not progress);
* **samples trained twice or never**: torchft from the sample ids of every committed contribution (a restarted
  replica's sampler starts its shard again; the batches a killed replica was computing are dropped); spotwise
  from its step events (every committed step's data position continues the last: each sample exactly once).

The sides run one after the other (never at once); repetitions interleave them; medians are quoted.  torchft's
manager server binds every interface (``[::]``, its code); nothing of spotwise's does.

    .venv/bin/python benchmarks/torchft_side_by_side.py --steps 150 --failures 3 --reps 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import machine, med, table, write_result  # noqa: E402

CTX = mp.get_context("spawn")

#: the lines of each side's training loop that are the framework's (counted by hand from the code below and
#: ``_ft_spotwise_train.py``; each is named)
TORCHFT_LINES = ["store = TCPStore(...)", "def load_state_dict(sd): ...", "    model.load_state_dict / opt.load_state_dict",
                 "def state_dict(): ...", "    return {model, optim}", "manager = Manager(pg=ProcessGroupGloo(), ...)",
                 "ddp = DistributedDataParallel(manager, model)", "opt = OptimizerWrapper(manager, opt)",
                 "sampler = DistributedSampler(ds, replica_rank, num_replica_groups, ...)",
                 "while manager.current_step() < steps:", "lighthouse = LighthouseServer(...) (a process of its own)",
                 "a supervisor that restarts a dead replica (torchelastic)"]
SPOTWISE_LINES = ["import spotwise.elastic as sw", "job = sw.init()", "model = job.model(model)",
                  "opt = job.optimizer(opt)", "for x, y, _ in job.data(ds, batch_size, epochs=1):", "job.backward(loss)"]


# ================================================================== torchft
def replica_main(replica_id: int, lighthouse: str, n_samples: int, batch: int, steps: int, log: str,
                 wrapper: str = "pure") -> None:
    """One torchft replica group of one process (see the module docstring)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torchft.data import DistributedSampler
    from torchft.ddp import DistributedDataParallel, PureDistributedDataParallel
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper
    from torchft.process_group import ProcessGroupGloo

    import _ft_model as m

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    model = m.model()
    opt = m.optimizer(model.parameters())

    def load_state_dict(sd: dict[str, Any]) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=10)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict, replica_id=f"replica_{replica_id}",
                      store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1, lighthouse_addr=lighthouse,
                      hostname="127.0.0.1", timeout=timedelta(seconds=10))
    ddp = DistributedDataParallel(manager, model) if wrapper == "ddp" else PureDistributedDataParallel(manager, model)
    optw = OptimizerWrapper(manager, opt)
    ds = m.dataset(n_samples)
    sampler = DistributedSampler(ds, replica_rank=replica_id, num_replica_groups=2, group_rank=0, num_replicas=1,
                                 shuffle=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler)
    with open(log, "a") as f:
        while manager.current_step() < steps:
            for x, y, ids in loader:
                began = time.time()
                optw.zero_grad()
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
                before = manager.current_step()
                optw.step()
                after = manager.current_step()
                f.write(json.dumps({"r": replica_id, "step": after, "committed": after > before, "wall": time.time(), "began": began,
                                    "ids": ids.tolist(), "n": manager.num_participants()}) + "\n")
                f.flush()
                if after >= steps:
                    break
    manager.shutdown(wait=False)


def _read(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line the kill cut
            pass
    return out


def torchft_once(a: argparse.Namespace, fail_steps: list[int], tmp: Path) -> dict[str, Any]:
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    logs = [tmp / f"ft-{r}-{time.monotonic_ns()}.jsonl" for r in range(2)]
    n = 2 * a.batch * a.steps

    def start(r: int) -> Any:
        p = CTX.Process(target=replica_main, args=(r, lighthouse.address(), n, a.batch, a.steps, str(logs[r]),
                                                   a.ft_ddp), daemon=True)
        p.start()
        return p

    t0 = time.time()
    procs = [start(0), start(1)]
    kills: list[float] = []
    pending = list(fail_steps)
    try:
        while procs[0].is_alive():
            if pending:
                mine = [e for e in _read(logs[1]) if e["committed"]]
                if mine and mine[-1]["step"] >= pending[0]:
                    os.kill(procs[1].pid, signal.SIGKILL)  # the replica's VM is gone
                    kills.append(time.time())
                    procs[1].join()
                    pending.pop(0)
                    procs[1] = start(1)  # the supervisor restarts it at once (torchelastic's job)
            if time.time() - t0 > a.timeout:
                raise RuntimeError(f"torchft did not finish {a.steps} steps in {a.timeout} s")
            time.sleep(0.01)
        wall = time.time() - t0
        survivor_exit = procs[0].exitcode
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        lighthouse.shutdown()
    rec0, rec1 = _read(logs[0]), _read(logs[1])
    commits = [e for e in rec0 + rec1 if e["committed"]]
    # recovery: the kill -> replica 0's first commit of a step it began after the kill (a step in flight at the
    # kill that commits is not a recovery); rejoin: the kill -> the restarted replica's first commit
    survivor = sorted((e["wall"], e["began"]) for e in rec0 if e["committed"])
    back = sorted(e["wall"] for e in rec1 if e["committed"])
    recovery, rejoin = [], []
    for k in kills:
        nxt = next((w for w, b in survivor if b > k), None)
        if nxt is not None:
            recovery.append(1000.0 * (nxt - k))
        again = next((w for w in back if w > k), None)
        if again is not None:
            rejoin.append(again - k)
    seen: dict[int, int] = {}
    for e in commits:
        for i in e["ids"]:
            seen[i] = seen.get(i, 0) + 1
    twice = sum(c - 1 for c in seen.values() if c > 1)
    # of each shard's samples up to the furthest one trained, those never trained in a committed step
    never = 0
    for r in range(2):
        shard = [i for i in seen if i % 2 == r]
        if shard:
            never += sum(1 for i in range(r, max(shard) + 1, 2) if i not in seen)
    samples = sum(len(e["ids"]) for e in commits)
    return {"wall_s": wall, "samples": samples, "goodput": samples / wall, "unique_goodput": (samples - twice) / wall,
            "fail_at_steps": fail_steps, "recovery_ms": recovery, "rejoin_s": rejoin,
            "twice": twice, "never": never, "failures": len(kills), "steps": max((e["step"] for e in commits), default=0),
            "survivor_exit": survivor_exit, "completed": survivor_exit == 0}


# ================================================================== spotwise
def spotwise_once(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from _common import build_run, start_ray

    from spotwise.capacity.faults import ScriptedRevocation, outage
    from spotwise.events import read_events
    from tests._specs import spec_with

    start_ray()
    n = 2 * a.batch * a.steps
    base = {"name": "ft-side", "seed": 0,
            "workload": {"script": str(HERE / "_ft_spotwise_train.py"), "args": [f"--samples={n}", f"--batch={a.batch}"],
                         "batch_size": a.batch},
            "target": {"samples": n},
            "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                        "data_plane": "collective", "standby": 0, "group_timeout_s": 5},
            "market": {"synthetic": {"kind": "constant", "price": 0.07}},
            "outputs": {"checkpoint_every": 0, "plots": False}}
    spec = spec_with(base)
    from spotwise.market.world import build_market

    mean = build_market(spec).step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    st = float(spec.cluster.straggler)  # the S-SGD round of 2: E[max of 2 draws] + Delta (paper 000 eq. 14)
    vround = mean * ((1 - st) + st * 1.5) + float(spec.cluster.sync_overhead_s)
    outs = tuple(outage((s + 0.5) * vround, (s + 0.5 + a.down) * vround, [1]) for s in fail_steps_of(a))
    out = tmp / f"sw-{time.monotonic_ns()}"
    t0 = time.time()
    coord = build_run(spec, out, revocation=ScriptedRevocation(outs))
    summary = coord.run()
    wall = time.time() - t0
    steps = list(read_events(out / "events.jsonl", kinds=["step"]))
    revokes = [e for e in read_events(out / "events.jsonl", kinds=["revoke"]) if e.get("reason") == "market"]
    # exactly once: each committed step's data position continues the last one's
    pos, breaks = 0, 0
    for e in steps:
        pos += int(e["samples"])
        if int(e["epoch"]) * n + int(e["pos"]) != pos and not (int(e["pos"]) == 0 and pos >= n):
            breaks += 1
    samples = int(coord.counters.samples)
    return {"wall_s": wall, "samples": samples, "goodput": samples / wall, "status": summary.status,
            "unique_goodput": min(samples, n) / wall if breaks == 0 else None,
            "recovery_ms": list(coord.counters.recoveries_ms), "twice": max(0, samples - n), "never": max(0, n - samples),
            "position_breaks": breaks, "failures": len(revokes), "steps": len(steps),
            "fail_at_steps": [next((s["step"] for s in steps if s["t"] >= r["t"]), None) for r in revokes]}


def fail_steps_of(a: argparse.Namespace) -> list[int]:
    """The steps after which member / replica 1 is lost: evenly over the middle of the run."""
    return [int(a.steps * (i + 1) / (a.failures + 1)) for i in range(a.failures)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--failures", type=int, default=3)
    ap.add_argument("--down", type=float, default=5.0, help="spotwise: steps a revoked slot stays away")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--ft-ddp", choices=("pure", "ddp"), default="pure",
                    help="torchft's gradient wrapper: PureDistributedDataParallel (per-tensor all-reduces) or its "
                         "DistributedDataParallel (torchft 0.2.0 on gloo: the survivor dies when a peer is killed "
                         "inside an all-reduce, ddp.py's `assert fut._fut`)")
    a = ap.parse_args()
    try:
        import torchft  # noqa: F401
    except ImportError:
        raise SystemExit("torchft is not installed: pip install torchft (it runs on gloo on this CPU)")
    fails = fail_steps_of(a)
    runs: dict[str, list[dict[str, Any]]] = {"torchft": [], "spotwise": []}
    with tempfile.TemporaryDirectory(prefix="ft-side-") as d:
        tmp = Path(d)
        for rep in range(a.reps):
            for side in ("torchft", "spotwise") if rep % 2 == 0 else ("spotwise", "torchft"):
                r = torchft_once(a, fails, tmp) if side == "torchft" else spotwise_once(a, tmp)
                runs[side].append(r)
                print(f"rep {rep} {side}: {json.dumps({k: v for k, v in r.items() if k != 'recovery_ms'})} "
                      f"recovery_ms={[round(x) for x in r['recovery_ms']]}", flush=True)

    def summary(side: str) -> dict[str, Any]:
        rs = runs[side]
        rec = [x for r in rs for x in r["recovery_ms"]]
        return {"goodput": med([r["goodput"] for r in rs]), "recovery_ms": med(rec) if rec else None,
                "unique_goodput": med([r["unique_goodput"] for r in rs if r["unique_goodput"] is not None]),
                "wall_s": med([r["wall_s"] for r in rs]), "samples": med([r["samples"] for r in rs]),
                "twice": med([r["twice"] for r in rs]), "never": med([r["never"] for r in rs]),
                "failures": med([r["failures"] for r in rs])}

    ft, sw = summary("torchft"), summary("spotwise")
    print(table(["", "changed lines", "recovery ms (median)", "goodput samples/s", "distinct samples/s", "wall s",
                 "samples", "trained twice", "never", "failures"],
                [["torchft", len(TORCHFT_LINES), ft["recovery_ms"], ft["goodput"], ft["unique_goodput"], ft["wall_s"],
                  ft["samples"], ft["twice"], ft["never"], ft["failures"]],
                 ["spotwise", len(SPOTWISE_LINES), sw["recovery_ms"], sw["goodput"], sw["unique_goodput"], sw["wall_s"],
                  sw["samples"], sw["twice"], sw["never"], sw["failures"]]]))
    ratio = sw["goodput"] / ft["goodput"] if ft["goodput"] else None
    print(f"goodput spotwise / torchft: {ratio:.3f}x" if ratio else "goodput ratio: n/a")
    if ft["unique_goodput"] and sw["unique_goodput"]:
        print(f"distinct samples per second spotwise / torchft: {sw['unique_goodput'] / ft['unique_goodput']:.3f}x")
    if ft["recovery_ms"] and sw["recovery_ms"]:
        print(f"recovery torchft / spotwise: {ft['recovery_ms'] / sw['recovery_ms']:.2f}x (above 1: spotwise recovers faster)")
    write_result("torchft_side_by_side", {"args": vars(a), "fail_steps": fails, "runs": runs, "torchft": ft,
                                          "spotwise": sw, "goodput_ratio": ratio, "machine": machine(),
                                          "torchft_lines": TORCHFT_LINES, "spotwise_lines": SPOTWISE_LINES})


if __name__ == "__main__":
    main()
