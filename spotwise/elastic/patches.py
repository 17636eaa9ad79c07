"""``torch.distributed`` as a script run by spotwise calls it (issue 55 item 1).

A script written for ``torchrun`` makes its own group and wraps its own model::

    init_process_group(backend="nccl")                       # joins the job's group instead
    model = DDP(model, device_ids=[ddp_local_rank])          # becomes the job's model (job.model)
    ...
    destroy_process_group()                                  # harmless: the group is the job's

While a spotwise member (or the coordinator's probe) runs such a script, these names of
``torch.distributed`` and ``torch.nn.parallel`` answer for the job -- in the script's thread only;
any other thread of the process gets PyTorch's own behaviour:

* ``init_process_group(...)`` checks the backend it names against the member's device
  (:func:`~spotwise.elastic.torchrun.check_backend`: exit 2 saying which name fits) and, before the
  first generation has formed, makes the default group the stand-in of
  :mod:`~spotwise.elastic.default_group`; from the first batch on the default group is the
  generation's (rank, size, collectives).  Its ``init_method``, ``store`` and ``timeout`` are not
  used: the job has its own rendezvous.  ``destroy_process_group()`` does nothing.
* ``DistributedDataParallel(model, ...)`` (the name ``torch.nn.parallel`` exports) returns what
  ``job.model(model)`` returns: DDP over each generation's group, rebuilt at every regroup, with
  ``.module`` the model itself and ``isinstance(wrapped, DistributedDataParallel)`` true.  Over a
  subgroup (``process_group=``, ``device_mesh=``) it exits 2.
* FSDP2's ``fully_shard(model)`` exits 2: the job's state is not sharded yet (issue 56).
* ``Tensor.backward()`` of a scalar in a step counts the loss into the step's record, as
  ``job.backward(loss)`` does (so a loop that calls ``loss.backward()`` has its losses in the run's
  records), and a gradient all-reduce that fails there inside DDP (a lost peer) fails the step
  rather than the script.

The replacements are installed once per process while a script host needs them
(:func:`install` / :func:`release`, counted); a script's thread is bound to its host with
:func:`bind`.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.parallel

from spotwise.elastic.usage import ScriptError

_LOCK = threading.Lock()
#: thread ident -> the script host whose script runs in that thread
_HOSTS: dict[int, Any] = {}
#: (owner, attribute) -> PyTorch's own object, while installed
_SAVED: dict[tuple[Any, str], Any] = {}
_COUNT = [0]
#: torch's own classes and functions (taken before anything is replaced)
_REAL_DDP = torch.nn.parallel.DistributedDataParallel
_REAL_BACKWARD = torch.Tensor.backward
_DDP_PARAMS = inspect.signature(_REAL_DDP.__init__)


def bind(host: Any) -> None:
    """The calling thread runs ``host``'s script."""
    with _LOCK:
        _HOSTS[threading.get_ident()] = host


def unbind() -> None:
    with _LOCK:
        _HOSTS.pop(threading.get_ident(), None)


def host_here() -> Any:
    """The script host of the calling thread, or None (not a script's thread)."""
    return _HOSTS.get(threading.get_ident())


class _DDPMeta(type(_REAL_DDP)):  # (ABCMeta: DDP is a Joinable)
    """``isinstance(job_model, DistributedDataParallel)`` is true for the job's wrapped model too."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls is SpotwiseDDP:
            from spotwise.elastic.job import ElasticModel

            return isinstance(obj, (_REAL_DDP, ElasticModel))
        return super().__instancecheck__(obj)


class SpotwiseDDP(_REAL_DDP, metaclass=_DDPMeta):  # type: ignore[misc]
    """``DistributedDataParallel`` as the name a script imports (module docstring): in a script's
    thread, the job's model; anywhere else, PyTorch's own DDP."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        host = host_here()
        if host is None:
            if cls is SpotwiseDDP:  # PyTorch's own, built here (its __init__ then runs)
                return _REAL_DDP(*args, **kwargs)
            return _REAL_DDP.__new__(cls)
        if cls is not SpotwiseDDP:
            raise ScriptError(f"{cls.__name__}, a subclass of DistributedDataParallel, wraps the model: under spotwise "
                              "the job's DDP is rebuilt at every regroup, so wrap the model with "
                              "DistributedDataParallel itself (or job.model(model))")
        bound = _DDP_PARAMS.bind(None, *args, **kwargs)
        bound.apply_defaults()
        return host.wrap_ddp(dict(list(bound.arguments.items())[1:]))


def _init_process_group(backend: Any = None, init_method: Any = None, timeout: Any = None, world_size: int = -1,
                        rank: int = -1, *args: Any, **kwargs: Any) -> None:
    host = host_here()
    if host is None:
        return _SAVED[(dist, "init_process_group")](backend, init_method, timeout, world_size, rank, *args, **kwargs)
    host.init_process_group(backend, int(world_size), int(rank))
    return None


def _destroy_process_group(group: Any = None) -> None:
    if host_here() is None:
        return _SAVED[(dist, "destroy_process_group")](group)
    return None  # the group is the job's: it ends with the job


def _refuse_fsdp(real: Callable[..., Any]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if host_here() is None:
            return real(*args, **kwargs)
        raise ScriptError("FSDP2's fully_shard shards the model's state over the group: "
                          "spotwise's in-place regroups move a whole replica, so sharded training is not supported "
                          "yet (issue 56); wrap the model with DistributedDataParallel(model) -- or job.model(model) "
                          "-- for now")

    refuse.__dict__.update(getattr(real, "__dict__", {}))  # fully_shard.state and the like
    refuse.__name__ = getattr(real, "__name__", "fully_shard")
    refuse.__doc__ = getattr(real, "__doc__", None)
    return refuse


def _backward(self: torch.Tensor, gradient: Any = None, retain_graph: Any = None, create_graph: bool = False,
              inputs: Any = None) -> None:
    host = host_here()

    def run() -> None:
        _REAL_BACKWARD(self, gradient, retain_graph, create_graph, inputs)

    if host is None:
        return run()
    return host.script_backward(self, run)


def _targets() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for every name replaced."""
    from torch.distributed import distributed_c10d

    out: list[tuple[Any, str, Any]] = [
        (dist, "init_process_group", _init_process_group),
        (distributed_c10d, "init_process_group", _init_process_group),
        (dist, "destroy_process_group", _destroy_process_group),
        (distributed_c10d, "destroy_process_group", _destroy_process_group),
        (torch.nn.parallel, "DistributedDataParallel", SpotwiseDDP),
        (torch.Tensor, "backward", _backward),
    ]
    try:
        import torch.distributed._composable.fsdp as composable
        import torch.distributed.fsdp as fsdp
    except ImportError:  # pragma: no cover - a torch without FSDP
        return out
    for owner in (fsdp, composable):
        real = getattr(owner, "fully_shard", None)
        if real is not None:
            out.append((owner, "fully_shard", _refuse_fsdp(real)))
    return out


def install() -> None:
    """Replace the names (module docstring); counted: each call needs one :func:`release`."""
    with _LOCK:
        _COUNT[0] += 1
        if _COUNT[0] > 1:
            return
        for owner, name, new in _targets():
            _SAVED[(owner, name)] = getattr(owner, name)
            setattr(owner, name, new)


def release() -> None:
    """Put PyTorch's own names back once no host needs the replacements."""
    with _LOCK:
        if _COUNT[0] == 0:
            return
        _COUNT[0] -= 1
        if _COUNT[0] > 0:
            return
        for (owner, name), real in _SAVED.items():
            setattr(owner, name, real)
        _SAVED.clear()


class Hold:
    """One holder's :func:`install`, given back at most once (a script host's, from its start to its
    stop or its probe's end)."""

    def __init__(self) -> None:
        self.held = False

    def take(self) -> None:
        if not self.held:
            install()
            self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            release()
