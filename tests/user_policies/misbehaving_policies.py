"""Policies that misbehave (issue 30 items 9 and 10): user code must not fake success or break
the exit contract -- each of these ends its run with exit 2 naming the policy."""

from __future__ import annotations

import sys

from spotwise import Decision, Observation, Policy, Resize


class ExitsInDecide(Policy):
    """Calls ``sys.exit(code)`` in ``decide`` at step ``at`` (0: the first consultation)."""

    name = "exits-in-decide"

    def __init__(self, at: int = 0, code: int = 0) -> None:
        self.at = int(at)
        self.code = int(code)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.step >= self.at:
            sys.exit(self.code)
        return []


class ExitsWhenBuilt(Policy):
    name = "exits-when-built"

    def __init__(self) -> None:
        sys.exit(0)

    def decide(self, obs: Observation) -> list[Decision]:
        return []


class RaisesBaseException(Policy):
    """Raises a BaseException that is neither an Exception nor a Ctrl-C."""

    name = "raises-base-exception"

    def decide(self, obs: Observation) -> list[Decision]:
        raise _Escape("not an Exception")


class _Escape(BaseException):
    pass


class ReturnsNone(Policy):
    """Forgets the ``return``: ``decide`` returns None (docs/policies.md: exit 2)."""

    name = "returns-none"

    def decide(self, obs: Observation) -> list[Decision]:  # type: ignore[return]
        _ = obs.step


class ResizesTo(Policy):
    """Returns ``Resize(workers=value)`` once, at step ``at`` (``nan``, ``inf``, ``2.5``, ``"4"``, ...)."""

    name = "resizes-to"

    def __init__(self, workers: object = "nan", at: int = 1) -> None:
        self.workers = float(workers) if workers in ("nan", "inf", "-inf") else workers
        self.at = int(at)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.step == self.at:
            return [Resize(reason="bad size", workers=self.workers)]  # type: ignore[arg-type]
        return []
