"""The user loop's side of ``torch.amp.GradScaler`` (:meth:`spotwise.elastic.job.ElasticOptimizer.step`):
what the scaler hands the job's optimizer, and the scale update every member makes alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class AmpStep:
    """What ``torch.amp.GradScaler.step`` hands the job's optimizer (PyTorch's amp-scaling protocol for
    optimizers that handle the scale themselves, ``_step_supports_amp_scaling``): instead of reading
    ``found_inf`` on the host and stepping only when it is 0, the scaler leaves the decision to the
    step, which folds it into the commit's one read.

    ``found_inf``: a device tensor, > 0 when a gradient is not finite (the step then updates nothing,
    on every member, as the scaler would skip it); ``grad_scale``: the scale the gradients still carry
    (``None`` when the script called ``scaler.unscale_`` first, e.g. to clip).  (The losses given to
    ``job.backward`` are unscaled as they are taken, by the scale of that moment.)"""

    found_inf: torch.Tensor
    grad_scale: torch.Tensor | None
    #: set by the commit: whether the step was skipped on every member (a gradient not finite anywhere)
    skipped: bool = False


def agree_found_inf(scaler: Any, optimizer: Any, found: bool) -> None:
    """Set the non-finite flags ``scaler.update()`` reads for ``optimizer``'s step to the job's decision:
    the commit's (a skip on one member is a skip on all), and none for a dropped step (nothing was
    applied; its retry sees its own overflow).  Every member then moves its scale alike -- a member
    whose own flags differed (a step dropped half-way through the gradient all-reduce) would otherwise
    scale its next gradients differently from the others'.  On the device: no read."""
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer))
    flags = list((state or {}).get("found_inf_per_device", {}).values())
    for i, t in enumerate(flags):
        t.fill_(1.0 if found and i == 0 else 0.0)
