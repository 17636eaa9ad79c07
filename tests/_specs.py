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
