"""Reading a run directory back from its URI (``spotwise run --resume URI``), as untrusted input.

Only the names a resume needs are read, each a fixed name or a checkpoint name the manifest lists
and :data:`~spotwise.control.checkpoint.CHECKPOINT_NAME` accepts (``step-NNNNNNNN.pt``): no
listing of the URI decides what is written locally, so no remote name can lead out of the local
run directory.  Every object must be a regular file (no symlink on ``file://``) within a size cap:
``spec.json`` and the manifest within ``$SPOTWISE_MAX_FILE_MB`` (the cap of every input file),
the event log and checkpoints within ``$SPOTWISE_MAX_DOWNLOAD_MB`` (default 64 GiB) and within what the
resume reads back locally (the event log: ``$SPOTWISE_MAX_FILE_MB``; a checkpoint:
:func:`~spotwise.control.checkpoint.checkpoint_max_bytes`).  Files are
written atomically; the checkpoints' checksums and content are verified by the resume itself
(:func:`~spotwise.control.checkpoint.require_checkpoint`), exactly as for a local run directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spotwise.control.checkpoint import CHECKPOINT_DIR, CHECKPOINT_NAME, MANIFEST, checkpoint_max_bytes
from spotwise.errors import InputError
from spotwise.envvars import env_number
from spotwise.inputfiles import max_input_bytes
from spotwise.remote.uri import RemoteRoot, storage_error
from spotwise.rundir import MARKER, RUN_FILES
from spotwise.safeparse import loads_json

SPEC = "spec.json"
EVENTS = "events.jsonl"
#: environment variable: the cap (MiB) of one downloaded event log or checkpoint
MAX_DOWNLOAD_ENV = "SPOTWISE_MAX_DOWNLOAD_MB"
DEFAULT_MAX_DOWNLOAD_MB = 65536.0


def max_download_bytes() -> int:
    return max(1, int(env_number(MAX_DOWNLOAD_ENV) * 1024 * 1024))  # InputError naming the allowed range


def _info(remote: RemoteRoot, rel: str, cap: int) -> dict[str, Any] | None:
    """The object ``rel``'s info (``None`` if absent); InputError if it is not a plain file within ``cap``."""
    try:
        info = remote.fs.info(remote.path(rel))
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001
        raise storage_error(remote, "read", e) from None
    if info.get("type") != "file" or info.get("islink"):
        raise InputError(f"{rel} at the URI is not a plain file ({'a link' if info.get('islink') else info.get('type')})",
                         "remove it there; spotwise writes only plain files", remote.url(rel))
    size = int(info.get("size") or 0)
    if size > cap:
        raise InputError(f"{rel} at the URI is {size:,} bytes, over the cap of {cap:,}",
                         f"raise the cap ({MAX_DOWNLOAD_ENV} or SPOTWISE_MAX_FILE_MB, in MiB) if the file is genuine",
                         remote.url(rel))
    return info


def read_small(remote: RemoteRoot, rel: str) -> bytes | None:
    """The bytes of the small object ``rel`` (spec, manifest) or ``None`` if it is absent."""
    cap = max_input_bytes()
    if _info(remote, rel, cap) is None:
        return None
    try:
        data = remote.fs.cat_file(remote.path(rel))
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001
        raise storage_error(remote, "read", e) from None
    if len(data) > cap:
        raise InputError(f"{rel} at the URI is over the cap of {cap:,} bytes", "raise SPOTWISE_MAX_FILE_MB if it is genuine",
                         remote.url(rel))
    return bytes(data)


def manifest_steps(raw: bytes | None) -> list[tuple[int, str]]:
    """``(step, file)`` of each well-formed entry of a manifest's bytes (malformed ones left out:
    the resume reports them); ``[]`` for none."""
    if raw is None:
        return []
    try:
        data = loads_json(raw.decode("utf-8"), f"{CHECKPOINT_DIR}/{MANIFEST}", "manifest.json")
    except (UnicodeDecodeError, ValueError, InputError):  # malformed or nested too deeply: the resume reports it
        return []
    entries = data.get("checkpoints") if isinstance(data, dict) else None
    out: list[tuple[int, str]] = []
    for e in entries if isinstance(entries, list) else []:
        name = e.get("file") if isinstance(e, dict) else None
        m = CHECKPOINT_NAME.match(name) if isinstance(name, str) else None
        if m is not None:
            out.append((int(m.group(1)), name))  # type: ignore[arg-type]
    return out


def newest_step(raw: bytes | None) -> int:
    """The newest step a manifest's bytes name (-1: none)."""
    return max((s for s, _ in manifest_steps(raw)), default=-1)


def local_manifest(local: Path) -> bytes | None:
    path = local / CHECKPOINT_DIR / MANIFEST
    try:
        return path.read_bytes() if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def holds_run(remote: RemoteRoot) -> bool:
    """Whether the URI already holds a spotwise run (its marker or its spec)."""
    try:
        return any(remote.fs.exists(remote.path(n)) for n in (MARKER, SPEC))
    except Exception as e:  # noqa: BLE001
        raise storage_error(remote, "read", e) from None


def remove_run(remote: RemoteRoot) -> None:
    """Remove the names a run directory holds from the URI (``--overwrite``); nothing else there."""
    try:
        for name in (*RUN_FILES, MARKER):
            path = remote.path(name)
            if remote.fs.exists(path):
                remote.fs.rm(path, recursive=True)
    except Exception as e:  # noqa: BLE001
        raise storage_error(remote, "remove the old run from", e) from None


def _download(remote: RemoteRoot, rel: str, dest: Path, cap: int) -> bool:
    """Copy ``rel`` to ``dest`` atomically (a temp file, fsync, rename); False if it is absent."""
    if _info(remote, rel, cap) is None:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with remote.fs.open(remote.path(rel), "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                n += len(chunk)
                if n > cap:
                    raise InputError(f"{rel} at the URI grew over the cap of {cap:,} bytes while read",
                                     f"raise {MAX_DOWNLOAD_ENV} if it is genuine", remote.url(rel))
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, dest)
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        return False
    except InputError:
        tmp.unlink(missing_ok=True)
        raise
    except Exception as e:  # noqa: BLE001
        tmp.unlink(missing_ok=True)
        raise storage_error(remote, "download from", e) from None
    return True


def fetch_run(remote: RemoteRoot, local: Path) -> list[str]:
    """Download what a resume needs into the (locked, empty of spotwise files) folder ``local``:
    ``spec.json``, ``events.jsonl``, the checkpoints the manifest names, then the manifest.
    Returns the names written.  InputError when the URI holds no run."""
    spec = read_small(remote, SPEC)
    if spec is None:
        raise InputError("no spotwise run at this URI (no spec.json there)",
                         "pass the outputs.uri of an earlier `spotwise run` (its events and checkpoints are there)", remote.uri)
    cap = max_download_bytes()
    # no larger than what the resume reads back locally (a 10 GB sparse events.jsonl is refused by its size,
    # not downloaded for minutes and then refused): the event log within the input cap, a checkpoint within its own
    events_cap, checkpoint_cap = min(cap, max_input_bytes()), min(cap, checkpoint_max_bytes())
    written: list[str] = []
    manifest = read_small(remote, f"{CHECKPOINT_DIR}/{MANIFEST}")
    for _, name in manifest_steps(manifest):
        rel = f"{CHECKPOINT_DIR}/{name}"
        if _download(remote, rel, local / CHECKPOINT_DIR / name, checkpoint_cap):
            written.append(rel)
    if manifest is not None:  # after the checkpoints it names
        _write(local / CHECKPOINT_DIR / MANIFEST, manifest)
        written.append(f"{CHECKPOINT_DIR}/{MANIFEST}")
    if _download(remote, EVENTS, local / EVENTS, events_cap):
        written.append(EVENTS)
    _write(local / SPEC, spec)  # last: a folder without spec.json is not resumable, so a cut download is redone
    written.append(SPEC)
    return written


def _write(path: Path, data: bytes) -> None:
    from spotwise.events import atomic_write_bytes

    atomic_write_bytes(path, data)
