"""JSON output that never holds ``NaN`` or ``Infinity``.

Python's :func:`json.dumps` writes ``NaN``/``Infinity`` by default, which is not JSON (strict
parsers such as ``jq`` and JavaScript's ``JSON.parse`` reject it).  Every JSON object spotwise
prints (``--json``) or writes (``sweep.json``) goes through :func:`dumps_finite`: a non-finite
number there is a bug in spotwise -- bad inputs are refused where they enter (the trace loaders
bound prices, the spec validates its numbers) -- so it raises :class:`NonFiniteOutputError`, an
internal error (exit 1) that names the field, instead of emitting invalid JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NonFiniteOutputError", "dumps_finite", "non_finite_fields"]


class NonFiniteOutputError(RuntimeError):
    """A result about to be written as JSON holds ``NaN`` or ``Infinity`` (an internal error)."""


def non_finite_fields(obj: Any, path: str = "$", limit: int = 5) -> list[str]:
    """Paths (``$.strategies[0].mean_cost``) of the first ``limit`` non-finite floats in ``obj``.

    Walks dicts, lists and tuples; other values (strings, ints, ``None``, objects that the
    encoder turns into strings) are finite by definition.
    """
    found: list[str] = []

    def walk(x: Any, p: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(x, float):
            if not math.isfinite(x):
                found.append(f"{p} = {x!r}")
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{p}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{p}[{i}]")
        else:
            try:  # numpy scalars and other float-likes
                import numpy as np

                if isinstance(x, np.floating) and not np.isfinite(x):
                    found.append(f"{p} = {float(x)!r}")
            except ImportError:  # pragma: no cover - numpy is a dependency
                pass

    walk(obj, path)
    return found


def dumps_finite(obj: Any, *, what: str = "output", **kwargs: Any) -> str:
    """``json.dumps(obj, allow_nan=False, **kwargs)``; a non-finite number raises
    :class:`NonFiniteOutputError` naming where it is (``what`` names the document)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        bad = non_finite_fields(obj)
        if not bad:
            raise
        raise NonFiniteOutputError(
            f"the JSON {what} holds non-finite numbers ({', '.join(bad)}); refusing to write invalid JSON") from exc
