"""What a regroup moves when some parameters are frozen (issue 41 item 3).

A member's flat vector holds every parameter, frozen ones included; only the parameters that require
a gradient and the float buffers change in training (:attr:`~spotwise.training.state.FlatModel.moving`).
The frozen ones -- a pretrained backbone, LoRA's base weights -- are built by every process itself
(from the same seed or file), so a regroup broadcasts the moving part only and replica offers carry
only it.  A member whose frozen parameters differ (built another way: an unseeded initialisation) is
found by comparing two float64 sums over them with the source's, computed on the device, and the
regroup then moves the whole vector.
"""

from __future__ import annotations

from typing import Any

import torch


def whole_state_needed(g: Any, fm: Any, is_source: bool, source: int) -> bool:
    """Whether the regroup over ``g`` must broadcast ``fm``'s whole flat vector: nothing is frozen, or
    some member's frozen parameters differ from the source's.  Every member calls it (two small
    collectives, only when something is frozen); every member gets the same answer."""
    if fm.M == fm.flat.numel():
        return True
    own = fm.frozen_fingerprint()
    ref = own.clone() if is_source else torch.zeros_like(own)
    g.broadcast(ref, source)
    differs = torch.tensor([0.0 if torch.equal(own, ref) else 1.0], dtype=torch.float32, device=fm.flat.device)
    g.allreduce(differs)
    return bool(float(differs[0]) > 0)


__all__ = ["whole_state_needed"]
