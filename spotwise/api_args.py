"""Type checks of the Python API's path and name arguments (issue 30 item 13).

``spotwise.plan(spec, traces="file.json")`` used to iterate the string's characters and read ``f``,
``i``, ... ``/`` (walking the whole filesystem).  Every API function taking a list of paths or names
goes through :func:`path_list` / :func:`name_list`: one path (``str`` or ``os.PathLike``) is a list
of one, a list/tuple of them is taken as is, anything else -- a number, bytes, a dict, a list
holding a non-path -- is an :class:`~spotwise.errors.InputError` naming the argument.
"""

from __future__ import annotations

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


__all__ = ["name_list", "path_arg", "path_list"]
