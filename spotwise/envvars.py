"""The numeric settings spotwise reads from ``SPOTWISE_*`` environment variables, each with its range.

Every one is read through :func:`env_number`, which refuses (InputError, exit 2, naming the variable
and its allowed range) a value that is not a number, not finite (``inf``, ``nan``), outside its
range (zero, negative, absurdly large) or, for a count, not an integer -- an unchecked
``SPOTWISE_LEASE_TTL_S=inf`` made a run wait forever for a lease (issue 38 item 1).
:func:`check_numeric_env` checks them all at once; ``spotwise run`` / ``demo`` call it before
anything is loaded, so a bad value is refused before Ray starts, not when it is first used.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from spotwise.errors import InputError


@dataclass(frozen=True)
class EnvNumber:
    """One numeric variable: its default, its allowed range (inclusive), its unit and an example value."""

    default: float
    lo: float
    hi: float
    unit: str
    example: str
    integer: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} of {self.unit} from {self.lo:g} to {self.hi:g}"


#: every numeric SPOTWISE_* variable (a ``default`` of NaN: unset means "derived", see the reader)
NUMERIC_ENV: dict[str, EnvNumber] = {
    # spotwise.remote.lease: a lease is stale this long after its holder's last heartbeat
    "SPOTWISE_LEASE_TTL_S": EnvNumber(90.0, 0.5, 86400.0, "seconds", "90"),
    # spotwise.inputfiles: the size cap of one input file (spec, catalog, trace, run-directory file)
    "SPOTWISE_MAX_FILE_MB": EnvNumber(256.0, 0.001, 1048576.0, "MiB", "1024"),
    # spotwise.remote.fetch: the size cap of one event log or checkpoint downloaded from outputs.uri
    "SPOTWISE_MAX_DOWNLOAD_MB": EnvNumber(65536.0, 0.001, 16777216.0, "MiB", "131072"),
    # spotwise.capacity.raystart: worker actors the local emulated provider may run (unset: from the memory)
    "SPOTWISE_MAX_LOCAL_WORKERS": EnvNumber(math.nan, 1, 100000, "worker actors", "32", integer=True),
    # spotwise.capacity.raystart: the local Ray's object store (unset: sized to the memory the process may use)
    "SPOTWISE_OBJECT_STORE_MB": EnvNumber(math.nan, 75, 1048576.0, "MiB", "512"),
}


def env_is_set(name: str) -> bool:
    """Whether ``name`` is set to something other than blanks."""
    return bool((os.environ.get(name) or "").strip())


def env_number(name: str) -> float:
    """``$name`` as a number within its range (:data:`NUMERIC_ENV`), or its default when unset or blank.

    InputError naming the variable and the allowed range otherwise.  Counts come back as whole floats
    (``int()`` them)."""
    spec = NUMERIC_ENV[name]
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return spec.default
    try:
        v = float(raw.strip())
    except ValueError:
        v = math.nan
    ok = math.isfinite(v) and spec.lo <= v <= spec.hi and (not spec.integer or v == int(v))
    if not ok:
        default = "derived from the machine" if math.isnan(spec.default) else f"{spec.default:g} {spec.unit}"
        raise InputError(f"{raw!r:.60} is not {spec.describe()}",
                         f"set it within that range, e.g. {name}={spec.example}, or unset it for the default ({default})",
                         name)
    return v


def check_numeric_env() -> None:
    """Check every variable of :data:`NUMERIC_ENV` that is set (InputError for the first bad one)."""
    for name in NUMERIC_ENV:
        env_number(name)
