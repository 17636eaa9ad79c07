"""Checkpoints: atomic, checksummed, loaded with ``weights_only=True``.

A checkpoint is ``OUT/checkpoints/step-NNNNNNNN.pt`` (the step, 8 digits) (``torch.save`` of a dict of tensors and
plain data -- no pickled objects, so ``torch.load(weights_only=True)`` reads it) plus an entry in
``OUT/checkpoints/manifest.json`` with its step and SHA-256.  Writing: temp file, ``fsync``,
``rename``, ``fsync`` of the folder, then the manifest (itself written atomically).  A crash at
any point leaves either the old or the new checkpoint visible, never half of one.  Loading picks
the newest checkpoint whose checksum verifies and falls back to older ones (the last ``keep``
are kept).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from spotwise.errors import InputError
from spotwise.events import atomic_write_text

CHECKPOINT_DIR = "checkpoints"
MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_manifest(folder: Path) -> list[dict[str, Any]]:
    path = folder / MANIFEST
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return []
    return list(data.get("checkpoints", [])) if isinstance(data, dict) else []


def save_checkpoint(out_dir: str | Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    """Write ``state`` as the checkpoint of ``step``; returns its path."""
    folder = Path(out_dir) / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{int(step):08d}.pt"
    tmp = folder / f".{path.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    digest = _sha256(path)
    entries = [e for e in _read_manifest(folder) if e.get("file") != path.name]
    entries.append({"file": path.name, "step": int(step), "sha256": digest})
    entries.sort(key=lambda e: e["step"])
    for old in entries[:-keep] if keep > 0 else []:
        try:
            (folder / old["file"]).unlink()
        except FileNotFoundError:
            pass
    entries = entries[-keep:] if keep > 0 else entries
    atomic_write_text(folder / MANIFEST, json.dumps({"checkpoints": entries}, indent=1) + "\n")
    return path


def load_latest_checkpoint(out_dir: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint whose checksum verifies, or ``None`` if there is none."""
    folder = Path(out_dir) / CHECKPOINT_DIR
    for entry in reversed(_read_manifest(folder)):
        path = folder / str(entry.get("file", ""))
        if not path.is_file() or _sha256(path) != entry.get("sha256"):
            continue  # torn or corrupted: fall back to the previous one
        try:
            state = torch.load(path, weights_only=True, map_location="cpu")
        except Exception:  # a checkpoint that fails to unpickle is as bad as a wrong checksum
            continue
        return state, path
    return None


def require_checkpoint(out_dir: str | Path) -> tuple[dict[str, Any], Path]:
    found = load_latest_checkpoint(out_dir)
    if found is None:
        raise InputError("no valid checkpoint in this run directory", "resume a directory written by `spotwise run` "
                         "that got past its first checkpoint, or start a new run", str(out_dir))
    return found
