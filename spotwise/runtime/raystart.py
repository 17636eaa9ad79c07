"""Starting Ray (local) or connecting to a cluster, with the settings the project uses everywhere."""

from __future__ import annotations

import logging
import os
from typing import Any

from spotwise.errors import InputError


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start (or connect to) Ray with the settings the project uses everywhere."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except Exception as e:  # ConnectionError and Ray's own variants
            raise InputError(f"cannot connect to the Ray cluster at {address!r} ({e.__class__.__name__})",
                             "check the address (ray status on the head node prints it) and that the cluster is up",
                             "--ray-address") from None
        return
    ray.init(num_cpus=num_cpus or os.cpu_count() or 1, **kwargs)


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail fast (exit 2) on a Ray address nothing listens on, instead of Ray's minutes of retries."""
    import socket

    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"malformed Ray address {address!r}", "write HOST:PORT, e.g. 127.0.0.1:6379", "--ray-address")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise InputError(f"cannot reach the Ray cluster at {address} ({e.strerror or e.__class__.__name__})",
                         "check the address that `ray start --head` printed and that the head node is up", "--ray-address") from None
