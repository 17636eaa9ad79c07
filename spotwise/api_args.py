"""Type checks of the Python API's arguments (issue 30 item 13, issue 38).

``spotwise.plan(spec, traces="file.json")`` used to iterate the string's characters and read ``f``,
``i``, ... ``/`` (walking the whole filesystem).  Every API function taking a list of paths or names
goes through :func:`path_list` / :func:`name_list`: one path (``str`` or ``os.PathLike``) is a list
of one, a list/tuple of them is taken as is, anything else -- a number, bytes, a dict, a list
holding a non-path -- is an :class:`~spotwise.errors.InputError` naming the argument.

Every other argument of :func:`spotwise.plan`, :func:`~spotwise.run`, :func:`~spotwise.simulate`,
:func:`~spotwise.sweep` and :func:`~spotwise.report` goes through :func:`bool_arg`, :func:`int_arg`,
:func:`number_arg`, :func:`str_arg` or :func:`duration_arg` before anything runs, so a wrong type
(``pilot_steps="10"``, ``overwrite="no"``, ``max_runs=True``) or value (NaN, infinity, a negative
number) is an InputError naming the argument (and its command-line flag), never a ``TypeError``
deep inside.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any

from spotwise.errors import InputError


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return type(value).__name__
    return f"{type(value).__name__} {text[:60]}"


def _one_path(value: Any, where: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise InputError(f"expected a path (str or os.PathLike), got {_show(value)}",
                         "pass a path as a str or a pathlib.Path", where)
    if not value.strip():
        raise InputError("an empty path", "pass the path of an existing file or folder", where)
    return value


def path_arg(value: Any, name: str) -> str | None:
    """``None`` or one path (``str`` / ``os.PathLike``) as a ``str``; InputError for any other type."""
    return None if value is None else _one_path(value, name)


def _items(value: Any, name: str, what: str, example: str) -> list[Any]:
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"expected {what} or a list of them, got {_show(value)}",
                         f"pass e.g. {example}", name)
    return list(value)


def path_list(value: Any, name: str, example: str = "'a.json'") -> list[str]:
    """``value`` -- ``None``, one path, or a list/tuple of paths -- as a list of ``str`` paths.

    A single ``str`` is ONE path, never a sequence of one-character paths; InputError (naming
    ``name`` and the offending item) for any other type."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [_one_path(value, name)]
    items = _items(value, name, "a path (str or os.PathLike)", f"{name}={example} or {name}=[{example}, ...]")
    return [_one_path(v, f"{name}[{i}]") for i, v in enumerate(items)]


def name_list(value: Any, name: str, example: str) -> list[str]:
    """``value`` -- ``None``, one name, or a list/tuple of names (instance types, ``KIND=FILE``) -- as a list of ``str``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = _items(value, name, "a string", example)
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise InputError(f"expected a string, got {_show(v)}", f"pass e.g. {example}", f"{name}[{i}]")
    return items


#: the API arguments that are also command-line flags (the same name with dashes): messages name both
_FLAGS = frozenset({"all_zones", "autoscale", "compare_on_demand", "deadline_hours", "emulate_network_mbps", "hindsight",
                    "history", "horizon", "install", "max_runs", "metadata_url", "notice_source", "objective", "overwrite",
                    "pilot_steps", "ray_address", "redis_url", "restart", "resume", "spec_market", "spot_price", "starts",
                    "train_size", "trust_code", "work_hours", "allow_changes"})


def _where(name: str) -> str:
    return f"{name} (--{name.replace('_', '-')})" if name in _FLAGS else name


def bool_arg(value: Any, name: str, allow_none: bool = False) -> bool | None:
    """``value`` when it is a ``bool`` (or ``None`` with ``allow_none``); InputError naming ``name`` otherwise
    (``"no"`` and ``0`` are refused: a string is always true, and 0/1 hide a mistaken argument)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise InputError(f"expected True or False, got {_show(value)}", f"pass {name}=True or {name}=False", _where(name))
    return value


def int_arg(value: Any, name: str, lo: int | None = None, allow_none: bool = False, example: str = "") -> int | None:
    """``value`` as an ``int`` when it is an integer (not a bool, not a float, not a string) ``>= lo``."""
    if value is None and allow_none:
        return None
    hint = f"pass an integer, e.g. {name}={example or (lo if lo is not None else 1)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"expected an integer, got {_show(value)}", hint, _where(name))
    if lo is not None and int(value) < lo:
        raise InputError(f"must be an integer >= {lo}, got {int(value)}", hint, _where(name))
    return int(value)


def number_arg(value: Any, name: str, lo: float = 0.0, *, strict: bool = False, allow_none: bool = False,
               example: str = "1.0") -> float | None:
    """``value`` as a finite ``float`` ``>= lo`` (``> lo`` with ``strict``); InputError for a bool, a
    string, NaN or infinity."""
    if value is None and allow_none:
        return None
    hint = f"pass a number, e.g. {name}={example}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"expected a number, got {_show(value)}", hint, _where(name))
    try:
        f = float(value)
    except (OverflowError, ValueError):
        f = math.inf
    if not math.isfinite(f):
        raise InputError(f"must be a finite number, got {value!r}", hint, _where(name))
    if f < lo or (strict and f == lo):
        raise InputError(f"must be {'>' if strict else '>='} {lo:g}, got {value!r}", hint, _where(name))
    return f


def str_arg(value: Any, name: str, choices: tuple[str, ...] = (), allow_none: bool = False, example: str = "") -> str | None:
    """``value`` when it is a ``str`` (one of ``choices`` when given); InputError otherwise."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        hint = f"pass one of {', '.join(map(repr, choices))}" if choices else f"pass a string, e.g. {name}={example!r}"
        raise InputError(f"expected a string, got {_show(value)}", hint, _where(name))
    if choices and value not in choices:
        raise InputError(f"unknown value {value!r}", f"pass one of {', '.join(map(repr, choices))}", _where(name))
    return value


def duration_arg(value: Any, name: str, example: str = "6h") -> str | float:
    """A duration: a string such as ``"6h"`` (parsed by the caller) or a finite number of seconds ``>= 0``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"expected a duration, got {_show(value)}",
                         f"pass seconds or a string such as {name}={example!r}", _where(name))
    f = number_arg(value, name, 0.0, example=example)
    assert f is not None
    return f


def callable_arg(value: Any, name: str, allow_none: bool = True) -> Any:
    """``value`` when it is callable (or ``None``); InputError otherwise."""
    if value is None and allow_none:
        return None
    if not callable(value):
        raise InputError(f"expected a function, got {_show(value)}", f"pass a function or None as {name}", name)
    return value


__all__ = ["bool_arg", "callable_arg", "duration_arg", "int_arg", "name_list", "number_arg", "path_arg", "path_list",
           "str_arg"]
