"""The run directory on object storage (issue 29 item 4): ``outputs.uri: s3://bucket/prefix``.

A run always writes its ordinary local run directory (``--out``, or a staging folder derived from
the URI); these modules mirror it to the URI as it goes and bring it back for ``--resume URI``:

* :mod:`spotwise.remote.uri` -- the URI's syntax (``s3://``, ``gs://``, ``file://``), its fsspec
  file system, the write probe and the default local staging folder;
* :mod:`spotwise.remote.mirror` -- :class:`~spotwise.remote.mirror.RunMirror`, which uploads each
  file once it is durably written locally (checkpoint data before its manifest);
* :mod:`spotwise.remote.fetch` -- reading a run back from the URI (only the names a run
  directory may hold, size-capped);
* :mod:`spotwise.remote.location` -- :func:`~spotwise.remote.location.open_run_location`, the
  run directory's lock plus the remote side, used by the runner.
"""
