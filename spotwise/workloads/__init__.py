"""Real PyTorch training workloads for the elastic data-parallel runtime.

Public API::

    make_workload(spec, seed) -> Workload          # registry.py
    Workload, IndexedDataset, TensorIndexedDataset # base.py
    flat_params, set_flat_params, flat_grad, apply_flat_grad, num_params, zero_grad,
    sparse_grad_parts, apply_sparse_sgd            # params.py

See :mod:`spotwise.workloads.base` for the determinism contract.
"""

from spotwise.workloads.base import IndexedDataset, TensorIndexedDataset, Workload
from spotwise.workloads.params import (
    apply_flat_grad,
    apply_sparse_sgd,
    flat_grad,
    flat_params,
    num_params,
    set_flat_params,
    sparse_grad_parts,
    zero_grad,
)
from spotwise.workloads.registry import make_workload, register_workload, workload_names

__all__ = [
    "IndexedDataset",
    "TensorIndexedDataset",
    "Workload",
    "apply_flat_grad",
    "apply_sparse_sgd",
    "flat_grad",
    "flat_params",
    "make_workload",
    "num_params",
    "register_workload",
    "set_flat_params",
    "sparse_grad_parts",
    "workload_names",
    "zero_grad",
]
