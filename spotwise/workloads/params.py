"""Flat parameter / gradient vectors, the unit the runtime all-reduces and averages.

Order and layout: ``model.parameters()`` order, each tensor flattened row-major, concatenated into
one float32 vector (``numel = sum(p.numel())``).  This order is deterministic for a given model
class, so vectors from different workers line up.

Sparse gradients (``nn.Embedding(sparse=True)`` / ``nn.EmbeddingBag(sparse=True)``) are
``torch.sparse_coo`` tensors possibly holding duplicate indices; :func:`flat_grad` coalesces and
densifies them (duplicates summed), so the flat vector is always the exact dense gradient.  For a
cheaper exchange, :func:`sparse_grad_parts` returns ``(param_index, rows, values)`` without
densifying, and :func:`apply_sparse_sgd` applies such parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from spotwise.workloads.device import to_host

if TYPE_CHECKING:  # type only: the serverless plane imports this module
    from spotwise.planes.serverless.significance import SparseUpdate


def _params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(model.parameters())


def num_params(model: torch.nn.Module) -> int:
    """Length of the flat vectors for ``model``."""
    return sum(p.numel() for p in _params(model))


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """A detached copy of all parameters as one flat float32 vector."""
    ps = _params(model)
    if not ps:
        return torch.zeros(0)
    return torch.cat([p.detach().reshape(-1).to(torch.float32) for p in ps])


def set_flat_params(model: torch.nn.Module, vec: torch.Tensor) -> None:
    """Overwrite every parameter from a flat vector made by :func:`flat_params` (in place).

    Raises :class:`ValueError` if the length does not match :func:`num_params`.
    """
    vec = torch.as_tensor(vec).reshape(-1)
    n = num_params(model)
    if vec.numel() != n:
        raise ValueError(f"flat vector has {vec.numel()} elements, the model has {n} parameters")
    off = 0
    with torch.no_grad():
        for p in _params(model):
            k = p.numel()
            p.copy_(vec[off : off + k].view_as(p).to(p.dtype))
            off += k


def _dense_grad(p: torch.nn.Parameter) -> torch.Tensor:
    g = p.grad
    if g is None:
        return torch.zeros(p.numel(), dtype=torch.float32, device=p.device)
    if g.is_sparse:
        g = g.coalesce().to_dense()
    return g.reshape(-1).to(torch.float32)


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    """All gradients as one dense flat float32 vector; a missing grad (``None``) counts as zero.

    Sparse gradients are coalesced and densified, so the result equals the dense gradient.  The
    vector is on the model's device (:func:`spotwise.workloads.device.to_host` ships it).
    """
    ps = _params(model)
    if not ps:
        return torch.zeros(0)
    return torch.cat([_dense_grad(p) for p in ps])


def zero_grad(model: torch.nn.Module) -> None:
    """Drop all gradients (``set_to_none``), which also resets sparse gradients cleanly."""
    for p in _params(model):
        p.grad = None


def apply_flat_grad(model: torch.nn.Module, grad: torch.Tensor, lr: float) -> None:
    """Plain SGD with an aggregated flat gradient: ``theta <- theta - lr * grad`` (in place).

    ``grad`` has the layout of :func:`flat_grad` (typically the average over workers).
    """
    grad = torch.as_tensor(grad).reshape(-1)
    n = num_params(model)
    if grad.numel() != n:
        raise ValueError(f"flat gradient has {grad.numel()} elements, the model has {n} parameters")
    off = 0
    with torch.no_grad():
        for p in _params(model):
            k = p.numel()
            p.add_(grad[off : off + k].view_as(p).to(p.dtype), alpha=-float(lr))
            off += k


def sparse_grad_parts(model: torch.nn.Module) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """The sparse gradients as ``(param_index, rows, values)`` with ``rows`` unique and sorted.

    ``param_index`` indexes ``list(model.parameters())``; ``values[i]`` is the gradient of row
    ``rows[i]`` of that (2-D) parameter.  Dense gradients are not included.
    """
    parts = []
    for i, p in enumerate(_params(model)):
        g = p.grad
        if g is not None and g.is_sparse:
            g = g.coalesce()
            parts.append((i, g.indices()[0].clone(), g.values().clone()))
    return parts


def apply_sparse_sgd(model: torch.nn.Module, parts: list[tuple[int, torch.Tensor, torch.Tensor]], lr: float) -> None:
    """Apply ``theta[rows] -= lr * values`` for each part from :func:`sparse_grad_parts` (rows may repeat across parts)."""
    ps = _params(model)
    with torch.no_grad():
        for i, rows, values in parts:
            ps[i].index_add_(0, rows, values.to(ps[i].dtype), alpha=-float(lr))


def flat_grad_sparse(model: torch.nn.Module) -> "SparseUpdate":
    """All gradients as a :class:`~spotwise.planes.serverless.significance.SparseUpdate` over the flat layout.

    The same numbers as :func:`flat_grad` without densifying: a dense parameter contributes all
    its entries, a sparse (embedding) gradient only the rows it touches (duplicates summed), and a
    missing gradient nothing.  ``flat_grad_sparse(m).to_dense() == flat_grad(m)``; the payload is
    what paper 004 ships ("sparse gradients", ``papers/004_9dc2adb66dc8d26e.txt`` Sec. 1).  Its
    arrays are on the host, whatever the model's device.
    """
    import numpy as np

    from spotwise.planes.serverless.significance import SparseUpdate

    idx_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    off = 0
    for p in _params(model):
        k = p.numel()
        g = p.grad
        if g is not None:
            if g.is_sparse:
                g = g.coalesce()
                rows = to_host(g.indices()[0]).astype(np.int64)
                width = k // p.shape[0] if p.dim() else 1
                vals = g.values().reshape(len(rows), -1)
                cols = np.arange(width, dtype=np.int64)
                idx_parts.append((off + rows[:, None] * width + cols[None, :]).reshape(-1))
                val_parts.append(to_host(vals.to(torch.float64)).reshape(-1))
            else:
                idx_parts.append(np.arange(off, off + k, dtype=np.int64))
                val_parts.append(to_host(g.reshape(-1).to(torch.float64)))
        off += k
    if not idx_parts:
        return SparseUpdate(np.zeros(0, np.int64), np.zeros(0), off)
    return SparseUpdate(np.concatenate(idx_parts), np.concatenate(val_parts), off)
