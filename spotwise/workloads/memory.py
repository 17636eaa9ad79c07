"""Estimating a built-in workload's memory before allocating it (issue 30 item 12).

``workload.params`` size the data and the model (``n_users``, ``hash_buckets``, ``n_embd``,
``corpus_bytes``, ...).  A value a few orders of magnitude too large used to end in a
``MemoryError`` (exit 1), the kernel's OOM killer, or a generator that runs for hours.  Each
builder now calls :func:`check_memory` with a rough estimate (data, plus :data:`MODEL_COPIES` copies
of the float32 parameters: the model, its flat vector, the gradient, the optimizer state) before
it allocates anything; an estimate above this machine's memory (:func:`machine_bytes`) is an
:class:`~spotwise.errors.InputError` (exit 2) giving both figures.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from spotwise.errors import InputError

#: float32 parameter copies a training process holds (model, flat vector, gradient, optimizer state)
MODEL_COPIES = 4
_GB = 1e9


def machine_bytes() -> int | None:
    """This machine's memory: its physical memory, or a smaller cgroup (container) limit; ``None`` if unknown.

    The total, not what is free right now: a workload that fits the machine is never refused because
    other processes happen to hold memory at the moment (that would make runs flaky)."""
    total: int | None = None
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file, encoding="ascii") as fh:
                raw = fh.read().strip()
        except OSError:
            continue
        if raw.isdigit() and (total is None or 0 < int(raw) < total):
            total = int(raw)
    return total


def _num(v: Any) -> str:
    """``100000000`` -> ``1e8`` (as a person writes it in a spec); small values unchanged."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, int) and abs(v) < 1_000_000):
        return str(v)
    text = f"{v:g}"
    mant, _, exp = text.partition("e")
    return f"{mant}e{int(exp)}" if exp else text


def check_memory(need_bytes: float, params: Mapping[str, Any], keys: tuple[str, ...], given: Mapping[str, Any] | None,
                 workload: str) -> None:
    """InputError when ``need_bytes`` exceeds :func:`machine_bytes`.

    The message names the size parameters among ``keys`` the spec set (``given``; all of ``keys`` when it
    set none), e.g. ``n_users 1e+08 needs ~54 GB of memory ...; this machine has 24 GB``.
    """
    have = machine_bytes()
    if have is None or need_bytes <= have:
        return
    named = [k for k in keys if given and k in given] or list(keys)
    what = ", ".join(f"{k} {_num(params[k])}" for k in named)
    verb = "needs" if len(named) == 1 else "need"
    raise InputError(f"{what} {verb} ~{need_bytes / _GB:,.1f} GB of memory for the {workload!r} workload's data and model; "
                     f"this machine has {have / _GB:,.1f} GB",
                     "use smaller sizes (the defaults fit a laptop), or run on a machine with more memory",
                     "workload.params")


def pmf_bytes(p: Mapping[str, Any]) -> float:
    """The generated ``pmf`` workload: popularity and factor arrays, the ratings, the embedding model."""
    rows = float(p["n_users"]) + float(p["n_items"])
    ratings = min(float(p["n_ratings"]), float(p["n_users"]) * float(p["n_items"]))
    true_rank = float(p["true_rank"] or p["rank"])
    return rows * (48.0 + 8.0 * true_rank) + 80.0 * ratings + MODEL_COPIES * 4.0 * rows * (float(p["rank"]) + 1.0)


def sparse_logreg_bytes(p: Mapping[str, Any], generated: bool) -> float:
    """``sparse-logreg``: ~1.2 kB a generated sample (13 counts, 26 categoricals, their hashes and
    transforms), the hidden weights of the generator and the model (one weight a bucket)."""
    buckets = float(p["hash_buckets"])
    data = 1200.0 * float(p["n_samples"]) + 24.0 * buckets if generated else 0.0
    return data + MODEL_COPIES * 4.0 * buckets


def gpt_bytes(p: Mapping[str, Any], batch_size: int, generated: bool) -> float:
    """``gpt-bytes``: the model (~12 L E^2 parameters), a batch's activations and the built-in corpus."""
    layers, embd, block = float(p["n_layer"]), float(p["n_embd"]), float(p["block_size"])
    n_params = 12.0 * layers * embd * embd + (256.0 + block) * embd
    activations = 4.0 * 20.0 * max(1, batch_size) * block * embd * layers
    corpus = 3.0 * float(p["corpus_bytes"]) if generated else 0.0
    return MODEL_COPIES * 4.0 * n_params + activations + corpus


def resnet_bytes(n_params: int, width: int, batch_size: int) -> float:
    """``resnet18-cifar``: the model and the first stage's activations (32 x 32 x width floats a sample,
    a few kept for the backward pass) of a batch or an evaluation chunk of 512."""
    return MODEL_COPIES * 4.0 * float(n_params) + 4.0 * 8.0 * max(512, batch_size) * float(width) * 1024.0


__all__ = ["MODEL_COPIES", "check_memory", "gpt_bytes", "machine_bytes", "pmf_bytes", "resnet_bytes", "sparse_logreg_bytes"]
