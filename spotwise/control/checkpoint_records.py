"""The plain-data records of a checkpoint, checked before a resume reads any of them (issue 54).

A checkpoint in a run directory is untrusted input: anyone who can write the folder can write one whose
checksum verifies.  :func:`record_problem` says what is wrong with its records -- ``None`` when every one is
exactly what :class:`~spotwise.control.checkpointing.Checkpointer` writes -- so that
:func:`~spotwise.control.checkpoint.check_state` rejects a malformed checkpoint as it rejects a torn one (the
resume falls back to an older checkpoint, saying why, or exits 2 naming every reason).  The rule, for every
record (and checked for each in ``tests/test_checkpoint_records.py``):

* **an unknown key is refused** -- at the top level and inside every record spotwise defines (a checkpoint of
  another writer or version is not half-read);
* **a missing key is refused** -- every key spotwise writes for the run's kind of job;
* **a wrong type, a NaN or infinity, a negative count or a value out of its range is refused**, naming the field.

One record is checked but not read back: ``cost`` (the money at the checkpoint, for readers of the run
directory) -- a resume carries the ``ledger``'s ``settled`` money, which holds the same and the open intervals.

What depends on the job being resumed (the sampler's data set size, the market's timeline length, a plane's
own records -- ``plane_carried``, ``round_draws``, ``schedule`` and a serverless ledger -- and the training
state's tensors) is checked where it is read, with an :class:`~spotwise.errors.InputError` naming the field
(exit 2): :mod:`spotwise.control.carried`, the planes' ``restore_state``, and
:meth:`~spotwise.control.checkpointing.Checkpointer.restore`, which turns any error a record's consumer raises
(torch's optimizer ``load_state_dict``, ``set_rng_state``) into that exit 2 naming the record.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
import torch

from spotwise.control.carried import money, durations, number_map, optional_number
from spotwise.errors import InputError
from spotwise.safeparse import loads_json

#: keys every checkpoint carries (format 1)
REQUIRED_KEYS = ("format", "step", "params", "lr", "T", "sampler", "dur_rng", "iter_rng", "available",
                 "provisioned", "sync", "sync_n", "ema_loss", "counters", "cost", "ledger", "place", "worker_market",
                 "carried", "plane_carried")
#: ... and those a serverless job's checkpoint (``kind: "serverless"``) carries besides them
SERVERLESS_KEYS = (*REQUIRED_KEYS, "kind", "schedule")
#: keys some checkpoints carry: the emulated market's position, the collective plane's round times drawn
#: ahead, a real model's state, restart mode's generation count (each plane checks its own records when it restores them)
OPTIONAL_KEYS = ("market", "expansions", "timeline", "round_draws", "model", "train_extra", "rng", "restart")
KNOWN_KEYS = frozenset((*SERVERLESS_KEYS, *OPTIONAL_KEYS))

_SAMPLER_KEYS = ("n", "seed", "epoch", "cursor", "pending", "next_id", "committed_in_epoch")
_TIMELINE_ORIGINS = ("initial", "expand", "rebid")
#: the emulated market's position (:meth:`~spotwise.capacity.provider.EmulatedProvider.market_state`)
_EMULATED_KEYS = ("market", "expansions", "timeline")
#: a real model's training state (:meth:`~spotwise.control.checkpointing.Checkpointer.take`)
_TRAINING_KEYS = ("model", "train_extra", "rng")
_OPEN_KEYS = ("instance_id", "t0", "category", "market", "policy")
_CARRIED_KEYS = ("last_loss", "last_eval", "recoveries_ms")
#: the most entries a list of a checkpoint may hold (slots, pending blocks, open intervals)
MAX_LIST = 1_000_000
#: the longest JSON text of a generator's state
MAX_RNG_TEXT = 100_000


class _Bad(Exception):
    """One record's problem (the text :func:`record_problem` returns)."""


def _shown(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _count(v: Any, field: str, upper: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (upper is not None and v > upper):
        want = "a count" if upper is None else f"a count <= {upper}"
        raise _Bad(f"{field} is {_shown(v)}, not {want}")
    return v


def _number(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _Bad(f"{field} is {_shown(v)}, not a finite number >= 0")
    return float(v)


def _text(v: Any, field: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str) or len(v) > 10_000 or (choices is not None and v not in choices):
        raise _Bad(f"{field} is {_shown(v)}, not " + (f"one of {', '.join(choices)}" if choices else "a name"))
    return v


def _keys(d: Any, field: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``d`` is a map with every key of ``required``, any of ``optional`` and no other."""
    if not isinstance(d, dict):
        raise _Bad(f"{field} is a {type(d).__name__}, not a map")
    unknown = [k for k in d if k not in required and k not in optional]
    if unknown:
        raise _Bad(f"{field} holds {_shown(unknown[0])}, which spotwise never writes there "
                   f"({', '.join((*required, *optional))})")
    missing = [k for k in required if k not in d]
    if missing:
        raise _Bad(f"{field} lacks {', '.join(missing)}")
    return d


def _carried(fn: Callable[..., Any], *args: Any) -> Any:
    """A reader of :mod:`spotwise.control.carried`, its InputError as this module's problem."""
    try:
        return fn(*args)
    except InputError as e:
        raise _Bad(e.what) from None


def _sampler(s: Any) -> None:
    s = _keys(s, "sampler", _SAMPLER_KEYS, ("ordered",))
    n = _count(s["n"], "sampler.n")
    if n < 1:
        raise _Bad("sampler.n is 0, not the size of a training set")
    _count(s["seed"], "sampler.seed", 2**63 - 1)
    _count(s["epoch"], "sampler.epoch", 2**62)
    _count(s["cursor"], "sampler.cursor", n)
    _count(s["next_id"], "sampler.next_id", 2**62)
    _count(s["committed_in_epoch"], "sampler.committed_in_epoch", n)
    if "ordered" in s and s["ordered"] is not True:
        raise _Bad(f"sampler.ordered is {_shown(s['ordered'])}, not true (a shuffled sampler writes none)")
    pending = s["pending"]
    if not isinstance(pending, list) or len(pending) > MAX_LIST:
        raise _Bad(f"sampler.pending is {_shown(pending)}, not a list of index blocks")
    held = 0
    for block in pending:
        if not isinstance(block, list) or not all(not isinstance(i, bool) and isinstance(i, int) and 0 <= i < n for i in block):
            raise _Bad(f"sampler.pending holds {_shown(block)}, not a block of sample indices below {n}")
        held += len(block)
        if held > n:
            raise _Bad(f"sampler.pending holds more than the {n} samples of the training set")


def _generator(text: Any, field: str, allow_empty: bool) -> None:
    """A numpy generator's state as JSON text: it must set a PCG64 generator (what spotwise uses)."""
    if allow_empty and text == "":
        return
    if not isinstance(text, str) or not text or len(text) > MAX_RNG_TEXT:
        raise _Bad(f"{field} is {_shown(text)}, not a random generator's state")
    try:
        state = loads_json(text, field, "checkpoint field")
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise ValueError("not a PCG64 state")
        np.random.PCG64().state = state
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError, InputError) as e:
        raise _Bad(f"{field} is not a random generator's state ({type(e).__name__}: {str(e)[:60]})") from None


def _market_position(state: dict[str, Any]) -> None:
    avail = state["available"]
    if not isinstance(avail, list) or len(avail) > MAX_LIST or len(set(map(repr, avail))) != len(avail):
        raise _Bad(f"available is {_shown(avail)}, not a list of distinct slots")
    for w in avail:
        _count(w, "available[]", MAX_LIST)
    emulated = [k for k in _EMULATED_KEYS if k in state]
    if emulated and len(emulated) != len(_EMULATED_KEYS):  # the emulated market writes all three
        raise _Bad(f"it lacks {', '.join(k for k in _EMULATED_KEYS if k not in state)} (an emulated market's position "
                   f"is {', '.join(_EMULATED_KEYS)})")
    if emulated:
        _text(state["market"], "market", ("spot", "on-demand"))
        _count(state["expansions"], "expansions", MAX_LIST)
        tl = state["timeline"]
        origin = tl.get("origin") if isinstance(tl, dict) else None
        tl = _keys(tl, "timeline", ("origin", "t", "popped"), ("bids",) if origin == "rebid" else ())
        _text(tl["origin"], "timeline.origin", _TIMELINE_ORIGINS)
        if _number(tl["t"], "timeline.t") > float(state["T"]) or (origin == "initial" and tl["t"] != 0):
            raise _Bad(f"timeline.t is {tl['t']!r}, not the instant its timeline began (0 for the initial one, "
                       f"at most the checkpoint's time {state['T']!r})")
        _count(tl["popped"], "timeline.popped")
        if origin == "rebid":
            bids = tl.get("bids")
            if not isinstance(bids, list) or not bids or len(bids) > MAX_LIST:
                raise _Bad(f"timeline.bids is {_shown(bids)}, not one bid per slot")
            for b in bids:
                if _number(b, "timeline.bids[]") <= 0:
                    raise _Bad("timeline.bids holds a bid of 0, not a price")


def _place(state: dict[str, Any]) -> None:
    place = state["place"]
    if not isinstance(place, (list, tuple)) or len(place) != 2 or not isinstance(place[0], str) or not place[0] \
            or not (place[1] is None or isinstance(place[1], str)):
        raise _Bad(f"place is {_shown(place)}, not [instance type, region or null]")
    _text(state["worker_market"], "worker_market", ("spot", "on_demand"))


def _vm_ledger(led: Any, T: float) -> None:
    from spotwise.market.billing import BillingPolicy

    led = _keys(led, "ledger", ("settled", "open"))
    _carried(money, led["settled"], "ledger.settled")
    opened = led["open"]
    if not isinstance(opened, list) or len(opened) > MAX_LIST:
        raise _Bad(f"ledger.open is {_shown(opened)}, not a list of open intervals")
    fields = {f.name: f.type for f in dataclasses.fields(BillingPolicy)}
    for e in opened:
        e = _keys(e, "ledger.open[]", _OPEN_KEYS)
        _text(e["instance_id"], "ledger.open[].instance_id")
        if _number(e["t0"], "ledger.open[].t0") > T:
            raise _Bad(f"ledger.open[].t0 is {e['t0']!r}, after the checkpoint's time {T!r}")
        _text(e["category"], "ledger.open[].category")
        _text(e["market"], "ledger.open[].market", ("spot", "on_demand"))
        pol = _keys(e["policy"], "ledger.open[].policy", tuple(fields))
        if not isinstance(pol["revoked_partial_free"], bool) or not isinstance(pol["name"], str) \
                or not isinstance(pol["price_rule"], str):
            raise _Bad(f"ledger.open[].policy is {_shown(pol)}, not a billing policy")
        try:
            BillingPolicy(**pol)
        except (InputError, TypeError, ValueError) as err:
            raise _Bad(f"ledger.open[].policy is not a billing policy ({str(err)[:80]})") from None


def _carried_summary(c: Any) -> None:
    c = _keys(c, "carried", _CARRIED_KEYS)
    _carried(optional_number, c["last_loss"], "carried.last_loss")
    _carried(number_map, c["last_eval"], "carried.last_eval")
    _carried(durations, c["recoveries_ms"], "carried.recoveries_ms")


def _training_state(state: dict[str, Any]) -> None:
    held = [k for k in _TRAINING_KEYS if k in state]
    if held and len(held) != len(_TRAINING_KEYS):  # a real model's checkpoint holds all three
        raise _Bad(f"it lacks {', '.join(k for k in _TRAINING_KEYS if k not in state)} (a model's training state is "
                   f"{', '.join(_TRAINING_KEYS)})")
    if "model" in state:
        m = state["model"]
        if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in m.items()):
            raise _Bad("model is not a state_dict (names to tensors)")
    if "train_extra" in state and not isinstance(state["train_extra"], dict):
        raise _Bad(f"train_extra is a {type(state['train_extra']).__name__}, not a map")
    if "rng" in state:
        rng = _keys(state["rng"], "rng", ("torch", "numpy_iter"))
        t = rng["torch"]
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or tuple(t.shape) != tuple(torch.get_rng_state().shape):
            raise _Bad("rng.torch is not torch's generator state")
        if rng["numpy_iter"] != "":
            raise _Bad(f"rng.numpy_iter is {_shown(rng['numpy_iter'])}, not empty (the provider holds that generator)")


def record_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with the records of a checkpoint ``state`` whose keys, step, parameters and scalars
    :func:`~spotwise.control.checkpoint.check_state` has checked; ``None`` when every record is spotwise's."""
    from spotwise.control.sync import SYNC_STRATEGIES

    try:
        unknown = sorted(str(k) for k in state if k not in KNOWN_KEYS)
        if unknown:
            raise _Bad(f"it holds {_shown(unknown[0])}, which no spotwise checkpoint holds")
        serverless = state.get("kind") == "serverless"
        if "kind" in state and not serverless:
            raise _Bad(f"kind is {_shown(state['kind'])}, not serverless (a VM run's checkpoint has none)")
        _sampler(state["sampler"])
        _generator(state["dur_rng"], "dur_rng", allow_empty=False)
        _generator(state["iter_rng"], "iter_rng", allow_empty=True)
        _market_position(state)
        _place(state)
        _text(state["sync"], "sync", tuple(SYNC_STRATEGIES) + (("bsp", "ssp", "isp") if serverless else ()))
        if state["sync_n"] is not None:
            _count(state["sync_n"], "sync_n", MAX_LIST)
        _carried(money, state["cost"], "cost")
        if not serverless:  # a serverless ledger is the plane's (checked by its accounting on restore)
            _vm_ledger(state["ledger"], float(state["T"]))
        _carried_summary(state["carried"])
        for key in ("plane_carried",):
            if key in state and not isinstance(state[key], dict):
                raise _Bad(f"{key} is a {type(state[key]).__name__}, not a map")
        _training_state(state)
    except _Bad as e:
        return str(e)
    return None
