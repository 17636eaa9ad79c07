"""Restart mode (issue 55 item 6): an unmodified torchrun script on spot capacity, stopped and started again
from its own checkpoint at every membership change.

* :mod:`~spotwise.planes.restart.plane` -- the data plane (generations, leases, lost work, the end);
* :mod:`~spotwise.planes.restart.generation` -- one generation's ranks with torchrun's environment;
* :mod:`~spotwise.planes.restart.member` -- the member actor that runs one rank's process;
* :mod:`~spotwise.planes.restart.boot` -- what runs in the script's own process (PyTorch's hooks);
* :mod:`~spotwise.planes.restart.totals` / :mod:`~spotwise.planes.restart.state` -- what the run adds up, and
  the (empty) model state the coordinator keeps.
"""
