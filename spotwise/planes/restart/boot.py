"""What runs in a restart-mode script's own process, before and around the script (issue 55 item 6).

``python -m spotwise.planes.restart.boot SCRIPT [ARGS...]`` runs ``SCRIPT`` as ``python SCRIPT ARGS``
would (``__main__``, ``sys.argv``, ``sys.path[0]``), after installing a :class:`StepReporter` that
watches the script through PyTorch's own global hooks -- the script is not changed:

* **steps**: :func:`torch.optim.optimizer.register_optimizer_step_pre_hook` /
  ``..._post_hook``.  The first optimizer that steps is the job's (a second one, a GAN's
  discriminator, is not counted).  Its step count is the optimizer's own ``state["step"]`` where it
  keeps one (Adam, AdamW, ...: exact after the script loads its checkpoint), else the steps this
  process took after the step it resumed from.  Before each step the reporter waits for the
  coordinator's *lease* (the steps that end before the market's next event on the emulated
  provider's virtual clock), as the in-place members do.
* **loss**: the sum of the scalars ``Tensor.backward`` was called on since the previous step (what
  the gradient is of: a script that divides each micro-batch's loss by its accumulation steps --
  nanoGPT, HF Trainer -- gives its mean loss); a ``GradScaler``-scaled loss counts unscaled.  Read
  after the step (on a GPU one step later, never stalling the queue).
* **checkpoints**: ``torch.save`` into ``SPOTWISE_CHECKPOINT_DIR`` (the folder spotwise names) is a
  checkpoint of the step count at that moment; ``torch.load`` from it says the script resumed.

Reports go to the coordinator's store (keys under the run's secret, :class:`~spotwise.planes.collective.group.StoreAddress`):
queue ``rec`` (rank 0's steps, every rank's checkpoints and loads) and key ``at/<gen>/<rank>`` (the
step a rank waits to take: the coordinator stops a generation only while its ranks wait there).
The process dies with the member that started it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import weakref
from typing import Any

#: the environment the member sets for the reporter (removed before the script runs)
CHANNEL_ENV = ("SPOTWISE_CHANNEL", "SPOTWISE_CHANNEL_KEY", "SPOTWISE_GEN", "SPOTWISE_PARENT_PID")
#: the longest the reporter sleeps between two looks at the lease
LEASE_POLL_MAX_S = 0.02


def _die_with_parent(parent: int) -> None:
    """Be killed when the member process that started this one dies (Linux; elsewhere nothing)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if parent and os.getppid() != parent:  # the member died before the prctl took effect
        os._exit(137)


def _inside(path: Any, folder: str) -> str | None:
    """``path``'s place below ``folder`` (relative), or None when it is a file object or elsewhere."""
    if not folder or not isinstance(path, (str, os.PathLike)):
        return None
    p = os.path.realpath(os.fspath(path))
    root = os.path.realpath(folder)
    return os.path.relpath(p, root) if p == root or p.startswith(root + os.sep) else None


class StepReporter:
    """Watches one script process (module docstring) and reports to ``store`` (a client of the run's store)."""

    def __init__(self, store: Any, gen: int, rank: int, checkpoint_dir: str, resume_step: int) -> None:
        self.store, self.gen, self.rank = store, int(gen), int(rank)
        self.checkpoint_dir = checkpoint_dir
        #: the step of the checkpoint spotwise expects the script to resume from (-1: none)
        self.resume_step = int(resume_step)
        self.count: int | None = None  # optimizer steps done (the job's step), known from the first step
        self.lease = 0
        self.loaded = False
        self._opt: Any = None
        self._loss: Any = None  # the scalars backward() saw since the last step (a tensor)
        self._pending: tuple[int, Any, float, float] | None = None  # a record whose loss is still on the device
        self._waiting_at: int | None = None

    # ------------------------------------------------------------------ hooks
    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._before_step)
        register_optimizer_step_post_hook(self._after_step)
        backward, save, load = torch.Tensor.backward, torch.save, torch.load
        reporter = self

        def _backward(tensor: Any, *a: Any, **k: Any) -> Any:
            reporter.saw_loss(tensor)
            return backward(tensor, *a, **k)

        def _save(obj: Any, f: Any, *a: Any, **k: Any) -> Any:
            out = save(obj, f, *a, **k)
            reporter.saved(f)
            return out

        def _load(f: Any, *a: Any, **k: Any) -> Any:
            out = load(f, *a, **k)
            reporter.was_loaded(f)
            return out

        torch.Tensor.backward = _backward  # type: ignore[method-assign]
        torch.save, torch.load = _save, _load  # type: ignore[assignment]
        scale = torch.amp.GradScaler.scale

        def _scale(scaler: Any, outputs: Any) -> Any:
            out = scale(scaler, outputs)
            if isinstance(outputs, torch.Tensor) and isinstance(out, torch.Tensor) and outputs.numel() == 1:
                out._spotwise_unscaled = outputs  # type: ignore[attr-defined]
            return out

        torch.amp.GradScaler.scale = _scale  # type: ignore[method-assign]

    def saw_loss(self, tensor: Any) -> None:
        try:
            if tensor.numel() != 1:
                return
            v = getattr(tensor, "_spotwise_unscaled", tensor).detach().float().reshape(())
            self._loss = v if self._loss is None else self._loss + v
        except Exception:  # never break the script's backward
            pass

    def _mine(self, opt: Any) -> bool:
        if self._opt is None:
            self._opt = weakref.ref(opt)
        return self._opt() is opt

    def _optimizer_step(self, opt: Any) -> int | None:
        """The optimizer's own count of its steps (``state["step"]`` of its first parameter with state)."""
        try:
            for group in opt.param_groups:
                for p in group["params"]:
                    s = opt.state.get(p, {}).get("step")
                    if s is not None:
                        return int(s.item() if hasattr(s, "item") else s)
        except Exception:
            return None
        return None

    def _before_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not self._mine(opt):
            return
        if self.count is None:
            own = self._optimizer_step(opt)
            self.count = own if own is not None else (max(0, self.resume_step) if self.loaded else 0)
            self._send({"kind": "start", "step": self.count, "loaded": self.loaded, "own_count": own is not None})
        self._wait_lease(self.count + 1)

    def _after_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not self._mine(opt):
            return
        self.count = (self.count or 0) + 1
        loss, self._loss = self._loss, None
        lr = opt.param_groups[0].get("lr") if opt.param_groups else None
        lr = float(lr.item() if hasattr(lr, "item") else lr) if lr is not None else None
        if self.rank != 0:
            return
        self.flush()
        if loss is not None and getattr(loss, "device", None) is not None and loss.device.type != "cpu":
            self._pending = (self.count, loss, lr or 0.0, time.time())  # read at the next step (no stall)
            return
        self._record(self.count, None if loss is None else float(loss), lr, time.time())

    def flush(self) -> None:
        if self._pending is not None:
            step, loss, lr, wall = self._pending
            self._pending = None
            self._record(step, float(loss), lr, wall)

    def _record(self, step: int, loss: float | None, lr: float | None, wall: float) -> None:
        self._send({"kind": "step", "step": step, "loss": loss, "lr": lr, "wall": wall})

    def _wait_lease(self, step: int) -> None:
        if step <= self.lease:
            return
        self.flush()  # the steps before it are logged first
        if self._waiting_at != step:
            self._waiting_at = step
            self.store.set(f"at/{self.gen}/{self.rank}", str(step))
        pause = 0.0005
        while True:
            self.lease = int(self.store.get("lease"))
            if step <= self.lease:
                return
            time.sleep(pause)
            pause = min(LEASE_POLL_MAX_S, pause * 1.5)

    def saved(self, f: Any) -> None:
        rel = _inside(f, self.checkpoint_dir)
        if rel is not None:
            self.flush()
            # before its first step a resumed script is at the step it resumed from (nanoGPT saves again there)
            step = self.count if self.count is not None else (max(0, self.resume_step) if self.loaded else 0)
            self._send({"kind": "checkpoint", "step": step, "path": rel})

    def was_loaded(self, f: Any) -> None:
        rel = _inside(f, self.checkpoint_dir)
        if rel is not None:
            self.loaded = True
            self._send({"kind": "loaded", "path": rel})

    def _send(self, rec: dict[str, Any]) -> None:
        rec.update(gen=self.gen, rank=self.rank)
        try:
            self.store.queue_push("rec", json.dumps(rec))
        except Exception:  # the coordinator is gone: the member is being stopped
            pass


def _connect(channel: str, key: str) -> Any:
    from datetime import timedelta

    import torch.distributed as dist

    host, _, port = channel.rpartition(":")
    raw = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))
    return dist.PrefixStore(f"{key}/", raw)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m spotwise.planes.restart.boot SCRIPT [ARGS...]")
    env = {k: os.environ.pop(k, "") for k in CHANNEL_ENV}
    _die_with_parent(int(env["SPOTWISE_PARENT_PID"] or 0))
    script = os.path.abspath(argv[0])
    reporter = StepReporter(_connect(env["SPOTWISE_CHANNEL"], env["SPOTWISE_CHANNEL_KEY"]), int(env["SPOTWISE_GEN"]),
                            int(os.environ.get("RANK", "0")), os.environ.get("SPOTWISE_CHECKPOINT_DIR", ""),
                            int(os.environ.get("SPOTWISE_RESUME_STEP", "-1")))
    reporter.install()
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        reporter.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
