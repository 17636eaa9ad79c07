"""The one place spotwise reads a pickle: CIFAR-10 "python version" batches, by a reader that runs no code.

A pickle is a program: ``pickle.load`` imports and calls whatever its ``GLOBAL``/``REDUCE`` opcodes
name, so a ``data_batch_1`` whose pickle names ``os.system`` ran a command in ``spotwise plan``,
``simulate`` and ``run`` (issue 38 item 4).  The genuine CIFAR-10 batches are protocol-2 pickles of
a dict with bytes keys ``b"batch_label"``, ``b"labels"`` (ints), ``b"data"`` (a numpy uint8 array
N x 3072) and ``b"filenames"`` (bytes).  :func:`read_cifar_pickle` reads exactly that, and nothing
that runs code:

1. the file must be a regular file of at most :func:`spotwise.inputfiles.max_input_bytes` bytes
   (256 MiB unless ``SPOTWISE_MAX_FILE_MB`` says otherwise; a real batch is 30 MiB);
2. its opcodes are scanned first (:func:`pickletools.genops`, which executes nothing): only the
   opcodes of plain data (numbers, strings, bytes, tuples, lists, dicts, the memo) and of the calls
   below are accepted, at most :data:`MAX_OPCODES` of them, with memo indices below that count --
   which bounds the objects, hence the memory, a load can create;
3. the load (:class:`pickle.Unpickler` with ``find_class`` overridden) resolves only the names a
   batch's numpy arrays and bytes need -- ``numpy.core.multiarray._reconstruct`` (and
   ``numpy._core.multiarray._reconstruct``), ``numpy.ndarray``, ``numpy.dtype``; how Python 3
   writes bytes at protocol 2 (``_codecs.encode(text, "latin1")``, ``bytes()``); and numpy's
   protocol-5 ``_frombuffer`` -- and each resolves to a stand-in that checks its arguments (integer
   and boolean dtypes only, a shape matching the bytes given) and builds the array with
   :func:`numpy.frombuffer`: numpy's own ``__setstate__`` never sees the file's bytes.

Anything else -- another name (``posix.system``, ``builtins.exec``, ``subprocess.Popen``), another
opcode, an object array, a shape that does not match its data, a result that is not a dict of
arrays, numbers, strings and flat lists of them -- raises :class:`~spotwise.errors.InputError`
(exit 2) naming the file and saying it is not a CIFAR-10 batch, before any of it runs.

This is the only module of spotwise that may unpickle anything; ``tests/test_no_pickle.py`` scans
the package for ``pickle.load``/``loads``/``Unpickler``, ``torch.load`` without
``weights_only=True``, ``np.load(..., allow_pickle=True)``, ``joblib``/``dill``/``cloudpickle``
loads and fails when one appears anywhere else.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from pathlib import Path
from typing import Any, Callable

import numpy as np

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_bytes

#: the most opcodes a batch may hold (a genuine 10,000-image batch has about 30,000)
MAX_OPCODES = 1_000_000
#: the most dimensions of an array in a batch
MAX_NDIM = 8
#: dtypes an array in a batch may have (numpy's ``dtype.__reduce__`` names them without byte order)
ALLOWED_DTYPES = frozenset({"b1", "u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8"})

FIX = ("use the 'python version' of CIFAR-10 (cifar-10-python.tar.gz, extracted); spotwise reads only numpy "
       "arrays, numbers, strings and lists from a batch, never code")

#: opcodes of plain data, the memo and the few calls below; everything else (INST, OBJ, NEWOBJ, EXT*, PERSID,
#: out-of-band buffers, the text protocol's INT/LONG/STRING) is refused before the load starts
_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
    "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "LIST",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
})
_MEMO_INDEXED = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


class NotABatch(Exception):
    """Why a file is not a CIFAR-10 batch (turned into an InputError naming the file)."""


class _NoState:
    """Refuses ``BUILD`` (pickle's ``__setstate__``): stand-ins take no state from the file."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise NotABatch(f"state given to {self!r}")


class _NdarrayType(_NoState):
    """What ``numpy.ndarray`` resolves to: a token ``_reconstruct`` accepts, not callable."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "numpy.ndarray"


_NDARRAY = _NdarrayType()


class _Dtype:
    """What ``numpy.dtype(...)`` builds: an allowed dtype, its byte order from the pickled state."""

    __slots__ = ("code", "dtype", "built")

    def __init__(self, code: str) -> None:
        self.code = code
        self.dtype = np.dtype(code)
        self.built = False

    def __setstate__(self, state: Any) -> None:
        # numpy writes (3, byteorder, None, None, None, -1, -1, 0) for a plain integer dtype
        if self.built or not isinstance(state, tuple) or len(state) != 8 or state[0] != 3:
            raise NotABatch(f"unexpected dtype state {_short(state)}")
        order = _text(state[1])
        if state[2:5] != (None, None, None) or state[5:] != (-1, -1, 0) or order not in ("|", "<", ">", "="):
            raise NotABatch(f"unexpected dtype state {_short(state)}")
        if self.dtype.itemsize > 1 and order in ("<", ">"):
            self.dtype = np.dtype(order + self.code)
        self.built = True


class _Array:
    """What ``_reconstruct(ndarray, ...)`` builds; its state (shape, dtype, bytes) makes the array."""

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if self.array is not None or not isinstance(state, tuple):
            raise NotABatch(f"unexpected array state {_short(state)}")
        if len(state) == 5 and state[0] == 1:
            state = state[1:]
        if len(state) != 4:
            raise NotABatch(f"unexpected array state {_short(state)}")
        shape, dtype, fortran, raw = state
        if type(fortran) not in (bool, int) or fortran not in (0, 1):
            raise NotABatch(f"unexpected array order {_short(fortran)}")
        self.array = _make_array(raw, dtype, shape, "F" if fortran else "C", native=True)


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        try:
            return v.decode("ascii")
        except UnicodeDecodeError:
            return None
    return v if isinstance(v, str) else None


def _short(v: Any) -> str:
    """A few characters saying what ``v`` is (never the repr of a large or deep value)."""
    if isinstance(v, (bytes, str)):
        return repr(v[:40]) + ("..." if len(v) > 40 else "")
    if isinstance(v, (bool, int, float)) or v is None:
        s = repr(v)
        return s if len(s) <= 40 else s[:37] + "..."
    if isinstance(v, (tuple, list, dict)):
        return f"a {type(v).__name__} of {len(v)}"
    return type(v).__name__


def _shape(shape: Any) -> tuple[int, ...]:
    if (not isinstance(shape, tuple) or len(shape) > MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise NotABatch(f"unexpected array shape {_short(shape)}")
    return shape


def _make_array(raw: Any, dtype: Any, shape: Any, order: str, native: bool) -> np.ndarray:
    if not isinstance(dtype, _Dtype):
        raise NotABatch(f"unexpected array dtype {_short(dtype)}")
    if not isinstance(raw, (bytes, bytearray)):
        raise NotABatch(f"unexpected array data {_short(raw)}")
    dims = _shape(shape)
    count = math.prod(dims)
    if count * dtype.dtype.itemsize != len(raw):
        raise NotABatch(f"an array of shape {dims} and dtype {dtype.dtype} needs {count * dtype.dtype.itemsize} bytes, "
                        f"the file gives {len(raw)}")
    arr = np.frombuffer(raw, dtype=dtype.dtype).reshape(dims, order=order)  # type: ignore[call-overload]
    # own, writable memory; ndarray.__setstate__ gives native byte order, protocol 5's _frombuffer keeps the pickled one
    return arr.astype(dtype.dtype.newbyteorder("=") if native else dtype.dtype, order="K", copy=True)


def _reconstruct(subtype: Any, shape: Any, typecode: Any) -> _Array:
    """``numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b"b")``: an empty array its state fills."""
    if subtype is not _NDARRAY or _text(typecode) != "b":
        raise NotABatch(f"unexpected _reconstruct({_short(subtype)}, {_short(shape)}, {_short(typecode)})")
    _shape(shape)
    return _Array()


def _dtype(code: Any, align: Any = False, copy: Any = True) -> _Dtype:
    """``numpy.dtype("u1", False, True)``: integer and boolean dtypes only (no objects, no records)."""
    name = _text(code)
    if name not in ALLOWED_DTYPES or not all(type(f) in (bool, int) and f in (0, 1) for f in (align, copy)):
        raise NotABatch(f"unexpected dtype {_short(code)}")
    return _Dtype(name)


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's protocol-5 array: ``_frombuffer(bytes, dtype, shape, order)``."""
    if order not in ("C", "F"):
        raise NotABatch(f"unexpected array order {_short(order)}")
    return _make_array(buf, dtype, shape, order, native=False)


def _encode(text: Any, encoding: Any = None) -> bytes:
    """``_codecs.encode(text, "latin1")``: how Python 3 writes bytes at protocol 2."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise NotABatch("unexpected _codecs.encode arguments")
    return text.encode("latin1")


def _bytes(*args: Any) -> bytes:
    """``bytes()`` (an empty bytes at protocol 2) or ``bytes(text, "latin1")``."""
    if not args:
        return b""
    return _encode(*args)


class _Call(_NoState):
    """A stand-in function find_class hands out: named, checked, and taking no state."""

    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return self.name


_RECONSTRUCT = _Call("numpy.core.multiarray._reconstruct", _reconstruct)
_FROMBUFFER = _Call("numpy.core.numeric._frombuffer", _frombuffer)
_ENCODE = _Call("_codecs.encode", _encode)
_BYTES = _Call("bytes", _bytes)

#: every name a CIFAR-10 batch may refer to, and its stand-in; nothing else is ever imported
ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Call("numpy.dtype", _dtype),
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("_codecs", "encode"): _ENCODE,
    ("__builtin__", "bytes"): _BYTES,
    ("builtins", "bytes"): _BYTES,
}


class _BatchUnpickler(pickle.Unpickler):
    """An unpickler whose globals are :data:`ALLOWED_GLOBALS`' stand-ins, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except (KeyError, TypeError):
            raise NotABatch(f"it refers to {module}.{name}, which a CIFAR-10 batch never does "
                            "(a pickle naming it would run code)") from None

    def persistent_load(self, pid: Any) -> Any:
        raise NotABatch("it holds a persistent id")


def _scan(raw: bytes) -> None:
    """Refuse opcodes a batch never needs, more than :data:`MAX_OPCODES` of them, and large memo indices."""
    n = 0
    try:
        for op, arg, _ in pickletools.genops(raw):
            n += 1
            if n > MAX_OPCODES:
                raise NotABatch(f"more than {MAX_OPCODES} pickle opcodes")
            if op.name not in _OPCODES:
                raise NotABatch(f"it holds the pickle opcode {op.name}, which a CIFAR-10 batch never needs")
            if op.name in _MEMO_INDEXED and not (isinstance(arg, int) and 0 <= arg < MAX_OPCODES):
                raise NotABatch(f"memo index {arg!r} out of range")
    except (ValueError, TypeError, UnicodeDecodeError, EOFError) as e:  # genops' own: not a pickle, truncated
        raise NotABatch(f"not a pickle: {e}") from None


def _plain(v: Any) -> bool:
    return isinstance(v, (bool, int, float, bytes, str)) or v is None


def _resolve(obj: Any) -> dict[Any, Any]:
    """The loaded dict with its stand-ins replaced by arrays; anything but a flat dict of data is refused."""
    if not isinstance(obj, dict):
        raise NotABatch(f"it holds a {type(obj).__name__}, not a dict")
    out: dict[Any, Any] = {}
    for k, v in obj.items():
        if not isinstance(k, (bytes, str)):
            raise NotABatch(f"a key of type {type(k).__name__}")
        if isinstance(v, _Array):
            if v.array is None:
                raise NotABatch(f"the array under {k!r} has no data")
            v = v.array
        elif isinstance(v, (list, tuple)):
            if not all(_plain(x) for x in v):
                raise NotABatch(f"the list under {k!r} holds something other than numbers and strings")
        elif not (_plain(v) or isinstance(v, np.ndarray)):
            raise NotABatch(f"unexpected {type(v).__name__} under {k!r}")
        out[k] = v
    return out


def loads_cifar_batch(raw: bytes) -> dict[Any, Any]:
    """The dict a CIFAR-10 batch's bytes hold (bytes keys, as ``pickle.load(f, encoding="bytes")`` gave),
    read without running code; :class:`NotABatch` says why the bytes are not a batch."""
    _scan(raw)
    try:
        obj = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except NotABatch:
        raise
    except Exception as e:  # noqa: BLE001 - any other unpickling failure is a malformed file
        raise NotABatch(f"{type(e).__name__}: {e}") from None
    return _resolve(obj)


def read_cifar_pickle(path: str | Path) -> dict[Any, Any]:
    """The dict the CIFAR-10 batch file ``path`` holds, read safely (see the module docstring);
    :class:`~spotwise.errors.InputError` (exit 2) naming the file when it is not a CIFAR-10 batch."""
    raw = read_input_bytes(path, "CIFAR-10 batch")
    try:
        return loads_cifar_batch(raw)
    except NotABatch as e:
        raise InputError(f"cannot read CIFAR-10 batch: this is not a CIFAR-10 batch ({e})", FIX, str(path)) from None
