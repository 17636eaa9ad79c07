"""Recovery latency of the regroupable gloo group (issue 10 goal: median <= 50 ms, p99 <= 300 ms at 8 and 16 workers).

``N`` member processes (:func:`spotwise.planes.collective.probe.member_main`) all-reduce a vector in a
loop; the coordinator revokes one at a random moment (SIGKILL, and it flags the generation at
once, as the runtime does on a revocation), waits for the survivors' alive reports and announces
the next generation.  Recovery = revocation -> the survivors' next completed all-reduce (the
slowest survivor), on one wall clock.  Only the group is measured here (no training step yet: the
collective data plane itself is the rest of issue 10).

    .venv/bin/python benchmarks/collective_recovery.py [--workers 8,16] [--revocations 12] [--size 100000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from spotwise.planes.collective.group import GroupCoordinator
from spotwise.planes.collective.probe import member_main

CTX = mp.get_context("spawn")


def run(n: int, revocations: int, size: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    coord = GroupCoordinator()
    q = CTX.Queue()
    live = list(range(n))
    coord.announce(0, live)
    procs = {m: CTX.Process(target=member_main, args=(coord.address, m, q),
                            kwargs={"rounds": 10**9, "size": size, "timeout_s": 5.0}, daemon=True) for m in live}
    for p in procs.values():
        p.start()
    events: list[tuple] = []

    def drain() -> None:
        while True:
            try:
                events.append(q.get_nowait())
            except Exception:
                return

    # wait until everyone has done a few steps
    while sum(1 for e in events if e[0] == "step" and e[3] >= 3) < len(live):
        events.append(q.get(timeout=120))
    kills: dict[int, float] = {}
    gen = 0
    for _ in range(min(revocations, n - 2)):
        time.sleep(rng.uniform(0.2, 0.5))
        drain()
        victim = rng.choice(live)
        os.kill(procs[victim].pid, signal.SIGKILL)
        kills[gen] = time.time()
        coord.fail(gen, f"revoked {victim}")
        live.remove(victim)
        procs[victim].join(5)
        alive = coord.alive(gen, live, timeout_s=10.0)
        live = sorted(alive)
        gen += 1
        coord.announce(gen, live)
    time.sleep(0.5)
    coord.store.set("stop", "1")
    deadline = time.monotonic() + 60
    while sum(1 for e in events if e[0] == "done") < len(live) and time.monotonic() < deadline:
        try:
            events.append(q.get(timeout=1))
        except Exception:
            pass
    for p in procs.values():
        if p.is_alive():
            p.kill()
    rec = []
    for g, t_kill in kills.items():
        firsts: dict[int, float] = {}
        for e in events:
            if e[0] == "step" and e[2] == g + 1 and e[1] not in firsts:
                firsts[e[1]] = e[6]
        if firsts:
            rec.append(max(firsts.values()) - t_kill)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[8, 16])
    ap.add_argument("--revocations", type=int, default=12)
    ap.add_argument("--size", type=int, default=100_000, help="float32 entries all-reduced per step")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    out = {}
    print("| workers | revocations | recovery median (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    for n in a.workers:
        rec = run(n, a.revocations, a.size, seed=n)
        ms = [1000 * r for r in rec]
        out[n] = ms
        print(f"| {n} | {len(ms)} | {statistics.median(ms):.1f} | {np.percentile(ms, 99):.1f} | {max(ms):.1f} |", flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
