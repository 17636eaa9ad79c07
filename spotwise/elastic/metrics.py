"""What ``job.log`` keeps: finite numbers by name (issue 41 item 6)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch


def clean_metrics(metrics: dict[str, Any], warn: Callable[[str], None]) -> dict[str, float]:
    """Finite numbers (0-dim tensors read here) by name; anything else dropped with a warning."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().float().item() if v.numel() == 1 else None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            warn(f"job.log({k}=...) is not a number ({type(v).__name__}): dropped")
            continue
        if not math.isfinite(float(v)):
            warn(f"job.log({k}={v}) is not finite: dropped")
            continue
        out[str(k)] = float(v)
    return out
