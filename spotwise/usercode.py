"""The traceback of user code (a ``module:function`` workload, a ``module:Class`` policy), without
spotwise's own leading frames: what the CLI prints above the one-line exit-2 message.

Also the checks on code references: their syntax (:func:`is_code_reference`) and the modules they may
never name (:func:`refuse_unsafe_reference`).  The spec (:mod:`spotwise.config`) validates its references
here, so this module never imports it; whether a resumed run may import the code its recorded spec
names is :mod:`spotwise.spec.trust`'s.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

_SPOTWISE_DIR = str(Path(__file__).resolve().parent)
#: an explicit traceback limit: ``None`` would mean ``sys.tracebacklimit``, which other code may set
_ALL_FRAMES = 1 << 20


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without the leading frames that belong to spotwise itself."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SPOTWISE_DIR):
        tb = tb.tb_next
    # every frame, whatever a library left in sys.tracebacklimit (SkyPilot sets it to 0 when it raises)
    return "".join(traceback.format_exception(type(exc), exc, tb, limit=_ALL_FRAMES))


#: top-level modules a code reference may never name: the standard library and builtins
#: (``os:system``, ``subprocess:run``, ``builtins:eval`` would run arbitrary commands from a spec)
FORBIDDEN_MODULES = frozenset(sys.stdlib_module_names) | {"builtins", "__main__"}


def refuse_unsafe_reference(ref: str, what: str, where: str) -> None:
    """Refuse a ``module:name`` reference (``what``: "workload", "policy", "optimizer") whose module is
    in the standard library or builtins, or any of whose parts is a dunder / name-mangled name.

    Raises :class:`~spotwise.errors.InputError` (exit 2) at ``where``; the syntax itself is the caller's.
    """
    from spotwise.errors import InputError

    mod, _, attr = str(ref).partition(":")
    parts = [p for p in mod.split(".") + [attr] if p]
    if any(p.startswith("__") for p in parts):
        raise InputError(f"{what} reference {ref!r} names a dunder or private (__...) attribute",
                         f"name your own {what} as 'package.module:Name' without '__' parts", where)
    top = mod.split(".")[0]
    if top in FORBIDDEN_MODULES:
        raise InputError(f"{what} reference {ref!r} names the standard-library module {top!r}; spotwise imports only your "
                         "own code there", f"write your {what} in a module of your own and name it as "
                         "'package.module:Name' (see docs, 'Security')", where)


def is_code_reference(text: object) -> bool:
    """Whether ``text`` reads as a code reference, ``package.module:Name`` -- what spotwise imports for a
    workload, an optimizer or a policy -- read leniently (blanks around it, a dotted ``Name``), so that
    :mod:`spotwise.spec.trust` counts every value an importer could take.  A colon alone is not one:
    ``V100:1``, ``s3://bucket``, ``10:30:00``, ``host:8080``, ``C:\\data``."""
    if not isinstance(text, str) or ":" not in text:
        return False
    mod, _, attr = text.strip().partition(":")
    return all(p.isidentifier() for p in mod.split(".")) and all(p.isidentifier() for p in attr.split("."))
