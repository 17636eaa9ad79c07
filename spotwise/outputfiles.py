"""Checks on the single output files a command writes (``--plot``, ``--write-spec``).

A path the user names is refused (:class:`~spotwise.errors.InputError`, exit 2) before any work
starts when it cannot be written: it is a directory, its folder does not exist, or the folder is
not writable.  Writing itself goes through :func:`write_output_text`, which turns the operating
system's refusal (a full disk, a permission change meanwhile) into the same kind of error.
"""

from __future__ import annotations

import os
from pathlib import Path

from spotwise.errors import InputError


def check_output_file(path: str | Path, flag: str) -> Path:
    """Return ``path`` if a file can be written there; else raise InputError naming ``flag``."""
    p = Path(path)
    if p.is_dir():
        raise InputError("is a directory", f"give {flag} a file name, e.g. {p / ('out' + (p.suffix or '.png'))}", f"{flag} {p}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"its folder {parent} does not exist", "create the folder first, or write the file elsewhere", f"{flag} {p}")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError("cannot be written (permission denied)", "choose a file in a folder you can write to", f"{flag} {p}")
    return p


def write_output_text(path: str | Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` (checked with :func:`check_output_file`); OS errors become InputError."""
    p = check_output_file(path, flag)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"could not be written: {e.strerror or e}", "free space or choose another file", f"{flag} {p}") from None
