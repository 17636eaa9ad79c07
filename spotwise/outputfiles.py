"""Checks on the single output files a command writes (``--plot``, ``--write-spec``, ``--emit`` and the files
``--emit`` writes beside its file).

A path the user names is refused (:class:`~spotwise.errors.InputError`, exit 2) before any work
starts when it cannot be written: it is a directory, its folder does not exist, the folder is
not writable, it is a symbolic link (dangling or not: spotwise never writes through a link; remove
the link or name the real file), or it is one of the command's input files
(:func:`refuse_inputs`: the spec being planned, a trace, a catalog...).  Writing itself goes through
:func:`write_output_text`: a temp file created ``O_EXCL | O_NOFOLLOW`` in the same folder, renamed
over the name (:func:`spotwise.rundir_files.write_run_bytes`), so a link put there after the check is
replaced, never followed; the operating system's refusal (a full disk, a permission change
meanwhile) becomes the same kind of error.  :func:`yaml_comment` writes a YAML comment that stays
one comment whatever the text holds; :func:`python_comment` is the same for Python source (``spotwise eject``'s
``train.py``), where ``#`` starts a comment too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from spotwise.errors import InputError


def check_output_file(path: str | Path, flag: str) -> Path:
    """Return ``path`` if a file can be written there; else raise InputError naming ``flag``."""
    p = Path(path)
    if p.is_symlink():
        raise InputError(f"is a symbolic link{'' if p.exists() else ' (dangling)'}; spotwise never writes through a link",
                         f"remove the link or give {flag} the real file's path", f"{flag} {p}")
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
    write_output_bytes(path, text.encode("utf-8"), flag)


def write_output_bytes(path: str | Path, data: bytes, flag: str) -> None:
    """Write ``data`` to ``path`` (checked with :func:`check_output_file`) through a temp file and a rename, so a
    link planted at ``path`` after the check is replaced, never written through; OS errors become InputError."""
    from spotwise.rundir_files import write_run_bytes

    p = check_output_file(path, flag)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        write_run_bytes(parent, p.name, data, fsync=False)  # temp file + rename: no link followed
    except OSError as e:
        raise InputError(f"could not be written: {e.strerror or e}", "free space or choose another file", f"{flag} {p}") from None


def write_figure(fig: object, path: str | Path, flag: str, **savefig: object) -> Path:
    """Render a matplotlib figure to PNG in memory and write it with :func:`write_output_bytes` (matplotlib's own
    ``savefig(path)`` would open ``path`` and follow a link there)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)  # type: ignore[attr-defined]
    write_output_bytes(path, buf.getvalue(), flag)
    return Path(path)


def refuse_inputs(outputs: Iterable[tuple[str | Path, str]], inputs: Iterable[str | Path]) -> None:
    """InputError (exit 2) when an output ``(path, flag)`` is one of ``inputs`` (the same file, through a link or
    a hard link too): a command never overwrites what it reads.  Call it before any work starts."""
    def ident(path: str | Path) -> tuple[str, tuple[int, int] | None]:
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
            return real, (st.st_dev, st.st_ino)
        except OSError:
            return real, None

    known: dict[object, str] = {}
    for q in inputs:
        real, node = ident(q)
        known[real] = str(q)
        if node is not None:
            known[node] = str(q)
    for path, flag in outputs:
        real, node = ident(path)
        hit = known.get(real) or (known.get(node) if node is not None else None)
        if hit is not None:
            raise InputError(f"is the input file {hit}; spotwise never overwrites a file it reads",
                             f"give {flag} another file name", f"{flag} {path}")


#: what cannot stand in a YAML comment as it is: what PyYAML refuses to read, what ends the comment's line
#: (LF, CR, U+0085, U+2028, U+2029), tabs and the bidirectional controls that hide text
_COMMENT_UNSAFE = re.compile("[^\x20-\x7E\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]|[\u2028\u2029\u061c\u200e\u200f"
                             "\u202a-\u202e\u2066-\u2069\ufeff]")


def yaml_comment(lines: str | Sequence[str]) -> str:
    """``lines`` (a string is split at line feeds) as YAML comment lines, ``# `` each; every character that would end
    the line or that a YAML reader refuses is written as its escape (a backslash and ``n``, ``u2028``...), so the comment stays a
    comment whatever a name in it holds."""
    if isinstance(lines, str):
        lines = lines.split("\n")
    return "".join("# " + _COMMENT_UNSAFE.sub(lambda m: ascii(m.group())[1:-1], line) + "\n" for line in lines)


#: :func:`yaml_comment` for Python source: ``# `` lines in which nothing ends the line (LF, CR, U+2028...), no NUL
#: (which Python refuses) and no surrogate (which UTF-8 cannot hold) is left as it is
python_comment = yaml_comment
