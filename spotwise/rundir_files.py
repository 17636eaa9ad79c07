"""Reading and writing the files of a run directory as untrusted input (issue 30, items 2 and 3).

A run directory may have been written by someone else, or edited since: any name in it may be a
symbolic link (``report/index.html -> ~/victim``, ``report -> /elsewhere``), a device
(``spec.json -> /dev/zero``) or a FIFO.  Everything spotwise reads or writes inside a run directory
``ROOT`` therefore goes through this module:

* every folder between ``ROOT`` and the file is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative
  to its parent's descriptor (``openat``), so a link anywhere below ``ROOT`` is refused, not
  followed -- ``ROOT`` itself is the user's choice and may be a link;
* :func:`write_run_bytes` writes a temp file created ``O_EXCL | O_NOFOLLOW`` in that real folder
  and renames it over the name (a link there is replaced, its target never touched);
  :func:`open_run_writer` opens the event log ``O_NOFOLLOW`` for appending;
* :func:`read_run_file` / :func:`open_run_reader` open ``O_NOFOLLOW | O_NONBLOCK``, ``fstat`` the
  descriptor and read only a regular file of at most :func:`~spotwise.inputfiles.max_input_bytes`.

Every refusal is an :class:`~spotwise.errors.InputError` (exit 2) naming the file and how to fix it;
a full disk is a :class:`DiskFullError`.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from spotwise.errors import InputError
from spotwise.inputfiles import MAX_FILE_ENV, max_input_bytes

#: errno values that mean "no space left" (ENOSPC; EDQUOT: the user's quota is exhausted).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_FIX_LINK = "remove the link (spotwise never writes or reads through a link in a run directory), or choose another --out"


class DiskFullError(InputError):
    """Writing ``where`` failed because its disk (or the user's quota) is full -- the user's to fix (exit 2)."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` for a full disk or an exhausted quota."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full_error(path: str | Path, exc: OSError, fix: str = "") -> DiskFullError:
    """The exit-2 error for a write to ``path`` that failed with ENOSPC/EDQUOT."""
    p = Path(path)
    return DiskFullError(
        f"the disk is full: could not write {p.name} in {p.parent} ({exc.strerror or exc})",
        fix or "free space on that disk (or choose another --out) and run again", str(p.parent))


def _parts(rel: str | Path) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise ValueError(f"not a relative path inside a run directory: {rel!r}")
    return parts


def _open_folder(root: Path, folders: list[str], create: bool) -> int:
    """A descriptor of ``root/folders...``, each step opened without following a link."""
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except FileNotFoundError:
        raise InputError("the run directory does not exist", "pass an existing run directory", str(root)) from None
    except OSError as e:
        raise InputError(f"cannot open the run directory ({e.strerror or e})", "check the path and its permissions",
                         str(root)) from None
    here = root
    for name in folders:
        here = here / name
        try:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            os.close(fd)
            if is_disk_full(e):
                raise disk_full_error(here / "x", e) from None
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                kind = "a symbolic link" if os.path.islink(here) else "not a directory"
                raise InputError(f"{name} in the run directory is {kind}; refusing to follow it", _FIX_LINK, str(here)) from None
            raise InputError(f"cannot open {name} ({e.strerror or e})", "check the run directory's permissions",
                             str(here)) from None
        os.close(fd)
        fd = nfd
    return fd


def make_run_folder(root: str | Path, rel: str | Path) -> Path:
    """Create (if missing) the folder ``root/rel``, each level a real folder, no link followed; returns its path."""
    os.close(_open_folder(Path(root), _parts(rel), create=True))
    return Path(root).joinpath(*_parts(rel))


def write_run_bytes(root: str | Path, rel: str | Path, data: bytes, *, fsync: bool = True) -> Path:
    """Write ``data`` to ``root/rel`` atomically, never through a link; returns the path.

    The folders below ``root`` are created if missing and must be real folders (a link is an
    InputError); the file goes to a temp file in that folder, then is renamed over ``rel`` (a link
    at ``rel`` is replaced, never followed).  A full disk raises :class:`DiskFullError`.
    """
    base = Path(root)
    parts = _parts(rel)
    path = base.joinpath(*parts)
    name = parts[-1]
    dfd = _open_folder(base, parts[:-1], create=True)
    tmp = f".{name.lstrip('.')}.tmp-{os.getpid()}"
    try:
        try:
            os.unlink(tmp, dir_fd=dfd)  # a stale temp file (or a planted link of that name)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        if fsync:
            os.fsync(dfd)
    except BaseException as e:  # never leave the temp file behind
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        if is_disk_full(e):
            raise disk_full_error(path, e) from None  # type: ignore[arg-type]
        if isinstance(e, IsADirectoryError):
            raise InputError(f"{name} in the run directory is a folder; spotwise writes a file there",
                             "move the folder away, or choose another --out", str(path)) from None
        raise
    finally:
        os.close(dfd)
    return path


def write_run_text(root: str | Path, rel: str | Path, text: str, *, fsync: bool = True) -> Path:
    """:func:`write_run_bytes` of ``text`` as UTF-8."""
    return write_run_bytes(root, rel, text.encode("utf-8"), fsync=fsync)


def open_run_writer(root: str | Path, rel: str | Path, *, append: bool) -> IO[str]:
    """A UTF-8 text file ``root/rel`` opened for writing (``append``: at its end, else truncated), no link followed."""
    base = Path(root)
    parts = _parts(rel)
    path = base.joinpath(*parts)
    dfd = _open_folder(base, parts[:-1], create=True)
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    flags |= os.O_APPEND if append else 0
    try:
        fd = os.open(parts[-1], flags, 0o644, dir_fd=dfd)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full_error(path, e) from None
        if e.errno == errno.ELOOP:
            raise InputError(f"{parts[-1]} in the run directory is a symbolic link; refusing to write through it",
                             _FIX_LINK, str(path)) from None
        raise InputError(f"cannot write {parts[-1]} ({e.strerror or e})", "choose a writable --out", str(path)) from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{parts[-1]} in the run directory is not a regular file", "remove it, or choose another --out",
                         str(path))
    if st.st_nlink > 1:  # written in place: a hard link would write into a file elsewhere
        os.close(fd)
        raise InputError(f"{parts[-1]} in the run directory has {st.st_nlink} hard links; refusing to write into it",
                         "remove it (spotwise writes files with other names only through their own link), or choose "
                         "another --out", str(path))
    os.set_blocking(fd, True)
    if not append:
        os.ftruncate(fd, 0)
    return io.open(fd, "a" if append else "w", encoding="utf-8")


def _kind_of(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def _open_regular(root: Path, parts: list[str], what: str, cap: int | None = None) -> tuple[int, Path]:
    """``root/parts`` opened read-only (no link followed anywhere below ``root``, never blocking on a
    FIFO), checked to be a regular file of at most ``cap`` bytes (default :func:`max_input_bytes`;
    ``cap=-1``: no size check, for a reader of the file's end)."""
    path = root.joinpath(*parts)
    dfd = _open_folder(root, parts[:-1], create=False)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=dfd)
    except FileNotFoundError:
        raise InputError(f"{what} not found", "pass a run directory written by `spotwise run` or `spotwise simulate`",
                         str(path)) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{what} is a symbolic link; spotwise does not follow links in a run directory",
                             _FIX_LINK, str(path)) from None
        raise InputError(f"cannot read the {what} ({e.strerror or e})", "check the file's permissions", str(path)) from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{what} is {_kind_of(st.st_mode)}, not a regular file",
                         "replace it with the file spotwise wrote (devices, pipes and folders are not read)", str(path))
    cap = max_input_bytes() if cap is None else cap
    if 0 <= cap < st.st_size:
        os.close(fd)
        raise InputError(f"{what} is larger than the {cap / (1 << 20):g} MiB that spotwise reads per file",
                         f"raise the cap with {MAX_FILE_ENV}=<MiB> if the file is genuine", str(path))
    os.set_blocking(fd, True)
    return fd, path


def read_run_file(root: str | Path, rel: str | Path, what: str | None = None, *, cap: int | None = None) -> bytes:
    """The bytes of the regular file ``root/rel`` (``what`` names it; default its name), read
    without following a link, at most ``cap`` bytes (default :func:`~spotwise.inputfiles.max_input_bytes`);
    InputError otherwise."""
    parts = _parts(rel)
    cap = max_input_bytes() if cap is None else cap
    fd, path = _open_regular(Path(root), parts, what or parts[-1], cap)
    try:
        chunks: list[bytes] = []
        total = 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise InputError(f"cannot read {what or parts[-1]} ({e.strerror or e})", "check the file", str(path)) from None
    finally:
        os.close(fd)
    raise InputError(f"{what or parts[-1]} grew past the {cap / (1 << 20):g} MiB cap while it was read",
                     f"raise the cap with {MAX_FILE_ENV}=<MiB>", str(path))


def read_run_tail(root: str | Path, rel: str | Path, cap: int, what: str | None = None) -> tuple[bytes, bool]:
    """The last ``cap`` bytes of the regular file ``root/rel`` (the whole file when shorter) and whether
    its start was cut; the checks of :func:`read_run_file` except the size cap (a long event log is read
    from its end: ``spotwise runs`` / ``status``)."""
    parts = _parts(rel)
    fd, path = _open_regular(Path(root), parts, what or parts[-1], -1)
    try:
        start = max(0, os.fstat(fd).st_size - cap)
        os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        total = 0
        while total < cap:
            chunk = os.read(fd, min(1 << 20, cap - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks), start > 0
    except OSError as e:
        raise InputError(f"cannot read {what or parts[-1]} ({e.strerror or e})", "check the file", str(path)) from None
    finally:
        os.close(fd)


def check_run_file(root: str | Path, rel: str | Path, what: str | None = None, *, cap: int | None = None) -> None:
    """InputError unless ``root/rel`` is a regular file :func:`read_run_file` would read (nothing is read):
    a link, a FIFO, a device, a folder or a file over the cap (``cap=-1``: any size) is named in the message."""
    parts = _parts(rel)
    fd, _ = _open_regular(Path(root), parts, what or parts[-1], cap)
    os.close(fd)


def check_run_names(root: str | Path, files: "tuple[str, ...] | list[str]", folders: "tuple[str, ...] | list[str]") -> None:
    """InputError naming the first of ``files`` (regular files spotwise writes) or ``folders`` (folders it
    writes) present in ``root`` as something else: a symbolic link (live, dangling or a loop), a FIFO, a
    device, a folder where a file belongs or a file where a folder belongs.  Absent names are fine;
    nothing is opened or read (``run --resume`` checks these before Ray starts)."""
    base = Path(root)
    for name in (*files, *folders):
        p = base / name
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            raise InputError(f"cannot access {name} ({e.strerror or e})", "check the run directory's permissions", str(p)) from None
        if stat.S_ISLNK(mode):
            raise InputError(f"{name} in the run directory is a symbolic link; spotwise never follows one there",
                             _FIX_LINK, str(p))
        if name in folders and not stat.S_ISDIR(mode):
            raise InputError(f"{name} in the run directory is {_kind_of(mode) if not stat.S_ISREG(mode) else 'a file'}, "
                             "where spotwise keeps a folder", "move it away (or resume a copy of the run)", str(p))
        if name in files and not stat.S_ISREG(mode):
            raise InputError(f"{name} in the run directory is {_kind_of(mode)}, not a regular file",
                             "replace it with the file spotwise wrote, or move it away", str(p))


def open_run_reader(root: str | Path, rel: str | Path, what: str | None = None) -> IO[bytes]:
    """``root/rel`` opened for reading in binary (line by line), with the checks of :func:`read_run_file`."""
    parts = _parts(rel)
    fd, _ = _open_regular(Path(root), parts, what or parts[-1])
    return io.open(fd, "rb")


def split_run_path(path: str | Path) -> tuple[Path, str]:
    """``path`` as (its folder, its name): for readers handed a file path (the folder is the root)."""
    p = Path(path)
    return p.parent, p.name


def iter_run_lines(root: str | Path, rel: str | Path, what: str | None = None) -> Iterator[bytes]:
    """The lines of the regular file ``root/rel`` (see :func:`open_run_reader`)."""
    with open_run_reader(root, rel, what) as fh:
        yield from fh


__all__ = ["DISK_FULL_ERRNOS", "DiskFullError", "check_run_file", "check_run_names", "disk_full_error", "is_disk_full",
           "iter_run_lines", "make_run_folder", "open_run_reader", "open_run_writer", "read_run_file", "read_run_tail",
           "split_run_path", "write_run_bytes", "write_run_text"]
