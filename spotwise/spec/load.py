"""Turning plain data (parsed YAML/JSON) into validated dataclasses, with field paths in errors.

Used by :mod:`spotwise.config`.  The rules are deliberately strict, because a typo in a spec that
is silently ignored costs real money on a real cloud:

* unknown keys are errors (with a "did you mean" suggestion);
* missing required fields are errors naming the field;
* values are converted only where the conversion is lossless and obvious (an int where a float
  is wanted; a duration string such as ``"2h"`` where seconds are wanted is handled by the
  dataclass itself);
* every error is an :class:`~spotwise.errors.InputError` whose ``where`` is the dotted path of the
  field (``cluster.workers``) and whose text says how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from spotwise.errors import InputError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h|hr|d|day|days)?\s*$")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0,
                 "hr": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0}


def parse_duration(value: object, where: str) -> float:
    """Seconds from a number or a string like ``"90s"``, ``"30m"``, ``"2h"``, ``"1.5d"``."""
    if isinstance(value, bool):
        raise InputError(f"expected a duration, got {value!r}", "write seconds (e.g. 3600) or a string such as '1h' or '30m'", where)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    raise InputError(f"expected a duration, got {value!r}", "write seconds (e.g. 3600) or a string such as '1h', '30m', '90s' or '2d'", where)


def duration_text(seconds: float) -> str | float:
    """A duration as a person writes it in a spec (``"36h"``, ``"2.5d"``, ``"90m"``): days from 48 h, hours from
    1 h, minutes from 1 min, each only when it states the duration exactly to three decimals; else seconds.  :func:`parse_duration` reads it back."""
    for unit, size, least in (("d", 86400.0, 172800.0), ("h", 3600.0, 3600.0), ("m", 60.0, 60.0)):  # days from 48 h
        if seconds >= least and abs(seconds / size - round(seconds / size, 3)) < 1e-9:
            return f"{round(seconds / size, 3):g}{unit}"
    return float(seconds)


#: floats above 2**53 are not exact integers; larger ones are refused where an integer is wanted
_MAX_EXACT_FLOAT_INT = float(2**53)


class Duration(float):
    """Type marker for spec fields holding seconds: accepts ``3600`` or ``"1h"``, ``"30m"``, ``"90s"``, ``"2d"``."""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None))
    if origin is list:
        (inner,) = get_args(tp) or (Any,)
        return f"a list of {_type_name(inner)}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false"}.get(tp, getattr(tp, "__name__", str(tp)))


def convert(tp: Any, value: Any, where: str) -> Any:
    """Convert ``value`` to type ``tp`` or raise InputError naming ``where``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if tp is Duration:
        return parse_duration(value, where)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise InputError(f"must not be empty (expected {_type_name(tp)})", "give it a value or remove the key to use the default", where)
        errors: list[InputError] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(arg, value, where)
            except InputError as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        raise InputError(f"expected {_type_name(tp)}, got {value!r}", "check the value's type", where)
    if origin is Literal:
        allowed = get_args(tp)
        if value in allowed:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"invalid value {value!r}", f"{hint}valid values are {', '.join(repr(a) for a in allowed)}", where)
    if origin is list or origin is tuple:
        if not isinstance(value, list):
            raise InputError(f"expected {_type_name(tp)}, got {value!r}", "write a YAML list, e.g. [a, b]", where)
        (inner,) = get_args(tp)[:1] or (Any,)
        out = [convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return out if origin is list else tuple(out)
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"expected a mapping, got {value!r}", "write key: value pairs", where)
        kt, vt = get_args(tp) or (Any, Any)
        return {convert(kt, k, f"{where}.{k}"): convert(vt, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise InputError(f"expected true or false, got {value!r}", "write true or false", where)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            # a float is taken only where it is exactly a (not astronomically large) whole number:
            # 8.0 -> 8, but 1e300 is not "an integer" a user meant (int(1e300) has 301 digits)
            if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_EXACT_FLOAT_INT:
                return int(value)
            raise InputError(f"expected an integer, got {value!r}", "write a whole number such as 8", where)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"expected a number, got {value!r}", "write a number such as 0.5", where)
        f = float(value)
        if f != f or f in (float("inf"), float("-inf")):
            raise InputError(f"expected a finite number, got {value!r}", "write a finite number", where)
        return f
    if tp is str:
        import datetime as _dt

        if isinstance(value, _dt.datetime):  # YAML reads an unquoted 2020-03-21T23:50:20Z as a timestamp
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InputError(f"expected a string, got {value!r}", "write a plain string", where)
        return str(value)
    if isinstance(value, tp):
        return value
    raise InputError(f"expected {_type_name(tp)}, got {value!r}", "check the value's type", where)


def build(cls: type, data: Any, where: str = "") -> Any:
    """Instantiate dataclass ``cls`` from a mapping, strictly (see module docstring)."""
    label = where or cls.__name__
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping, got {data!r}", "write key: value pairs", label)
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), list(fields), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown field {k!r}", f"{hint}valid fields are {', '.join(sorted(fields))}", label)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        path = f"{where}.{name}" if where else name
        if name in data:
            kwargs[name] = convert(hints[name], data[name], path)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError("required field is missing", f"add '{name}:' to the spec", path)
    try:
        return cls(**kwargs)
    except InputError as e:
        if where:
            e.where = f"{where}.{e.where}" if e.where else where
            e.args = (e.message,)
        raise


def to_plain(obj: Any) -> Any:
    """Dataclasses -> plain dicts/lists (JSON/YAML-serialisable), for echoing a spec back."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj


__all__ = ["Duration", "build", "convert", "parse_duration", "to_plain"]
