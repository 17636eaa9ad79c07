"""Every spec field that names a local file spotwise reads or ships to the nodes, walked in one place
(issue 54 item 9), and the check each path passes when the spec is loaded.

* :func:`spec_paths` -- ``(where, container, key)`` of each such field in a spec dict (the
  :meth:`~spotwise.config.JobSpec.to_dict` form): ``market.traces[i]``, ``market.catalog[i]``,
  ``market.synthetic.fit_to``, ``market.revocation.lifetimes``, ``workload.dataset``,
  ``workload.script``, ``workload.requirements`` and every pool's own traces, catalog and lifetimes.
  ``--emit`` mounts them (:mod:`spotwise.planner.emit.files`); a field added later is added here.
* :func:`check_spec_files` -- each of them checked at load with
  :func:`spotwise.inputfiles.check_input_file` (stat only: a FIFO is never opened): it exists, is a
  regular file (``workload.dataset``, ``traces`` and ``fit_to`` may also be a folder: the built-in datasets and
  :func:`~spotwise.market.traces.load_traces` read one), is
  readable and, except the dataset (a corpus may be large), within the per-file cap.  Anything else
  is an :class:`~spotwise.errors.InputError` (exit 2) naming the field -- not an emitted cluster
  whose every node fails on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from spotwise.inputfiles import check_input_file

#: what each field's file is, as messages name it (keyed by the field's last name)
_WHAT = {"traces": "trace file or folder", "catalog": "catalog file", "fit_to": "trace file or folder", "lifetimes": "lifetimes file",
         "dataset": "dataset file or folder", "script": "training script", "requirements": "requirements file"}


#: fields that may name a folder: a dataset (the built-in datasets read one) and traces (load_traces reads every
#: trace file in a folder, as ``spotwise plan --trace DIR`` does)
_FOLDER_OK = frozenset({"dataset", "traces", "fit_to"})


def spec_paths(d: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """``(where, container, key)`` of every input path in a spec dict (``JobSpec.to_dict()`` form)."""
    def market(m: Any, at: str) -> Iterator[tuple[str, Any, Any]]:
        if not isinstance(m, dict):
            return
        for key in ("traces", "catalog"):
            for i, _ in enumerate(m.get(key) or []):
                yield f"{at}.{key}[{i}]", m[key], i
        synth = m.get("synthetic")
        if isinstance(synth, dict) and synth.get("fit_to"):
            yield f"{at}.synthetic.fit_to", synth, "fit_to"
        rev = m.get("revocation")
        if isinstance(rev, dict) and rev.get("lifetimes"):
            yield f"{at}.revocation.lifetimes", rev, "lifetimes"

    yield from market(d.get("market"), "market")
    wl = d.get("workload")
    if isinstance(wl, dict):
        for key in ("dataset", "script", "requirements"):  # the data, the user's training script, its pip file
            if wl.get(key):
                yield f"workload.{key}", wl, key
    for j, pool in enumerate((d.get("cluster") or {}).get("pools") or []):
        if isinstance(pool, dict):
            rev = pool.get("revocation")
            if isinstance(rev, dict) and rev.get("lifetimes"):
                yield f"cluster.pools[{j}].revocation.lifetimes", rev, "lifetimes"
            yield from market(pool.get("market"), f"cluster.pools[{j}].market")


def _field_key(where: str) -> str:
    return where.rsplit(".", 1)[-1].split("[", 1)[0]


def check_spec_path(where: str, raw: str, base: Path | None = None) -> Path:
    """The input file ``raw`` of the field ``where`` (relative: against ``base``, else the current folder)
    checked as that field's file; returns the local path, InputError naming the field."""
    p = Path(raw).expanduser()
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    name = _field_key(where)
    return check_input_file(p, _WHAT.get(name, "file"), where, folder_ok=name in _FOLDER_OK, capped=name != "dataset")


def check_spec_files(spec: Any, base: Path | None = None) -> None:
    """Every input file of ``spec`` (a :class:`~spotwise.config.JobSpec` or its dict form; relative paths
    against ``base``, else the current folder) checked without opening it; InputError naming the field."""
    d = spec if isinstance(spec, dict) else spec.to_dict()
    for where, box, key in spec_paths(d):
        if isinstance(box[key], str):  # else the field's own check says what it must be
            check_spec_path(where, box[key], base)


__all__ = ["check_spec_files", "check_spec_path", "spec_paths"]
