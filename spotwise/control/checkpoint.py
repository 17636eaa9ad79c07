"""Checkpoints: atomic, checksummed, loaded with ``weights_only=True``, confined to their folder.

A checkpoint is ``OUT/checkpoints/step-NNNNNNNN.pt`` (the step, 8 digits) (``torch.save`` of a dict of tensors and
plain data -- no pickled objects, so ``torch.load(weights_only=True)`` reads it) plus an entry in
``OUT/checkpoints/manifest.json`` with its step and SHA-256.  Writing: temp file, ``fsync``,
``rename``, ``fsync`` of the folder, then the manifest (itself written atomically).  A crash at
any point leaves either the old or the new checkpoint visible, never half of one.  Loading picks
the newest checkpoint whose checksum verifies *and* whose content is usable (required keys, a
finite ``params`` tensor of the model's shape) and falls back to older ones, saying so through a
``warn`` callback (stderr by default); the last ``keep`` are kept.

Failure behaviour (all :class:`~spotwise.errors.InputError`, exit 2 through the CLI):

* the manifest is untrusted input: it must be UTF-8 JSON ``{"checkpoints": [...]}`` whose every
  ``file`` is a plain name ``step-NNNNNNNN.pt`` (matching its ``step``) that resolves inside
  ``OUT/checkpoints``.  Anything else -- an absolute path, ``../``, a symlink leading out, binary
  or truncated JSON -- is refused, naming the manifest and the bad entry; nothing outside the
  folder is ever read, and the keep-N rotation never unlinks a name that breaks the rule;
* ``checkpoints/`` itself must be a real folder (a link to ``/`` or to another run's folder is refused),
  and every file is read by the run directory's safe reader (:mod:`spotwise.rundir_files`): a FIFO, a
  device, a folder or a file over :func:`checkpoint_max_bytes` under a checkpoint's name is skipped
  (naming why) without blocking or being hashed, and the resume falls back to an older checkpoint;
* a full disk (ENOSPC/EDQUOT) while writing a checkpoint or the manifest is a
  :class:`~spotwise.rundir.DiskFullError` naming the folder; the temp file is removed first, so no
  ``.tmp-PID`` file is ever left behind and the previous checkpoint stays the newest.  torch's
  own short-write error (``RuntimeError: ... unexpected pos N vs M``, raised over the file's
  ENOSPC) counts as a full disk too, and the message says how many bytes the checkpoint needs
  and how many are free (issue 18 item 9);
* no checkpoint that verifies and validates: :func:`require_checkpoint` raises.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from spotwise.errors import InputError
from spotwise.safeparse import loads_json
from spotwise.events import atomic_write_text
from spotwise.rundir import DiskFullError, is_disk_full
from spotwise.inputfiles import max_input_bytes
from spotwise.rundir_files import make_run_folder, read_run_file
from spotwise.reports.terminal_text import warn_on_stderr  # re-exported: spotwise.control.checkpointing
from spotwise.rundir_names import CHECKPOINT_DIR  # noqa: F401 (re-exported; the registry names it)
from spotwise.control.checkpoint_records import REQUIRED_KEYS, SERVERLESS_KEYS, record_problem

MANIFEST = "manifest.json"
#: The only names a manifest entry may carry (and the only files the rotation may remove).
CHECKPOINT_NAME = re.compile(r"^step-(\d{8})\.pt$")
#: checkpoint files up to this size are read back whatever ``$SPOTWISE_MAX_FILE_MB`` says (4 GiB: a
#: billion float32 parameters); a larger one needs the variable raised (:func:`checkpoint_max_bytes`)
CHECKPOINT_MIN_CAP = 4 << 30

Warn = Callable[[str], None]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _bad_manifest(path: Path, what: str) -> InputError:
    return InputError(f"{what}", "restore checkpoints/manifest.json from a backup, or delete it and start the run again "
                      "(spotwise writes only step-NNNNNNNN.pt names inside the checkpoints folder)", str(path))


def _check_entry(folder: Path, manifest: Path, entry: Any, index: int) -> dict[str, Any]:
    """One manifest entry, validated: a dict with a safe ``file``, an int ``step``, a ``sha256`` string."""
    if not isinstance(entry, dict):
        raise _bad_manifest(manifest, f"entry {index} is not an object: {entry!r:.80}")
    name = entry.get("file")
    m = CHECKPOINT_NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise _bad_manifest(manifest, f"entry {index} names {name!r:.200}, not a checkpoint file of this folder "
                            "(only step-NNNNNNNN.pt inside checkpoints/ may be read or removed)")
    step = entry.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step != int(m.group(1)):
        raise _bad_manifest(manifest, f"entry {index} ({name}) has step {step!r}, which does not match its file name")
    if not isinstance(entry.get("sha256"), str):
        raise _bad_manifest(manifest, f"entry {index} ({name}) lacks its sha256")
    path = folder / name
    if os.path.islink(path):  # spotwise never makes one; a link (in or out of the folder, dangling, a loop) is never followed
        raise _bad_manifest(manifest, f"entry {index} ({name}) is a symbolic link (spotwise writes checkpoints as regular "
                            "files; a link leading out of the checkpoints folder or anywhere else is not followed)")
    return {"file": name, "step": step, "sha256": entry["sha256"]}


def _check_folder(folder: Path) -> None:
    """InputError unless ``folder`` (``OUT/checkpoints``) is absent or a real folder: a link (to ``/``, to
    another run's checkpoints), a file or a FIFO under the name is refused, naming it, never followed."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot access the checkpoints folder ({e.strerror or e})", "check the run directory's permissions",
                         str(folder)) from None
    if stat.S_ISLNK(mode):
        raise InputError("the checkpoints folder is a symbolic link; spotwise never reads checkpoints through a link",
                         "replace it with the run's own checkpoints/ folder (or resume a copy of the run)", str(folder))
    if not stat.S_ISDIR(mode):
        raise InputError("checkpoints in the run directory is not a folder", "move it away; spotwise keeps its "
                         "checkpoints in a checkpoints/ folder", str(folder))


def checkpoint_max_bytes() -> int:
    """The largest checkpoint file read back: :func:`~spotwise.inputfiles.max_input_bytes`, at least
    :data:`CHECKPOINT_MIN_CAP` (a real model's parameters may exceed the cap of a spec or trace)."""
    return max(max_input_bytes(), CHECKPOINT_MIN_CAP)


def _read_manifest(folder: Path) -> list[dict[str, Any]]:
    """The manifest's validated entries (``[]`` when there is none yet); InputError if it is unusable."""
    path = folder / MANIFEST
    _check_folder(folder)
    if not os.path.lexists(path):  # a dangling link or a loop is named by the reader, not taken for "no manifest"
        return []
    try:  # below the run directory, no link followed (checkpoints/ itself included), a regular file within the cap
        data = loads_json(read_run_file(folder.parent, f"{folder.name}/{MANIFEST}").decode("utf-8"), str(path), "manifest.json")
    except UnicodeDecodeError:
        raise _bad_manifest(path, "manifest.json is not UTF-8 text (binary or corrupted)") from None
    except ValueError as e:  # JSONDecodeError: truncated or not JSON
        raise _bad_manifest(path, f"manifest.json is not valid JSON (truncated or corrupted: {e})") from None
    except OSError as e:
        raise _bad_manifest(path, f"manifest.json cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints", []), list):
        raise _bad_manifest(path, 'manifest.json must be an object {"checkpoints": [...]}')
    return [_check_entry(folder, path, e, i) for i, e in enumerate(data.get("checkpoints", []))]


def _unlink_checkpoint(folder: Path, name: str) -> None:
    """Remove ``folder/name`` -- only a ``step-NNNNNNNN.pt`` name; a symlink is unlinked, never followed."""
    if not CHECKPOINT_NAME.match(name):  # unreachable after _check_entry; kept as the last line of defence
        return
    try:
        (folder / name).unlink()
    except FileNotFoundError:
        pass


def _fsync_dir(folder: Path) -> None:
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class _CountingSink(io.RawIOBase):
    """A write-only stream that only counts: the exact size :func:`torch.save` writes, nothing stored."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = memoryview(b).nbytes
        self.n += n
        return n

    def tell(self) -> int:
        return self.n


def _serialized_size(state: Any) -> int:
    """Bytes ``torch.save(state)`` writes (serialised into a counting sink: no memory, no disk)."""
    sink = _CountingSink()
    torch.save(state, sink)
    return sink.n


def _free_bytes(folder: Path) -> int:
    try:
        return int(shutil.disk_usage(folder).free)
    except OSError:
        return -1


def _disk_full_cause(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT ``OSError`` of ``exc`` or of its cause/context chain (torch raises its own
    ``RuntimeError("... unexpected pos N vs M")`` over the file object's ENOSPC)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if is_disk_full(e):
            return e  # type: ignore[return-value]
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _is_short_write(exc: BaseException) -> bool:
    """torch's zip writer's check that every byte it wrote arrived (a short write)."""
    return isinstance(exc, RuntimeError) and "unexpected pos" in str(exc)


def _size(n: int) -> str:
    """``n`` bytes for a person: ``512 B``, ``40.6 KiB``, ``3.82 MiB``, ``1.50 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.{1 if unit == 'KiB' else 2}f} {unit}"
    return f"{n} B"


def _checkpoint_disk_full(path: Path, exc: OSError, state: Any, out_dir: str | Path,
                          previous: list[dict[str, Any]]) -> DiskFullError:
    """The exit-2 error for a checkpoint that did not fit: how much it needs and how much is free.

    ``previous``: the manifest's entries before this write (untouched by it), to say what a resume
    continues from.
    """
    try:
        need = _serialized_size(state)
    except Exception:  # pragma: no cover - the state was serialisable a moment ago
        need = -1
    free = _free_bytes(path.parent)
    what = f"the disk is full: could not write {path.name} in {path.parent} ({exc.strerror or exc})"
    if need >= 0:
        what += f"; the checkpoint needs {_size(need)}"
    if free >= 0:
        what += f", {_size(free)} {'are' if free != 1 else 'is'} free there"
    room = (f"free at least {_size(need - max(free, 0))} (plus file-system overhead) on that disk"
            if need > max(free, 0) else "free space on that disk")
    if previous:
        last = max(e["step"] for e in previous)
        fix = (f"{room}, then `spotwise run --resume {Path(out_dir)}` continues from step {last} (its checkpoint "
               "is intact; the partial file was removed)")
    else:
        fix = f"{room} (or choose another --out), then start the run again with --overwrite (no checkpoint was written yet)"
    return DiskFullError(what, fix, str(path.parent))


def _new_file_nofollow(path: str, flags: int) -> int:
    """``open``'s opener for a temp file: created afresh (``O_EXCL``), never through a link (``O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)


def save_checkpoint(out_dir: str | Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    """Write ``state`` as the checkpoint of ``step``; returns its path.

    Entries of a later step than ``step`` (left over from before a resume fell back to an older
    checkpoint) are dropped: the run has moved on from an earlier point.  Raises
    :class:`~spotwise.rundir.DiskFullError` on a full disk (the temp file removed, the manifest
    unchanged) and InputError on an unusable manifest; other write errors propagate unchanged,
    always after the temp file is removed.
    """
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    folder = make_run_folder(out_dir, CHECKPOINT_DIR)  # a real folder, never a link out of the run (issue 30 item 2)
    entries = _read_manifest(folder)  # validate before writing anything
    path = folder / f"step-{int(step):08d}.pt"
    tmp = folder / f".{path.name}.tmp-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)  # a stale temp file, or a link planted under its name: never written through
        with open(tmp, "wb", opener=_new_file_nofollow) as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        full = _disk_full_cause(e)
        if full is None and _is_short_write(e):
            # torch's own short-write check without the OSError behind it: a full disk if the
            # checkpoint does not fit in what is free now (the temp file is gone already)
            if _free_bytes(folder) < _serialized_size(state):
                full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if full is not None:
            raise _checkpoint_disk_full(path, full, state, out_dir, entries) from None
        raise
    digest = _sha256(path)
    entries = [e for e in entries if e["file"] != path.name]
    stale = [e for e in entries if e["step"] > int(step)]
    entries = [e for e in entries if e["step"] < int(step)]
    entries.append({"file": path.name, "step": int(step), "sha256": digest})
    entries.sort(key=lambda e: e["step"])
    dropped = stale + (entries[:-keep] if keep > 0 else [])
    entries = entries[-keep:] if keep > 0 else entries
    atomic_write_text(folder / MANIFEST, json.dumps({"checkpoints": entries}, indent=1) + "\n", root=out_dir)
    for old in dropped:  # after the manifest no longer names them
        _unlink_checkpoint(folder, old["file"])
    return path


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))


def check_state(state: Any, expect_shape: Sequence[int] | None = None, step: int | None = None) -> str | None:
    """What is wrong with a loaded checkpoint ``state`` (``None`` when it is usable).

    Checks the keys of :data:`REQUIRED_KEYS`, ``format`` 1, the ``step`` (matching ``step`` if
    given), a finite floating-point ``params`` tensor of shape ``expect_shape`` (if given), finite
    ``lr``/``T``/``ema_loss``, the types of the plain-data fields, and every record as spotwise
    writes it (:func:`~spotwise.control.checkpoint_records.record_problem`: no unknown or missing
    key, no wrong type, NaN, infinity or negative count).
    """
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a checkpoint dictionary"
    serverless = state.get("kind") == "serverless"  # a serverless job's checkpoint (spotwise.planes.serverless)
    missing = [k for k in (SERVERLESS_KEYS if serverless else REQUIRED_KEYS) if k not in state]
    if missing:
        return f"it lacks {', '.join(missing)}"
    if state["format"] != 1:
        return f"unknown checkpoint format {state['format']!r}"
    s = state["step"]
    if isinstance(s, bool) or not isinstance(s, int) or s < 0 or (step is not None and s != step):
        return f"its step {s!r} does not match the manifest ({step})"
    p = state["params"]
    if not isinstance(p, torch.Tensor) or not p.is_floating_point():
        return "params is not a floating-point tensor"
    if expect_shape is not None and tuple(p.shape) != tuple(expect_shape):
        return f"params has shape {tuple(p.shape)}, the model needs {tuple(expect_shape)}"
    if not bool(torch.isfinite(p).all()):
        return "params holds NaN or infinite values"
    for key in ("lr", "T"):
        if not _is_number(state[key]) or state[key] < 0:
            return f"{key} is {state[key]!r}, not a finite number >= 0"
    if state["ema_loss"] is not None and not _is_number(state["ema_loss"]):
        return f"ema_loss is {state['ema_loss']!r}, not a finite number"
    if serverless and not isinstance(state["schedule"], str):
        return f"schedule is a {type(state['schedule']).__name__}, not a str"
    if isinstance(state["provisioned"], bool) or not isinstance(state["provisioned"], int) or state["provisioned"] < 0:
        return f"provisioned is {state['provisioned']!r}, not a count"
    if state["sync_n"] is not None and (isinstance(state["sync_n"], bool) or not isinstance(state["sync_n"], int)):
        return f"sync_n is {state['sync_n']!r}, not an integer"
    kinds = {"sampler": dict, "counters": dict, "cost": dict, "available": list, "sync": str, "dur_rng": str, "iter_rng": str}
    for key, typ in kinds.items():
        if not isinstance(state[key], typ):
            return f"{key} is a {type(state[key]).__name__}, not a {typ.__name__}"
    return _counters_wrong(state["counters"]) or record_problem(state)


def _counters_wrong(counters: dict[str, Any]) -> str | None:
    """What is wrong with a checkpoint's ``counters`` (``None`` when usable): only the fields of
    :class:`~spotwise.control.records.Counters`, every one of them, each a finite number >= 0 of its field's kind
    (a count is an integer), ``recoveries_ms`` (carried elsewhere since issue 54 item 5) ignored."""
    import dataclasses

    from spotwise.control.records import Counters

    kinds = {f.name: f.type for f in dataclasses.fields(Counters) if f.name != "recoveries_ms"}
    missing = [k for k in kinds if k not in counters]
    if missing:  # a counter left out would restart at 0: the summary would silently count one session
        return f"counters lacks {', '.join(missing)}"
    for key, value in counters.items():
        if key == "recoveries_ms":
            continue
        if key not in kinds:
            shown = repr(key)[:60]
            return f"counters holds {shown}, which is no counter of a run ({', '.join(sorted(kinds))})"
        whole = kinds[key] in ("int", int)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not _is_number(value) \
                or value < 0:
            return f"counters.{key} is {repr(value)[:60]}, not {'a count' if whole else 'a finite number >= 0'}"
    return None


def _read_checked(path: Path, sha256: str) -> tuple[bytes | None, str | None]:
    """The bytes of a manifest entry's file and ``None``, or ``None`` and why it cannot be trusted.

    Read once, by the run directory's safe reader (:func:`~spotwise.rundir_files.read_run_file`): no
    link followed, a FIFO or device refused without blocking, at most :func:`checkpoint_max_bytes`
    (a 10 GB sparse file is refused by its size, not hashed); the checksum is of the bytes loaded."""
    if not os.path.lexists(path):
        return None, "the file is missing"
    try:
        data = read_run_file(path.parent.parent, f"{path.parent.name}/{path.name}", "it", cap=checkpoint_max_bytes())
    except InputError as e:
        return None, e.what
    if not data:
        return None, "it is empty (0 bytes: truncated)"
    if hashlib.sha256(data).hexdigest() != sha256:
        return None, f"its checksum does not match the manifest (truncated or corrupted; {len(data):,} bytes)"
    return data, None


def _load_problem(e: Exception) -> str:
    """A loading failure in a few words: the exception's class and the first line of its message."""
    first = (str(e).strip().splitlines() or [""])[0][:120]
    return f"it is not a loadable checkpoint ({e.__class__.__name__}{': ' + first if first else ''})"


def load_latest_checkpoint(
    out_dir: str | Path, expect_shape: Sequence[int] | None = None, warn: Warn | None = None,
    rejected: list[str] | None = None,
) -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint that verifies (checksum) and validates (:func:`check_state`), or ``None``.

    Every newer checkpoint skipped on the way is reported through ``warn`` (one message naming the
    file, the reason and the step fallen back to); ``warn=None`` is silent.  ``rejected``, if
    given, receives one ``"step-NNNNNNNN.pt: why"`` line per checkpoint skipped (and, when none is
    usable, per checkpoint file the manifest does not list).  Raises InputError for an unusable
    manifest (see the module docstring); never reads a file outside the folder.
    """
    folder = Path(out_dir) / CHECKPOINT_DIR
    skipped: list[str] = []
    entries = _read_manifest(folder)  # checkpoints/ a real folder (not a link to / or to another run), or InputError
    for entry in reversed(entries):
        path = folder / entry["file"]
        state: Any = None
        data, problem = _read_checked(path, entry["sha256"])
        if problem is None:
            try:
                state = torch.load(io.BytesIO(data or b""), weights_only=True, map_location="cpu")
                problem = check_state(state, expect_shape, entry["step"])
            except Exception as e:  # fails to unpickle: as bad as a wrong checksum
                problem = _load_problem(e)
        if problem is not None:
            skipped.append(f"{path.name}: {problem}")
            if rejected is not None:
                rejected.append(skipped[-1])
            continue
        if skipped and warn is not None:
            for s in skipped:
                warn(f"checkpoint {s}; falling back to step {entry['step']} ({path.name})")
        return state, path
    if skipped and warn is not None:
        for s in skipped:
            warn(f"checkpoint {s}; no older checkpoint to fall back to")
    if rejected is not None and folder.is_dir():
        listed = {e["file"] for e in entries}
        for p in sorted(folder.iterdir()):
            if CHECKPOINT_NAME.match(p.name) and p.name not in listed:
                rejected.append(f"{p.name}: not listed in manifest.json (its checksum is unknown, so it is not trusted)")
    return None


def no_valid_checkpoint_error(out_dir: str | Path, rejected: Sequence[str]) -> InputError:
    """The error for a run directory with no usable checkpoint.

    With none found the run died before its first checkpoint; otherwise the message counts the
    checkpoints found and says, per file, why each was rejected (missing, empty, checksum,
    unloadable, wrong content or shape, not in the manifest).
    """
    if not rejected:
        return InputError("the run directory has no checkpoint to resume from (the run stopped before its first "
                          "checkpoint)", "start it again with `spotwise run SPEC --out DIR --overwrite`", str(out_dir))
    n = len(rejected)
    return InputError(f"no valid checkpoint to resume from: {n} checkpoint{'s' if n != 1 else ''} found and "
                      f"{'it was' if n == 1 else 'all were'} rejected -- " + "; ".join(rejected),
                      "restore checkpoints/ from a backup, or start the run again with `spotwise run SPEC --out DIR "
                      "--overwrite` (a checkpoint of another spec does not fit this model)", str(out_dir))


def require_checkpoint(
    out_dir: str | Path, expect_shape: Sequence[int] | None = None, warn: Warn | None = warn_on_stderr,
) -> tuple[dict[str, Any], Path]:
    """Like :func:`load_latest_checkpoint` (warning on stderr by default), but InputError if none is
    usable: :func:`no_valid_checkpoint_error`, which counts the checkpoints rejected and says why."""
    rejected: list[str] = []
    found = load_latest_checkpoint(out_dir, expect_shape, warn, rejected=rejected)
    if found is None:
        raise no_valid_checkpoint_error(out_dir, rejected)
    return found


def refuse_foreign_checkpoint(state: dict[str, Any], plane: str) -> None:
    """Refuse (InputError, exit 2) a checkpoint written by another kind of job than ``plane``'s.

    Serverless checkpoints carry ``kind: "serverless"``; the instance planes' (``ps``,
    ``collective``) carry none.  A run directory resumed with a spec of the other kind would
    otherwise continue on parameters and membership that mean something else.
    """
    serverless = state.get("kind") == "serverless"
    if plane == "serverless" and not serverless:
        raise InputError("this run directory holds a VM run's checkpoints", "resume it without cluster.kind: serverless")
    if plane != "serverless" and serverless:
        raise InputError("this run directory holds a serverless run's checkpoints",
                         "resume it with its own spec (cluster.kind: serverless)")
