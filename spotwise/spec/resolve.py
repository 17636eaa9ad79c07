"""What a loaded spec settles once it is whole: its data plane, a built-in's family, epochs in samples.

Each takes a :class:`~spotwise.config.JobSpec` and fills in what its fields imply
(:func:`settle_data_plane`: ``cluster.data_plane: auto``; :func:`resolve_family`: a built-in
workload's own throughput family, issue 42 item 2; :func:`resolve_epochs`: ``target.epochs`` in
samples once the training set's size is known, and ``target.tokens`` once its tokens per sample
are, issue 41 item 4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.spec.plane_choice import choose_data_plane


def resolve_family(spec: Any) -> None:
    """A family the spec did not give (a built-in's own, :data:`IMPLIED_FAMILIES`) is kept where the
    instance type (every pool's) has a throughput profile for it, else it is ``mlp`` -- the CPU types'
    (issue 42 item 2: ``resnet18-cifar`` on a V100 is planned as resnet18 without ``family:``)."""
    w = spec.workload
    if not w.__dict__.get("_family_implied") or w.family == "mlp":
        return
    from spotwise.spec.plane_choice import _packaged_catalog

    catalog = _packaged_catalog()
    try:
        for path in spec.market.catalog:
            catalog = catalog.extend(path)
    except InputError:
        return  # a catalog file not readable from here: the market's build reports it
    c = spec.cluster
    types = [p.instance_type for p in c.pools] if c.pools else [c.instance_type]
    for name in types:
        if not name:  # not picked yet (cluster.accelerators): settled after spotwise.spec.hardware picks it
            return
        try:
            it = catalog.instance(name, cloud=c.cloud, region=c.region)
        except InputError:
            return  # an unknown type: the market's build names it
        if catalog._throughput_or_none(it, w.family) is None:
            w.family = "mlp"
            return


def resolve_epochs(spec: Any, n_train: int | None = None) -> None:
    """``target.epochs`` or ``target.tokens`` in samples: the training set's size (``n_train``, else
    the workload built once here) or the workload's tokens per sample (``info["tokens_per_sample"]``,
    a ``gpt-bytes`` sample's ``block_size``) kept on the spec, and the recipe checked against the
    length it gives.  Nothing for a spec without either or already resolved.  A workload that does
    not say its tokens per sample is an InputError."""
    t = spec.target
    if t.epochs is not None and not t.__dict__.get("_n_train"):
        if n_train is None:
            from spotwise.elastic.describe import workload_for

            n_train = len(workload_for(spec.workload, spec.seed).train)
        t.__dict__["_n_train"] = int(n_train)  # not a spec field: never written to spec.json
        spec._check_recipe()
    if t.tokens is not None and not t.__dict__.get("_tokens_per_sample"):
        t.__dict__["_tokens_per_sample"] = tokens_per_sample(spec)
        spec._check_recipe()


def tokens_per_sample(spec: Any) -> int:
    """The tokens one training sample of ``spec.workload`` holds (its loss's targets): the workload's
    ``info["tokens_per_sample"]``, or a ``gpt-bytes`` window's ``block_size``."""
    w = spec.workload
    if w.script is not None:
        raise InputError("target.tokens needs the workload's tokens per sample, which a training script does not "
                         "declare", "give the job's length as target.samples (tokens / your sequence length)",
                         "target.tokens")
    from spotwise.elastic.describe import workload_for

    info = workload_for(w, spec.seed).info or {}
    tps = info.get("tokens_per_sample")
    if isinstance(tps, bool) or not isinstance(tps, int) or tps < 1:
        raise InputError(f"workload {w.name!r} does not say how many tokens a sample holds",
                         "use target.samples or target.epochs, or (your module:function workload) set "
                         "info['tokens_per_sample'] on the Workload it returns", "target.tokens")
    return int(tps)


def settle_data_plane(spec: Any) -> None:
    """``cluster.data_plane: auto`` becomes the plane the job's workers get, and the checks that depend
    on the plane run again (:mod:`spotwise.spec.plane_choice`); why is kept for ``plan`` and ``run``
    (:func:`data_plane_why`)."""
    c = spec.cluster
    plane, why = choose_data_plane(c, [str(p) for p in spec.market.catalog], script=spec.workload.script is not None)
    c.__dict__["_plane_why"] = why  # not a spec field: never written to spec.json
    if plane != c.data_plane:
        c.data_plane = plane  # type: ignore[assignment]
        c._check_data_plane()
        spec._check_recipe()


def data_plane_why(spec: Any) -> str:
    """Why the job trains on ``cluster.data_plane`` (``the workers have GPUs (p3.2xlarge: 1 x V100) ...``)."""
    c = spec.cluster
    return str(c.__dict__.get("_plane_why") or choose_data_plane(c, script=spec.workload.script is not None)[1])


def resolve_paths(spec: Any, base: Path) -> None:
    """The spec file's relative paths (traces, catalogs, lifetimes, dataset, script,
    requirements file; the pools' own traces and lifetimes) made absolute, then checked
    (:func:`~spotwise.spec.input_paths.check_spec_files`)
    against the folder it was read from."""
    def res(s: str) -> str:
        q = Path(s).expanduser()
        return str(q if q.is_absolute() else (base / q).resolve())

    m = spec.market
    m.traces = [res(t) for t in m.traces]
    m.catalog = [res(c) for c in m.catalog]
    if m.synthetic is not None and m.synthetic.fit_to is not None:
        m.synthetic.fit_to = res(m.synthetic.fit_to)
    if m.revocation.lifetimes is not None:
        m.revocation.lifetimes = res(m.revocation.lifetimes)
    if spec.workload.dataset is not None:
        spec.workload.dataset = res(spec.workload.dataset)
    if spec.workload.script is not None:
        spec.workload.script = res(spec.workload.script)
    if spec.workload.requirements is not None:
        spec.workload.requirements = res(spec.workload.requirements)
    for pool in spec.cluster.pools or []:  # a pool's own traces and lifetimes, read like the job's
        if pool.revocation is not None and pool.revocation.lifetimes is not None:
            pool.revocation.lifetimes = res(pool.revocation.lifetimes)
        if pool.market is not None:
            pool.market.traces = [res(t) for t in pool.market.traces]
            if pool.market.synthetic is not None and pool.market.synthetic.fit_to is not None:
                pool.market.synthetic.fit_to = res(pool.market.synthetic.fit_to)
    from spotwise.spec.input_paths import check_spec_files

    check_spec_files(spec)  # each a regular, readable file of sane size, stat only (issue 54 item 9)
