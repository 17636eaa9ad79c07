"""S-SGD's gradient all-reduce on PyTorch's own DDP machinery (issue 40 item 1).

S-SGD (``papers/001_30a454edd897cf47.txt`` Sec. 3.3: replicas "updated using averaged
gradients") needs, at every step, the members' sample-weighted mean gradient.  A member used to
back-propagate into one flat buffer and all-reduce it after the backward pass; here the model is
wrapped in ``torch.nn.parallel.DistributedDataParallel`` over the *generation's* process group
(:meth:`~spotwise.planes.collective.group.ElasticGroup.process_group`), so DDP's Reducer buckets
the gradients and all-reduces each bucket while the backward pass is still computing the next
ones -- communication overlapped with computation, as DDP does it -- and only parameters that
require a gradient are reduced (a frozen backbone or a LoRA model reduces its adapters only).

* **Sample-weighted, not averaged by world size.**  DDP's default divides by the number of ranks;
  a step's blocks differ in size at an epoch's end, so a comm hook (``register_comm_hook``, DDP's
  own extension point) multiplies each member's bucket by its share ``n_i / n`` of the step's
  samples and sums: ``sum_i (n_i / n) g_i``, the gradient of the mean loss over all ``n`` samples
  (every member computes ``n`` and its ``n_i`` from the shared data cursor, so no extra collective).
* **One wrapper per generation.**  A regroup forms a new process group; the wrapper is rebuilt on
  it at the generation's first S-SGD step (``init_sync=False``: the members already hold the same
  state, adopted or broadcast when the generation formed) and dropped with it.
* **Attributes pass through.**  A workload's ``loss(model, batch)`` may read attributes of its model
  (``model.config``); the wrapper answers them from the wrapped module.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from spotwise.workloads.device import ddp_device_ids

def load_ddp_machinery() -> None:
    """Import what DDP's constructor imports on its first use: TorchDynamo (``torch._dynamo``, ~800
    modules; 1.5 CPU-s here).  A member does it when it starts, not inside its first generation's
    first step, where on a loaded machine it took over a minute and the controller's stall watch
    declared every member of the generation lost."""
    import torch._dynamo  # noqa: F401


#: messages of a collective that failed because of a peer (a closed connection, a timeout, an
#: aborted group), not because of the user's model: such a failure fails the generation
COMM_FAILURE_MARKERS = ("gloo", "nccl", "connection", "timed out", "timeout", "closed", "broken pipe", "aborted",
                        "peer", "socket", "processgroup", "collective", "unbound buffer")


def comm_failure(e: BaseException) -> bool:
    """Whether a ``RuntimeError`` raised by a backward pass through the wrapper is a failed collective."""
    text = str(e).lower()
    return isinstance(e, RuntimeError) and any(m in text for m in COMM_FAILURE_MARKERS)


class AttributeForwardingDDP(DistributedDataParallel):
    """``DistributedDataParallel`` that answers the wrapped module's own attributes too (module docstring)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":  # not set yet (inside DDP's own __init__): no recursion
                raise
            return getattr(self.module, name)


@dataclass
class WeightedSum:
    """The comm hook's state: the process group and this member's share of the step's samples."""

    pg: Any
    weight: float = 1.0
    #: a user loop's step (:mod:`spotwise.elastic.host`): why a bucket's all-reduce failed, else None
    failed: str | None = None
    #: buckets handed to the hook since the user loop's last commit (0 after a backward pass: the
    #: forward went around the wrapper, or every micro-batch ran under ``no_sync``)
    reduced: int = 0
    #: a user loop's step: called before each bucket's all-reduce -- the generation's step gate
    #: (:meth:`~spotwise.planes.collective.group.ElasticGroup.await_gate`), which raises if it did not pass
    before: Any = None

    def __post_init__(self) -> None:
        if self.pg is None:
            raise ValueError("a weighted all-reduce needs a process group")


def weighted_sum_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: none, or its own classes
    """DDP comm hook: ``bucket * weight`` summed over the members (in place, in the bucket's buffer)."""
    buf = bucket.buffer()
    if state.weight != 1.0:
        buf.mul_(float(state.weight))
    fut = state.pg.allreduce([buf]).get_future()
    return fut.then(lambda f: f.value()[0])


def tolerant_sum_hook(state, bucket):  # type: ignore[no-untyped-def]
    """:func:`weighted_sum_hook` for a user's loop: a failed all-reduce does not raise out of the
    user's ``loss.backward()`` -- the bucket keeps its local values and ``state.failed`` says why; the
    step's commit all-reduce carries the flag, so every member drops the step alike."""
    state.reduced += 1
    buf = bucket.buffer()
    if state.weight != 1.0:
        buf.mul_(float(state.weight))
    try:
        if state.before is not None:
            state.before()  # every member at the step's gate before its first collective (raises if not)
        fut = state.pg.allreduce([buf]).get_future()
    except Exception as e:  # RuntimeError, or the gate's GroupFailed
        state.failed = str(e) or "the gradient all-reduce failed"
        done = torch.futures.Future()
        done.set_result(buf)
        return done

    def finish(f):  # type: ignore[no-untyped-def]
        try:
            return f.value()[0]
        except Exception as e:  # a peer died or the group was aborted
            state.failed = str(e) or "the gradient all-reduce failed"
            return buf

    return fut.then(finish)


#: buffers (BatchNorm statistics) are not broadcast before each forward pass: each member keeps its
#: own, and the step averages them sample-weighted (spotwise.training.state).  torch >= 2.13 names
#: this ``forward_sync_buffers`` (with ``init_sync=False`` nothing is synced at construction either)
_NO_BUFFER_SYNC = ({"forward_sync_buffers": False}
                   if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
                   else {"broadcast_buffers": False})


class BucketedReducer:
    """A model wrapped in DDP over one generation's process group, with the weighted-sum hook."""

    def __init__(self, model: torch.nn.Module, process_group: Any, gen: int, device: torch.device,
                 find_unused: bool = False, bucket_cap_mb: float = 25.0, hook: Any = None) -> None:
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError("no parameter of the model requires a gradient")
        self.gen = int(gen)
        self.state = WeightedSum(process_group)
        device = torch.device(device)
        ids = ddp_device_ids(device)
        self.ddp = AttributeForwardingDDP(model, process_group=process_group, device_ids=ids, init_sync=False,
                                          gradient_as_bucket_view=True, find_unused_parameters=bool(find_unused),
                                          bucket_cap_mb=float(bucket_cap_mb), **_NO_BUFFER_SYNC)
        self.ddp.register_comm_hook(self.state, weighted_sum_hook if hook is None else hook)

    def no_sync(self) -> Any:
        """DDP's ``no_sync``: gradients accumulate locally (every micro-batch but a step's last)."""
        return self.ddp.no_sync()
