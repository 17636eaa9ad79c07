"""Untrusted text on a terminal (issue 54 item 3): the one sanitiser for every value read from a run
directory, bucket, trace or spec before a person's terminal shows it.

A folder name, a recorded spec name, a metric key, a decision's reason or a lease's host can hold
anything: ESC sequences that set the window title or clear the screen, a CSI (0x9b), BEL, a carriage
return or backspaces that overwrite what was printed, bidi overrides (U+202E) that show a name
reversed, and Rich markup (``[link=http://evil]x[/link]`` becomes an OSC 8 hyperlink).  Three layers,
one rule (:func:`clean`):

* :func:`clean` -- every control or format character (Unicode categories Cc, Cf, Cs, Zl, Zp: C0, DEL,
  C1, bidi overrides and isolates, zero-width characters) becomes a visible escape (``\\x1b``,
  ``\\u202e``); what is left is printable text.
* :func:`safe_text` / :func:`display_copy` -- a value becomes a :class:`rich.text.Text` (never parsed
  as markup), or a record's strings (a dataclass's fields, a dict's keys and values, at any depth)
  are cleaned once where it is read for display, so a field printed later is covered too.
* :func:`terminal_console` -- the CLI's consoles: whatever reaches them as plain text is cleaned
  again at the last step (the text of every rendered segment), and no hyperlink style is emitted, so
  a path that forgot the first two layers still writes no escape sequence from the data.

``--json`` output never passes here: JSON escapes control characters itself and keeps the data exact.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from typing import Any, Iterable

#: Unicode categories that are not text to show: controls, format characters, surrogates, line/paragraph separators
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def clean(value: Any, *, keep_newlines: bool = False) -> str:
    """``str(value)`` with every control or format character written as a visible escape (``\\x1b``).

    ``keep_newlines``: leave ``\\n`` (a rendered line break, :func:`terminal_console`'s last step);
    an untrusted value itself is one line.  Idempotent: what it returns is printable ASCII escapes
    and the value's printable characters."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the common case: nothing to do
        return text
    return "".join(ch if (ch == "\n" and keep_newlines) or unicodedata.category(ch) not in _HIDDEN
                   else _escape(ch) for ch in text)


def safe_text(value: Any, style: str | None = None) -> Any:
    """A :class:`rich.text.Text` of the cleaned value: shown as it is, never read as markup."""
    from rich.text import Text

    return Text(clean(value), style=style or "")


def safe_cells(*values: Any) -> list[Any]:
    """Table cells from untrusted strings (:func:`safe_text`); ``None`` stays an empty cell."""
    return [None if v is None else v if not isinstance(v, str) else safe_text(v) for v in values]


def display_copy(value: Any) -> Any:
    """A copy of ``value`` for display with every string in it cleaned: dataclass fields, dict keys and
    values, list and tuple items, at any depth (other values as they are).  The record itself -- what
    ``--json`` prints -- is not changed."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {display_copy(k): display_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(display_copy(v) for v in value) if not hasattr(value, "_fields") else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: display_copy(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


def warn_on_stderr(message: str) -> None:
    """One ``warning:`` line on stderr (plain, no console): its message may quote names read from a run
    directory or bucket (a checkpoint's file, an object's key), so it is cleaned."""
    import sys

    sys.stderr.write(f"warning: {clean(message)}\n")
    sys.stderr.flush()


class _Cleaned:
    """A renderable that renders ``inner`` and cleans the text of each plain segment (control segments,
    e.g. a live display's cursor moves, are the console's own and kept); hyperlink styles are dropped."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Any]:
        from rich.segment import Segment

        for seg in console.render(self.inner, options):
            if seg.control:
                yield seg
                continue
            style = seg.style
            if style is not None and style.link:
                style = style.update_link(None)
            yield Segment(clean(seg.text, keep_newlines=True), style)


class _CleaningHook:
    """The render hook of :func:`terminal_console` (rich's ``RenderHook`` protocol)."""

    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Cleaned(r) for r in renderables]


def terminal_console(**kwargs: Any) -> Any:
    """A :class:`rich.console.Console` (``kwargs`` as Console's) whose output holds no control or format
    character and no hyperlink coming from the text printed (module docstring); the CLI prints through these."""
    from rich.console import Console, RenderHook

    class Hook(_CleaningHook, RenderHook):
        pass

    console = Console(**kwargs)
    console.push_render_hook(Hook())
    return console


__all__ = ["clean", "display_copy", "safe_cells", "safe_text", "terminal_console", "warn_on_stderr"]
