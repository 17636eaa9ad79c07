"""A member's replica offers, off the training thread's critical path (issue 40 item 3).

The leader offers the coordinator its replica -- the flat parameters and the extra state
(optimizer moments, scaler, integer buffers) -- periodically, when asked (a revocation notice, a
checkpoint) and at the end.  Measured on an H200 (issue 40), offering every 20 steps with the
state serialised (``torch.save`` of the whole optimizer state into memory) on the training thread
cost more than half the GPU at 85M parameters.  Here an offer is:

1. **a copy, on the training thread, between two steps**: every tensor of the state into reused
   buffers through :class:`~spotwise.workloads.device.HostCopier` -- on a GPU a device-side copy
   then a pinned-host copy on a side stream (training goes on meanwhile); on the CPU a memcpy;
2. **encoded on a background thread**: the extra state packed tensor by tensor
   (:mod:`spotwise.training.tensor_tree`: a small header, the copies' own bytes served as they are
   fetched -- never a second, serialised copy of the state in memory, never the live state) while
   the member trains; the offer's header is pushed to the coordinator's store, on the thread's own
   connection, only once its bytes are ready;
3. **scheduled by its measured cost**: the periodic offers are spaced so that their cost -- the
   copy's time on the training thread plus the background thread's CPU time, which on a small
   machine competes with training -- stays within :data:`BUDGET` (2 %) of the training time;
   ``cluster.replica_every`` is the most often they happen (:class:`OfferSchedule`).

The final offer (``wait``: nothing trains after it) on a CPU serves the live state without a copy.
The guarantee is unchanged: a revocation without notice loses at most the steps since the last
replica the coordinator holds; with a notice none (the requested offer is taken at once).  One
offer at a time: a new one first waits for the previous one's serialisation (its buffers are reused).
"""

from __future__ import annotations

import io
import json
import math
import threading
import time
from typing import Any, Callable

import numpy as np
import torch

from spotwise.training.tensor_tree import Packed, pack, read_views
from spotwise.workloads.device import HostCopier

#: the share of training time periodic offers may take
BUDGET = 0.02


class OfferSchedule:
    """When the next periodic offer is due: ``every`` steps after the last one (``replica_every``, the
    most often), or later when offers cost more than ``budget`` (default :data:`BUDGET`) of the
    steps between them; ``budget`` 0: exactly every ``every`` steps."""

    def __init__(self, every: int, budget: float = BUDGET) -> None:
        if int(every) < 0 or not 0 <= budget < 1:
            raise ValueError(f"every must be >= 0 and budget in [0, 1), got {every!r}, {budget!r}")
        self.every, self.budget = int(every), float(budget)
        self.step_s: float | None = None  # the mean step time (moving average)
        self.offer_s: float | None = None  # the mean cost of one offer
        self.last = 0

    def observe_step(self, seconds: float) -> None:
        if seconds >= 0 and math.isfinite(seconds):
            self.step_s = seconds if self.step_s is None else 0.9 * self.step_s + 0.1 * seconds

    def observe_offer(self, seconds: float) -> None:
        if seconds >= 0 and math.isfinite(seconds):
            self.offer_s = seconds if self.offer_s is None else 0.5 * self.offer_s + 0.5 * seconds

    def interval(self) -> int:
        """Steps between two periodic offers (0: none)."""
        if self.every <= 0:
            return 0
        if not self.budget or not self.offer_s or not self.step_s:  # budget 0: a fixed schedule
            return self.every
        return max(self.every, int(math.ceil(self.offer_s / (self.budget * self.step_s))))

    def due(self, step: int) -> bool:
        """Whether a periodic offer is due at ``step``: at the multiples of ``every`` while offers are
        cheap (the same steps on every run of a job and across a resume), else ``interval()`` steps
        after the last one."""
        n = self.interval()
        if n <= 0:
            return False
        return step % n == 0 if n == self.every else step - self.last >= n

    def offered(self, step: int) -> None:
        self.last = int(step)


def _tensors_of(tree: Any, out: list[torch.Tensor]) -> Any:
    """``tree`` with every tensor replaced by its index in ``out`` (appended), for :func:`_rebuild`."""
    if isinstance(tree, torch.Tensor):
        out.append(tree)
        return _Slot(len(out) - 1)
    if isinstance(tree, dict):
        return {k: _tensors_of(v, out) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tensors_of(v, out) for v in tree)
    return tree


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


def _rebuild(tree: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(tree, _Slot):
        return tensors[tree.i]
    if isinstance(tree, dict):
        return {k: _rebuild(v, tensors) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rebuild(v, tensors) for v in tree)
    return tree


class _Encoded:
    """An extra state :func:`~spotwise.training.tensor_tree.pack` cannot express, as ``torch.save`` bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.nbytes = data, len(data)

    @classmethod
    def of(cls, state: Any) -> "_Encoded":
        bio = io.BytesIO()
        torch.save(state, bio)
        return cls(bio.getvalue())

    def read_array(self, offset: int, size: int) -> np.ndarray:
        return read_views([memoryview(self.data)], offset, size)


class ReplicaOffers:
    """The leader's offers (module docstring).  ``connect()`` opens the background thread's own client
    of the coordinator's store; :meth:`take` serves an offer's bytes to the coordinator's fetches."""

    def __init__(self, device: torch.device, connect: Callable[[], Any]) -> None:
        self.copier = HostCopier(device)
        self._connect = connect
        self._store: Any = None
        self._lock = threading.Lock()
        #: token -> (header, vector, extra state, whether its buffers stay as they are until it is dropped)
        self._outbox: dict[int, tuple[dict[str, Any], np.ndarray, Packed | _Encoded, bool]] = {}
        self._thread: threading.Thread | None = None
        self._next_token = 0
        self._error: BaseException | None = None
        #: the last offer's cost: seconds on the training thread, CPU seconds of the background thread
        self.last_cost: tuple[float, float] = (0.0, 0.0)

    def offer(self, head: dict[str, Any], vec: torch.Tensor | list[torch.Tensor], extra: dict[str, Any] | None, *,
              wait: bool = False) -> float:
        """Offer the state ``vec`` (the flat parameters; or its parts -- the moving ranges when some
        parameters are frozen -- offered as one vector, concatenated) and ``extra`` (optimizer state
        etc.; ``None``: none) under ``head`` (step, epoch, position, why ...); returns the seconds it
        took on this thread.  ``wait``: serialise and push before returning (the final offer: nothing
        trains after)."""
        t0 = time.perf_counter()
        self.settle()  # the previous offer's buffers are about to be reused:
        with self._lock:  # its bytes are no longer served (only the newest offer is kept)
            self._outbox.clear()
        tensors: list[torch.Tensor] = [v.reshape(-1) for v in (vec if isinstance(vec, list) else [vec])]
        head = {**head, "parts": len(tensors)}
        tree = _tensors_of(extra, tensors) if extra is not None else None
        if wait and self.copier.device.type != "cuda":  # the final offer: nothing changes the state after it
            copies, ready = [t.detach() for t in tensors], (lambda: None)
        else:
            copies, ready = self.copier.copy(tensors)
        with self._lock:
            self._next_token += 1
            token = self._next_token
        head = {**head, "token": token}
        on_thread = time.perf_counter() - t0
        # the host buffers of a GPU's copies are reused by the next offer: chunks of one are served
        # as copies, taken under the lock; the CPU's copies and a final offer's state stay as they are
        stable = self.copier.device.type != "cuda" or wait
        self._thread = threading.Thread(target=self._serialise, args=(head, copies, tree, ready, on_thread, stable),
                                        name="spotwise-offer", daemon=True)
        self._thread.start()
        if wait:
            self.settle()
        return time.perf_counter() - t0

    def _serialise(self, head: dict[str, Any], copies: list[torch.Tensor], tree: Any, ready: Callable[[], None],
                   on_thread: float, stable: bool) -> None:
        try:
            self._encode(head, copies, tree, ready, on_thread, stable)
        except BaseException as e:  # raised on the training thread by settle()
            self._error = e

    def _encode(self, head: dict[str, Any], copies: list[torch.Tensor], tree: Any, ready: Callable[[], None],
                on_thread: float, stable: bool) -> None:
        c0 = time.thread_time()
        ready()
        k = int(head.pop("parts", 1))
        vec = np.ascontiguousarray(copies[0].numpy(), dtype=np.float32) if k == 1 else \
            np.concatenate([c.numpy().astype(np.float32, copy=False) for c in copies[:k]])
        extra: Packed | _Encoded = _Encoded(b"")
        if tree is not None:
            state = _rebuild(tree, copies)  # the copies (or, for the final offer, the state nothing changes now)
            extra = pack(state) or _Encoded.of(state)
        head = {**head, "vec_bytes": int(vec.nbytes), "extra_bytes": int(extra.nbytes)}
        with self._lock:  # (the host buffer is not written again before this offer leaves the outbox)
            self._outbox[int(head["token"])] = (head, vec, extra, stable)
        try:
            if self._store is None:
                self._store = self._connect()
            self._store.queue_push("replicas", json.dumps(head).encode())
        except Exception:  # the store is gone: the run is ending, nobody fetches
            pass
        self.last_cost = (on_thread, time.thread_time() - c0)

    def settle(self) -> None:
        """Wait until the offer in flight (if any) is serialised and announced; what failed there is
        raised here, on the training thread."""
        t = self._thread
        if t is not None:
            t.join()
            self._thread = None
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def take(self, token: int, offset: int, size: int) -> np.ndarray | None:
        """Bytes ``[offset, offset + size)`` of the offer ``token`` -- its flat float32 vector, then its
        encoded extra state -- as a ``uint8`` array (a view of the offer's memory where the range lies
        in one tensor: Ray copies it once, into its object store), or ``None`` once a newer offer
        replaced it; the last chunk drops it."""
        with self._lock:
            got = self._outbox.get(int(token))
            if got is None:
                return None
            _, vec, extra, stable = got
            vb = memoryview(vec).cast("B")
            total = len(vb) + extra.nbytes
            lo, hi = int(offset), min(total, int(offset) + int(size))
            if hi <= len(vb):
                out = np.frombuffer(vb[lo:hi], dtype=np.uint8)
            elif lo >= len(vb):
                out = extra.read_array(lo - len(vb), hi - lo)
            else:
                out = np.concatenate([np.frombuffer(vb[lo:], dtype=np.uint8), extra.read_array(0, hi - len(vb))])
            if not stable and out.base is not None:
                out = out.copy()  # (the next offer may overwrite the buffer once the lock is released)
            if hi >= total:
                self._outbox.pop(int(token), None)
            return out

    def close(self) -> None:
        self.settle()
        with self._lock:
            self._outbox.clear()
