"""How user code failed, in words: the one rule every user-code boundary applies (issue 30 item 9).

A user workload (``module:function``) or policy (``module:Class``) runs inside spotwise's own
process (or a worker actor of it).  Whatever it raises is the user's to fix -- exit 2 naming it --
and that includes ``sys.exit()`` (``exit()``, ``quit()``): a :class:`SystemExit` out of user code
must not end the run with the user's exit code (``sys.exit(0)`` would fake a success with no
``summary.json``) nor kill a worker actor (which would look like a lost node).  Only a real
interrupt passes through: Ctrl-C and SIGTERM (:class:`KeyboardInterrupt`, and spotwise's
``Terminated``, its subclass) and generator clean-up (:class:`GeneratorExit`).
"""

from __future__ import annotations

#: BaseExceptions that are not user code failing: they propagate as they are
PASS_THROUGH: tuple[type[BaseException], ...] = (KeyboardInterrupt, GeneratorExit)


def is_user_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised from user code, is that code failing (exit 2 naming it): any
    Exception, a ``SystemExit`` and any other BaseException but Ctrl-C/SIGTERM and GeneratorExit."""
    return not isinstance(exc, PASS_THROUGH)


def failure_text(exc: BaseException, during: str) -> str:
    """``raised ZeroDivisionError in decide at step 7: <message>``, or for a ``SystemExit``
    ``called sys.exit(0) in decide at step 0``; ``during`` says where (may be empty)."""
    where = f" {during}" if during else ""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}){where}"
    return f"raised {type(exc).__name__}{where}: {exc}"


def exit_fix(exc: BaseException, what: str) -> str:
    """The start of the fix for a ``SystemExit`` out of ``what`` ("a policy", "a workload"); "" otherwise."""
    if not isinstance(exc, SystemExit):
        return ""
    return (f"do not call sys.exit() (or exit()/quit()) in {what}: spotwise runs it inside its own process, so "
            "raise an exception to stop instead; ")
