"""What the nodes of an emitted cluster need besides the image (issue 29 item 3): spotwise, the spec,
every file the spec names, and the workload's code.

* :func:`parse_install` -- how the nodes get spotwise (``--install``): a git URL or requirement, a
  wheel or a source folder (mounted).
* :func:`node_files` -- every input file the spec names (``market.traces``, ``market.catalog``,
  ``market.synthetic.fit_to``, ``market.revocation.lifetimes``, ``workload.dataset``, ``workload.script``,
  ``workload.requirements`` and the pools'
  own traces and lifetimes), each mounted under :data:`REMOTE_INPUTS`, and a ``module:function``
  workload's module or package, mounted under :data:`REMOTE_CODE` (on ``PYTHONPATH`` there).  A
  path that does not exist here cannot be mounted: :class:`InputError` (exit 2).
* :func:`node_spec_dict` -- the spec as the nodes read it: the same job with those paths rewritten
  to the mounted copies (relative to the spec's folder on the node, :data:`REMOTE_DIR`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.spec.input_paths import check_spec_path, spec_paths

#: where the job lives on the nodes: the spec, its inputs, the workload's code, the run directory
REMOTE_DIR = "~/spotwise-job"
REMOTE_SPEC = f"{REMOTE_DIR}/spec.yaml"
REMOTE_RUN = f"{REMOTE_DIR}/run"
REMOTE_INPUTS = f"{REMOTE_DIR}/inputs"
REMOTE_CODE = f"{REMOTE_DIR}/code"
#: the virtual environment the setup creates on every node
REMOTE_VENV = "~/spotwise-venv"
#: a wheel's file name: ``{dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl`` (PEP 427) holds only these
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9._+-]+\.whl$")
#: what a name on the node may hold: the launchers paste ``file_mounts`` targets into their own shell
#: (Ray's ``mkdir -p TARGET``) unquoted, so every target spotwise writes is built from these characters only
_UNSAFE_REMOTE = re.compile(r"[^A-Za-z0-9._+-]+")
INSTALL_MISSING = ("no spotwise install source: rerun spotwise plan with --install (a git URL such as "
                   "git+https://github.com/OWNER/spotwise.git, a wheel file or a source folder), or set SPOTWISE_INSTALL")


# ------------------------------------------------------------------------------------- spotwise itself
@dataclass(frozen=True)
class Install:
    """How the nodes get spotwise: a pip argument, and a local wheel or folder to mount first."""

    pip_arg: str | None  # None: not given (the setup stops with a message)
    local: Path | None = None
    remote: str | None = None

    @property
    def mounts(self) -> dict[str, str]:
        return {self.remote: str(self.local)} if self.local is not None and self.remote else {}

    @property
    def is_folder(self) -> bool:
        return self.local is not None and self.local.is_dir()


def parse_install(value: str | None) -> Install:
    """``--install``: a URL / requirement (used as it is), or an existing wheel file or source folder (mounted)."""
    if value is None or not value.strip():
        return Install(None)
    v = value.strip()
    from spotwise.spec.checks import bad_char

    ch = bad_char(v)
    if ch is not None or v.startswith("-"):
        raise InputError(f"{v!r:.200} " + (f"holds the control character {ch}" if ch else "starts with '-' (a pip option)"),
                         "give --install one git URL, requirement, wheel file or source folder, on one line", "--install")
    if "://" in v or v.startswith("git+"):
        return Install(v)
    p = Path(v).expanduser()
    if p.is_file() and p.suffix == ".whl":
        if not _WHEEL_NAME.match(p.name):
            raise InputError(f"the wheel's file name {p.name!r:.200} is not a wheel name: pip reads "
                             "NAME-VERSION-PYTHON-ABI-PLATFORM.whl, letters, digits and . _ + - only",
                             "give --install the wheel as `python -m build` or `pip wheel` named it "
                             "(e.g. spotwise-0.1.0-py3-none-any.whl)", "--install")
        remote = f"{REMOTE_DIR}/{p.name}"
        return Install(remote, p.resolve(), remote)
    if p.is_dir() and ((p / "pyproject.toml").is_file() or (p / "setup.py").is_file()):
        return Install(f"{REMOTE_DIR}/src", p.resolve(), f"{REMOTE_DIR}/src")
    if p.exists() or v.endswith(".whl") or "/" in v or v in (".", ".."):
        raise InputError(f"{v!r} is neither a wheel file nor a folder with pyproject.toml",
                         "give --install a spotwise wheel (.whl), the source folder, or a git URL "
                         "(git+https://github.com/OWNER/spotwise.git)", "--install")
    return Install(v)  # a requirement pip resolves on the nodes (e.g. an index of your own)


# ------------------------------------------------------------------------------------- the spec's files
def _local(path: str, base: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base or Path.cwd()) / p


@dataclass(frozen=True)
class NodeFiles:
    """What ``file_mounts`` carries besides spotwise: ``inputs`` (local path, path on the node relative to
    :data:`REMOTE_DIR`) for every file the spec names, and ``code`` (local module file or package, its
    path on the node) of a ``module:function`` workload."""

    inputs: tuple[tuple[str, str], ...] = ()
    code: tuple[str, str] | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def mounts(self) -> dict[str, str]:
        out = {f"{REMOTE_DIR}/{rel}": local for local, rel in self.inputs}
        if self.code is not None:
            out[self.code[1]] = self.code[0]
        return out

    def remote(self, local: str, base: Path | None = None) -> str | None:
        key = str(_local(local, base).resolve())
        return next((rel for loc, rel in self.inputs if loc == key), None)


def workload_code(spec: JobSpec, base: Path | None = None) -> tuple[tuple[str, str] | None, list[str]]:
    """A ``module:function`` workload's top-level module or package here, and where it goes on the node.

    Looked up without importing it (importing runs the user's code): on ``PYTHONPATH``, in the current
    folder, the spec's folder, then ``sys.path``.  An installed package (site-packages) is not mounted
    (a note says to install it on the nodes); a module found nowhere is an InputError (exit 2)."""
    name = spec.workload.name
    if ":" not in name:
        return None, []
    top = name.partition(":")[0].split(".")[0]
    dirs = [*filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)), os.getcwd(),
            *([str(base)] if base else []), *sys.path[1:]]
    for d in dirs:
        for cand in (Path(d) / top, Path(d) / f"{top}.py"):
            if (cand.is_dir() and any(cand.glob("*.py"))) or cand.is_file():
                if {"site-packages", "dist-packages"} & set(cand.resolve().parts):
                    return None, [f"the workload's module {top} is an installed package ({cand}): it is not mounted; "
                                  "name it in workload.packages so the nodes' setup installs it"]
                return (str(cand.resolve()), f"{REMOTE_CODE}/{cand.name}"), []
    raise InputError(f"cannot find the workload's module {top!r} here, so --emit cannot mount it on the nodes",
                     f"run spotwise plan from the folder that holds {top}.py (or the {top}/ package), or add that "
                     "folder to PYTHONPATH", "workload.name")


def node_files(spec: JobSpec, base: Path | None = None) -> NodeFiles:
    """Every input file of ``spec`` (paths relative to ``base``, the spec's folder, else the current
    folder) with its place on the node, and the workload's code; InputError for a path that is missing here
    or is not the field's kind of file (:func:`~spotwise.spec.input_paths.check_spec_path`)."""
    inputs: dict[str, str] = {}
    for where, box, key in spec_paths(spec.to_dict()):
        raw = str(box[key])
        p = _local(raw, base)
        if not p.exists():
            raise InputError(f"{where} names {raw!r}, which does not exist here: --emit cannot mount it on the nodes",
                             "fix the path in the spec (a relative path is read from the spec's folder) or remove the "
                             "entry, then emit again", where)
        check_spec_path(where, raw, base)  # a folder, FIFO, device or oversized file fails on every node
        local = str(p.resolve())
        if local not in inputs:  # the name on the node: plain characters only (see _UNSAFE_REMOTE)
            name = _UNSAFE_REMOTE.sub("_", p.resolve().name).strip("._") or "input"
            inputs[local] = f"inputs/{len(inputs)}-{name[:100]}"
    code, notes = workload_code(spec, base)
    if getattr(spec.workload, "script", None):
        notes.append("the training script is mounted on its own: modules it imports from its folder must be on the nodes "
                     "(a package of yours in workload.packages or workload.requirements), as must the packages it needs "
                     "beyond spotwise's (name them there too)" if not (spec.workload.packages or spec.workload.requirements)
                     else "the training script is mounted on its own; the setup installs workload.packages and "
                     "workload.requirements, and modules it imports from its own folder must be among them")
    return NodeFiles(tuple(inputs.items()), code, tuple(notes))


def node_spec_dict(spec: JobSpec, files: NodeFiles, base: Path | None = None) -> dict[str, Any]:
    """``spec`` as the nodes read it: every input path replaced by its mounted copy (relative to the
    spec's folder on the node, where spotwise resolves it)."""
    d = spec.to_dict()
    for _, box, key in spec_paths(d):
        rel = files.remote(str(box[key]), base)
        if rel is not None:
            box[key] = rel
    return d
