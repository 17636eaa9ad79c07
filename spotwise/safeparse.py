"""Parsing user YAML and run-directory JSON with bounds, so that hostile input is an exit 2.

Python's parsers trust their input more than a CLI may: ``yaml.safe_load`` of 5000 nested lists
and ``json.loads`` of one deeply nested line raise ``RecursionError``; a 5000-digit integer raises
``ValueError`` (Python's ``int`` max-str-digits guard); a YAML mapping that repeats a key keeps the
last value silently (``workers: 2`` then ``workers: 400``); YAML aliases can expand a few lines into
billions of values when walked.  The helpers here turn each of these into an
:class:`~spotwise.errors.InputError` naming the file (and line) and saying how to fix it:

* :func:`load_yaml` -- YAML through :class:`StrictLoader` (a ``SafeLoader`` that refuses duplicate
  mapping keys, nesting deeper than :data:`MAX_DEPTH` and over-long integers), then
  :func:`check_bounds` on the result (depth through aliases, total size);
* :func:`loads_json` -- ``json.loads`` with the same depth bound;
* :func:`check_bounds` -- an iterative (never recursive) walk of parsed data, for data handed to
  the Python API as dicts.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from spotwise.errors import InputError

#: deepest nesting of lists/mappings accepted in a spec, a catalog, a config or a run-directory file
MAX_DEPTH = 64
#: most values (containers and scalars, aliases counted each time they are used) in one document
MAX_VALUES = 2_000_000
#: most digits of an integer literal (Python refuses to parse more than 4300)
MAX_INT_DIGITS = 400
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.33)  # 10**400 < 2**1332

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.YAMLError):
    """Raised inside the loader; :func:`load_yaml` turns it into an InputError."""

    def __init__(self, what: str, fix: str, line: int | None) -> None:
        super().__init__(what)
        self.what, self.fix, self.line = what, fix, line


def _line(node: yaml.Node | None) -> int | None:
    mark = getattr(node, "start_mark", None)
    return None if mark is None else int(mark.line) + 1


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate mapping keys, nesting deeper than :data:`MAX_DEPTH`
    and integers longer than :data:`MAX_INT_DIGITS` digits (raising a ``yaml.YAMLError``)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark if self.check_event() else None
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels",
                               f"flatten the data (at most {MAX_DEPTH} nested lists/mappings)",
                               None if mark is None else int(mark.line) + 1)
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int | None] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue  # ``<<: *base`` overrides on purpose
                key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: the constructor reports it
                    continue
                if repeated:
                    first = seen[key]
                    at = f" (first on line {first})" if first else ""
                    raise _Refused(f"duplicate key {key!r}{at}: YAML would silently keep only the last value",
                                   f"keep one {key!r} entry in this mapping", _line(key_node))
                seen[key] = _line(key_node)
        return super().construct_mapping(node, deep)  # type: ignore[no-untyped-call, no-any-return]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _Refused(f"an integer with {digits} digits", f"write a number of at most {MAX_INT_DIGITS} digits",
                           _line(node))
        return super().construct_yaml_int(node)  # type: ignore[no-untyped-call, no-any-return]


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def check_bounds(data: Any, where: str, what: str = "the data", fix: str = "") -> None:
    """Raise :class:`InputError` when ``data`` nests lists/dicts deeper than :data:`MAX_DEPTH` or holds
    more than :data:`MAX_VALUES` values (aliases counted at each use), or an integer of more than
    :data:`MAX_INT_DIGITS` digits (printing it would raise ``ValueError``).  Iterative: never recurses.
    ``fix`` (optional) replaces the default hint."""
    if not isinstance(data, (dict, list, tuple)):
        return
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 1
    while stack:
        obj, depth = stack.pop()
        if count > MAX_VALUES:
            raise InputError(f"{what} holds more than {MAX_VALUES:,} values (repeated YAML aliases?)",
                             fix or "make it smaller; a spec, catalog or config is a few hundred lines", where)
        children: Any = obj.values() if isinstance(obj, dict) else obj
        if depth > MAX_DEPTH:
            raise InputError(f"{what} is nested deeper than {MAX_DEPTH} levels",
                             fix or f"flatten it (at most {MAX_DEPTH} nested lists/mappings)", where)
        count += len(children)
        for c in children:
            if isinstance(c, (dict, list, tuple)):
                stack.append((c, depth + 1))
            elif isinstance(c, int) and c.bit_length() > _MAX_INT_BITS:  # str() of it would raise ValueError
                raise InputError(f"{what} holds an integer of more than {MAX_INT_DIGITS} digits",
                                 f"write a number of at most {MAX_INT_DIGITS} digits", where)


def load_yaml(text: str, where: str, what: str = "file", fix: str = "fix the YAML syntax (indentation, colons, quotes)") -> Any:
    """``text`` parsed by :class:`StrictLoader` and checked by :func:`check_bounds`.

    :class:`InputError` naming ``where`` (and the line) for invalid YAML, a duplicate key, nesting
    deeper than :data:`MAX_DEPTH`, an over-long integer, or a document that expands too far.
    """
    try:
        data = yaml.load(text, Loader=StrictLoader)
    except _Refused as e:
        at = f"line {e.line}: " if e.line else ""
        raise InputError(f"{at}{e.what}", e.fix, where) from None
    except RecursionError:  # not reachable through the composer's bound; kept as the last defence
        raise InputError(f"the {what} is nested too deeply", f"flatten it (at most {MAX_DEPTH} nested lists/mappings)", where) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(f"not valid YAML{at}", fix, where) from None
    except ValueError as e:  # e.g. a timestamp YAML cannot represent
        raise InputError(f"not valid YAML ({e})", fix, where) from None
    check_bounds(data, where, f"the {what}")
    return data


def loads_json(text: str | bytes, where: str, what: str = "file", *, bounded: bool = True,
               fix: str | None = None) -> Any:
    """``json.loads(text)``, with nesting bounded by :data:`MAX_DEPTH` (:class:`InputError` naming ``where``).

    The one place spotwise parses JSON it did not just write itself (spec.json, summary.json,
    events.jsonl, manifest.json, lease.json, traces, sweep results read back, checkpoint fields, a
    metadata service's answer): ``json.loads`` of 100,000 nested brackets raises ``RecursionError``,
    which every caller would otherwise have to remember.  ``bounded=False`` only turns that
    ``RecursionError`` into the InputError (for large files such as traces, whose size is bounded
    elsewhere and whose readers never recurse); ``fix`` replaces the default hint.

    ``ValueError`` (not JSON, a number too long to parse) and ``UnicodeDecodeError`` propagate as
    ``json.loads`` raises them, so callers keep their own messages for those.
    """
    fix = fix or f"spotwise writes at most {MAX_DEPTH} nested lists/objects; restore the file or regenerate it"
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"the {what} is nested too deeply", fix, where) from None
    if not bounded:
        return data
    opens = text.count(b"[") + text.count(b"{") if isinstance(text, bytes) else text.count("[") + text.count("{")
    if opens > MAX_DEPTH:  # cheap test first: a shallow document cannot nest deeper than it has brackets
        check_bounds(data, where, f"the {what}", fix)
    return data


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_VALUES", "StrictLoader", "check_bounds", "load_yaml", "loads_json"]
