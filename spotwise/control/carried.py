"""What a run's summary adds up over its sessions, as a checkpoint carries it (issue 54 item 5).

A resumed run is the uninterrupted run: its ``summary.json`` reports the whole run, not the last
session.  Whatever the summary reads that a session accumulates -- the last step's loss, the last
evaluation, a training script's latest metrics, the per-phase step timing, the recoveries and joins
measured, the regroups -- is therefore written into every checkpoint and read back on resume (a
resume that has nothing left to train reports exactly what the finished run did).

A checkpoint is untrusted input: each reader here checks what it takes back and refuses anything
else with an :class:`~spotwise.errors.InputError` naming the field (exit 2), never half-uses it.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

from spotwise.errors import InputError

#: the most entries a carried list or map may hold (a run's recoveries, a script's metric names)
MAX_ENTRIES = 1_000_000
#: the longest name a carried map may use (a script's metric names are the script's: any string)
MAX_NAME = 100_000

_FIX = "resume from the run directory spotwise wrote (or start the run again with --overwrite)"


def refuse(field: str, value: Any, want: str) -> InputError:
    """The error for a checkpoint's ``field`` holding ``value`` where ``want`` belongs."""
    shown = repr(value)
    return InputError(f"the checkpoint's {field} is {shown[:80]}{'...' if len(shown) > 80 else ''}, not {want}", _FIX)


def _finite(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))


def optional_number(raw: Any, field: str) -> float | None:
    """A finite number or None (the last step's loss: None before any step, or a NaN step's)."""
    if raw is None:
        return None
    if not _finite(raw):
        raise refuse(field, raw, "a finite number or null")
    return float(raw)


def count(raw: Any, field: str) -> int:
    """A count (an integer >= 0)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise refuse(field, raw, "a count")
    return int(raw)


def number_map(raw: Any, field: str) -> dict[str, float]:
    """``{name: finite number}`` (an evaluation's values, a script's metrics, milliseconds by phase)."""
    if not isinstance(raw, dict) or len(raw) > MAX_ENTRIES:
        raise refuse(field, raw, "a map of names to numbers")
    out: dict[str, float] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or len(k) > MAX_NAME or not _finite(v):
            raise refuse(f"{field}[{str(k)[:40]!r}]", v, "a finite number under a name")
        out[k] = float(v)
    return out


def amount(raw: Any, field: str) -> float:
    """A finite number >= 0 (seconds, dollars)."""
    if not _finite(raw) or float(raw) < 0:
        raise refuse(field, raw, "a finite number >= 0")
    return float(raw)


#: the maps of a cost breakdown (``summary.json``'s ``cost_breakdown``), each ``{name: USD}``
COST_MAPS = ("by_category", "by_market", "by_instance", "by_pool")


#: the maps every breakdown holds (``by_pool``: a VM job's only)
_MONEY_KEYS = ("total", "by_category", "by_market", "by_instance")


def money(raw: Any, field: str) -> dict[str, Any]:
    """Money spent, as a checkpoint carries it: ``total``, ``by_category``, ``by_market`` and
    ``by_instance`` (and a VM job's ``by_pool``), every amount finite and >= 0, ``by_category`` adding
    up to the total, ``by_market`` and ``by_instance`` to the same instance money, at most the total.
    Any other key, or one of these missing, is refused: the money a resume carries into the summary is
    either exactly spotwise's or not used."""
    if not isinstance(raw, dict):
        raise refuse(field, raw, "a map of money spent")
    unknown = [k for k in raw if k != "total" and k not in COST_MAPS]
    if unknown:
        raise refuse(f"{field}[{str(unknown[0])[:40]!r}]", raw[unknown[0]], f"one of total, {', '.join(COST_MAPS)}")
    missing = [k for k in _MONEY_KEYS if k not in raw]
    if missing:
        raise refuse(field, raw, f"a map of money spent with its {', '.join(missing)}")
    out: dict[str, Any] = {"total": amount(raw["total"], f"{field}.total")}
    for key in COST_MAPS:
        m = number_map(raw.get(key, {}), f"{field}.{key}")
        for k, v in m.items():
            if v < 0:
                raise refuse(f"{field}.{key}[{k[:40]!r}]", v, "an amount >= 0")
        out[key] = m
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)  # noqa: E731
    if not close(sum(out["by_category"].values()), out["total"]):
        raise refuse(f"{field}.by_category", out["by_category"], f"amounts adding up to the total {out['total']!r}")
    instances = sum(out["by_instance"].values())
    if not close(sum(out["by_market"].values()), instances) or instances > out["total"] * (1 + 1e-6) + 1e-9:
        raise refuse(f"{field}.by_market", out["by_market"], f"the instances' money {instances!r} by market, "
                     f"at most the total {out['total']!r}")
    if "by_pool" not in raw:
        out.pop("by_pool")
    return out


def durations(raw: Any, field: str) -> list[float]:
    """A list of finite milliseconds >= 0 (recoveries, joins, regroups measured so far)."""
    if not isinstance(raw, (list, tuple)) or len(raw) > MAX_ENTRIES:
        raise refuse(field, raw, "a list of milliseconds")
    for v in raw:
        if not _finite(v) or float(v) < 0:
            raise refuse(field, v, "a list of milliseconds >= 0")
    return [float(v) for v in raw]


def exact(raw: Any, field: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """``raw`` as a map holding exactly ``keys`` (one missing would silently restart at its default, one
    unknown is another writer's): refused otherwise, naming the field."""
    if not isinstance(raw, dict):
        raise refuse(field, raw, "a map")
    unknown = [k for k in raw if k not in keys]
    missing = [k for k in keys if k not in raw]
    if unknown or missing:
        name = unknown[0] if unknown else missing[0]
        raise refuse(f"{field}[{str(name)[:40]!r}]", raw.get(name, "<absent>"), f"a map of exactly {', '.join(keys)}")
    return raw


def section(state: dict[str, Any], key: str) -> dict[str, Any]:
    """The checkpoint's ``key`` map (``{}`` in a checkpoint written before it existed)."""
    raw = state.get(key, {})
    if not isinstance(raw, dict):
        raise refuse(key, raw, "a map")
    return raw


@contextlib.contextmanager
def reading(record: str) -> Iterator[None]:
    """While a resume puts a checkpoint's ``record`` into the job: an error its consumer raises over the
    record's content (a ``ValueError``, ``TypeError``, ``KeyError``, ``IndexError`` -- or torch's
    ``RuntimeError`` of an optimizer state or generator state that does not fit) is the checkpoint's
    fault, not spotwise's: an :class:`~spotwise.errors.InputError` naming the record (exit 2).  The
    records' form is checked before (:mod:`spotwise.control.checkpoint_records`); this is what a
    consumer finds beyond the form (an optimizer state of another model, a timeline past its end)."""
    try:
        yield
    except InputError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as e:
        shown = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise InputError(f"the checkpoint's {record} cannot be restored into this job ({type(e).__name__}: {shown})",
                         _FIX) from None
