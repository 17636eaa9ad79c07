"""The error of a script that misuses the user-loop API (a fixable mistake: the run exits 2 with its message)."""

from __future__ import annotations


class ScriptError(Exception):
    """The user's script misused the API (a fixable mistake: exit 2 with the message)."""
