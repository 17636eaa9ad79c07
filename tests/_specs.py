"""Test helpers shared by several test modules: job specs from a base dict with overrides."""

from __future__ import annotations

import copy
from typing import Any

from spotwise.config import JobSpec, spec_from_dict


def spec_with(base: dict[str, Any], **over: Any) -> JobSpec:
    """A JobSpec from ``base`` with ``a__b=value`` overrides (``cluster__workers=8``)."""
    d = copy.deepcopy(base)
    for path, value in over.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return spec_from_dict(d)


def single_process_sgd(spec: JobSpec, steps: int, global_batch: int) -> Any:
    """The reference of the equivalence tests: plain SGD on one process, ``steps`` steps of
    ``global_batch`` samples drawn by the job's epoch sampler; the final flat parameters."""
    import torch

    from spotwise.control.sampler import EpochSampler
    from spotwise.workloads.params import flat_params
    from spotwise.workloads.registry import make_workload

    wl = make_workload(spec.workload, spec.seed)
    model = wl.build_model()
    sampler = EpochSampler(len(wl.train), spec.seed)
    for _ in range(steps):
        block = sampler.reserve(global_batch)
        assert block is not None
        model.zero_grad()
        wl.loss(model, wl.train.batch(block.indices)).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= spec.workload.lr * p.grad
        sampler.commit(block)
    return flat_params(model).detach().numpy()
