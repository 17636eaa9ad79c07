"""The traceback of user code (a ``module:function`` workload, a ``module:Class`` policy), without
spotwise's own leading frames: what the CLI prints above the one-line exit-2 message.

Also the checks on code references (refused modules, and whether a resumed run may import the code
its recorded spec names).  The spec (:mod:`spotwise.config`) validates its references here, so this
module reads a spec through :class:`NamesCode` -- the fields it needs -- and never imports it.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

_SPOTWISE_DIR = str(Path(__file__).resolve().parent)
#: an explicit traceback limit: ``None`` would mean ``sys.tracebacklimit``, which other code may set
_ALL_FRAMES = 1 << 20


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without the leading frames that belong to spotwise itself."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SPOTWISE_DIR):
        tb = tb.tb_next
    # every frame, whatever a library left in sys.tracebacklimit (SkyPilot sets it to 0 when it raises)
    return "".join(traceback.format_exception(type(exc), exc, tb, limit=_ALL_FRAMES))


#: top-level modules a code reference may never name: the standard library and builtins
#: (``os:system``, ``subprocess:run``, ``builtins:eval`` would run arbitrary commands from a spec)
FORBIDDEN_MODULES = frozenset(sys.stdlib_module_names) | {"builtins", "__main__"}


def refuse_unsafe_reference(ref: str, what: str, where: str) -> None:
    """Refuse a ``module:name`` reference (``what``: "workload", "policy", "optimizer") whose module is
    in the standard library or builtins, or any of whose parts is a dunder / name-mangled name.

    Raises :class:`~spotwise.errors.InputError` (exit 2) at ``where``; the syntax itself is the caller's.
    """
    from spotwise.errors import InputError

    mod, _, attr = str(ref).partition(":")
    parts = [p for p in mod.split(".") + [attr] if p]
    if any(p.startswith("__") for p in parts):
        raise InputError(f"{what} reference {ref!r} names a dunder or private (__...) attribute",
                         f"name your own {what} as 'package.module:Name' without '__' parts", where)
    top = mod.split(".")[0]
    if top in FORBIDDEN_MODULES:
        raise InputError(f"{what} reference {ref!r} names the standard-library module {top!r}; spotwise imports only your "
                         "own code there", f"write your {what} in a module of your own and name it as "
                         "'package.module:Name' (see docs, 'Security')", where)


class _NamedWorkload(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def optimizer(self) -> object: ...
    @property
    def dataset(self) -> str | None: ...


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class NamesCode(Protocol):
    """What :func:`code_references` reads of a job spec (a :class:`spotwise.config.JobSpec`): the
    workload's name, optimizer and dataset, and the policies' names."""

    @property
    def workload(self) -> _NamedWorkload: ...
    @property
    def policies(self) -> Sequence[_Named]: ...


def code_references(job: NamesCode) -> dict[str, str]:
    """The user-code references a spec names, by field: a ``module:function`` workload, a training
    script (and its arguments), a ``module:Class`` optimizer, ``module:Class`` policies (built-in
    names are not code)."""
    refs: dict[str, str] = {}
    script = getattr(job.workload, "script", None)
    if script:  # issue 41: a training script is code too, with its arguments
        import os

        refs["workload.script"] = os.path.normpath(os.path.abspath(os.path.expanduser(str(script))))
        refs["workload.args"] = " ".join(str(a) for a in getattr(job.workload, "args", []) or [])
    if ":" in job.workload.name:
        refs["workload.name"] = job.workload.name
    opt = job.workload.optimizer
    opt_name = opt.get("name") if isinstance(opt, dict) else opt
    if isinstance(opt_name, str) and ":" in opt_name:
        refs["workload.optimizer.name"] = opt_name
    for i, p in enumerate(job.policies):
        if ":" in str(p.name):
            refs[f"policies[{i}].name"] = str(p.name)
    return refs


def _dataset(job: NamesCode) -> str | None:
    """The recorded ``workload.dataset``, normalised for comparison (absolute, ``~`` expanded), or None."""
    import os

    ds = getattr(job.workload, "dataset", None)
    if not ds:
        return None
    return os.path.normpath(os.path.abspath(os.path.expanduser(str(ds))))


def check_resume_trust(recorded: NamesCode, given: NamesCode | None, trust_code: bool, where: str) -> None:
    """May a resumed run import the user code, and read the dataset, its recorded ``spec.json`` names?

    A run directory may come from someone else: its ``spec.json`` is untrusted input.  Built-in
    workloads and policies need nothing.  When the recorded spec names user code, the user must
    either pass their own spec (``given``) naming the same references, field by field, or pass
    ``trust_code``; otherwise -- or on any difference -- :class:`~spotwise.errors.InputError` (exit 2).

    A ``workload.dataset`` is treated the same way (issue 38 item 4): a resume reads the files it
    names -- and a training run can carry what it read out in its checkpoints, losses and mirrored
    run directory -- so a dataset path that only the run directory gives is read only with ``given``
    naming the same path or ``trust_code``.  Datasets are read by spotwise's own readers, never as code
    (CIFAR-10 batches through :mod:`spotwise.workloads.safe_pickle`), whatever is trusted.
    """
    from spotwise.errors import InputError

    _check_code_trust(recorded, given, trust_code, where)
    ds = _dataset(recorded)
    if given is not None:
        theirs = _dataset(given)
        if ds != theirs:
            raise InputError(
                f"the run's spec.json does not match the spec you passed: workload.dataset is "
                f"{repr(ds) if ds else 'absent'} in the run directory but {repr(theirs) if theirs else 'absent'} in your spec",
                "pass the spec the run was started with, or start a new run with --out", where)
        return
    if ds is not None and not trust_code:
        raise InputError(
            f"the run's spec.json names the dataset {ds!r}; resuming would read it",
            "pass the spec you started the run with (spotwise run SPEC --resume DIR) so spotwise can check the path, or "
            "--trust-code if you trust whoever wrote this run directory", where)


def _check_code_trust(recorded: NamesCode, given: NamesCode | None, trust_code: bool, where: str) -> None:
    """:func:`check_resume_trust` for the user-code references."""
    from spotwise.errors import InputError

    refs = code_references(recorded)
    if given is not None:
        theirs = code_references(given)
        def shown(job: NamesCode, found: dict[str, str], key: str) -> str:
            if key in found:
                return repr(found[key])
            return f"{job.workload.name!r} (built in)" if key == "workload.name" else "absent"

        for key in sorted(set(refs) | set(theirs)):
            if refs.get(key) != theirs.get(key):
                raise InputError(
                    f"the run's spec.json does not match the spec you passed: {key} is {shown(recorded, refs, key)} in the "
                    f"run directory but {shown(given, theirs, key)} in your spec",
                    "pass the spec the run was started with, or start a new run with --out", where)
        return
    if refs and not trust_code:
        names = ", ".join(f"{k}={v}" for k, v in refs.items())
        raise InputError(
            f"the run's spec.json names user code ({names}); resuming would import and run it",
            "pass the spec you started the run with (spotwise run SPEC --resume DIR) so spotwise can check it, or "
            "--trust-code if you trust whoever wrote this run directory", where)
