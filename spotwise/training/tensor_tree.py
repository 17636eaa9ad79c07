"""A state tree (optimizer state, integer buffers, scaler) as bytes served straight from its tensors.

``torch.save`` of a tree into memory writes every tensor's bytes into one new buffer: serialising
the AdamW moments of a 25M-parameter model for a replica offer held 200 MB more than the state
itself, on top of the offer's copy of it (issue 40: a member's peak memory 1.5x a DDP rank's).
:class:`Packed` holds a small JSON header -- the tree with each tensor replaced by its index, and
each tensor's dtype, shape and size -- plus the tensors themselves; :meth:`Packed.read` returns any
byte range of ``header + tensor bytes`` by slicing the tensors' own memory, so the encoded form is
never materialised on the sender.  :func:`unpack` reads it back, checking everything (it comes
from another process: dtypes from an allow-list, shapes, sizes and offsets against the data, bounded
depth, canonical numbers, plain and distinct mapping keys, a CRC-32 of the header and one of the tensors'
bytes, so a changed byte is an error, never another value), and never unpickles.  Every malformed
input raises :class:`UnpackError` (issue 54 item 9), the torch.save form's included.  A tree :func:`pack` cannot express (a non-strided tensor, an object that is not plain
data) is encoded with ``torch.save`` and read back with ``weights_only=True`` as before
(:func:`encode`/:func:`decode` tell the two apart by :data:`MAGIC`).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


#: the first bytes of a packed tree (``torch.save`` output starts with ``PK``, a zip file); then
#: ``<QI``: the header's length and its CRC-32, the JSON header, the tensors' bytes
MAGIC = b"SWTT2\n"
_LEN = struct.Struct("<QI")
#: deepest nesting :func:`pack` writes and :func:`unpack` accepts
MAX_DEPTH = 32
#: the longest header :func:`unpack` accepts (an optimizer state of 100k tensors fits)
MAX_HEADER_BYTES = 64 * 2**20
#: the most dimensions, and the largest dimension, of a tensor :func:`unpack` accepts (a zero-size
#: tensor's other dimensions are not bounded by its bytes)
MAX_DIMS = 64
MAX_DIM = 2**40
#: the longest integer (digits) and string a header may hold
MAX_INT_DIGITS = 400
#: the JSON nesting a header may hold: the tree's own bound, times two for its encoding, plus slack
_MAX_JSON_DEPTH = 2 * MAX_DEPTH + 8

_DTYPES: dict[str, torch.dtype] = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


class UnpackError(ValueError):
    """The bytes are not a well-formed packed tree."""


@dataclass
class Packed:
    """A packed tree: ``header`` then the bytes of ``tensors`` in order (module docstring)."""

    header: bytes
    tensors: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.header.startswith(MAGIC):
            raise ValueError("a packed tree's header starts with MAGIC")
        for t in self.tensors:
            if t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError("a packed tree holds contiguous CPU tensors")
        self._views = [memoryview(self.header)] + [_bytes_of(t) for t in self.tensors]
        self.nbytes = sum(len(v) for v in self._views)

    def read(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)`` of the encoded form (fewer at its end)."""
        return self.read_array(offset, size).tobytes()

    def read_array(self, offset: int, size: int) -> np.ndarray:
        """:meth:`read` as a ``uint8`` array: a view of the tensor's own memory where the range lies in
        one tensor (no copy: what sends it, e.g. Ray, copies it once), else one new array."""
        return read_views(self._views, offset, size)

    def tobytes(self) -> bytes:
        return self.read(0, self.nbytes)


def map_tensors(tree: Any, fn: Any) -> Any:
    """``tree`` (tensors in dicts, lists and plain tuples: a ``state_dict``) with ``fn(t)`` for every tensor ``t``."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn) for k, v in tree.items()}
    if isinstance(tree, list):
        return [map_tensors(v, fn) for v in tree]
    if isinstance(tree, tuple) and type(tree) is tuple:
        return tuple(map_tensors(v, fn) for v in tree)
    return tree


def clone_tree(tree: Any) -> Any:
    """``tree`` with every tensor cloned (same device): a snapshot of a state whose tensors are
    changed in place later -- ``Optimizer.state_dict()`` holds the optimizer's live tensors."""
    return map_tensors(tree, lambda t: t.detach().clone())


def tree_to_host(tree: Any) -> Any:
    """``tree`` with every device tensor copied to the host (CPU tensors as they are)."""
    return map_tensors(tree, lambda t: t if t.device.type == "cpu" else t.detach().cpu())


def clone_tree_into(tree: Any, into: Any = None) -> Any:
    """:func:`clone_tree` of ``tree``, with its tensors copied into ``into``'s (an earlier result of this
    function) where the two have the same structure and every tensor the same shape, dtype and
    device -- a snapshot taken again and again without allocating its memory again; a fresh clone
    where they differ (an optimizer's state appears at its first step)."""
    if into is None or not _same_layout(tree, into):
        return clone_tree(tree)
    return _copy_into(tree, into)


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_layout(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_layout(x, y) for x, y in zip(a, b))
    return not isinstance(b, torch.Tensor)


def _copy_into(tree: Any, into: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return into.copy_(tree.detach())
    if isinstance(tree, dict):
        return {k: _copy_into(v, into[k]) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy_into(v, w) for v, w in zip(tree, into)]
    if isinstance(tree, tuple) and type(tree) is tuple:
        return tuple(_copy_into(v, w) for v, w in zip(tree, into))
    return tree


def read_views(views: list[memoryview], offset: int, size: int) -> np.ndarray:
    """Bytes ``[offset, offset + size)`` of the concatenation of ``views`` (byte memoryviews) as a
    ``uint8`` array: a view where the range lies in one of them, else one new array."""
    total = sum(len(v) for v in views)
    lo, hi = max(0, int(offset)), min(total, int(offset) + max(0, int(size)))
    if hi <= lo:
        return np.empty(0, dtype=np.uint8)
    parts: list[memoryview] = []
    start = 0
    for v in views:
        end = start + len(v)
        if end > lo and start < hi:
            parts.append(v[max(lo, start) - start:min(hi, end) - start])
        if end >= hi:
            break
        start = end
    if len(parts) == 1:
        return np.frombuffer(parts[0], dtype=np.uint8)
    out = np.empty(hi - lo, dtype=np.uint8)
    at = 0
    for part in parts:
        out[at:at + len(part)] = np.frombuffer(part, dtype=np.uint8)
        at += len(part)
    return out


def digest(values: torch.Tensor | np.ndarray, chunk_bytes: int = 32 * 2**20) -> str:
    """A BLAKE2b digest of a tensor's (or array's) bytes, read in chunks of ``chunk_bytes`` (a device
    tensor is copied to the host a chunk at a time: memory stays bounded whatever the model's size)."""
    h = hashlib.blake2b(digest_size=20)
    if isinstance(values, np.ndarray):
        flat = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        for i in range(0, flat.size, chunk_bytes):
            h.update(memoryview(flat[i:i + chunk_bytes]))
        return h.hexdigest()
    t = values.detach().reshape(-1)
    if not t.is_contiguous():
        t = t.contiguous()
    raw = t.view(torch.uint8) if t.numel() else t
    for i in range(0, raw.numel(), chunk_bytes):
        h.update(memoryview(raw[i:i + chunk_bytes].cpu().numpy()))
    return h.hexdigest()


def _bytes_of(t: torch.Tensor) -> memoryview:
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


class _Unsupported(Exception):
    pass


def _encode_node(x: Any, tensors: list[torch.Tensor], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Unsupported("too deep")
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided or x.dtype not in _DTYPES.values() or x.is_quantized:
            raise _Unsupported(f"tensor {x.dtype} {x.layout}")
        tensors.append(x.detach())
        return {"t": [len(tensors) - 1, str(x.dtype).removeprefix("torch."), list(x.shape)]}
    if x is None or isinstance(x, (bool, str)):
        return {"v": x}
    if isinstance(x, int):
        return {"i": str(int(x))}
    if isinstance(x, float):
        return {"f": repr(float(x))}
    if isinstance(x, dict):
        return {"d": [[_encode_node(k, tensors, depth + 1), _encode_node(v, tensors, depth + 1)] for k, v in x.items()]}
    if isinstance(x, list):
        return {"l": [_encode_node(v, tensors, depth + 1) for v in x]}
    if isinstance(x, tuple) and type(x) is tuple:
        return {"u": [_encode_node(v, tensors, depth + 1) for v in x]}
    raise _Unsupported(type(x).__name__)


def pack(tree: Any) -> Packed | None:
    """``tree`` packed (module docstring); ``None`` where it holds what a packed tree cannot express.
    Tensors must be on the CPU; non-contiguous ones are copied, the rest are served as they are
    (the caller keeps them unchanged until the bytes are read)."""
    tensors: list[torch.Tensor] = []
    try:
        node = _encode_node(tree, tensors, 0)
    except _Unsupported:
        return None
    if any(t.device.type != "cpu" for t in tensors):
        raise ValueError("pack() takes CPU tensors (copy device tensors to the host first)")
    tensors = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    sizes = [t.numel() * t.element_size() for t in tensors]
    crc = 0
    for t in tensors:  # one pass over the bytes (zlib releases the GIL), so a changed byte is found
        crc = zlib.crc32(_bytes_of(t), crc)
    body = json.dumps({"tree": node, "sizes": sizes, "crc": crc}, separators=(",", ":")).encode()
    return Packed(MAGIC + _LEN.pack(len(body), zlib.crc32(body)) + body, tensors)


def encode(tree: Any) -> bytes:
    """``tree`` as bytes: packed where possible, else ``torch.save`` (read both with :func:`decode`)."""
    p = pack(tree)
    if p is not None:
        return p.tobytes()
    bio = io.BytesIO()
    torch.save(tree, bio)
    return bio.getvalue()


def decode(data: bytes | bytearray | memoryview) -> Any:
    """What :func:`encode` (or :meth:`Packed.read`) wrote; ``torch.load(weights_only=True)`` for the
    ``torch.save`` form.  Total on untrusted bytes: whatever is malformed raises :class:`UnpackError`
    (a ``ValueError``), never another exception or another value than was encoded."""
    try:
        mv = memoryview(data).cast("B")
    except (TypeError, ValueError) as e:
        raise UnpackError(f"not bytes ({e.__class__.__name__})") from None
    if bytes(mv[:len(MAGIC)]) == MAGIC:
        return unpack(mv)
    if bytes(mv[:2]) != b"PK":  # torch.save writes a zip file
        raise UnpackError("neither a packed tree nor a torch.save file")
    try:
        return torch.load(io.BytesIO(bytes(mv)), weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 -- torch.load's failures on bad bytes are many kinds (zip, unpickler)
        raise UnpackError(f"a malformed torch.save file ({e.__class__.__name__})") from None


def _tensor_spec(spec: Any, sizes: list[int]) -> tuple[int, torch.dtype, list[int]]:
    """``(index, dtype, shape)`` of a tensor entry, checked against the byte count of its tensor."""
    if not (isinstance(spec, list) and len(spec) == 3 and type(spec[0]) is int and isinstance(spec[2], list)):
        raise UnpackError("a malformed tensor entry")
    i, dname, shape = spec
    if not 0 <= i < len(sizes):
        raise UnpackError("a tensor entry names no tensor")
    dtype = _DTYPES.get(dname) if isinstance(dname, str) else None
    if dtype is None:
        raise UnpackError(f"dtype {str(dname)[:40]!r} is not allowed")
    if len(shape) > MAX_DIMS or not all(type(d) is int and 0 <= d <= MAX_DIM for d in shape) \
            or math.prod(max(d, 1) for d in shape) > MAX_DIM:  # a zero-size tensor's strides must fit too
        raise UnpackError("a malformed tensor shape")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(shape) * itemsize != sizes[i]:
        raise UnpackError(f"tensor {i}: shape {shape[:8]} of {dname} is not {sizes[i]} bytes")
    return i, dtype, shape


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a JSON object names a key twice")
    return out


def _plain_key(key: Any) -> bool:
    """A mapping key :func:`pack` writes: None, bool, int, float, str, or a tuple of them."""
    if key is None or isinstance(key, (bool, int, float, str)):
        return True
    return type(key) is tuple and all(_plain_key(k) for k in key)


def unpack(data: bytes | bytearray | memoryview) -> Any:
    """The tree of a packed form; every tensor a fresh, writable CPU tensor (module docstring).
    :class:`UnpackError` for every malformed input."""
    mv = memoryview(data).cast("B")
    start = len(MAGIC) + _LEN.size
    if bytes(mv[:len(MAGIC)]) != MAGIC or len(mv) < start:
        raise UnpackError("not a packed tree")
    n, header_crc = _LEN.unpack(mv[len(MAGIC):start])
    if n > MAX_HEADER_BYTES or start + n > len(mv):
        raise UnpackError("a packed tree's header is longer than its data")
    body = bytes(mv[start:start + n])
    if zlib.crc32(body) != header_crc:
        raise UnpackError("a packed tree's header does not match its checksum")
    try:
        meta = json.loads(body, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:  # ValueError: not JSON, not UTF-8, a key twice, 5000 digits
        raise UnpackError(f"a packed tree's header is not JSON ({e.__class__.__name__})") from None
    if not isinstance(meta, dict) or set(meta) != {"tree", "sizes", "crc"} or not isinstance(meta["sizes"], list):
        raise UnpackError("a packed tree's header holds other keys than tree, sizes and crc")
    sizes, crc = meta["sizes"], meta["crc"]
    if not all(type(s) is int and 0 <= s <= len(mv) for s in sizes) or type(crc) is not int:
        raise UnpackError("a packed tree's sizes are not byte counts")
    offsets = list(itertools.accumulate(sizes, initial=start + n))  # Python ints: no overflow
    if offsets[-1] != len(mv):
        raise UnpackError(f"a packed tree's tensors need {offsets[-1] - start - n} bytes, it holds {len(mv) - start - n}")
    if zlib.crc32(mv[start + n:]) != crc:
        raise UnpackError("a packed tree's tensor bytes do not match their checksum")
    used: set[int] = set()

    def tensor(spec: Any) -> torch.Tensor:
        i, dtype, shape = _tensor_spec(spec, sizes)
        if i in used:
            raise UnpackError("a tensor entry names a tensor already used")
        used.add(i)
        if sizes[i] == 0:
            return torch.empty(shape, dtype=dtype)
        raw = bytearray(mv[offsets[i]:offsets[i + 1]])
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)

    def node(x: Any, depth: int) -> Any:
        if depth > MAX_DEPTH or not isinstance(x, dict) or len(x) != 1:
            raise UnpackError("a malformed or too deep tree node")
        (k, v), = x.items()
        if k == "t":
            return tensor(v)
        if k == "v" and (v is None or isinstance(v, (bool, str))):
            return v
        if k == "i" and isinstance(v, str) and 0 < len(v) <= MAX_INT_DIGITS:
            try:
                out = int(v)
            except ValueError:
                raise UnpackError("a malformed integer") from None
            if str(out) != v:  # "1_0", " 1", "+1": not what pack writes
                raise UnpackError("an integer not written as pack writes it")
            return out
        if k == "f" and isinstance(v, str) and 0 < len(v) <= 64:
            try:
                f = float(v)
            except ValueError:
                raise UnpackError("a malformed float") from None
            if repr(f) != v:  # "1e999", "-nan", "1_0.0": not what pack writes
                raise UnpackError("a float not written as pack writes it")
            return f
        if k == "d" and isinstance(v, list):
            out_d: dict[Any, Any] = {}
            for kv in v:
                if not (isinstance(kv, list) and len(kv) == 2):
                    raise UnpackError("a malformed mapping entry")
                key = node(kv[0], depth + 1)
                if not _plain_key(key):
                    raise UnpackError("a mapping key that is not a plain value")
                if key in out_d:
                    raise UnpackError(f"a mapping names the key {str(key)[:60]!r} twice")
                out_d[key] = node(kv[1], depth + 1)
            return out_d
        if k in ("l", "u") and isinstance(v, list):
            items = [node(e, depth + 1) for e in v]
            return items if k == "l" else tuple(items)
        raise UnpackError(f"a malformed tree node {str(k)[:40]!r}")

    tree = node(meta["tree"], 0)
    if len(used) != len(sizes):
        raise UnpackError("a packed tree holds tensors its tree does not name")
    return tree


__all__ = ["MAGIC", "Packed", "UnpackError", "pack", "encode", "decode", "unpack", "digest", "read_views", "clone_tree"]
