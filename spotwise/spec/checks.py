"""Small validators shared by the spec dataclasses (each raises InputError naming the field and the fix)."""

from __future__ import annotations

from spotwise.errors import InputError

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
