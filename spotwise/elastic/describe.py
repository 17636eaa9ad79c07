"""What the coordinator knows of a training script: its model and its training set's size.

The coordinator of a ``workload.script`` job (issue 41) keeps what it keeps of every job -- the
parameters of the last replica for checkpoints and the exported model, the data position's epoch
size -- but trains nothing.  It learns the model's layout and the dataset's size by running the
script the way a member does, up to its first batch, in a thread of its own on the CPU: the script
registers its model, optimizers and data (:mod:`spotwise.elastic.job`) and then waits there for
good.  A script that fails before its first batch exits 2 here, with its traceback, before any
member starts; one that never reaches it within :data:`DESCRIBE_TIMEOUT_S` exits 2 saying what to
call.  Results are cached per (script, args, seed, batch size) for the life of the process.
"""

from __future__ import annotations

import copy
import os
import threading
from typing import Any

import torch

from spotwise.errors import InputError
from spotwise.workloads.base import Workload

#: seconds a script may take from its start to its first batch (imports, data, model)
DESCRIBE_TIMEOUT_S = float(os.environ.get("SPOTWISE_SCRIPT_DESCRIBE_TIMEOUT_S", "300"))

_CACHE: dict[tuple[Any, ...], Workload] = {}
_LOCK = threading.Lock()


class ScriptDataSize:
    """The script's training set as the coordinator keeps it: its size."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def batch(self, indices: Any) -> Any:
        raise RuntimeError("the coordinator of a script job reads no data")


def _no_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    raise RuntimeError("a script job's loss is computed by the script")


def workload_for(spec: Any, seed: int) -> Any:
    """The workload of a :class:`~spotwise.config.WorkloadSpec`: a training script's description
    (:func:`describe_script`), else :func:`~spotwise.workloads.registry.make_workload`'s."""
    if getattr(spec, "script", None) is not None:
        return describe_script(spec, seed)
    from spotwise.workloads.registry import make_workload

    return make_workload(spec, seed)


def describe_script(spec: Any, seed: int) -> Workload:
    """A :class:`~spotwise.workloads.base.Workload` standing for ``spec.script`` on the coordinator
    (module docstring): ``build_model()`` returns a copy of the script's model as it built it, the
    training set is its size only."""
    key = (spec.script, tuple(spec.args), int(seed), int(spec.batch_size))
    with _LOCK:
        got = _CACHE.get(key)
        if got is not None:
            return got
    from spotwise.elastic.host import ScriptHost

    if not os.path.isfile(spec.script):
        raise InputError(f"training script {spec.script} not found", "give its path relative to the spec's folder "
                         "(workload.script: train.py)", "workload.script")
    from spotwise.elastic.torchrun import Place

    # the probe is rank 0 of 1 and told it does not start the job (SPOTWISE_JOINING, SPOTWISE_PROBE): its
    # state seeds nothing -- a fresh job's first generation takes its rank 0's -- so a script's own resume
    # path (loading its checkpoint) and the side effects it keeps for a real start need not run here
    host = ScriptHost(spec.script, list(spec.args), torch.device("cpu"), int(seed), int(spec.batch_size),
                      place=Place(0, 1, joining=True, probe=True))
    host.start()
    try:
        first = host.wait_registered(DESCRIBE_TIMEOUT_S)
        snapshot = copy.deepcopy(host.parts().module).cpu() if first.kind == "registered" else None
        parts = host.parts() if first.kind == "registered" else None
    finally:
        host.leave()  # the controller's own environment and torch.distributed back
        host.abandon()  # and its own __main__: the script's thread ends where it waits (or hangs)
    if first.kind != "registered" or parts is None:
        where = "workload.script"
        if first.kind == "raised":
            raise InputError(f"your training script {spec.script} failed before its first batch:\n{first.why}",
                             "fix the script (run it on its own first: python train.py)", where)
        if first.kind == "ended":
            raise InputError(f"your training script {spec.script} returned without taking a batch from job.data()",
                             "iterate the batches of job.data() in the script's training loop", where)
        raise InputError(f"your training script {spec.script}: {first.why}", "see the spotwise.elastic API "
                         "(docs/own-loop.md)", where)
    n = parts.n_train
    wl = Workload(name="script", family=str(spec.family), build_model=lambda: copy.deepcopy(snapshot), loss=_no_loss,
                  train=ScriptDataSize(n), test=None, metric_name="loss", evaluate=lambda m, d: {},
                  info={"script": spec.script, "ordered": parts.ordered})
    with _LOCK:
        _CACHE[key] = wl
    return wl
