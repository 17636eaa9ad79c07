"""Counting a step's reads from the device (issue 40 item 2: a step reads the device once)."""

from __future__ import annotations

import pytest
import torch

#: the Tensor methods that copy a value to the host and wait for the device
READS = ("item", "tolist", "__float__", "__bool__", "__int__")


def count_device_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Patch :data:`READS` to count their calls in the returned ``{"n": ...}`` (undone with the monkeypatch)."""
    reads = {"n": 0}
    for name in READS:
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, **k):  # type: ignore[no-untyped-def]
            reads["n"] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads
