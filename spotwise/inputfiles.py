"""Reading user-named input files (specs, catalogs, traces) safely.

A path a user passes may name anything: ``/dev/zero`` (endless), a FIFO (blocks until someone
writes), a terminal, or a multi-gigabyte dump.  :func:`read_input_bytes` refuses everything but
regular files and reads at most :func:`max_input_bytes` bytes, so a wrong path costs an error
message, not the machine's memory.  The cap defaults to :data:`DEFAULT_MAX_FILE_MB` MiB per file
and can be raised with the environment variable :data:`MAX_FILE_ENV` (in MiB, may be fractional).

Every failure raises :class:`~spotwise.errors.InputError` naming the file and saying how to fix it.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from spotwise.envvars import env_number
from spotwise.errors import InputError

#: environment variable holding the per-file size cap in MiB
MAX_FILE_ENV = "SPOTWISE_MAX_FILE_MB"
#: default per-file cap (MiB): far above any real trace or spec, far below what parsing can afford
DEFAULT_MAX_FILE_MB = 256.0

_MIB = 1024 * 1024


def max_input_bytes() -> int:
    """The per-file cap in bytes: ``$SPOTWISE_MAX_FILE_MB`` MiB, else :data:`DEFAULT_MAX_FILE_MB`.

    Raises :class:`InputError` when the variable is set but is not a number within its range
    (:data:`spotwise.envvars.NUMERIC_ENV`).
    """
    return max(1, int(env_number(MAX_FILE_ENV) * _MIB))  # InputError naming the allowed range


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input_file(path: str | Path, what: str = "file", where: str | None = None, *,
                     folder_ok: bool = False, capped: bool = True) -> Path:
    """``path`` checked without opening it (a FIFO is never opened, so nothing blocks): it exists, is a
    regular file (a folder too with ``folder_ok``; a symbolic link counts as what it points at), is
    readable and, with ``capped``, holds at most :func:`max_input_bytes` bytes.

    ``what`` names the file in messages ("requirements file"); ``where`` is the error's place (a spec
    field such as ``workload.requirements``; default: the path itself, else the path is named in the
    message).  Raises :class:`InputError` saying how to fix it; returns the path.
    """
    p = Path(path)
    at = where or str(p)
    named = "" if where is None else f"{str(p)!r:.300} "
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{named}does not exist (expected a {what})" if named else f"{what} not found",
                         "check the path (relative paths are taken from the "
                         + ("spec's folder)" if where else "current directory)"), at) from None
    except OSError as exc:
        raise InputError(f"{named}cannot access the {what} ({exc.strerror or exc.__class__.__name__})",
                         "check the path and its permissions", at) from None
    if stat.S_ISDIR(st.st_mode):
        if not folder_ok:
            raise InputError(f"{named}is a directory, expected a {what}", f"name a {what} inside it", at)
    elif not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise InputError(f"{named}not a regular file ({kind})" if kind != "not a regular file" else f"{named}not a regular file",
                         f"pass a {what} on disk; devices, pipes and sockets are not read", at)
    elif capped:
        cap = max_input_bytes()
        if st.st_size > cap:
            raise _too_big(what, cap, at, named)
    if not os.access(p, os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)):
        raise InputError(f"{named}cannot read the {what} (permission denied)", "check its permissions", at)
    return p


def _too_big(what: str, cap: int, where: str, named: str = "") -> InputError:
    return InputError(
        f"{named}the {what} is larger than the {cap / _MIB:g} MiB that spotwise reads per file",
        f"pass a smaller file, or raise the cap with {MAX_FILE_ENV}=<MiB> (e.g. {MAX_FILE_ENV}={max(1024, 4 * math.ceil(cap / _MIB))})",
        where,
    )


def read_input_bytes(path: str | Path, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (``what`` names it in messages, e.g. "trace file").

    Raises :class:`InputError` when the path does not exist, is a directory, is not a regular
    file (device, FIFO, socket: refused *before* opening, so nothing blocks or streams forever),
    cannot be read, or is larger than :func:`max_input_bytes` (the message says how to raise it):
    :func:`check_input_file`, then the read itself bounded by the cap.
    """
    p = check_input_file(path, what)
    where = str(p)
    cap = max_input_bytes()
    too_big = _too_big(what, cap, where)
    try:
        # O_NONBLOCK: should the path have been swapped for a FIFO since stat(), open() still returns
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror or exc.__class__.__name__})", "check its permissions", where) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("not a regular file", f"pass a {what} on disk; devices, pipes and sockets are not read", where)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            except OSError as exc:
                raise InputError(f"cannot read the {what} ({exc.strerror or exc.__class__.__name__})", "check the file", where) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while we read it
                raise too_big
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_input_text(path: str | Path, what: str = "file", fix: str | None = None) -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (a leading BOM is dropped).

    Raises :class:`InputError` as :func:`read_input_bytes` does, and for bytes that are not UTF-8
    text (``fix`` overrides the default hint).
    """
    raw = read_input_bytes(path, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not a UTF-8 text file (undecodable byte at offset {exc.start})",
                         fix or f"pass a text {what}, not a binary file", str(path)) from None
    return text.lstrip("\ufeff")


__all__ = ["DEFAULT_MAX_FILE_MB", "MAX_FILE_ENV", "check_input_file", "max_input_bytes", "read_input_bytes", "read_input_text"]
