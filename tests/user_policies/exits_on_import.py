"""A policy module that calls ``sys.exit(0)`` while it is imported (issue 30 item 9)."""

from __future__ import annotations

import sys

from spotwise import Decision, Observation, Policy

sys.exit(0)


class Never(Policy):  # pragma: no cover - never defined: the import exits first
    name = "never"

    def decide(self, obs: Observation) -> list[Decision]:
        return []
