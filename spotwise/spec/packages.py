"""The workload's own Python packages (issue 42 item 3): what the nodes of an emitted cluster install
besides spotwise, so a script's ``import timm`` (or a ``module:function`` workload's) works there.

* ``workload.packages`` -- pip requirements (PEP 508: ``timm==1.0.9``, ``einops>=0.8``,
  ``mylib @ git+https://github.com/me/mylib.git``), each installed by the emitted setup as one
  quoted word.  No pip options (a word starting with ``-``) and no bare URLs: a requirement names
  the package it installs, so a reader of the spec knows what lands on the nodes.
* ``workload.requirements`` -- a requirements file (relative to the spec's folder, like every path
  of a spec), mounted on the nodes and installed with ``pip install -r``; its lines are the user's
  own and pip reads them as usual (a local path inside it must exist on the nodes too).

Both are checked here, at load, before anything runs.  A local ``spotwise run`` uses the current
environment: they are not installed here.
"""

from __future__ import annotations

from typing import Any

from spotwise.errors import InputError
from spotwise.spec.checks import bad_char

#: a requirement longer than this is not one a person wrote
MAX_REQUIREMENT_CHARS = 500
#: more requirements than this belong in a requirements file
MAX_PACKAGES = 100


def check_packages(value: Any) -> list[str]:
    """``workload.packages`` as a list of PEP 508 requirement strings; InputError naming the bad entry."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be a list of pip requirements, got {value!r:.200}",
                         "e.g. packages: [timm==1.0.9, einops]", "packages")
    if len(value) > MAX_PACKAGES:
        raise InputError(f"names {len(value)} packages (at most {MAX_PACKAGES})",
                         "put them in a requirements file and name it in workload.requirements", "packages")
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[str] = []
    for i, req in enumerate(value):
        where = f"packages[{i}]"
        if not isinstance(req, str) or not req.strip():
            raise InputError(f"must be a pip requirement (text), got {req!r:.200}", "e.g. timm==1.0.9", where)
        req = req.strip()
        ch = bad_char(req)
        if ch is not None:
            raise InputError(f"{req!r:.200} holds the control character {ch}", "write the requirement on one line", where)
        if len(req) > MAX_REQUIREMENT_CHARS:
            raise InputError(f"is {len(req)} characters long (at most {MAX_REQUIREMENT_CHARS})",
                             "name the package and its version, e.g. timm==1.0.9", where)
        if req.startswith("-"):
            raise InputError(f"{req!r:.200} is a pip option, not a requirement",
                             "name packages only; options (an index URL, -e, -r) go in a file named by "
                             "workload.requirements", where)
        try:
            Requirement(req)
        except InvalidRequirement as e:
            fix = ("a URL installs as NAME @ URL, e.g. mylib @ git+https://github.com/me/mylib.git"
                   if "://" in req else "write it as pip reads it, e.g. timm==1.0.9 or einops>=0.8")
            raise InputError(f"{req!r:.200} is not a pip requirement ({str(e).splitlines()[0][:200]})", fix, where) from None
        if req in out:
            raise InputError(f"{req!r:.200} is named twice", "name each package once", where)
        out.append(req)
    return out


def check_requirements(value: Any) -> str | None:
    """``workload.requirements``: the path of a requirements file (existence is checked where the file is
    read or mounted: at ``--emit``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"must be the path of a requirements file, got {value!r:.200}",
                         "e.g. requirements: requirements.txt (relative to the spec's folder)", "requirements")
    ch = bad_char(value)
    if ch is not None:
        raise InputError(f"{value!r:.200} holds the control character {ch}", "give the file's path on one line",
                         "requirements")
    return value


__all__ = ["check_packages", "check_requirements"]
