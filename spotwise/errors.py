"""Error types shared by every part of spotwise.

The CLI contract (DESIGN.md, "Errors"): anything a user can cause -- a bad spec, a malformed
trace, a wrong flag -- raises :class:`InputError`, which the CLI turns into exit status 2 and a
single message saying what is wrong and how to fix it.  Anything else is an internal failure
(exit status 1).
"""

from __future__ import annotations


class SpotwiseError(Exception):
    """Base class of every error spotwise raises on purpose."""


class InputError(SpotwiseError):
    """A problem with user-supplied input (spec, trace file, flag).

    ``what`` says what is wrong, ``fix`` says how to fix it; ``where`` (optional) names the file,
    field or flag concerned.  ``str(err)`` is the one-line message the CLI prints.
    """

    def __init__(self, what: str, fix: str = "", where: str | None = None) -> None:
        self.what = what
        self.fix = fix
        self.where = where
        super().__init__(self.message)

    @property
    def message(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        if self.fix:
            return f"{head} -- {self.fix}"
        return head


class InfeasibleError(InputError):
    """The request is well-formed but cannot be satisfied (e.g. a deadline too tight).

    Still the user's to fix (exit 2): the message names the binding constraint and what would
    make the problem feasible.
    """
