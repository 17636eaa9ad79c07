"""Calls from the coordinator to a collective member that carry state: handing over a generation's
starting state and fetching a replica (issue 28 item 3).

A member is a threaded Ray actor in a run (an ObjectRef comes back; large arguments and results go
through Ray's object store, any size) or a plain object in in-process tests (the call runs at once).
"""

from __future__ import annotations

from typing import Any


def call_member(member: Any, method: str, *args: Any) -> Any:
    """Call ``method`` on a member: a Ray actor (an ObjectRef comes back) or an in-process object
    (the result itself)."""
    fn = getattr(member, method)
    return fn.remote(*args) if hasattr(fn, "remote") else _Done(fn(*args))


class _Done:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def wait_calls(calls: list[Any], timeout_s: float) -> list[Any]:
    """The results of :func:`call_member` calls, in order; ``None`` for a call whose member died or
    did not answer within ``timeout_s``."""
    out: list[Any] = []
    refs = [c for c in calls if not isinstance(c, _Done)]
    values: dict[int, Any] = {}
    if refs:
        import ray
        from ray.exceptions import RayError

        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for r in done:
            try:
                values[id(r)] = ray.get(r)
            except RayError:
                values[id(r)] = None
    for c in calls:
        out.append(c.value if isinstance(c, _Done) else values.get(id(c)))
    return out
