"""The ``--json`` contract of the command line (DESIGN.md): a command run with ``--json`` prints exactly one
JSON object on stdout; everything else it, Ray or user code prints goes to stderr."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any, Iterator

#: where print_json writes while a ``--json`` command runs (the real stdout, set aside)
_json_out: list[Any] = []


@contextlib.contextmanager
def json_stdout(enabled: bool) -> Iterator[None]:
    """While a ``--json`` command runs, everything but :func:`print_json` goes to stderr.

    Ray's raylet warnings, user code's ``print``/``os.write(1, ...)`` and child processes that
    inherit fd 1 would otherwise land in the middle of the JSON.  When stdout is a real file
    descriptor it is duplicated away, fd 1 is pointed at stderr (``os.dup2``) and the JSON is
    written to the saved descriptor.  fd 1 is restored afterwards, except when Ray was started
    during the command: its log threads keep printing until the process exits, so fd 1 stays on
    stderr (the CLI process ends right after).  Where stdout has no descriptor (an in-process test
    runner), ``sys.stdout`` is swapped for ``sys.stderr`` instead.  Disabled: does nothing.
    """
    if not enabled or _json_out:
        yield
        return
    real = sys.stdout
    try:
        fd: int | None = real.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    try:
        err_fd: int | None = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        err_fd = None
    if fd is None or err_fd is None:
        sys.stdout = sys.stderr
        _json_out.append(real)
        try:
            yield
        finally:
            _json_out.clear()
            sys.stdout = real
        return
    real.flush()
    saved = os.dup(fd)
    out = os.fdopen(saved, "w", encoding="utf-8", closefd=True)
    ray_before = _ray_running()
    os.dup2(err_fd, fd)
    _json_out.append(out)
    try:
        yield
    finally:
        _json_out.clear()
        sys.stdout.flush()
        out.flush()
        if ray_before or not _ray_running():
            os.dup2(out.fileno(), fd)
        out.close()


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:  # noqa: BLE001 - a half-imported Ray counts as not running
        return False


def print_json(obj: Any) -> None:
    """The one JSON object of a ``--json`` command, on stdout (the real one, see :func:`json_stdout`)."""
    from spotwise.reports.finite_json import dumps_finite

    text = dumps_finite(obj, what="--json output", indent=2, default=str)  # NaN/Infinity: an internal error, never printed
    stream = _json_out[0] if _json_out else sys.stdout
    stream.write(text + "\n")
    stream.flush()
