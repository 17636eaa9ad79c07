"""A collective member's synchronous steps: S-SGD (on DDP's machinery or flat) and S-MA.

``papers/001_30a454edd897cf47.txt`` Sec. 3.3.  Each function takes the member's generation ``g``,
replica and data cursor, changes the replica only once the step's all-reduce completed (the
atomic commit of :mod:`spotwise.planes.collective.member`) and returns ``(loss, samples)`` of the
committed step; the member counts the step and records it.  A failed collective raises
:class:`~spotwise.planes.collective.group.GroupFailed` with nothing applied; a non-finite
all-reduced loss or gradient raises :class:`Diverged` on every member alike.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from spotwise.planes.collective.bucketed import comm_failure
from spotwise.planes.collective.group import ElasticGroup, GroupFailed
from spotwise.planes.collective.replica import DataCursor, Replica
from spotwise.training.tensor_tree import clone_tree


class Diverged(ArithmeticError):
    """A step's all-reduced loss or gradient is not finite (every member sees it at the same step)."""


def ssgd_step(g: ElasticGroup, rep: Replica, cursor: DataCursor, k: int, r: int, b: int, lr: float) -> tuple[float, int]:
    """S-SGD with ``k`` members, this one ``r``, ``b`` samples each: the sample-weighted mean
    gradient through the recipe's optimizer on every replica.  Through DDP's buckets
    (:func:`bucketed_step`) when every member has samples; else (an epoch's short last step, sparse
    gradients) one flat all-reduce of ``(n_i g_i, n_i buffers_i, n_i loss_i, n_i)`` after backward."""
    sizes = cursor.block_sizes(k, b)
    if rep.can_bucket and min(sizes) > 0:
        return bucketed_step(g, rep, cursor, sizes, r, b, lr)
    clock = rep.clock
    rep.gradient_on_device(cursor.block(r, b), rep.updater.loss_scale)  # no host read (issue 40 item 2)
    with clock.timed("reduce"):
        g.allreduce(rep.buf)  # GroupFailed: nothing was changed
    with clock.timed("sync"):  # the step's one read: its loss, sample count and whether the gradient is finite
        loss_sum, total, bad = torch.stack([rep.buf[rep.N], rep.buf[rep.N + 1], _nonfinite(rep)]).tolist()
    loss = loss_sum / total if total > 0 else float("nan")
    if total > 0 and not math.isfinite(loss):
        raise Diverged(f"the loss is {loss}")
    if bad > 0:  # every member sees the same sum: all stop
        raise Diverged("the aggregated gradient holds NaN or infinite values")
    with clock.timed("optimizer"):
        ok = rep.sgd(rep.buf[: rep.N], total, lr, check=False)
    if not ok:
        raise Diverged("the aggregated gradient holds NaN or infinite values")
    return loss, cursor.advance(k, b)


def _nonfinite(rep: Replica) -> torch.Tensor:
    """1 (on the device) when the summed gradient in ``rep.buf`` holds a NaN or an infinity, read with
    the step's loss: the check :meth:`Replica.sgd` would make with a read of its own.  Plain SGD never
    checked (a non-finite gradient shows in the next loss), and under fp16 the grad scaler skips an
    overflowing step itself: 0 for both."""
    if rep.updater.plain or rep.updater.scaler is not None or rep.P == 0:
        return rep.zeros(1, rep.buf.dtype)[0]
    return (~torch.isfinite(rep.buf[: rep.P]).all()).to(rep.buf.dtype)


def bucketed_step(g: ElasticGroup, rep: Replica, cursor: DataCursor, sizes: list[int], r: int, b: int,
                  lr: float) -> tuple[float, int]:
    """An S-SGD step on DDP's machinery (:mod:`spotwise.planes.collective.bucketed`): the gradient
    buckets are all-reduced while the backward pass runs, then one small all-reduce combines the
    buffers, loss and sample count, and the step's one host read takes the loss, the count and the
    reduced gradient's norm (a non-finite one stops every member alike: they all hold it).  A
    failed collective fails the generation with nothing applied (the optimizer has not stepped)."""
    total = float(sum(sizes))
    block = cursor.block(r, b)
    if not rep.bound_to(g.gen):  # the generation's first bucketed step: every member is here
        # DDP's find_unused_parameters must be the same on every member (it adds a collective):
        # any member whose probe found a parameter without a gradient turns it on for all
        rep.release_buf()  # before the probe's gradients: one gradient's worth of memory at a time
        mine = rep.unused_params if rep.unused_params is not None else rep.probe_unused(block)
        agreed = rep.tensor([1.0 if mine else 0.0])
        g.allreduce(agreed)  # GroupFailed: nothing was changed
        rep.unused_params = bool(agreed.item() > 0)
    try:
        rep.bind(g)
        gsq = rep.reduced_gradient(block, sizes[r] / total, rep.updater.loss_scale)
    except RuntimeError as e:
        if not comm_failure(e):
            raise
        # the wrapper (its Reducer holds the failed works) goes with the group, released off this thread
        g.fail(str(e), rep.unbind())
        raise GroupFailed(str(e)) from None
    clock = rep.clock
    with clock.timed("reduce"):
        g.allreduce(rep.tail)  # GroupFailed: nothing was changed
    with clock.timed("sync"):
        loss_sum, n, norm_sq = torch.stack([rep.tail[rep.B], rep.tail[rep.B + 1], gsq.to(rep.tail.dtype)]).tolist()
    loss = loss_sum / n if n > 0 else float("nan")
    if not math.isfinite(loss):
        raise Diverged(f"the loss is {loss}")
    if not math.isfinite(norm_sq) and rep.updater.scaler is None:  # fp16: the scaler skips the step itself
        raise Diverged("the aggregated gradient holds NaN or infinite values")
    with clock.timed("optimizer"):
        rep.apply_reduced(lr, n)
    return loss, cursor.advance(len(sizes), b)


def sma_step(g: ElasticGroup, rep: Replica, cursor: DataCursor, k: int, r: int, b: int, H: int,
             lr: float) -> tuple[float, int]:
    """S-MA: ``H`` local optimizer steps, then the replicas (parameters and float buffers) are
    averaged.  Each member keeps its own optimizer state (momentum, Adam moments) across rounds --
    it is not averaged; a joiner takes its source's."""
    start = rep.flat.clone()
    # a snapshot: the optimizer's state_dict holds its live tensors, which the local steps change in place
    opt_start = clone_tree(rep.extra_state()) if rep.updater.optimizer is not None else None
    # no host read in the local steps (issue 40 item 2): losses and a non-finite count stay on the
    # device, a step is applied unchecked, and the round's one read (after its all-reduce) sees a
    # non-finite loss or gradient as a NaN loss -- every member restores the round's start then
    loss_sum, bad = rep.zeros(1, torch.float64)[0], rep.zeros(1)[0]
    n_sum = 0
    scaled = rep.updater.scaler is not None  # fp16: an overflowing gradient is the scaler's to skip
    for h in range(H):
        loss, n = rep.gradient_on_device(cursor.block(h * k + r, b), rep.updater.loss_scale)
        if n:
            bad += (~torch.isfinite(loss)).float()
            if not scaled:
                bad += (~torch.isfinite(rep.buf[: rep.P]).all()).float()
            rep.sgd(rep.buf[: rep.N], n, lr, check=False)  # buf holds n * grad
            loss_sum += loss.double() * n
            n_sum += n
    rep.buf[: rep.N].copy_(rep.flat).mul_(float(n_sum))
    rep.buf[rep.N].copy_(torch.where(bad > 0, torch.full_like(loss_sum, float("nan")), loss_sum))
    rep.buf[rep.N + 1] = float(n_sum)
    try:
        g.allreduce(rep.buf)
    except GroupFailed:
        rep.flat.copy_(start)  # the round is retried from where it began
        rep.load_extra_state(opt_start)
        raise
    summed, total = rep.buf[rep.N:rep.N + 2].tolist()  # the round's one host read
    loss = summed / total if total > 0 else float("nan")
    if total > 0 and not math.isfinite(loss):
        rep.flat.copy_(start)
        rep.load_extra_state(opt_start)
        raise Diverged(f"the loss is {loss}")
    if total > 0:
        rep.flat.copy_(rep.buf[: rep.N]).div_(total)
    return loss, cursor.advance(H * k, b)


def adpsgd_step(g: ElasticGroup, rep: Replica, cursor: DataCursor, plan: Any, r: int, step: int,
                lr: float) -> tuple[float, int, int]:
    """AD-PSGD (Lian et al. 2018, Spotnik's ref. [28]): the gradient at this replica, a pairwise
    average with this step's partner (a seeded perfect matching), then the step:
    ``x <- (x + x_partner) / 2 - lr g(x)`` (through the recipe's optimizer, whose state stays
    each member's own; float buffers are averaged with the partner's like the parameters).
    Only the pair waits for each other.  Returns ``(loss, n, samples the cursor moved)``."""
    from spotwise.planes.collective.plan import gossip_partner

    k, b = len(plan.members), plan.batch
    lt, n = rep.gradient_on_device(cursor.block(r, b), rep.updater.loss_scale)  # no host read yet
    partner = gossip_partner(plan.gen, step, k, r)
    if partner is not None:
        peer = rep.zeros(rep.N)
        g.exchange(rep.flat.clone(), peer, plan.members[partner], tag=step % 32768)
        rep.flat.add_(peer).mul_(0.5)
    loss = 0.0
    if n:
        loss, bad = torch.stack([lt.to(rep.buf.dtype), _nonfinite(rep)]).tolist()  # the step's one read
        if not math.isfinite(loss):
            raise Diverged(f"the loss is {loss}")
        if bad > 0:
            raise Diverged("the gradient holds NaN or infinite values")
        own = rep.flat[rep.P:].clone() if rep.B else None  # keep the pair's mean buffers
        if not rep.sgd(rep.buf[: rep.N], n, lr, check=False):
            raise Diverged("the gradient holds NaN or infinite values")
        if own is not None:
            rep.flat[rep.P:].copy_(own)
    return loss, n, cursor.advance(k, b)
