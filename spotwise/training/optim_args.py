"""The types of a ``torch.optim`` class's constructor arguments, checked before the class sees them
(issue 54 item 9: ``foreach: "yes"`` planned with exit 0 -- torch.optim takes any truthy value as
true, and ``betas: [0.9]`` raised an IndexError inside Adam).

:func:`check_optimizer_kwargs` reads the class's own signature: each argument's annotation
(``bool``, ``float``, ``int``, ``bool | None``, ``tuple[float, float]``, ``str | None``...) and, where
there is none, its default's type.  A bool option must be a bool, a number a finite number (not a
bool), an ``int`` a whole number, a tuple a list of that many such values.  An annotation it does
not know (a callable, a tensor-only type) is left to the class.  Anything else is an
:class:`~spotwise.errors.InputError` naming ``optimizer.KEY`` and what the value must be.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from typing import Any

from spotwise.errors import InputError

_UNKNOWN = object()  # an annotation this module does not judge


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _judge(value: Any, tp: Any) -> bool | object:
    """True / False when ``value`` fits / does not fit ``tp``; :data:`_UNKNOWN` for a type not judged here."""
    if tp is bool:
        return isinstance(value, bool)
    if tp is float:
        return _is_number(value)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_judge(value, a) for a in typing.get_args(tp)]
        if any(v is True for v in verdicts):
            return True
        return _UNKNOWN if any(v is _UNKNOWN for v in verdicts) else False
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            verdicts = [_judge(v, args[0]) for v in value]
        elif len(args) != len(value):
            return False
        else:
            verdicts = [_judge(v, a) for v, a in zip(value, args)]
        if any(v is False for v in verdicts):
            return False
        return True if all(v is True for v in verdicts) else _UNKNOWN
    try:
        import torch

        if tp is torch.Tensor:  # a spec holds no tensors: a union's other members decide
            return False
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return _UNKNOWN


def _by_default(value: Any, default: Any) -> bool | object:
    """Where a parameter has no annotation: its default's type (bool, number, tuple of numbers)."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return _is_number(value)
    if isinstance(default, tuple) and all(_is_number(d) for d in default):
        return isinstance(value, tuple) and len(value) == len(default) and all(_is_number(v) for v in value)
    return _UNKNOWN


def _describe(tp: Any, default: Any) -> str:
    if tp is inspect.Parameter.empty:
        if isinstance(default, bool):
            return "true or false"
        if isinstance(default, tuple):
            return f"a list of {len(default)} numbers, e.g. {list(default)}"
        return "a finite number"
    if typing.get_origin(tp) is tuple and Ellipsis not in typing.get_args(tp):
        return f"a list of {len(typing.get_args(tp))} numbers" + (f", e.g. {list(default)}" if isinstance(default, tuple) else "")
    text = str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "").replace("torch.Tensor | ", "") \
        .replace(" | torch.Tensor", "").replace("NoneType", "None")
    return {"bool": "true or false", "bool | None": "true, false or null", "str | None": "a name or null", "float": "a finite number",
            "int": "a whole number"}.get(text, text)


def check_optimizer_kwargs(klass: Any, name: str, kwargs: dict[str, Any], where: str = "optimizer") -> None:
    """Every value of ``kwargs`` against the type ``klass.__init__`` declares for it; InputError naming
    ``{where}.{key}``.  Arguments the signature does not name are left to the caller's name check."""
    try:
        sig = inspect.signature(klass.__init__)
    except (TypeError, ValueError):
        return
    try:
        hints = typing.get_type_hints(klass.__init__)
    except Exception:  # noqa: BLE001 -- a string annotation that does not resolve: judge by the signature's
        hints = {}
    for key, value in kwargs.items():
        param = sig.parameters.get(key)
        if param is None or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        tp = hints.get(key, param.annotation)
        verdict = _judge(value, tp) if tp is not inspect.Parameter.empty else _UNKNOWN
        if verdict is _UNKNOWN and param.default is not inspect.Parameter.empty:
            verdict = _by_default(value, param.default)
        if verdict is False:
            shown = list(value) if isinstance(value, tuple) else value
            raise InputError(f"{name}'s {key} must be {_describe(tp, param.default)}, got {shown!r:.200}",
                             f"write e.g. {key}: {_example(param.default, tp)} under workload.optimizer", f"{where}.{key}")


def _example(default: Any, tp: Any) -> str:
    if isinstance(default, bool):
        return "true" if not default else "false"
    if isinstance(default, tuple):
        return str(list(default))
    if default is None and _judge(True, tp) is True:
        return "true"
    return repr(default) if default is not inspect.Parameter.empty and default is not None else "<a value>"


__all__ = ["check_optimizer_kwargs"]
