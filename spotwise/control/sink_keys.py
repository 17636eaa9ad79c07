"""Metric names as each metrics sink accepts them (issue 54 item 9).

A metric's name comes from user code (``job.log(**values)``, a workload's evaluation metric), and each
sink has its own rules: MLflow refuses a whole batch for one name with a character outside
``[/\\w.\\- :]``, one that is not its own ``posixpath.normpath`` (``a/../b``, ``a//b``, a leading
``/``, ``..``) or one over 250 characters -- and the run was left ``RUNNING``; TensorBoard's tags are
``[-/\\w.]`` (others are replaced with a warning by TensorFlow's writers, silently kept by PyTorch's);
W&B keeps ``_``-prefixed keys for itself and nests at ``.``/``/``.

:class:`MetricKeys` maps every name to one its sink accepts, once, in one place (every sink's
:class:`~spotwise.control.sinks.Scalars` holds one): characters outside the sink's set become
``_``, the name is split at ``/`` into non-empty parts none of which is ``.`` or ``..`` (a run of
dots becomes one ``_``), a name starting with a reserved character gets an ``x`` in front, and the
name is cut to the sink's length (two names that map to one get ``_2``, ``_3``... in the order they
are first seen).  A name
that changes is said once per sink, on stderr, with the original (escaped) and the name used.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class KeyRules:
    """What one sink accepts as a metric name."""

    sink: str
    #: one character the sink does *not* accept (replaced with ``_``)
    refused: re.Pattern[str]
    max_len: int
    #: characters a name may not start with (an ``x`` is put in front -- W&B's own keys start with ``_``)
    reserved_start: str = ""

    def __post_init__(self) -> None:
        if not self.sink or not 8 <= self.max_len <= 4096:
            raise ValueError(f"KeyRules: a sink name and a length of 8 to 4096 characters, got {self.sink!r}, {self.max_len}")
        if self.refused.match("_") or self.refused.match("a"):
            raise ValueError(f"KeyRules({self.sink}): '_' and letters must be accepted (they replace what is refused)")


#: each sink's rules (the characters refused: anything outside the set, every control and format character)
RULES: dict[str, KeyRules] = {
    "mlflow": KeyRules("mlflow", re.compile(r"[^/\w.\- ]|[\x00-\x1f\x7f-\x9f]"), 250),
    "tensorboard": KeyRules("tensorboard", re.compile(r"[^/\w.\-]|[\x00-\x1f\x7f-\x9f]"), 250),
    "wandb": KeyRules("wandb", re.compile(r"[^/\w.\- ]|[\x00-\x1f\x7f-\x9f]"), 250, reserved_start="_"),
}


def _parts(text: str) -> str:
    parts = [p.strip() for p in re.sub(r"\.{2,}", "_", text).split("/")]
    return "/".join("_" if p == "." else p for p in parts if p)


def normalise(name: str, rules: KeyRules) -> str:
    """``name`` as ``rules`` accept it (see the module docstring); never empty."""
    text = unicodedata.normalize("NFC", name.encode("utf-8", "replace").decode("utf-8"))  # no lone surrogates
    text = "".join("_" if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") else c for c in text)
    text = _parts(rules.refused.sub("_", text)) or "_"
    if rules.reserved_start and text[0] in rules.reserved_start:
        text = "x" + text
    return _parts(text[:rules.max_len]) or "_"  # cut, then its parts again (a cut may leave a "." part)


class MetricKeys:
    """The names one sink is given: each original mapped once (:func:`normalise`), collisions told apart,
    every change said once through ``note``."""

    def __init__(self, rules: KeyRules, note: Callable[[str], None]) -> None:
        self.rules, self.note = rules, note
        self._map: dict[str, str] = {}
        self._used: set[str] = set()

    def __call__(self, name: str) -> str:
        got = self._map.get(name)
        if got is not None:
            return got
        key = normalise(name, self.rules)
        if key in self._used:
            stem, n = key[:self.rules.max_len - 8].rstrip("/. ") or "_", 2
            while f"{stem}_{n}" in self._used:
                n += 1
            key = f"{stem}_{n}"
        self._map[name] = key
        self._used.add(key)
        if key != name:
            shown = ascii(name)[1:-1]
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            self.note(f"the metric name '{shown}' is given to the {self.rules.sink} sink as '{ascii(key)[1:-1]}' "
                      f"({self.rules.sink} does not accept the original)")
        return key


__all__ = ["KeyRules", "MetricKeys", "RULES", "normalise"]
