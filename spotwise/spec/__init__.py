"""The job spec: everything that turns a YAML job description into validated dataclasses.

* :mod:`spotwise.spec.load` -- plain data (parsed YAML/JSON) -> dataclasses, durations, field paths in errors;
* :mod:`spotwise.spec.checks` -- the small validators the spec dataclasses share;
* :mod:`spotwise.spec.market` -- the market side of a spec (synthetic prices, revocations, markets, pools);
* :mod:`spotwise.spec.pools` -- the checks of ``cluster.pools``, ``cluster.balance`` and ``cluster.ps_shards``;
* :mod:`spotwise.spec.hardware` -- ``cluster.accelerators`` / ``target.hours`` resolved into concrete fields.

The dataclasses themselves (:class:`~spotwise.config.JobSpec`, ``ClusterSpec``, ...) live in
:mod:`spotwise.config`, which also re-exports the market and pool specs of :mod:`spotwise.spec.market`;
import them from there.  This package re-exports nothing, so that ``spotwise.config`` can import its
modules without an import circle.
"""
