"""Test helper shared by the checkpoint-file tests (``test_rundir_safety.py``, ``test_hardening_checkpoints.py``):
a checkpoint state as spotwise writes one -- every record present and well-formed
(:mod:`spotwise.control.checkpoint_records`) -- for tests of the files around it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import torch


#: a breakdown of no money spent
NO_MONEY: dict[str, Any] = {"total": 0.0, "by_category": {}, "by_market": {}, "by_instance": {}}


def valid_state(step: int, shape: tuple[int, ...] = (4,), **over: Any) -> dict[str, Any]:
    """A complete checkpoint state of ``step`` whose parameters are ``shape`` (filled with ``step``)."""
    from spotwise.control.phases import PhaseTotals
    from spotwise.control.records import Counters

    counters = {f.name: 0 for f in dataclasses.fields(Counters) if f.name != "recoveries_ms"}
    s: dict[str, Any] = {
        "format": 1, "step": step, "params": torch.full(shape, float(step)), "lr": 0.1, "T": float(step),
        "sampler": {"n": 100, "seed": 0, "epoch": 0, "cursor": 0, "pending": [], "next_id": 0, "committed_in_epoch": 0},
        "dur_rng": json.dumps(np.random.default_rng(0).bit_generator.state), "iter_rng": "", "available": [0, 1],
        "provisioned": 2, "sync": "full", "sync_n": None, "ema_loss": None, "counters": counters,
        "cost": dict(NO_MONEY), "ledger": {"settled": dict(NO_MONEY), "open": []}, "place": ["c5.xlarge", None],
        "worker_market": "spot", "carried": {"last_loss": None, "last_eval": {}, "recoveries_ms": []},
        "plane_carried": {"phases": PhaseTotals().state()},
    }
    s.update(over)
    return s
