"""The user's script inside a spotwise member: its thread, and the hand-over of each step.

A collective member (:mod:`spotwise.planes.collective.member`) that trains a script
(``workload: {script: train.py}``) runs it in a thread of its own, with ``sys.argv`` set to the
script and its ``args``; :func:`spotwise.elastic.init` there returns a job backed by the member's
:class:`ScriptHost`.  The two threads take turns, never running at once:

* the **member thread** does what happens between steps -- waiting at the lease, regrouping,
  taking the source's state, replica offers, records -- and then hands the script a :class:`Go`
  (the generation's group, this member's index and the data position) with :meth:`ScriptHost.run_step`;
* the **script thread** computes the step: it pulls its blocks from the data position, runs the
  user's forward and backward passes (DDP's buckets all-reduce during the backward pass), and at
  ``optimizer.step()`` commits (:meth:`ScriptHost.commit`): one small all-reduce of the step's
  buffers, loss, sample count, failure flag and batch count -- the one host read -- then the user's
  optimizers step.  It reports an :class:`Outcome` and waits for the next :class:`Go`.

So the member's state (the model's flat vector, the optimizers' ``state_dict``) is only read or
written by the member thread while the script waits, and a step is applied by every member or
none (a failed collective drops it on every member; the member thread then regroups and the
script's next batches retry the same samples).
"""

from __future__ import annotations

import math
import sys
import threading
import traceback
from collections import deque
from typing import Any, Callable

import torch

from spotwise.elastic import patches
from spotwise.elastic.batches import BatchFeed
from spotwise.elastic.ddp_call import ddp_call
from spotwise.elastic.amp import AmpStep
from spotwise.elastic.handover import TAIL_HEAD, TERMINAL, Abandoned, Go, Outcome, Parts, user_traceback  # noqa: F401  (re-exported)
from spotwise.elastic.job import install_host
from spotwise.elastic.metrics import clean_metrics
from spotwise.elastic.points import CommitPoints
from spotwise.elastic.positions import StreamPosition
from spotwise.elastic.script_thread import ScriptThread
from spotwise.elastic.script_env import ScriptEnv
from spotwise.elastic.torchrun import Place
from spotwise.elastic.usage import ScriptError
from spotwise.elastic.windows import NEEDS_STEPS, Windows
from spotwise.workloads.device import unscale_grads

class ScriptHost:
    """The :class:`~spotwise.elastic.job.Backend` of a script run by a member (module docstring)."""

    launched = True

    def __init__(self, path: str, args: list[str], device: torch.device, seed: int, batch_size: int,
                 place: Place | None = None) -> None:
        self.path = str(path)
        self.args = [str(a) for a in args]
        self.device = torch.device(device)
        self.seed = int(seed)
        self.batch_size = int(batch_size)
        #: torchrun's environment, the default group and the rank-derived names (issue 55)
        self.env = ScriptEnv(self.path, self.device, place)
        self._rank, self._world = self.env.rank, self.env.world
        #: inside ``job.backward`` (its ``loss.backward()`` is not counted twice)
        self._in_backward = False
        #: job.randint's windows (:mod:`~spotwise.elastic.windows`), and whether the job.steps() loop began
        self._windows = self._looping = False
        self._cv = threading.Condition()
        self._handed: Go | None = None
        #: outcomes reported by the script thread, oldest first (a step's, then its return to a batch)
        self._outcomes: deque[Outcome] = deque()
        self._thread = ScriptThread(self.path, self.args, self._main)
        #: a terminal outcome that came in place of the script's return to its next batch
        self._terminal: Outcome | None = None
        #: between a step's commit and the next step's first batch (the script runs its own code)
        self._between = False
        #: whether the member thread waits in :meth:`run_step` for the script's own code (read by the
        #: member's heartbeat: its user's code at work, however little CPU it uses)
        self.running = False
        # what the script registered
        self.modules: list[torch.nn.Module] = []
        self.find_unused: list[bool] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        #: the step's commit points: the optimizers of each ``job.optimizer()`` call (:mod:`~spotwise.elastic.points`)
        self.points = CommitPoints()
        self.states: dict[str, Any] = {}
        self._feed: BatchFeed | None = None
        #: batches each step took (the last committed step's): what the loader predicts
        self._per_step = 1
        self.position: StreamPosition | None = None
        #: the member's replica of the script's model (:class:`~spotwise.planes.collective.script_member.ScriptReplica`),
        #: attached when the member built it: the DDP wrapper, the flat buffers, the failure flag
        self.replica: Any = None
        # the step in progress (script thread)
        self._go: Go | None = None
        self._stopped = False
        self._pulled = 0
        self._loss_sum: torch.Tensor | None = None
        self._loss_n = 0
        self._pending: dict[str, Any] = {}
        self._late: dict[str, Any] = {}
        self._step = 0
        self._samples = 0
        #: this step was dropped at one of its commit points: the script's rest of it trains nothing
        self._void = False
        self._names = patches.Hold()  # torch.distributed's names, patched from start() to stop() or leave()
        self.warnings: list[str] = []

    # ================================================================== the member thread
    @property
    def joining(self) -> bool:
        return self.env.place.joining

    def start(self) -> None:
        """Run the script in its thread (it stops at its first batch until :meth:`run_step`), with
        ``torch.distributed``'s group calls answered by the job (:mod:`~spotwise.elastic.patches`)."""
        install_host(self)
        self._names.take()
        # torch imports torch._dynamo lazily when the script builds its optimizer (torch/_compile.py);
        # imported here first, so that import never races one in this process's other threads (under
        # load a racing import handed the script a partially initialised torch._dynamo)
        import torch._dynamo  # noqa: F401

        self._thread.start()

    def wait_registered(self, timeout_s: float) -> Outcome:
        """The script's first outcome: ``registered`` (its model, optimizers and data are known) or
        how it ended before (``raised``, ``ended``, ``usage``)."""
        return self._take(timeout_s, "the script did not take a batch from job.data() within {t:.0f} s of starting: "
                                     "call spotwise.elastic.init(), job.model() (or DDP(model)), job.optimizer() "
                                     "and job.data() and iterate the data (or draw with job.randint() and loop over "
                                     "job.steps(n))")

    def parts(self) -> Parts:
        assert self.modules and self.position is not None
        module = self.modules[0] if len(self.modules) == 1 else torch.nn.ModuleList(self.modules)
        return Parts(module, self.optimizers, self.position.n, list(self.find_unused), self.states,
                     self.position.ordered, list(self.modules))

    def run_step(self, go: Go, timeout_s: float | None = None, beside: Callable[[], None] | None = None) -> Outcome:
        """Hand the script ``go`` and wait for how its step ended, and then for the script to stop at
        its next step's first batch (or end): what it does between ``optimizer.step()`` and that
        batch -- an EMA update, a counter, ``job.log`` -- belongs to the step, so the state the
        member copies next is the whole step's.  ``timeout_s``: a script that never calls
        ``optimizer.step()`` is reported as a ``usage`` outcome.  ``beside``: the member's own work
        while the script computes (its wait at the step gate), called once the step is handed over."""
        if self._terminal is not None:  # the script ended right after its last step
            out, self._terminal = self._terminal, None
            return out
        self.running = True
        try:
            with self._cv:
                self._handed = go
                self._cv.notify_all()
            if beside is not None:
                beside()
            out = self._take(timeout_s, "the script took batches but did not call optimizer.step() within {t:.0f} s: "
                                        "call step() on the object job.optimizer() returned once per step")
            if out.kind in ("committed", "dropped", "diverged"):
                after = self._take(timeout_s, "the script did not come back for its next batch within {t:.0f} s of "
                                              "optimizer.step() (its own work between two steps: an evaluation, a "
                                              "save; SPOTWISE_SCRIPT_STEP_TIMEOUT_S sets this bound)")
                if after.kind == "ready":
                    out.late_metrics = after.late_metrics
                else:
                    self._terminal = after
            return out
        finally:
            self.running = False

    def _take(self, timeout_s: float | None, late: str) -> Outcome:
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._outcomes), timeout=timeout_s):
                return Outcome("usage", why=late.format(t=timeout_s or 0))
            out = self._outcomes.popleft()
        return out

    def leave(self) -> None:
        """The coordinator's probe is done with the script (it waits at its first batch for good): the
        process's own environment, default group and ``torch.distributed`` names come back."""
        self.env.leave()
        self._names.give_back()

    def stop(self, timeout_s: float = 60.0) -> Outcome | None:
        """The job is over: let the script leave its loop (its data iteration ends) and finish."""
        if not self._thread.alive():
            return None
        out = self.run_step(Go(stop=True), timeout_s)
        if self._thread.join(5.0):
            self._names.give_back()
        return out

    def abandon(self, timeout_s: float = 5.0) -> bool:
        """End the script's thread where it stands, running none of the rest of the script (the
        coordinator's probe is done with it): at its first batch it is handed an abandoning
        :class:`Go`, else :class:`Abandoned` is raised in it (:meth:`ScriptThread.end
        <spotwise.elastic.script_thread.ScriptThread.end>`: a thread left behind holds the process's
        ``__main__``).  Returns whether the thread ended."""
        def wake() -> None:
            with self._cv:
                self._handed = Go(stop=True, abandon=True)
                self._cv.notify_all()

        return self._thread.end(wake, timeout_s)

    # ================================================================== the script thread
    def _main(self, run: Callable[[], None]) -> None:
        patches.bind(self)
        self.env.enter()
        try:
            run()
        except Abandoned:
            return  # the probe ended it where it stood (abandon())
        except StopIteration:
            if not self._stopped:  # a StopIteration that is not the job's end: the user's
                self._report(Outcome("raised", why=traceback.format_exc(limit=-8)), wait=False)
                return
        except ScriptError as e:
            self._report(Outcome("usage", why=str(e)), wait=False)
            return
        except BaseException:  # the user's failure, sys.exit too: exit 2 with their traceback
            self._report(Outcome("raised", why=user_traceback()), wait=False)
            return
        finally:
            patches.unbind()
        self._report(Outcome("ended", why="the script returned" + ("" if self._stopped else
                                                                   " before the job's target")), wait=False)

    def _report(self, out: Outcome, wait: bool = True) -> Go | None:
        with self._cv:
            self._outcomes.append(out)
            self._cv.notify_all()
            if not wait:
                return None
            self._cv.wait_for(lambda: self._handed is not None)
            go, self._handed = self._handed, None
        return go

    def _begin(self, go: Go | None) -> None:
        if go is not None and go.abandon:
            self._stopped = True
            raise Abandoned()
        self._go = go
        if go is None or go.stop:
            self._stopped = True
            if self._feed is not None:
                self._feed.close()  # its DataLoader workers
            return
        self._rank, self._world = int(go.r), int(go.k)
        self.env.moved(go.group, self._rank, self._world)  # the default group, RANK, the script's master_process
        assert self.position is not None
        self.position.moved_to(go.epoch, go.pos)
        self._step = int(go.step)
        self._samples = self.position.absolute
        self._pulled = 0
        self._loss_sum = None
        self._loss_n = 0
        self._void = False
        self.points.begin(self.scaler)
        if self.replica is not None:
            self.replica.keep_buffers()

    # ------------------------------------------------------------------ Backend: registration
    def _first_step(self) -> None:
        """Stop at a step boundary and take the next :class:`Go`: the job's first step once the script
        registered its model, optimizers and data (so a joiner's ``job.step``, read before its first
        batch to set a learning rate, is the job's, not 0), or the next step after a commit."""
        if not self._thread.is_current() or self._stopped:
            return
        if self._go is None and self.modules and self.optimizers and self.position is not None:
            self._begin(self._report(Outcome("registered")))
        elif self._between:
            if self._void and self.replica is not None:
                # a dropped step: the BatchNorm statistics its forward passes moved (up to here: a
                # GAN's later commit points too) go back to the step's start, before the regroup --
                # and so does a GradScaler's scale, which the script's update() after it moved
                self.replica.restore_buffers()
                self.points.restore_scaler(self.scaler)
            late = clean_metrics(self._late, self._warn)
            self._late = {}
            self._between = False
            self._begin(self._report(Outcome("ready", late_metrics=late)))

    @property
    def step(self) -> int:
        if not self._between:
            self._first_step()
        return self._step

    @property
    def samples(self) -> int:
        if not self._between:
            self._first_step()
        return self._samples

    @property
    def rank(self) -> int:
        if not self._between:
            self._first_step()
        return self._rank

    @property
    def world(self) -> int:
        if not self._between:
            self._first_step()
        return self._world

    def register_model(self, module: torch.nn.Module, find_unused: bool) -> int:
        self.modules.append(module)
        self.find_unused.append(bool(find_unused))
        return len(self.modules) - 1

    def register_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> int:
        index = self.points.add(optimizers)
        self.optimizers = self.points.optimizers
        return index

    def register_scheduler(self, scheduler: Any) -> None:
        self.points.schedulers.append(scheduler)

    def register_state(self, name: str, obj: Any) -> None:
        if self.position is not None:
            raise ScriptError(f"job.state({name!r}, ...) after job.data(): register the script's own state before "
                              "its first batch")
        self.states[name] = obj

    def register_data(self, dataset: Any, batch_size: int | None, collate_fn: Any, epochs: float | None,
                      loader: dict[str, Any]) -> None:
        if batch_size is not None and int(batch_size) != self.batch_size:
            what = "job.randint's size" if type(dataset).__name__ == "Windows" else "job.data(batch_size=...)"
            raise ScriptError(f"the script's batch size ({what}: {batch_size}) differs from the spec's "
                              f"workload.batch_size ({self.batch_size}): give the same number in both (or leave it out "
                              "of job.data())")
        self._feed = BatchFeed(dataset, collate_fn, **loader)
        self.position = StreamPosition(self._feed.n, self.seed, ordered=self._feed.ordered)
        self._windows = isinstance(dataset, Windows)

    # ------------------------------------------------------------------ Backend: the step
    def forward_module(self, index: int = 0) -> Any:
        rep = self.replica
        if rep is not None and not self._void and not rep.hook_failed():
            red = rep.reducer_of(index)
            if red is not None:
                return red.ddp
        return self.modules[index]

    def forward_failed(self, index: int, error: RuntimeError) -> bool:
        """A collective inside the DDP wrapper's forward pass failed (a peer was lost): the step fails
        (its commit drops it on every member) and the rest of it runs on this member's replica alone."""
        from spotwise.planes.collective.bucketed import comm_failure

        red = None if self.replica is None else self.replica.reducer_of(index)
        if red is None or not comm_failure(error):
            return False
        red.state.failed = red.state.failed or str(error) or "a collective in the forward pass failed"
        return True

    def no_sync(self, index: int | None = None) -> Any:
        import contextlib

        rep = self.replica
        reds = [] if rep is None else [r for r in rep.reducers if r is not None] if index is None else \
            [r for r in [rep.reducer_of(index)] if r is not None]
        stack = contextlib.ExitStack()
        for r in reds:
            stack.enter_context(r.no_sync())
        return stack

    def next_batch(self) -> Any:
        if self._go is None and not self._stopped:  # the script's first batch: it has registered everything
            if not self.modules or not self.optimizers:
                raise ScriptError("the script took a batch before job.model() and job.optimizer(): wrap the model "
                                  "and the optimizer(s) first")
        self._first_step()  # the first batch of a step: wait for the member's go
        if self._stopped:
            raise StopIteration
        go, pos, feed = self._go, self.position, self._feed
        assert go is not None and pos is not None and feed is not None
        if self._pulled == 0:
            feed.plan(pos, go.k, go.r, self._per_step, self.batch_size)
        idx = pos.block(self._pulled * go.k + go.r, self.batch_size)
        self._pulled += 1
        return feed.batch(idx)

    def backward(self, loss: torch.Tensor) -> None:
        if self._void:  # the rest of a step dropped at an earlier commit point: nothing of it counts
            self._run_backward(loss.backward)
            return
        if self._go is None or self._stopped or self._between:
            raise ScriptError("job.backward() outside a step: take a batch from job.data() first")
        self._count_loss(loss)
        self._run_backward(loss.backward)

    def script_backward(self, tensor: torch.Tensor, run: Any) -> None:
        """The script's own ``tensor.backward()`` (:mod:`~spotwise.elastic.patches`): a scalar's, in a
        step, counts as ``job.backward(tensor)`` does; any other runs as it is."""
        if self._in_backward or self._void or self._go is None or self._stopped or self._between \
                or tensor.numel() != 1 or not tensor.requires_grad:
            return run()
        self._count_loss(tensor)
        self._run_backward(run)

    def _count_loss(self, loss: torch.Tensor) -> None:
        d = loss.detach().float().reshape(())
        scale = self._scale()
        if scale is not None:  # a GradScaler's scaled loss: recorded unscaled (on the device, no read)
            d = d / scale.to(d.device)
        self._loss_sum = d.clone() if self._loss_sum is None else self._loss_sum + d
        self._loss_n += 1

    def _run_backward(self, run: Any) -> None:
        self._in_backward = True
        try:
            run()
        except RuntimeError as e:  # a collective DDP runs in the backward pass besides the buckets' (the
            # unused-parameter map): a lost peer fails the step, dropped at the commit, not the script
            rep = self.replica
            reds = [] if rep is None else [r for r in rep.reducers if r is not None]
            from spotwise.planes.collective.bucketed import comm_failure

            if not reds or not comm_failure(e):
                raise
            reds[0].state.failed = reds[0].state.failed or str(e)
        finally:
            self._in_backward = False

    # ------------------------------------------------------------------ Backend: a torchrun script's calls
    def init_process_group(self, backend: Any, world_size: int, rank: int) -> None:
        self.env.init_process_group(backend, world_size, rank)

    def wrap_ddp(self, kwargs: dict[str, Any]) -> Any:
        """``DistributedDataParallel(module, **kwargs)`` in the script: the job's model (``job.model``)."""
        from spotwise.elastic.job import init

        module, find_unused = ddp_call(kwargs, self.device)
        return init().model(module, find_unused_parameters=find_unused)

    def boundary(self) -> bool:
        """The top of a ``job.steps()`` loop: the job's next step begins here; False when the job is over."""
        if self.position is None and self._thread.is_current():
            raise ScriptError("job.steps() before the script's first batch: a member that joins a running job learns "
                              "the job's step at its first batch, so draw one before the loop (nanoGPT's "
                              "`X, Y = get_batch('train')` above `while True`) or iterate job.data()")
        self._looping = True
        self._first_step()
        return not self._stopped

    def log(self, metrics: dict[str, Any]) -> None:
        if self._between:  # after optimizer.step(), before the next batch: the values are that step's
            self._late.update(metrics)
        else:
            self._pending.update(metrics)

    def commit(self, amp: AmpStep | None = None, index: int = 0) -> bool:
        go, rep = self._go, self.replica
        group = self.points.groups[index]
        if self._void:  # a later commit point of a step dropped at an earlier one: nothing is applied
            for o in group:
                o.zero_grad(set_to_none=True)
            return False
        if self._stopped:
            raise ScriptError("optimizer.step() after the job ended (the data iteration stopped): leave the loop")
        if self._windows and not self._looping:
            raise ScriptError(NEEDS_STEPS)
        if go is None or self._pulled == 0 or self._between:
            raise ScriptError("optimizer.step() before any batch of this step: take a batch from job.data() first")
        from spotwise.planes.collective.group import GroupFailed

        k, b, pulled = go.k, self.batch_size, self._pulled
        n_local = pulled * b
        self._check_reduced(rep)
        lrs = [float(g.get("lr", 0.0)) for o in self.optimizers for g in o.param_groups]
        loss_sum = self._loss_sum  # (unscaled as job.backward took them)
        tail = rep.fill_tail(n_local, loss_sum, self._loss_n, pulled, lrs, None if amp is None else amp.found_inf,
                             point=index)
        try:
            go.group.allreduce(tail)
            vals = tail[rep.B:].tolist()  # the commit's one host read
        except GroupFailed as e:
            return self._drop(f"the step's commit all-reduce failed: {e}")
        loss_sum, loss_n, failed, pulled_sum, pulled_sq, found_inf, point_sum, point_sq = vals[:TAIL_HEAD]
        if failed > 0:
            return self._drop(rep.hook_failed() or "a member's gradient all-reduce failed")
        if int(point_sum) != k * index or int(point_sq) != k * index * index:
            raise ScriptError(f"the members stepped different optimizers at the same point of step {self._step + 1} "
                              f"(this one the optimizer of job.optimizer() call {index + 1}): every member must step "
                              "the job's optimizers in the same order, the same number of times")
        if int(pulled_sum) != k * pulled or int(pulled_sq) != k * pulled * pulled:
            raise ScriptError(f"the members took different numbers of batches in step {self._step + 1} (this one "
                              f"{pulled}, {int(pulled_sum)} in all over {k}): every member must take the same number "
                              "of batches before optimizer.step()")
        for i, (mine, total) in enumerate(zip(lrs, vals[TAIL_HEAD:])):  # every member steps with the same rates
            if abs(total - k * mine) > 1e-6 * max(1.0, abs(total)):
                raise ScriptError(f"the members stepped with different learning rates in step {self._step + 1} "
                                  f"(parameter group {i}: {mine:g} here, {total / k:g} on average): compute them from "
                                  "job.step or job.samples, the same on every member, not from a counter of the "
                                  "script's own (a member that joins later starts its script afresh), or register "
                                  "a torch.optim.lr_scheduler with job.scheduler(scheduler)")
        skip = amp is not None and found_inf > 0  # the GradScaler's skip: no update, the step counts (as in DDP)
        if amp is not None:
            amp.skipped = skip
        if self.points.inner(index):  # a commit point inside the step (a GAN's first)
            self.points.keep_start(index)
            self._apply(group, amp, skip)
            self.points.stepped.add(index)
            return True
        loss = loss_sum / loss_n if loss_n > 0 else math.nan
        if skip and not math.isfinite(loss):
            loss = math.nan  # an overflow of the scaled loss, not a divergence: the scaler backs off
        elif loss_n > 0 and not math.isfinite(loss):
            self.points.rollback(self.scaler)
            self._end_step(Outcome("diverged", why=f"the loss is {loss}"))
            return False
        self._apply(group, amp, skip)
        self.points.done()
        total = k * n_local
        rep.adopt_buffers(tail, total)
        metrics = clean_metrics(self._pending, self._warn)
        self._pending = {}
        self._step += 1
        self._samples += total
        self._per_step = pulled
        stepped = [float(v) / k for v in vals[TAIL_HEAD:]]  # the members' common rates (checked above)
        self._end_step(Outcome("committed", loss=loss, samples=total, metrics=metrics, lrs=stepped))
        return True

    @property
    def scaler(self) -> Any:
        """The GradScaler the script gave ``job.optimizer(..., scaler=)`` (registered as ``grad_scaler``), or None."""
        return self.states.get("grad_scaler")

    @staticmethod
    def _apply(group: list[torch.optim.Optimizer], amp: AmpStep | None, skip: bool) -> None:
        """Step the commit point's optimizers (nothing when the GradScaler skips the step), on
        gradients unscaled as ``GradScaler.unscale_`` does when the scaler left them scaled."""
        if skip:
            return
        if amp is not None and amp.grad_scale is not None:
            unscale_grads(group, amp.grad_scale)
        for o in group:
            o.step()

    def _scale(self) -> torch.Tensor | None:
        """The registered GradScaler's current scale (a device tensor), if it has one and is enabled."""
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled():
            return None
        return getattr(scaler, "_scale", None)

    def _check_reduced(self, rep: Any) -> None:
        """A step whose backward pass ran but reduced no gradient bucket went around the DDP wrapper:
        this member would step with its own gradient while the others wait for it.  Checked before
        each commit, on this member alone (its peers are waiting in their bucket all-reduces)."""
        reds = [r for r in rep.reducers if r is not None]
        if not reds:
            return
        reduced = sum(r.state.reduced for r in reds)
        for r in reds:
            r.state.reduced = 0
        if reduced or any(r.state.failed for r in reds):
            return
        if self._loss_n > 0 or any(q.grad is not None for m in self.modules for q in m.parameters() if q.requires_grad):
            raise ScriptError(f"step {self._step + 1}'s gradients were not all-reduced: the script's forward pass went "
                              "around the wrapped model (model.module(...), or a copy of the model) or every "
                              "micro-batch of the step ran under no_sync(); call the object job.model() returned, "
                              "and let a step's last micro-batch synchronise")

    def _end_step(self, out: Outcome) -> None:
        """Report the step's outcome and go on with the script's own code: the script stops at the
        next step's first batch (:meth:`_first_step`), where the member hands the next :class:`Go`."""
        self._pulled = 0
        self._loss_sum = None
        self._loss_n = 0
        self._between = True
        self._report(out, wait=False)

    def _drop(self, why: str) -> bool:
        """The step is dropped on every member: what its earlier commit points stepped goes back to
        where the step began, gradients are let go, the member thread regroups; the script's rest of
        the step (a GAN's later commit points) trains nothing, and a collective of the script's own
        on the default group there returns this member's own values (its generation failed)."""
        self.points.rollback(self.scaler)
        for o in self.optimizers:
            o.zero_grad(set_to_none=True)
        self._pending = {}
        self._void = True
        self.env.alone()  # the script's own collectives in the rest of the step: on this member alone
        self._end_step(Outcome("dropped", why=why))
        return False

    def _warn(self, msg: str) -> None:
        self.warnings.append(msg)
        print(f"spotwise: {msg}", file=sys.stderr, flush=True)
