"""Output URIs: their syntax, their fsspec file system, the write probe, the local staging folder.

Supported schemes (:data:`SCHEMES`): ``s3://bucket/prefix`` (needs ``s3fs``), ``gs://bucket/prefix``
(needs ``gcsfs``; both come with ``pip install 'spotwise[cloud]'``) and ``file:///absolute/path``.
Credentials and endpoints come from the environment the cloud's own tools read
(``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL`` for an S3-compatible server such as
MinIO; ``GOOGLE_APPLICATION_CREDENTIALS``), never from the spec: the spec is copied into the run
directory and must hold no secret.

:func:`check_uri` is pure (no import of fsspec) and runs when a spec is loaded;
:func:`connect` and :func:`probe_writable` run when ``spotwise run`` starts, before training.
Every failure is an :class:`~spotwise.errors.InputError` (exit 2) that says how to fix it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotwise.errors import InputError

#: scheme -> the Python package that implements it (``None``: fsspec's own)
SCHEMES: dict[str, str | None] = {"s3": "s3fs", "gs": "gcsfs", "file": None}
_SUPPORTED = "s3://bucket/prefix, gs://bucket/prefix or file:///absolute/path"
_URI_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
#: a bucket name as S3 and GCS accept it (lowercase letters, digits, dots, dashes, underscores)
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
#: what a URI's path (after the bucket; all of a file:// path) may hold: characters every object store keeps
#: as they are and no shell or YAML reads specially -- the URI reaches the emitted launch files (plan --emit)
_PATH_RE = re.compile(r"^[A-Za-z0-9._\-/=+@,]*$")
_PATH_CHARS = "letters, digits and . _ - / = + @ ,"
#: the longest URI accepted (S3 and GCS object names are at most 1024 bytes)
MAX_URI_CHARS = 1024
#: the object written and removed by :func:`probe_writable`
PROBE_PREFIX = ".spotwise-probe-"


def is_uri(value: str | os.PathLike[str]) -> bool:
    """Whether ``value`` is written as a URI (``scheme://...``) rather than a local path."""
    return isinstance(value, str) and _URI_RE.match(value) is not None


def check_uri(uri: str, where: str = "outputs.uri") -> str:
    """``uri`` validated and normalised (no trailing ``/``); InputError naming the supported schemes."""
    if not isinstance(uri, str):
        raise InputError(f"must be a string URI, got {uri!r:.80}", f"write e.g. {_SUPPORTED}", where)
    if len(uri) > MAX_URI_CHARS:
        raise InputError(f"is {len(uri)} characters long; at most {MAX_URI_CHARS} are accepted",
                         "choose a shorter prefix, e.g. s3://bucket/runs/job1", where)
    if any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029" for c in uri):
        raise InputError(f"{uri!r:.200} holds a control character or line break",
                         f"write the URI on one line with {_PATH_CHARS} after the bucket", where)
    m = _URI_RE.match(uri.strip())
    if m is None:
        raise InputError(f"{uri!r:.200} is not a URI", f"write {_SUPPORTED}", where)
    scheme, rest = m.group(1).lower(), m.group(2).rstrip("/")
    if scheme not in SCHEMES:
        raise InputError(f"unsupported URI scheme {scheme + '://'!r}", f"use one of {_SUPPORTED}", where)
    parts = rest.split("/")
    if any(p in ("..", ".") for p in parts) or "\\" in rest or "\x00" in rest:
        raise InputError(f"{uri!r:.200} holds '.', '..' or a backslash", "name the folder plainly, e.g. s3://bucket/runs/job1", where)
    path = rest if scheme == "file" else rest.partition("/")[2]
    if not _PATH_RE.match(path):
        bad = next(c for c in path if not _PATH_RE.match(c))
        raise InputError(f"{uri!r:.200} holds {bad!r} in its path; spotwise takes only {_PATH_CHARS} there (no spaces, "
                         "quotes, $, backticks or other characters a shell or an object store reads specially)",
                         f"rename the {'folder' if scheme == 'file' else 'prefix'} with those characters only, e.g. "
                         f"{'file:///data/runs/job1' if scheme == 'file' else scheme + '://bucket/runs/job1'}", where)
    if scheme == "file":
        if not rest.startswith("/"):
            raise InputError(f"{uri!r:.200} is not an absolute file:// URI", "write three slashes: file:///absolute/path", where)
        return "file://" + (rest or "/")
    if not _BUCKET_RE.match(parts[0]):
        raise InputError(f"{parts[0]!r:.80} is not a bucket name", f"write {scheme}://bucket/prefix", where)
    if any(p == "" for p in parts[1:]):
        raise InputError(f"{uri!r:.200} has an empty path segment ('//')", f"write {scheme}://bucket/prefix", where)
    return f"{scheme}://{rest}"


@dataclass
class RemoteRoot:
    """A run directory's place on object storage: ``fs`` (fsspec) and the ``root`` path within it."""

    uri: str
    scheme: str
    fs: Any
    root: str

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"RemoteRoot.scheme must be one of {sorted(SCHEMES)}, got {self.scheme!r}")
        if not self.root:
            raise ValueError("RemoteRoot.root must not be empty")

    def path(self, rel: str) -> str:
        """The file system path of ``rel`` (a ``/``-separated name inside the run directory)."""
        return f"{self.root.rstrip('/')}/{rel}" if rel else self.root

    def url(self, rel: str = "") -> str:
        return f"{self.uri}/{rel}" if rel else self.uri


def _missing_package(scheme: str, package: str) -> InputError:
    return InputError(f"{scheme}:// needs the Python package {package}, which is not installed",
                      "pip install 'spotwise[cloud]' (installs s3fs and gcsfs)", "outputs.uri")


def connect(uri: str) -> RemoteRoot:
    """The file system of ``uri`` (InputError when its package is missing).  Nothing is written."""
    uri = check_uri(uri)
    scheme, rest = uri.split("://", 1)
    package = SCHEMES[scheme]
    if package is not None:
        try:
            importlib.import_module(package)
        except ImportError:
            raise _missing_package(scheme, package) from None
    import fsspec

    options: dict[str, Any] = {"skip_instance_cache": True}
    if scheme == "s3":  # fail fast on an unreachable endpoint instead of retrying for minutes
        options["config_kwargs"] = {"connect_timeout": 10, "read_timeout": 120, "retries": {"max_attempts": 3}}
    try:
        fs = fsspec.filesystem(scheme, **options)
    except ImportError:
        raise _missing_package(scheme, package or "fsspec") from None
    return RemoteRoot(uri=uri, scheme=scheme, fs=fs, root=rest)


def describe_error(e: BaseException) -> str:
    """A storage error in a few words (its class and the first line of its message)."""
    first = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{e.__class__.__name__}{': ' + first if first else ''}"


def storage_error(remote: RemoteRoot, what: str, e: BaseException) -> InputError:
    """The exit-2 error for a failed operation on ``remote``: why, and how to fix it."""
    if isinstance(e, InputError):
        return e
    bucket = remote.root.split("/", 1)[0]
    if isinstance(e, FileNotFoundError):
        why, fix = (f"the bucket {bucket!r} does not exist" if remote.scheme != "file" else "the folder does not exist",
                    "create it first (aws s3 mb / gcloud storage buckets create / mkdir -p), or fix outputs.uri")
    elif isinstance(e, PermissionError):
        why, fix = "access denied", "give these credentials write access to it, or choose another outputs.uri"
    else:
        why = describe_error(e)
        fix = ("check the network, the credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS) "
               "and, for an S3-compatible server, AWS_ENDPOINT_URL")
    return InputError(f"cannot {what} {remote.uri} ({why})", fix, "outputs.uri")


def probe_writable(remote: RemoteRoot) -> None:
    """Write and remove a small marker object under the URI: InputError (exit 2) when the bucket is
    missing, unreachable or not writable -- before anything else of the run is written there."""
    probe = remote.path(f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}")
    try:
        if remote.scheme == "file":
            remote.fs.makedirs(remote.root, exist_ok=True)
        remote.fs.pipe_file(probe, b"spotwise write probe\n")
        remote.fs.rm_file(probe)
    except Exception as e:  # noqa: BLE001 - every storage failure becomes one exit-2 message
        raise storage_error(remote, "write to", e) from None


def default_staging_dir(uri: str) -> Path:
    """The local folder a run at ``uri`` is staged in when no ``--out`` is given:
    ``$SPOTWISE_STAGING_DIR`` (or ``$XDG_CACHE_HOME/spotwise/runs``, ``~/.cache/spotwise/runs``)
    ``/<readable name>-<hash of the URI>``."""
    uri = check_uri(uri)
    base = os.environ.get("SPOTWISE_STAGING_DIR")
    if not base:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(cache) / "spotwise" / "runs")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", uri.split("://", 1)[1]).strip("-.")[:60] or "run"
    return Path(base).expanduser() / f"{slug}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
