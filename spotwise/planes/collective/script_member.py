"""A collective member whose steps are the user's own loop (issue 41; :mod:`spotwise.elastic.host`).

:class:`ScriptReplica` is what :class:`~spotwise.planes.collective.member.CollectiveMember` keeps
of a script's training state in place of a workload's :class:`~spotwise.planes.collective.replica.Replica`:
the script's own model, its parameters and float buffers made views into one flat float32 vector
(:class:`~spotwise.training.state.FlatModel`: what a regroup broadcasts, a replica offer copies and
a checkpoint stores), and the script's own optimizers, whose ``state_dict`` -- with the integer
buffers and the objects the script registered with ``job.state`` -- is the extra state that travels
with it.  Its DDP wrapper is built over each generation's process group with the tolerant comm hook
(:func:`~spotwise.planes.collective.bucketed.tolerant_sum_hook`): a failed bucket does not raise out
of the user's backward pass; the step's commit drops the step on every member instead.

:func:`script_step` is one step of such a member: hand the script the generation and data position,
wait for its outcome, and turn it into the member's record (or a failed generation).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from spotwise.control.phases import PhaseClock
from spotwise.elastic.host import TAIL_HEAD, Go, Outcome, Parts, ScriptHost
from spotwise.elastic.torchrun import Place
from spotwise.planes.collective.group import ElasticGroup, GroupFailed
from spotwise.planes.collective.plan import Plan
from spotwise.planes.collective.replica import DataCursor
from spotwise.planes.collective.step_gate import STEP_TIMEOUT_S
from spotwise.planes.collective.steps import Diverged
from spotwise.training.state import FlatModel
from spotwise.workloads.device import GpuBusy, device_index, to_device



class ScriptStopped(Exception):
    """The script ended, raised, or misused the API: its :class:`Outcome` says which."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.why)
        self.outcome = outcome


class ScriptReplica:
    """The script's training state as a member holds it (module docstring)."""

    loader = None  # the script builds its own batches

    def __init__(self, parts: Parts, device: torch.device) -> None:
        self.device = torch.device(device)
        self.fm = FlatModel(parts.module, self.device)
        self.model = self.fm.model
        self.P, self.B = self.fm.P, self.fm.B
        self.N = self.P + self.B
        self.flat = self.fm.flat
        self.optimizers = list(parts.optimizers)
        self.states = dict(parts.states)
        #: the models the script wrapped (one DDP wrapper each, over the same group) and their flags
        self.modules = list(parts.modules)
        self.find_unused = list(parts.find_unused)
        self.clock = PhaseClock(busy=GpuBusy(self.device))
        #: the script's host (set when it is started: :func:`start_script`), stopped by :meth:`close`
        self.host: ScriptHost | None = None
        #: one :class:`~spotwise.planes.collective.bucketed.BucketedReducer` per wrapped model (None for
        #: a model with nothing to train), built over the generation's group; empty when unbound
        self.reducers: list[Any] = []
        #: the buffers as the step in progress began (:meth:`keep_buffers`)
        self._kept: Any = None
        self._gen: int | None = None
        #: ``n * buffers`` (B), then :data:`TAIL_HEAD` entries: what the commit all-reduces (:meth:`ScriptHost.commit`)
        self.tail = self.zeros(self.B + TAIL_HEAD)  # and one entry per parameter group: its learning rate
        if not any(p.requires_grad for p in self.fm.params):
            raise ValueError("no parameter of the script's model requires a gradient")

    # ------------------------------------------------------------------ DDP over the generation
    def bound_to(self, gen: int | None) -> bool:
        return bool(self.reducers) and self._gen == gen

    def bind(self, group: ElasticGroup) -> None:
        from spotwise.planes.collective.bucketed import BucketedReducer, tolerant_sum_hook

        if not self.bound_to(group.gen):
            self.unbind()
            pg, share = group.process_group(), 1.0 / max(1, len(group.members))  # every block is full: share 1 / k
            for m, unused in zip(self.modules, self.find_unused):
                red = None
                if any(q.requires_grad for q in m.parameters()):
                    red = BucketedReducer(m, pg, int(group.gen), self.device, find_unused=unused, hook=tolerant_sum_hook)
                    red.state.weight = share
                    red.state.before = group.await_gate
                self.reducers.append(red)
            self._gen = int(group.gen)

    def reducer_of(self, index: int) -> Any:
        """The DDP wrapper of the script's ``index``-th model in this generation (None: unbound, or nothing to train)."""
        return self.reducers[index] if index < len(self.reducers) else None

    def unbind(self) -> Any:
        reds, self.reducers, self._gen = self.reducers, [], None
        for p in self.fm.params:
            p.grad = None
        return reds or None

    def hook_failed(self) -> str | None:
        return next((r.state.failed for r in self.reducers if r is not None and r.state.failed), None)

    # ------------------------------------------------------------------ the commit's tail
    def fill_tail(self, n_local: int, loss_sum: torch.Tensor | None, has_loss: int, pulled: int,
                  lrs: list[float], found_inf: torch.Tensor | None = None, point: int = 0) -> torch.Tensor:
        """The step's commit vector: the float buffers times this member's samples, then
        :data:`TAIL_HEAD` entries (the loss sum, whether there is one, the hook's failure flag, the
        batches taken and their square, a GradScaler's non-finite count, the commit point ``point``
        and its square), then the learning rates (of every parameter group of the job: the vector
        has one length at every commit point, so members at different points fail the check, not
        the all-reduce)."""
        h = self.B + TAIL_HEAD
        if self.tail.numel() != h + len(lrs):
            self.tail = self.zeros(h + len(lrs))
        t = self.tail
        if lrs:
            t[h:] = torch.tensor(lrs, dtype=t.dtype)
        if self.B:
            t[: self.B].copy_(self.fm.buffer_vec).mul_(float(n_local))
        if loss_sum is not None:
            t[self.B].copy_(loss_sum.to(t.dtype))
        else:
            t[self.B] = 0.0
        t[self.B + 1] = 1.0 if has_loss else 0.0
        t[self.B + 2] = 1.0 if self.hook_failed() else 0.0
        t[self.B + 3] = float(pulled)
        t[self.B + 4] = float(pulled * pulled)
        if found_inf is not None:
            t[self.B + 5].copy_(found_inf.detach().sum().to(t.dtype))
        else:
            t[self.B + 5] = 0.0
        t[self.B + 6] = float(point)
        t[self.B + 7] = float(point * point)
        return t

    def keep_buffers(self) -> None:
        """At a step's start: a device copy of the buffers (a dropped step's forward passes moved
        BatchNorm's running statistics; :meth:`restore_buffers` takes that back)."""
        self._kept = self.fm.buffer_snapshot(self._kept)

    def restore_buffers(self) -> None:
        if self._kept is not None:
            self.fm.restore_buffers(self._kept)

    def adopt_buffers(self, tail: torch.Tensor, total: int) -> None:
        """The sample-weighted mean of the members' float buffers (BatchNorm statistics), as the built-in steps do."""
        if self.B and total > 0:
            self.fm.buffer_vec.copy_(tail[: self.B]).div_(float(total))

    # ------------------------------------------------------------------ what the member loop uses
    def zeros(self, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(int(n), dtype=dtype, device=self.device)

    def tensor(self, values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return to_device(torch.as_tensor(values, dtype=dtype), self.device)

    def set_params(self, vec: Any) -> None:
        v = torch.as_tensor(vec, dtype=torch.float32).reshape(-1)
        if v.numel() != self.N:
            raise ValueError(f"a replica of {self.N} values cannot take {v.numel()}")
        self.flat.copy_(to_device(v, self.device))

    @property
    def has_extra(self) -> bool:
        return True

    def extra_state(self) -> dict[str, Any]:
        """The optimizers', the integer buffers' and the registered objects' state (live tensors: the
        member copies it between steps)."""
        return {"int_buffers": self.fm.int_buffers(), "optimizers": [o.state_dict() for o in self.optimizers],
                "states": {k: v.state_dict() for k, v in self.states.items()}}

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        if not extra:
            return
        self.fm.load_int_buffers(extra.get("int_buffers") or {})
        opts = extra.get("optimizers") or []
        if opts and len(opts) != len(self.optimizers):
            raise ValueError(f"the state holds {len(opts)} optimizers, the script has {len(self.optimizers)}")
        for o, sd in zip(self.optimizers, opts):
            load_keeping_groups(o, sd)
        for name, sd in (extra.get("states") or {}).items():
            if name in self.states:
                self.states[name].load_state_dict(sd)

    def evaluate(self) -> dict[str, float]:
        return {}  # the script evaluates in its own loop and logs what it finds

    def reset_loader(self) -> None:
        return None

    def expect(self, blocks: Any) -> None:
        return None

    def close(self) -> None:
        """The job is over for this member: the script's data iteration ends and it finishes."""
        if self.host is not None:
            self.host.stop()


def load_keeping_groups(optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(sd)`` into the parameter-group dicts the optimizer has: PyTorch's
    makes new ones, and the script may hold the old -- ``set_rates(optimizer.param_groups, ...)``
    with the list taken before the call that let the member load the job's state (a joiner's first
    step, a fresh job's rank-0 state) -- and would set its learning rate where nothing reads it."""
    kept = list(optimizer.param_groups)
    optimizer.load_state_dict(sd)
    for i, (old, new) in enumerate(zip(kept, optimizer.param_groups)):
        if old is not new:
            old.clear()
            old.update(new)
            optimizer.param_groups[i] = old


def script_step(host: ScriptHost, rep: ScriptReplica, g: ElasticGroup, cursor: DataCursor, k: int, r: int,
                step: int) -> Outcome:
    """Hand the script one step and return its outcome: committed (the cursor moved past the step's
    samples); :class:`GroupFailed` if the step was dropped, :class:`ScriptStopped` if the script is
    over, :class:`~spotwise.planes.collective.steps.Diverged` if its loss is not finite."""
    rep.bind(g)
    go = Go(group=g, k=k, r=r, step=step, epoch=cursor.epoch, pos=cursor.pos)
    # the step gate (step_gate): every member here before the step's first collective, so the others'
    # work between two steps (the leader's evaluation) is waited for there, not inside a collective's
    # timeout; this thread waits at it while the script computes its forward pass
    g.open_gate()
    try:
        out = host.run_step(go, STEP_TIMEOUT_S, beside=g.pass_gate)
    finally:
        g.close_gate()
    if out.kind == "committed":
        cursor.epoch, cursor.pos = divmod(cursor.epoch * cursor.n + cursor.pos + int(out.samples), cursor.n)
        return out
    if out.kind == "diverged":  # every member saw the same all-reduced loss: the member halts
        raise Diverged(out.why)
    if out.kind == "dropped":
        g.fail(out.why, rep.unbind())
        raise GroupFailed(out.why)
    raise ScriptStopped(out)


def prepare_script_member() -> None:
    """What a script member loads before its script starts (at its first plan): DDP's machinery and
    the ``torch.distributed`` names a torchrun script calls (:mod:`~spotwise.elastic.patches`)."""
    from spotwise.elastic import patches
    from spotwise.planes.collective.bucketed import load_ddp_machinery

    load_ddp_machinery()
    patches.install()  # (for the life of the member's process)


def place_of(plan: Plan, member: int, address: Any, device: torch.device) -> Place:
    """Where ``member`` is in ``plan``'s generation, as torchrun's environment says it: its rank (the
    plan's members are in rank order), the generation's size, the job's planned size, its device
    index, the store's address, and whether it starts the job (``plan.start``) or joins it."""
    k = len(plan.members)
    return Place(plan.members.index(member), k, max(k, int(plan.planned)), device_index(device), str(address.host),
                 int(address.port), joining=not plan.start)


def start_script(spec: Any, device: torch.device, seed: int,
                 place: Place | None = None) -> tuple[ScriptHost, ScriptReplica, DataCursor]:
    """A member's script: started in its thread with torchrun's environment for ``place``, run to its
    first batch; its replica and data cursor.  :class:`ScriptStopped` if it ended before."""
    prepare_script_member()
    host = ScriptHost(spec.script, spec.args, device, int(seed), int(spec.batch_size), place=place)
    host.start()
    first = host.wait_registered(STEP_TIMEOUT_S)
    if first.kind != "registered":
        raise ScriptStopped(first)
    parts = host.parts()
    rep = ScriptReplica(parts, device)
    host.replica, rep.host = rep, host
    #: the script's data: a step takes the next k * A * b positions of the epochs' orders
    return host, rep, DataCursor(parts.n_train, int(seed), ordered=parts.ordered)


def ready_to_form(m: Any, g: ElasticGroup, plan: Plan) -> None:
    """Before member ``m`` (a :class:`~spotwise.planes.collective.member.CollectiveMember` of a script
    job) forms ``plan``'s generation: its script runs to its first batch -- started now, at the
    first plan it sees, so it knows its rank (:func:`place_of`) -- and then every member of the plan
    is waited for (a joiner's script builds its model while the others wait here, not inside gloo's
    rendezvous, whose timeout is the group's).  A script that stops before its first batch ends the
    run: a ``script`` record, and the generation fails (:class:`GroupFailed`)."""
    if m.host is None and m.start_failed is None:
        try:
            m.host, m.replica, m.cursor = start_script(m.spec, m.device, m.seed, place_of(plan, m.member, m.address,
                                                                                             m.device))
        except ScriptStopped as e:  # (returning before the first batch is no end of the job)
            out = e.outcome
            m.start_failed = out if out.kind != "ended" else Outcome("usage", why="the script returned before its first "
                                                                      "batch in this member")
    if m.start_failed is not None:
        report_script_end(g, plan, m.member, m.step, m.start_failed)
        g.store.set(f"fail/{plan.gen}", f"member {m.member}: the script stopped before its first batch"[:200])
        raise GroupFailed("the script stopped before its first batch")
    # a fresh job's first generation takes its rank 0's state: the leader's first offer carries it whole
    m.offer_whole = bool(plan.start and plan.source == m.member)
    g.store.set(f"ready/{plan.gen}/{m.member}", "1")
    keys = [f"ready/{plan.gen}/{w}" for w in plan.members]
    deadline = time.monotonic() + STEP_TIMEOUT_S
    pause = 0.001
    while not g.store.check(keys):
        if g.store.check([f"fail/{plan.gen}"]):
            raise GroupFailed(g.store.get(f"fail/{plan.gen}").decode(errors="replace"))
        if time.monotonic() > deadline:
            g.store.set(f"fail/{plan.gen}", f"member {m.member}: a member's script did not reach its first batch")
            raise GroupFailed("a member's script did not reach its first batch")
        time.sleep(pause)
        pause = min(0.02, pause * 1.5)


def with_metrics(rec: dict[str, Any], out: Outcome) -> dict[str, Any]:
    """The step's record with what the script logged before and after its ``optimizer.step()``."""
    metrics = {**out.metrics, **out.late_metrics}
    if metrics:
        rec["metrics"] = metrics
    if out.lrs:  # the rate the optimizer stepped with (its first parameter group's), and every group's
        rec["lr"] = out.lrs[0]
        if len(set(out.lrs)) > 1:
            rec["lrs"] = list(out.lrs)
    return rec


def report_script_end(g: ElasticGroup, plan: Any, member: int, step: int, out: Outcome) -> None:
    """Tell the coordinator the script is over (a ``script`` record, any member's)."""
    import json

    g.store.queue_push("rec", json.dumps([{"step": step + 1, "gen": plan.gen, "strategy": plan.strategy,
                                           "script": out.kind, "why": str(out.why)[-4000:], "member": member}]))
