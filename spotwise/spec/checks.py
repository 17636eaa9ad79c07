"""Small validators shared by the spec dataclasses (each raises InputError naming the field and the fix)."""

from __future__ import annotations

from typing import Any

from spotwise.errors import InputError

#: absolute ceiling on worker counts in a spec (the machine or cluster is checked when a run starts)
MAX_SPEC_WORKERS = 100_000

#: seeds go to numpy (any non-negative integer) and torch.manual_seed (at most 2**64 - 1)
MAX_SEED = 2**63 - 1


def _positive(value: float | int | None, name: str, fix: str) -> None:
    if value is not None and not value > 0:
        raise InputError(f"must be > 0, got {value!r}", fix, name)


def _non_negative(value: float | int | None, name: str, fix: str) -> None:
    if value is not None and value < 0:
        raise InputError(f"must be >= 0, got {value!r}", fix, name)


def _seed(value: int, name: str) -> None:
    """InputError unless ``0 <= value <= MAX_SEED`` (numpy rejects negative seeds, torch huge ones)."""
    if not 0 <= value <= MAX_SEED:
        raise InputError(f"must be an integer in [0, 2**63 - 1], got {value!r}", "use a non-negative seed such as 0 or 42", name)


#: most price points a synthetic market may hold over its horizon (16 bytes each: 10 M = 160 MB)


#: characters no name, region or URI may hold: they end a line (of a YAML comment, of a shell command) or hide text
#: (bidirectional overrides); C0/C1 controls, DEL, U+2028/U+2029 and the bidi controls
_HIDDEN = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")


def bad_char(value: str) -> str | None:
    """The first character of ``value`` that is a control character, a line or paragraph separator or a
    bidirectional control (as ``repr`` shows it), else ``None``."""
    import unicodedata

    for ch in value:
        if ch in _HIDDEN or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            return ascii(ch)
    return None


def _plain_text(value: object, name: str, fix: str = "") -> None:
    """InputError naming ``name`` when the string ``value`` holds a control character, a line break (``\\n``,
    ``\\r``, U+0085, U+2028, U+2029) or a bidirectional control: such names end up in generated YAML and shell."""
    if isinstance(value, str):
        ch = bad_char(value)
        if ch is not None:
            raise InputError(f"holds the control character {ch} (line breaks, tabs and other control characters are "
                             "not allowed here)", fix or "use plain printable text on one line", name)


#: the metrics sinks ``outputs.sinks`` may name (issue 41 item 6), and the packages each needs
SINKS: dict[str, tuple[str, ...]] = {"tensorboard": ("tensorboard",), "wandb": ("wandb",),
                                     "mlflow": ("mlflow", "sqlalchemy", "alembic")}


def check_sinks(names: list[str]) -> None:
    """InputError (at load) for an unknown or repeated sink, or one whose packages are not installed.
    MLflow's default store is a SQLite file (SQLAlchemy, Alembic); a tracking server needs neither."""
    import importlib.util
    import os

    for i, name in enumerate(names):
        if name not in SINKS:
            raise InputError(f"unknown sink {name!r}", f"valid sinks are {', '.join(SINKS)}", "outputs.sinks")
        if name in names[:i]:
            raise InputError(f"{name!r} is named twice", "name each sink once", "outputs.sinks")
        need = SINKS[name]
        if name == "mlflow" and os.environ.get("MLFLOW_TRACKING_URI", "sqlite").split(":")[0] not in ("sqlite", ""):
            need = need[:1]
        missing = [m for m in need if importlib.util.find_spec(m) is None]
        if missing:
            pkgs = " ".join("mlflow-skinny" if m == "mlflow" else m for m in missing)
            raise InputError(f"the {name} sink needs {', '.join(missing)}, not installed here",
                             f"pip install {pkgs} (or spotwise[metrics]), or remove {name} from outputs.sinks",
                             "outputs.sinks")


def check_worker_counts(c: Any) -> None:
    """A cluster's ``workers``, ``min_workers``, ``max_workers``, ``standby`` and ``sync_n`` against each other
    and against what spotwise manages (:data:`MAX_SPEC_WORKERS`)."""
    _positive(c.workers, "workers", "provision at least one worker")
    for name in ("workers", "max_workers", "standby", "sync_n"):
        v = getattr(c, name)
        if v is not None and v > MAX_SPEC_WORKERS:
            raise InputError(f"{v} is more workers than spotwise manages (at most {MAX_SPEC_WORKERS:,})",
                             f"lower {name}; the local emulated provider holds far fewer (about one per 300 MiB "
                             "of memory) and a Ray cluster as many as its 'spot' resources", name)
    if c.min_workers is not None and (isinstance(c.min_workers, bool) or not isinstance(c.min_workers, int)
                                         or not 1 <= c.min_workers <= c.workers):
        raise InputError(f"min_workers must be a whole number from 1 to workers ({c.workers}), got {c.min_workers!r}",
                         "1 trains on whatever nodes the market gives (elastic); workers waits for all of them (a gang)",
                         "min_workers")
    if c.max_workers is not None and c.max_workers < c.workers:
        raise InputError(
            f"max_workers ({c.max_workers}) is below workers ({c.workers})",
            "raise max_workers or lower workers", "max_workers",
        )
