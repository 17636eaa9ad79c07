"""What the step gate costs a step (issue 55 item 3; :mod:`spotwise.planes.collective.step_gate`).

Two member processes, each an :class:`~spotwise.planes.collective.group.ElasticGroup` over this
process's store (the coordinator's, as in a run), take steps of the same fixed work -- ``--step-ms``
of matmuls (calibrated once), then a gradient-sized all-reduce (``--grad-mb``) and the commit's small
one, as a user loop's step does, computed by a script thread the member thread hands it to -- in
alternating blocks of ``--block`` steps with and without the step gate (the rest identical: the
fail-flag read the gate replaces is made without it).
Interleaving the blocks puts the machine's load on both sides alike; the per-step wall time on
member 0 is compared by medians, and the time the script's first collective waited for the gate
(what it adds to the step when its round trips do not hide behind the compute) is reported too.

    .venv/bin/python benchmarks/step_gate.py --step-ms 20 --blocks 40
    .venv/bin/python benchmarks/step_gate.py --step-ms 100 --blocks 20
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _member(address: Any, member: int, a: argparse.Namespace, iters: int, out: Any) -> None:
    """A member as a user loop's: this (member) thread hands each step to a script thread and waits
    for it; gated, it opens the gate first and passes it while the script computes (as
    :func:`~spotwise.planes.collective.script_member.script_step` does), and the script's first
    collective waits for it (as the DDP comm hook does)."""
    import queue
    import threading

    import torch

    from spotwise.planes.collective.group import ElasticGroup

    torch.set_num_threads(1)
    g = ElasticGroup(address, member, timeout_s=30.0, check_every_s=0.002)
    g.form(0)
    grad = torch.zeros(int(a.grad_mb * (1 << 20) / 4))
    tail = torch.zeros(16)
    go: queue.Queue[bool | None] = queue.Queue()
    done: queue.Queue[float] = queue.Queue()

    def script() -> None:
        x = torch.randn(128, 128)
        while (gated := go.get()) is not None:
            for _ in range(iters):
                x = torch.tanh(x @ x)
            t = time.perf_counter()
            g.await_gate()  # the first bucket's hook
            waited = time.perf_counter() - t
            g.pg.allreduce([grad]).wait()  # the gradient buckets (DDP's: no flag read)
            g.allreduce(tail)  # the commit: its fail-flag read is the gate's when gated
            done.put(waited)

    th = threading.Thread(target=script, daemon=True)
    th.start()
    rows: list[tuple[bool, float, float]] = []
    for block in range(2 * a.blocks):
        gated = block % 2 == (block // 2) % 2  # on/off, then off/on: neither side always first
        for _ in range(a.block):
            t0 = time.perf_counter()
            if gated:
                g.open_gate()
            go.put(gated)
            if gated:
                g.pass_gate()
            waited = done.get()
            g.close_gate()
            rows.append((gated, time.perf_counter() - t0, waited))
    go.put(None)
    th.join()
    out.put((member, rows))
    g.close()


def _calibrate(step_ms: float) -> int:
    import torch

    torch.set_num_threads(1)
    x = torch.randn(128, 128)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        x = torch.tanh(x @ x)
        n += 1
    return max(1, int(n * step_ms / 500.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--grad-mb", type=float, default=1.0)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=40, help="blocks per side")
    a = ap.parse_args()
    from spotwise.planes.collective.group import GroupCoordinator

    iters = _calibrate(a.step_ms)
    coord = GroupCoordinator(timeout_s=30.0)
    coord.announce(0, [0, 1])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_member, args=(coord.address, m, a, iters, q)) for m in (0, 1)]
    [p.start() for p in ps]
    got = dict(q.get(timeout=3600) for _ in ps)
    [p.join() for p in ps]
    rows = got[0][a.block:]  # the first block warms up
    on = [w for gated, w, _ in rows if gated]
    off = [w for gated, w, _ in rows if not gated]
    gate = [s for gated, _, s in rows if gated]
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"step work {a.step_ms:g} ms ({iters} matmuls), {a.grad_mb:g} MB all-reduce; {len(on)} gated and {len(off)} "
          f"ungated steps on member 0")
    print(f"median step: gated {m_on * 1e3:.2f} ms, ungated {m_off * 1e3:.2f} ms: {100 * (m_on / m_off - 1):+.2f} %")
    print(f"the script's wait for the gate at its first collective: median {statistics.median(gate) * 1e6:.0f} us, "
          f"mean {statistics.mean(gate) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
