"""What a script's ``DistributedDataParallel(module, **kwargs)`` may ask for under spotwise.

The job's model is data-parallel over the job's whole group, which changes at every regroup
(:mod:`spotwise.elastic.patches` routes the call to the job's ``job.model``): a subgroup, another
member's device or DDP's own mixed precision cannot be honoured, and each is refused with a message
saying what to write instead (:class:`~spotwise.elastic.usage.ScriptError`, exit 2).
"""

from __future__ import annotations

from typing import Any

import torch

from spotwise.elastic.usage import ScriptError
from spotwise.workloads.device import device_index


def ddp_call(kwargs: dict[str, Any], device: torch.device) -> tuple[torch.nn.Module, bool]:
    """The module and ``find_unused_parameters`` of a script's DDP call on a member on ``device``
    (``kwargs`` holds every argument by name, ``module`` included, which is taken out)."""
    import torch.distributed as dist

    module = kwargs.pop("module", None)
    if not isinstance(module, torch.nn.Module):
        raise ScriptError("DistributedDataParallel(module, ...) takes the model (a torch.nn.Module)")
    pg, mesh = kwargs.get("process_group"), kwargs.get("device_mesh")
    if mesh is not None or (pg is not None and pg is not dist.group.WORLD
                            and not (dist.is_initialized() and pg is dist.distributed_c10d._get_default_group())):
        raise ScriptError("DistributedDataParallel over a subgroup (process_group= or device_mesh=): under spotwise "
                          "the model is data-parallel over the job's whole group, which changes at every regroup; "
                          "leave process_group out")
    ids = kwargs.get("device_ids")
    device = torch.device(device)
    if ids is not None and (device.type != "cuda" or [torch.device("cuda", i) if isinstance(i, int)
                                                      else torch.device(i) for i in ids]
                            != [torch.device("cuda", device_index(device))]):
        raise ScriptError(f"DistributedDataParallel(device_ids={ids!r}) on this member's device {device}: "
                          "give device_ids=[LOCAL_RANK] on a GPU (its own) and none on a CPU")
    if kwargs.get("mixed_precision") is not None:
        raise ScriptError("DistributedDataParallel(mixed_precision=...) is not supported under spotwise: use "
                          "torch.autocast in the forward pass")
    return module, bool(kwargs.get("find_unused_parameters", False))
