"""Test helpers shared by the resume-equals-the-uninterrupted-run tests (``test_resume_same_run.py`` for the
VM planes, ``test_serverless_resume.py`` for the serverless plane): the summaries of two run directories,
field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``summary.json`` as ``{"a.b.c": value}`` (floats rounded to 12 digits: written and read back)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = round(v, 12) if isinstance(v, float) else v
    return out


def summary_differences(out: Path, full: Path, may_differ: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """The fields of the two run directories' summaries that differ, but those named in ``may_differ``
    (a name ending in ``.``: every field below it); a field only one of them has always counts."""
    a, b = (flat(json.loads((d / "summary.json").read_text())) for d in (out, full))
    return {k: (a.get(k, "<absent>"), b.get(k, "<absent>")) for k in sorted(set(a) | set(b))
            if (k not in a or k not in b) or (a[k] != b[k] and not any(
                k == m or (m.endswith(".") and k.startswith(m)) for m in may_differ))}
