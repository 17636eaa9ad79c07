"""The restart-aware lower bound of a trace sweep: what no strategy -- not even one that knows the
future -- can beat once every (re)start costs what the sweep charges for it.

:func:`spotwise.sim.bounds.oracle.free_move_bound` lets the job hop to the cheapest place with capacity at
every instant for free.  Every real schedule pays a restart each time it (re)acquires instances
-- the first start, a rejoin after a revocation, a move, a switch to on-demand -- ``d`` seconds
billed at the new capacity's price with no progress (Can't Be Late, NSDI'24, Sec. 3's
changeover delay ``d``; the sweep's model, :mod:`spotwise.sim.sweep.engine`).  On traces where spot
vanishes every few hours the free-move bound is therefore out of reach for *any* schedule, and a
ratio against it mixes the policy's mistakes with costs nobody can avoid.  This module computes a
bound that charges them.

The model (issue 31: partial capacity).  The job has ``N`` nodes and trains on ``n`` of them, ``n``
from ``m`` = ``min_nodes`` (1 elastic, ``N`` a gang) to ``N``, at ``speed * rate(a)`` where ``a``
counts the nodes that are computing (:meth:`~spotwise.sim.sweep.records.SweepJob.rate`).  At a place
at time ``t`` it holds ``s <= k(t)`` spot nodes (:meth:`~spotwise.sim.sweep.places.Place.nodes_at`,
while the spot price is not above on-demand) and ``o`` on-demand ones, ``s + o <= N``, billed per
node; every node acquired spends ``d`` seconds starting -- billed, not computing -- while the
others compute on; a node released (revoked, scaled in) costs the others nothing; the coordinator
is billed from the start until the work is done.  On-demand nodes may also compute on beside spot
nodes that start to replace them, and leave once those are ready (make-before-break: the sweep's
:class:`~spotwise.policies.base.TopUp`), so the job may hold up to ``2 N`` nodes for ``d``.
For ``N = 1`` this is the changeover model of Can't Be Late: a stint in one mode, ``d`` lost at
every (re)start.

The bound (Lagrangian relaxation; weak duality).  For a price ``lam >= 0`` on progress,
``g(lam) = min over relaxed schedules of [cost - lam * progress] + lam W`` is a lower bound on the
optimum for every ``lam`` as long as every real schedule ``S`` maps to a relaxed one whose
bracket is at most ``cost(S) - lam progress(S)`` (then ``g(lam) <= cost(S*) - lam (progress(S*) -
W) <= cost(S*)`` for the optimal ``S*``).  A relaxed schedule is a path through the *modes*, per
place ``i`` and count ``n`` in ``[m, N]``: ``F(i, n)``, holding ``n`` nodes of which at least one
is spot (allowed where ``k >= 1``), billed as if ``min(k, n)`` were spot and the rest on-demand;
``O(i, n)``, ``n`` on-demand nodes; plus waiting before the first start, waiting after it
(the coordinator alone) and *done*.  A mode is credited ``lam * speed * rate(n)`` per second --
all its nodes computing -- and the restarts are charged at the transitions, ``c = lam * d * speed``
times a concave ``phi`` (``rate`` itself when concave on ``0..N`` -- linear ``n / N`` by default --
else the largest line below every rate increment): ``c (phi(n) - phi(S))`` where ``S`` is the most
nodes any real schedule in the first mode can keep.  Within ``F`` or within ``O``, ``S = min(n1,
n2)``: growing pays ``c (rate(n2) - rate(n1))`` (only the new nodes restart), scaling in is free;
``O(n1) -> F(n2)`` needs a new spot node, ``F(n1) -> O(n2)`` can keep at most ``n1 - 1`` on-demand
nodes; entering from a wait or from another place keeps none (``c rate(n2)``).  A real schedule
may pass through several modes at one instant, so the programme charges the cheapest such path
(the closure; ``tests/test_partial_bounds.py`` checks it against Floyd-Warshall):
``O(n1) -> F(n2)``: ``c (phi(x) - phi(x - 1))`` with ``x = min(n1 + 1, N)`` for ``n2 <= n1 + 1``,
else ``c (phi(n2) - phi(n1))``; ``F(n1) -> O(n2)``: free for ``n2 < n1``, else ``c (phi(n2) -
phi(n1) + phi(n2 + 1) - phi(n2))`` (``phi(N) - phi(N - 1)`` for the last term at ``n2 = N``).
From ``O(N)`` the spot nodes may instead replace on-demand ones make-before-break, which loses no
progress and bills at least one on-demand node ``d`` seconds beyond ``N``: ``O(N) -> F(n2)`` is
charged ``min(c (phi(N) - phi(N - 1)), d u)`` with ``u`` a node's on-demand $ per second (the
other transitions' charges the closure leaves as they were: a path through ``O(N)`` never beats
them).  Then the programme switches only at stretch boundaries (within a stretch the relaxed
objective is linear in every switching time), one transition per boundary, each in ``O(N)`` per
place with prefix and suffix minima over the counts, vectorised over a grid of ``lam``; ``g`` is
concave in ``lam`` (a minimum of affine functions) and :func:`restart_bound` maximises it on a grid
refined around the best point.

Why a real schedule ``S`` maps to a cheaper relaxed one.  First normalise ``S`` without raising
its cost or lowering its progress: drop every node it holds for less than ``d`` (it never
computes) and, for ``m > 1``, every node held while fewer than ``m`` are held at its place (the
job computes nothing then, nor in the ``d`` seconds after the count grows back, when a node
taken back at that moment would be ready as early).  Then map ``S`` to the modes of the nodes it
holds (``F`` if any is spot, else ``O``; the waits when none).  The relaxed bill is the cheapest
price of those nodes, at most ``S``'s.  The relaxed credit exceeds ``S``'s by ``lam speed
(rate(h) - rate(a))`` with ``h`` held and ``a`` computing; a transition that brings ``J`` new nodes
to ``h+`` charges at most ``phi(h+) - phi(h+ - J)``, spread over the ``d`` seconds those nodes
start.  At any instant the charges in force are of node sets acquired one after another, each
still held (normalised), on top of the ``a`` nodes computing; by concavity their sum is at most
``phi(h) - phi(a) <= rate(h) - rate(a)`` (``h >= m`` whenever a node starts, by the
normalisation; below ``m``, ``rate`` is 0 and ``phi <= rate`` above it).  So the charges never
exceed the credit ``S`` loses to its restarts.  Each transition charges the fewest new nodes
*any* schedule in those modes needs, so it holds for every mix of spot and on-demand.

Make-before-break.  While on-demand nodes compute on beside spot nodes that start to replace them,
``S`` holds ``h`` nodes, up to ``2 N`` (normalised: spot nodes revoked before they are ready are
dropped -- ``S`` computes as much without them -- so the replacement completes).  Map ``S`` to
``F(min(h, N))`` from the moment the spot nodes are acquired, holding ``S``'s cheapest ``min(h, N)``
nodes, the new spot ones among them: its bill is ``S``'s less that of the ``h - N`` dearest nodes,
on-demand ones, ``u`` each per second.  From ``O(n1)``, ``n1 < N``, or ``F(n1)`` that is growth to
``F(min(h, N))`` (none from ``F(N)``) -- charged as above, paid by the credit ``S`` forgoes while
the new nodes start -- and a free scale-in when the on-demand nodes leave.  From ``O(N)`` ``S``
computes on all ``N`` (no credit to forgo) and pays ``u`` for at least one node beyond ``N`` for
the ``d`` seconds the spot nodes start: the charge ``min(c (phi(N) - phi(N - 1)), d u)``.  If the
on-demand nodes left after ``l < d`` seconds instead, ``S`` would pay ``l u`` and forgo ``d - l``
seconds of a node's credit: a mix of the two terms, never below their minimum.  (The converse --
on-demand nodes starting while the spot nodes they replace compute on -- is not in the model: the
sweep releases spot nodes before it replaces them, on a revocation or a switch of market.)

A gang.  Nodes starting one after another cost a gang (``m = N``) the whole rate while any of them
starts, so the charges above (``1/N`` of a restart per new node, to stay additive) are weak for it.
On count traces a gang's bound is also the maximum of a second relaxation, :func:`_gang_dual`,
whose modes are the compositions themselves -- ``s`` spot and ``N - s`` on-demand nodes at a place,
``N + 1`` per place (normalised, a gang holds ``N`` nodes or none, beside the on-demand nodes that
spot ones replace make-before-break).  Entering a place charges ``c``; changing ``s`` at the
boundary after a stretch of ``L`` seconds charges ``c min(1, L / d)``: the gang computes nothing in
the union of the ``d``-second windows after its changes, which is at least ``d`` for the first and
``min(d, gap)`` more for each next one (a change inside a stretch moves, at no gain to ``S``, to the
stretch's boundary or onto another change: the union is concave in its time).  Raising ``s`` from
``s1`` to ``s2`` make-before-break stalls nothing and bills ``s2 - s1`` on-demand nodes beyond
``N`` for ``d`` (the composition ``s2`` from the moment the spot nodes are acquired): such a change
charges ``min(c min(1, L / d), (s2 - s1) d u)`` (on-demand nodes leaving ``l < d`` early pay ``l``
of it and stall ``min(d - l, gap)``: again at least the minimum).

All or nothing.  Where no place's trace counts nodes (one node, 0/1 series, no capacity trace),
``S`` holds its ``N`` nodes or none, all spot or all on-demand, and the programme keeps that model:
the counts ``{N}``, every spot <-> on-demand switch restarting all of them -- the bound as before
issue 31 -- except that spot may replace the ``N`` on-demand nodes make-before-break, billing all
``N`` of them beyond ``N`` for ``d``: ``O -> F`` charges ``min(c rate(N), N d u)``.  (It does not
cover a schedule that holds fewer than ``N`` nodes, or a mix of spot and on-demand ones, on such
traces -- a TopUp of fewer than ``N``; in small cases it never went above the exact optimum on a
grid of such schedules.)

The coordinator is billed from the start until the job is done, idle stretches included, as the
sweep bills it: a *done* mode (free, never left) ends the schedule; ending it before the work is
done only forfeits progress, which the relaxation prices.  Every schedule that does work starts at
least once -- at least ``m`` nodes -- so the programme tracks whether it has (done is reachable only
after a start); the bound is then exact for a job at one place that never loses capacity.

What the bound leaves out, each making it lower (so it stays a bound): billing minimums,
checkpoint egress on moves, and the difference between a rejoin, a start and a restart (it
charges the smallest of the three for every entry); on count traces, a spot node replaced by an
on-demand one while ``F`` keeps its count (the mode does not know how many of its nodes were
spot); beyond the first, the on-demand nodes a make-before-break replacement from ``O(N)`` bills
beyond ``N`` (the mode does not know how many it replaces).  The sweep's tests check, window by
window, that no strategy that meets the deadline pays less (a run past the deadline uses capacity
outside the window, and the ``no-interruptions`` estimate ignores outages).

How loose it can be: the dual prices progress linearly, so it may sit below the cheapest schedule
by up to about one restart per window -- e.g. a job that must move once to finish is bounded by
the straight line between "stop where capacity ends" and "move and run to the deadline"
(``tests/test_restart_bound.py`` works such cases out by hand).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.sim.bounds.oracle import (
    live_places,
    node_options,
    rate_table,
    window_cuts,
)
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import SweepJob

#: points of the grid over the progress price, per refinement round
_GRID = 48
_ROUNDS = 4


def restart_shape(job: SweepJob) -> np.ndarray:
    """``phi(n)``, ``n = 0..workers``: the concave function the restarts are charged with (module
    docstring) -- the job's rates without the ``min_nodes`` cut when they are concave (linear by
    default), else ``n`` times the smallest slope of ``rate`` between counts the job trains on."""
    n = job.workers
    full = np.concatenate([[0.0], np.asarray(job.rates, dtype=float)]) if job.rates is not None else np.arange(n + 1) / n
    inc = np.diff(full)
    if np.all(inc[1:] <= inc[:-1] + 1e-12):
        return full
    r, m = rate_table(job), job.min_nodes
    slopes = [r[h] / h for h in range(m, n + 1)]
    slopes += [(r[h] - r[a]) / (h - a) for a in range(m, n + 1) for h in range(a + 1, n + 1)]
    return max(0.0, min(slopes)) * np.arange(n + 1)


@dataclass(frozen=True)
class _Window:
    """A window's stretches and modes: ``lengths`` (s), per place and stretch the ``F`` modes' $/s
    ``cf`` ``(P, K, R)`` and whether they are allowed ``okf`` ``(P, K)``, the ``O`` modes' $/s ``co``
    ``(P, R)``, the work per second ``work`` ``(P, R)`` (``R`` counts ``min_nodes..workers``)."""

    lengths: np.ndarray
    cf: np.ndarray
    okf: np.ndarray
    co: np.ndarray
    work: np.ndarray
    speeds: np.ndarray
    coord: float
    phi: np.ndarray
    counts: np.ndarray
    #: the dearest mode's $ per second of work (the top of the grid over the progress price)
    dearest: float
    #: all N nodes or none, all spot or all on-demand (every place all or nothing)
    whole: bool
    #: per place and stretch, the spot nodes it gives (0 where spot is dearer than on-demand) and the
    #: spot price ($/h); per place the on-demand price (the gang's compositions, :func:`_gang_dual`)
    spot_nodes: np.ndarray
    spot_price: np.ndarray
    on_demand: np.ndarray


def _window(job: SweepJob, places: Sequence[Place], start: float) -> _Window:
    live = live_places(job, places, start)
    cuts = window_cuts(job, live, start)
    mids = cuts[:-1]
    # every place all or nothing (one node, a 0/1 series, no capacity trace): the job holds its N
    # nodes or none, all spot or all on-demand -- the model of one node, as before issue 31
    whole = not any(p.counts_nodes for p in live) or job.workers == 1
    low = job.workers if whole else job.min_nodes
    n = np.arange(low, job.workers + 1)
    rate = rate_table(job)[n]
    cf, okf, co, work, dear, kspot, spot = [], [], [], [], [], [], []
    for p in live:
        w, c, _, s = node_options(job, p, mids, strict=False)
        kspot.append(np.where(np.asarray(p.price.value_at(mids)) <= p.on_demand_per_hour, p.nodes_at(mids, job.workers), 0))
        spot.append(np.asarray(p.price.value_at(mids), dtype=float))
        w, c, s = w[:, low - job.min_nodes:], c[:, low - job.min_nodes:], s[:, low - job.min_nodes:]
        cf.append(c)
        okf.append(s[:, 0] >= 1)  # s = min(k, n) >= 1 for one n iff for every n
        co.append((n * p.on_demand_per_hour + job.coordinator_per_hour) / 3600.0)
        work.append(w[0])
        pm = np.maximum(np.asarray(p.price.value_at(mids), dtype=float), p.on_demand_per_hour)
        dear.append(np.max((n[None, :] * pm[:, None] + job.coordinator_per_hour) / 3600.0 / (p.speed * rate[None, :])))
    return _Window(np.diff(cuts), np.array(cf), np.array(okf), np.array(co), np.array(work),
                   np.array([p.speed for p in live], dtype=float), job.coordinator_per_hour / 3600.0,
                   rate_table(job) if whole else restart_shape(job), n, float(max(dear)), whole, np.array(kspot), np.array(spot),
                   np.array([p.on_demand_per_hour for p in live], dtype=float))


def _scan(x: np.ndarray, spare: np.ndarray, suffix: bool) -> np.ndarray:
    """Along axis 1 of ``x``: ``min(x[:, j:])`` (``suffix``) or ``min(x[:, :j + 1])``, by doubling
    (``log2`` of the length rounds, ping-ponging between ``x`` and ``spare``: both are overwritten);
    returns the one holding the result."""
    k = 1
    while k < x.shape[1]:
        if suffix:
            np.minimum(x[:, :-k], x[:, k:], out=spare[:, :-k])
            spare[:, -k:] = x[:, -k:]
        else:
            np.minimum(x[:, k:], x[:, :-k], out=spare[:, k:])
            spare[:, :k] = x[:, :k]
        x, spare = spare, x
        k *= 2
    return x


def _dual(lams: np.ndarray, win: _Window, d: float, work: float) -> np.ndarray:
    """``g(lam)`` for each progress price in ``lams`` (module docstring): one pass of the programme.

    Every schedule that does any work starts at least once, so *done* is reachable only from a
    started mode: without that, mixing with "do nothing" (the Lagrangian's convex hull through the
    origin) would spread the first start's cost over the work and loosen the bound.

    The modes are arrays ``(count, lam, place)``; per stretch the transitions between counts are
    prefix and suffix minima over the counts (the charges ``phi(n2) - phi(n1)`` split into a part of
    ``n1`` and one of ``n2``)."""
    phi, n = win.phi, win.counts
    top = phi.size - 1
    c = lams[:, None] * win.speeds[None, :] * d                          # (lam, place)
    g = phi[n][:, None, None] * c[None]                                 # (count, lam, place): entering afresh
    up = np.minimum(n + 1, top)
    g_of = (phi[up] - phi[up - 1])[:, None, None] * c[None]             # O(n1) -> F: one new node, at the top
    g_fo = (phi[n] + np.where(n < top, phi[up] - phi[n], phi[top] - phi[top - 1]))[:, None, None] * c[None]
    if win.whole:  # spot <-> on-demand replaces every node
        g_of, g_fo = g, 2.0 * g
    # O(N) -> F: the spot nodes may start while the N on-demand ones compute on (make-before-break,
    # a TopUp): no progress lost, the replaced on-demand nodes billed d beyond N -- one of them at
    # least (N of them where spot gives all N or none)
    mbb = d * win.on_demand / 3600.0 * (top if win.whole else 1)        # (place,)
    g_of = np.concatenate([g_of[:-1], np.minimum(g_of[-1:], mbb[None, None, :])])
    first = lams * float(win.speeds.min()) * d * phi[n[0]]              # the cheapest start of all
    credit = win.work.T[:, None, :] * lams[None, :, None]               # (count, lam, place)
    cf = np.where(win.okf[:, :, None], win.cf, np.inf).transpose(1, 2, 0)[:, :, None, :]  # (stretch, count, 1, place)
    base_o = win.co.T[:, None, :] - credit
    r = n.size
    shape = (r, lams.size, win.speeds.size)
    f, o = np.full(shape, np.inf), np.full(shape, np.inf)
    sufs, sufs2 = np.empty((3,) + shape), np.empty((3,) + shape)         # suffix minima of F, O, O + g_of
    pres, pres2 = np.empty((2,) + shape), np.empty((2,) + shape)         # prefix minima of F - g, O - g
    tmp = np.empty(shape)
    idle = np.zeros(lams.size)        # before the first start: the coordinator is up, nothing held
    wait = np.full(lams.size, np.inf)  # after a start, holding nothing
    done = np.full(lams.size, np.inf)
    for k in range(win.lengths.size):
        held = np.minimum(np.minimum(f.min(axis=0), o.min(axis=0)).min(axis=1), wait)
        best = np.minimum(held, idle)                                   # any mode but done may (re)start
        # started: running or waiting after a start, or a start of no length (its entry charge only):
        # the schedules the programme compares switch at stretch boundaries, so a stint that would
        # end inside the stretch it began in shrinks to nothing -- it must still count as a start
        started = np.minimum(held, best + first)
        sufs[0], sufs[1] = f, o
        np.add(o, g_of, out=sufs[2])
        suf = _scan(sufs, sufs2, True)                                  # scaling in is free
        np.subtract(f, g, out=pres[0])
        np.subtract(o, g, out=pres[1])
        pre = _scan(pres, pres2, False)                                 # growing from n1 to n2 pays phi(n2) - phi(n1)
        entry = g + best[None, :, None]
        np.minimum(suf[0], entry, out=f)
        np.minimum(f[:1], suf[2, :1], out=f[:1])                        # O(n1) -> F(n2), n1 >= n2 - 1
        np.minimum(f[1:], suf[2, :-1], out=f[1:])
        np.add(g[1:], pre[0, :-1], out=tmp[1:])
        np.minimum(f[1:], tmp[1:], out=f[1:])
        np.add(g[2:], pre[1, :-2], out=tmp[2:])                         # O(n1) -> F(n2), n1 <= n2 - 2
        np.minimum(f[2:], tmp[2:], out=f[2:])
        np.minimum(suf[1], entry, out=o)
        np.add(g[1:], pre[1, :-1], out=tmp[1:])
        np.minimum(o[1:], tmp[1:], out=o[1:])
        np.minimum(o[:-1], suf[0, 1:], out=o[:-1])                      # F(n1) -> O(n2), n1 > n2: free
        np.add(g_fo, pre[0], out=tmp)                                   # ... n1 <= n2
        np.minimum(o, tmp, out=o)
        wait = np.minimum(wait, started)
        done = np.minimum(done, started)
        length = win.lengths[k]
        np.subtract(cf[k], credit, out=tmp)
        tmp *= length
        f += tmp
        o += base_o * length
        idle = idle + win.coord * length
        wait = wait + win.coord * length
    return np.minimum(np.minimum(np.minimum(f.min(axis=0), o.min(axis=0)).min(axis=1), wait), done) + lams * work


def _gang_dual(lams: np.ndarray, win: _Window, d: float, work: float) -> np.ndarray:
    """``g(lam)`` of a gang (``min_nodes = N``) on count traces, its modes the compositions: ``s`` spot and
    ``N - s`` on-demand nodes at a place (module docstring, "A gang").  Any change of ``s`` stalls the
    gang while the new nodes start: at the boundary after a stretch of ``L`` seconds it is charged
    ``lam d speed min(1, L / d)``, entering a place ``lam d speed``; raising ``s`` by ``j``, at most
    ``j d`` of an on-demand node's price (make-before-break: the on-demand nodes compute on while the
    spot nodes that replace them start)."""
    nodes = win.phi.size - 1
    s = np.arange(nodes + 1)
    cost = (s[None, None, :] * win.spot_price[:, :, None] + (nodes - s)[None, None, :] * win.on_demand[:, None, None]
            + win.coord * 3600.0) / 3600.0
    cost = np.where(s[None, None, :] <= win.spot_nodes[:, :, None], cost, np.inf).transpose(1, 0, 2)  # (stretch, place, s)
    full = win.work[:, -1]                                              # speed * rate(N) per place
    credit = (lams[:, None] * full[None, :])[:, :, None]                 # (lam, place, 1)
    c = credit * d                                                      # N nodes stalled for d
    first = lams * float(full.min()) * d
    mbb = (d * win.on_demand / 3600.0)[None, :, None] * s                # (1, place, s): s on-demand nodes billed d
    v = np.full((lams.size, win.speeds.size, nodes + 1), np.inf)
    up = np.empty_like(v)
    idle = np.zeros(lams.size)
    wait = np.full(lams.size, np.inf)
    done = np.full(lams.size, np.inf)
    for k in range(win.lengths.size):
        held = np.minimum(v.min(axis=(1, 2)), wait)
        best = np.minimum(held, idle)
        started = np.minimum(held, best + first)
        stall = 1.0 if k == 0 or d <= 0 else min(1.0, win.lengths[k - 1] / d)
        # raising s from s1 to s2 make-before-break: s2 - s1 on-demand nodes billed d beyond N (s1 = s2: v)
        np.subtract(v, mbb, out=up)
        np.minimum.accumulate(up, axis=2, out=up)
        up += mbb
        v = np.minimum(np.minimum(np.minimum(v, v.min(axis=2, keepdims=True) + c * stall), up), best[:, None, None] + c)
        wait = np.minimum(wait, started)
        done = np.minimum(done, started)
        length = win.lengths[k]
        v = v + (cost[k][None] - credit) * length
        idle = idle + win.coord * length
        wait = wait + win.coord * length
    return np.minimum(np.minimum(v.min(axis=(1, 2)), wait), done) + lams * work


def _maximiser(job: SweepJob, win: _Window, d: float,
               dual: Callable[[np.ndarray, _Window, float, float], np.ndarray] = _dual) -> tuple[float, float]:
    """``(lam*, g(lam*))``: the dual's maximum on a grid refined ``_ROUNDS`` times around the best point."""
    work = float(job.work_s)
    # a progress price above the dearest mode's cost per unit of work (restart included) buys
    # every second it can: the dual's slope there is W minus the most work that fits, so the
    # maximiser lies below it unless the job cannot fit (then the bound grows without limit)
    hi = win.dearest * (1.0 + job.deadline_s / max(job.deadline_s - d, 1.0)) * 4.0
    lo = 0.0
    best_lam, best = 0.0, -math.inf
    for _ in range(_ROUNDS):
        lams = np.linspace(lo, hi, _GRID)
        g = dual(lams, win, d, work)
        i = int(np.argmax(g))
        if g[i] > best:
            best, best_lam = float(g[i]), float(lams[i])
        step = lams[1] - lams[0]
        lo, hi = max(0.0, lams[i] - step), lams[i] + step
    return best_lam, best


def restart_bound(job: SweepJob, places: Sequence[Place], start: float) -> float:
    """A lower bound on the cost of any schedule from ``start`` that pays its restarts (module docstring)."""
    if job.work_s <= 0:
        return 0.0
    d = min(job.restart_s, float(job.start_s or 0.0), float(job.rejoin_s or 0.0))
    win = _window(job, places, start)
    best = _maximiser(job, win, d)[1]
    if job.min_nodes == job.workers and not win.whole:  # a gang on count traces: both relaxations are bounds
        best = max(best, _maximiser(job, win, d, _gang_dual)[1])
    if not math.isfinite(best):
        raise InfeasibleError("the restart-aware bound is not finite", "check the traces' prices")
    return best
